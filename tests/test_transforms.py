"""Every JAX transformation through every op family's forward and backward ops:
strided, adaptive and fractional pools (forward mode and second order through
every op: test_second_order.py; the unpool's: test_unpool.py)."""

from __future__ import annotations

from typing import Any, NamedTuple

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import assert_close, assert_same, cotangent, make_input, require
from jax.test_util import check_grads

import jaxpool
from jaxpool import _backward, _core, _mesh, _platform, reference

SAMPLES = np.random.default_rng(15).random((2, 3, 2))


class Op(NamedTuple):
    shape: tuple[int, ...]  # (N, C, *spatial)
    forward: Any  # (x, **kw) -> (values, indices)
    backward: Any  # (g, x, indices, **kw) -> grad
    torch: Any  # (torch, x) -> (values, indices)


OPS = {
    "max_pool3d": Op(
        (2, 2, 5, 6, 5),
        lambda x, **kw: jaxpool.max_pool3d_with_argmax(x, 3, 2, 1, **kw),
        lambda g, x, i, **kw: jaxpool.max_pool3d_with_argmax_backward(
            g, x, i, 3, 2, 1, **kw
        ),
        lambda torch, x: torch.nn.functional.max_pool3d(
            x, 3, 2, 1, return_indices=True
        ),
    ),
    "adaptive_max_pool2d": Op(
        (2, 3, 10, 9),
        lambda x, **kw: jaxpool.adaptive_max_pool2d(x, (4, 3), **kw),
        jaxpool.adaptive_max_pool2d_backward,
        lambda torch, x: torch.nn.functional.adaptive_max_pool2d(
            x, (4, 3), return_indices=True
        ),
    ),
    # Fixed samples, in x's dtype as the op requires (and as torch draws its
    # windows from them).
    "fractional_max_pool2d": Op(
        (2, 3, 10, 9),
        lambda x, **kw: jaxpool.fractional_max_pool2d(
            x, 2, (4, 3), samples=jnp.asarray(SAMPLES, jnp.asarray(x).dtype), **kw
        ),
        jaxpool.fractional_max_pool2d_backward,
        lambda torch, x: torch.nn.functional.fractional_max_pool2d(
            x,
            2,
            (4, 3),
            return_indices=True,
            _random_samples=torch.from_numpy(SAMPLES).to(x.dtype),
        ),
    ),
}
ALGORITHMS = ["scatter", "gather"]


@pytest.fixture(params=list(OPS))
def op(request) -> Op:
    return OPS[request.param]


def tie_free(shape, seed=0, dtype=np.float64):
    """Distinct values 0.1 apart: a finite-difference step of 1e-3 never moves
    an argmax."""
    rng = np.random.default_rng(seed)
    return (rng.permutation(int(np.prod(shape))).reshape(shape) * 0.1).astype(dtype)


def values_of(op, **kw):
    return lambda x: op.forward(x, **kw)[0]


def expected_grad(op, x, w):
    """Reference gradient of sum(w * pool(x)): the oracle scatter of w."""
    _, indices = op.forward(x)
    nd = len(op.shape) - 2
    return reference.scatter_add(np.asarray(w), np.asarray(indices), x.shape[-nd:])


def test_jit_matches_eager(op):
    x = make_input(np.random.default_rng(0), op.shape, "float32", "nan")
    values, indices = op.forward(x)
    chex.assert_trees_all_equal(jax.jit(op.forward)(x), (values, indices), strict=True)
    g = jnp.ones_like(values)
    assert_same(jax.jit(op.backward)(g, x, indices), op.backward(g, x, indices))


@pytest.mark.parametrize("extra", [(3,), (2, 3)], ids=["one-axis", "two-axes"])
def test_vmap_equals_python_loop(op, extra):
    x = make_input(np.random.default_rng(1), extra + op.shape, "float32", "ties")
    fwd, bwd = op.forward, op.backward
    for _ in extra:
        fwd, bwd = jax.vmap(fwd), jax.vmap(bwd)
    values, indices = fwd(x)
    # Small-integer cotangents sum exactly in any order (a GPU scatter-add's
    # order varies), so the gradients compare bitwise on every backend.
    g = cotangent(np.random.default_rng(2), values.shape, "float32")
    grads = bwd(g, x, indices)
    for b in np.ndindex(*extra):
        vb, ib = op.forward(x[b])
        want = (vb, ib, op.backward(g[b], x[b], ib))
        chex.assert_trees_all_equal(
            (values[b], indices[b], grads[b]), want, strict=True
        )


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_grad_and_value_and_grad(op, algorithm):
    x = jnp.asarray(make_input(np.random.default_rng(3), op.shape, "float32", "random"))
    w = jnp.asarray(
        np.random.default_rng(4).integers(-3, 4, op.forward(x)[0].shape), jnp.float32
    )

    def loss(x):
        return jnp.sum(w * op.forward(x, algorithm=algorithm)[0])

    want = expected_grad(op, x, w).astype(np.float32)
    assert_same(jax.grad(loss)(x), want)
    value, grad = jax.value_and_grad(loss)(x)
    assert_same(grad, want)
    assert value == loss(x)


def test_jacrev_is_one_hot_at_the_indices(op):
    with jax.enable_x64(True):
        x = jnp.asarray(tie_free(op.shape))
        values, indices = op.forward(x)
        jac = jax.jacrev(values_of(op))(x)  # (*out, *in)
    lead = op.shape[:2]
    plane = int(np.prod(op.shape[2:]))
    jac = np.asarray(jac).reshape(*values.shape, *lead, plane)
    want = np.zeros_like(jac)
    for o in np.ndindex(*values.shape):
        want[(*o, *o[:2], int(indices[o]))] = 1.0
    assert_same(jac, want)


def test_hessian_of_a_nonlinear_loss(op):
    # f = sum(w * y**3), y = x[argmax]: d2f/dx2 is diagonal, 6 * w * y summed
    # over the windows that chose each element.
    with jax.enable_x64(True):
        x = jnp.asarray(tie_free(op.shape) / 10)
        values, indices = op.forward(x)
        w = jnp.asarray(np.random.default_rng(5).standard_normal(values.shape))
        hess = jax.hessian(lambda x: jnp.sum(w * values_of(op)(x) ** 3))(x)
    size = x.size
    terms = 6 * np.asarray(w) * np.asarray(values)
    diagonal = reference.scatter_add(terms, np.asarray(indices), x.shape[2:]).ravel()
    magnitude = reference.scatter_add(np.abs(terms), np.asarray(indices), x.shape[2:])
    hess = np.asarray(hess).reshape(size, size)
    assert_same(hess - np.diag(np.diag(hess)), np.zeros((size, size)))
    # JAX forms 6*w*y and sums the windows in its own order: each diagonal entry
    # is within a few roundings per term of the float64 oracle.
    bound = 16 * 2.0**-53 * magnitude.ravel()
    assert (np.abs(np.diag(hess) - diagonal) <= bound).all()
    assert np.abs(diagonal).max() > 0


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_check_grads_order_2_float64(op, algorithm):
    with jax.enable_x64(True):
        x = jnp.asarray(tie_free(op.shape))
        _, indices = op.forward(x)
        w = jnp.asarray(tie_free(indices.shape, seed=1))

        def f(x):
            return w * op.forward(x, algorithm=algorithm)[0] ** 2

        check_grads(f, (x,), order=2, modes=["rev"], eps=1e-3)

        def b(g):
            return op.backward(g, x, indices, algorithm=algorithm)

        check_grads(b, (w,), order=2, modes=["rev"])


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_grad_of_grad_matches_torch_double_backward(op, algorithm):
    torch = require("torch")
    x = tie_free(op.shape) / 10
    rng = np.random.default_rng(6)
    out_shape = op.forward(x)[0].shape
    w = rng.standard_normal(out_shape)
    v = rng.standard_normal(x.shape)

    def loss(x, w):  # nonlinear in the pooled values: its Hessian is not zero
        return jnp.sum(w * op.forward(x, algorithm=algorithm)[0] ** 3)

    def outer(x, w):
        return jnp.sum(v * jax.grad(loss)(x, w))

    with jax.enable_x64(True):
        gx, gw = jax.grad(outer, argnums=(0, 1))(jnp.asarray(x), jnp.asarray(w))

    xt = torch.from_numpy(x).requires_grad_()
    wt = torch.from_numpy(w).requires_grad_()
    yt, _ = op.torch(torch, xt)
    (gt,) = torch.autograd.grad((wt * yt**3).sum(), xt, create_graph=True)
    gxt, gwt = torch.autograd.grad((torch.from_numpy(v) * gt).sum(), (xt, wt))
    assert np.abs(gxt.numpy()).max() > 0  # a linear loss would give zero here
    assert_close(gx, gxt.numpy(), "float64", "d/dx")
    assert_close(gw, gwt.numpy(), "float64", "d/dw")


def test_checkpoint(op):
    x = jnp.asarray(make_input(np.random.default_rng(7), op.shape, "float32", "random"))

    def loss(x):
        return jnp.sum(jnp.sin(op.forward(x)[0]))

    assert_same(jax.grad(jax.checkpoint(loss))(x), jax.grad(loss)(x))
    remat = jax.remat(lambda x: jnp.sin(op.forward(jnp.cos(x))[0]).sum())
    plain = lambda x: jnp.sin(op.forward(jnp.cos(x))[0]).sum()  # noqa: E731
    assert_same(jax.grad(remat)(x), jax.grad(plain)(x))


def test_scan_over_a_sequence_of_volumes(op):
    xs = jnp.asarray(
        make_input(np.random.default_rng(8), (4, *op.shape), "float32", "random")
    )

    def total(xs):
        def body(carry, x):
            y = op.forward(x)[0]
            return carry + jnp.sum(y * y), y.mean()

        out, means = jax.lax.scan(body, 0.0, xs)
        return out + means.sum()

    grads = jax.grad(total)(xs)
    for t in range(4):
        want = jax.grad(
            lambda x: jnp.sum(op.forward(x)[0] ** 2) + op.forward(x)[0].mean()
        )(xs[t])
        assert_close(grads[t], want, "float32")


def test_float64_end_to_end(op):
    with jax.enable_x64(True):
        x = jnp.asarray(tie_free(op.shape))
        values, indices = op.forward(x)
        grad = jax.grad(lambda x: jnp.sum(op.forward(x)[0] ** 2))(x)
        back = op.backward(values, x, indices)
    assert x.dtype == values.dtype == grad.dtype == back.dtype == jnp.float64
    assert indices.dtype == jnp.int32
    assert_same(grad, 2 * np.asarray(back))


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_backward_ops_under_grad(op, algorithm):
    # The backward ops are differentiable in grad_output (their VJP is a gather).
    x = jnp.asarray(
        make_input(np.random.default_rng(10), op.shape, "float32", "random")
    )
    values, indices = op.forward(x)
    v = jnp.asarray(np.random.default_rng(11).standard_normal(x.shape), jnp.float32)
    grad = jax.grad(
        lambda g: jnp.sum(v * op.backward(g, x, indices, algorithm=algorithm))
    )(values)
    lead = x.shape[:2]
    want = jnp.take_along_axis(
        v.reshape(*lead, -1), indices.reshape(*lead, -1), axis=-1
    )
    assert_same(grad, want.reshape(values.shape))


@pytest.mark.parametrize("algorithm", [*ALGORITHMS, "auto"])
def test_gather_algorithm_has_no_scatter(op, algorithm):
    """``"gather"`` lowers to no scatter at all; ``"scatter"`` to one; the
    default ``"auto"`` to the scatter here, where windows overlap (and in the
    standalone backward, whose indices may come from anywhere)."""
    x = jnp.asarray(
        make_input(np.random.default_rng(12), op.shape, "float32", "random")
    )
    values, indices = op.forward(x)
    bwd = jax.jit(lambda g, i: op.backward(g, x, i, algorithm=algorithm))
    step = jax.jit(
        jax.grad(lambda x: jnp.sum(op.forward(x, algorithm=algorithm)[0] ** 2))
    )
    for hlo in (bwd.lower(values, indices).as_text(), step.lower(x).as_text()):
        assert ("scatter" in hlo) == (algorithm != "gather")
    assert_same(bwd(values, indices), op.backward(values, x, indices))


@pytest.mark.parametrize(
    "shape, pool",
    [
        ((2, 3, 6, 6, 6), lambda x, **kw: jaxpool.max_pool3d_with_argmax(x, 2, **kw)),
        (
            (2, 3, 6, 9),
            lambda x, **kw: jaxpool.max_pool2d_with_argmax(x, (2, 3), (3, 3), **kw),
        ),
        (
            (2, 3, 6, 6, 4),
            lambda x, **kw: jaxpool.adaptive_max_pool3d(x, (2, 3, 1), **kw),
        ),
    ],
    ids=["k2-s2", "k2x3-s3", "adaptive-integer-ratio"],
)
def test_auto_gradient_of_disjoint_windows_is_a_select(shape, pool):
    """Where no two windows share an input element, ``jax.grad`` with the
    default ``"auto"`` is the elementwise select: no scatter in the program,
    and the scatter's bits."""
    x = jnp.asarray(make_input(np.random.default_rng(13), shape, "float32", "ties"))

    def grad(algorithm):
        loss = lambda x: jnp.sum(pool(x, algorithm=algorithm)[0] ** 2)  # noqa: E731
        return jax.jit(jax.grad(loss))

    assert "scatter" not in grad("auto").lower(x).as_text()
    assert "scatter" in grad("scatter").lower(x).as_text()
    assert_same(grad("auto")(x), grad("scatter")(x))


def test_auto_standalone_backward_honours_any_index():
    """The standalone backward's indices may come from anywhere, so ``"auto"``
    is the scatter there, even for disjoint windows: an in-plane index outside
    its own window still gets its gradient (the select would drop it)."""
    x = jnp.zeros((1, 1, 4, 4))
    indices = jnp.array([[[[15, 0], [0, 0]]]])  # window (0, 0) points at 15
    g = jnp.ones((1, 1, 2, 2))
    auto = jaxpool.max_pool2d_with_argmax_backward(g, x, indices, 2)
    gather = jaxpool.max_pool2d_with_argmax_backward(
        g, x, indices, 2, algorithm="gather"
    )
    assert auto[0, 0, 3, 3] == 1 and gather[0, 0, 3, 3] == 0


def test_traced_window_argument_raises_helpful_type_error():
    x = jnp.zeros((1, 1, 4, 4, 4))
    with pytest.raises(TypeError, match=r"`kernel_size`.*static"):
        jax.jit(jaxpool.max_pool3d_with_argmax)(x, 2)
    with pytest.raises(TypeError, match=r"`padding`.*static"):
        jax.jit(lambda x, p: jaxpool.max_pool3d_with_argmax(x, 2, padding=p))(x, 1)
    with pytest.raises(TypeError, match=r"`ceil_mode`.*static"):
        jax.jit(lambda x, c: jaxpool.max_pool3d_with_argmax(x, 2, ceil_mode=c))(x, True)
    # Closing over them or marking them static works.
    f = jax.jit(jaxpool.max_pool3d_with_argmax, static_argnums=1)
    assert f(x, 2)[0].shape == (1, 1, 2, 2, 2)


def _same_then_new(kernel):
    """Eager calls: the same configuration, spelled three ways, then a new one.

    ``kernel`` names the ``_platform`` function each traces: the pool's forward,
    its backward (in ``jax.grad``), the unpool."""
    x = jnp.asarray(
        make_input(np.random.default_rng(14), (2, 3, 8, 6), "float32", "random")
    )
    values, indices = jaxpool.max_pool2d_with_argmax(x, 2)

    def grad(*window):
        loss = lambda x: jnp.sum(jaxpool.max_pool2d_with_argmax(x, *window)[0] ** 2)  # noqa: E731
        return jax.grad(loss)(x)

    unpool = jaxpool.max_unpool2d
    return {
        "forward": (
            [
                lambda: jaxpool.max_pool2d_with_argmax(x, 2),
                lambda: jaxpool.max_pool2d_with_argmax(x, (2, 2), stride=2),
                lambda: jaxpool.max_pool2d_with_argmax(np.asarray(x), [2], None, 0),
            ],
            lambda: jaxpool.max_pool2d_with_argmax(x, 3),
        ),
        "backward": (
            [lambda: grad(2), lambda: grad((2, 2)), lambda: grad(2, 2, 0)],
            lambda: grad(2, 1),
        ),
        "unpool": (
            [
                lambda: unpool(values, indices, 2),
                lambda: unpool(values, indices, output_size=(8, 6)),
                lambda: unpool(values, indices, (2, 2), 2, 0, output_size=x.shape),
            ],
            lambda: unpool(values, indices, 2, output_size=(9, 6)),
        ),
    }[kernel]


@pytest.mark.parametrize("kernel", ["forward", "backward", "unpool"])
def test_eager_calls_trace_once_per_configuration(retrace, monkeypatch, kernel):
    """The ops are jitted inside, with a hashable spec: eager calls with the
    same configuration, however spelled, trace the kernel once and reuse the
    program; a new configuration traces again (``chex.assert_max_traces``
    counts the traces, and raises on the second)."""
    original = getattr(_platform, kernel)
    chex.clear_trace_counter()
    counted = chex.assert_max_traces(original, n=1)
    monkeypatch.setattr(_platform, kernel, counted)
    if kernel == "forward":  # what the custom_vjp calls, jitted at import
        monkeypatch.setattr(_core, "_forward", _mesh.traced_once(counted, 1))
    same, new = _same_then_new(kernel)
    first = same[0]()
    for call in same[1:]:
        chex.assert_trees_all_equal(call(), first, strict=True)
    with pytest.raises(AssertionError, match=rf"Function '{kernel}' is traced > 1 t"):
        new()


@pytest.mark.parametrize(
    "mesh", [None, "explicit"], ids=["no mesh", "under an explicit mesh"]
)
def test_grad_traces_each_platforms_kernels_once(monkeypatch, mesh):
    """JAX traces a custom_vjp's forward twice in ``jax.grad`` (the primal,
    then the forward rule, under another abstract-mesh context); the kernel's
    second trace is the first's jaxpr, so the forward (every platform's form)
    is traced once. The deterministic backward's kernels likewise: each
    platform's covering sum once, the VJP's (on a GPU, and under a mesh, the
    covering reduction of the forward's values) and the "gather" op's (which
    has no values) each once. Without a mesh no platform's form is traced
    until the program is lowered (``_lazy``): here for every platform, by a
    ``jax.export`` to all three."""
    traced = []

    def counting(kernel, name):
        def run(*args):
            traced.append((name, *(a for a in args if not isinstance(a, jax.Array))))
            return kernel(*args)

        return run

    forward = counting(_platform.forward, "forward")
    monkeypatch.setattr(_core, "_forward", _mesh.traced_once(forward, 1))
    gather = counting(_backward.gather_sum, "gather")
    traced_gather = _mesh.traced_once(gather, (2, 3, 4, 5))
    monkeypatch.setattr(_platform, "_gather_sum", traced_gather)
    window = dict(kernel_size=3, stride=1, padding=1)  # 9 covering: the reduction

    def f(x):
        loss = lambda x: jnp.sum(jaxpool.max_pool2d_with_argmax(x, **window)[0])  # noqa: E731
        grad = jax.grad(loss)(x)
        values, indices = jaxpool.max_pool2d_with_argmax(x, **window)
        kw = dict(algorithm="gather", **window)
        return grad, jaxpool.max_pool2d_with_argmax_backward(values, x, indices, **kw)

    x = jnp.zeros((2, 4, 9, 9))
    if mesh is None:
        jax.jit(f).trace(x)
        assert [t[0] for t in traced] == ["forward"], traced
        every = ["cpu", "tpu", "cuda"]
        checks = [jax.export.DisabledSafetyCheck.platform()]
        jax.export.export(jax.jit(f), platforms=every, disabled_checks=checks)(x)
    else:
        devices = np.array(jax.devices()[:1])
        axis = jax.sharding.AxisType.Explicit
        with jax.set_mesh(jax.make_mesh((1,), ("b",), (axis,), devices=devices)):
            jax.jit(f).trace(x)
    names = [t[0] for t in traced]
    # The VJP's covering reduction (GPU; under a mesh every platform's), the
    # "gather" op's covering sum (CPU and GPU; under a mesh the partitioned
    # one) and, without a mesh, the TPU's dense one, which both share.
    coverings = 2 if mesh else 3
    assert names.count("forward") == 1, traced
    assert names.count("gather") == coverings, traced
    assert len(set(traced)) == len(traced), traced
