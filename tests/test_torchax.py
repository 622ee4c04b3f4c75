"""jaxpool as torchax's pooling ops (``jaxpool.torchax``) against PyTorch's CPU
kernels (torch==2.13.0, torchax==0.0.14.dev20261026).

Every op through both of torchax's paths: eager autograd (``loss.backward()``,
which calls the ATen backward ops) and ``jax.grad`` of ``extract_jax``'s
function under ``jax.jit`` (jaxpool's ``custom_vjp``), values and indices bit
for bit; ATen's errors; PyTorch's OpInfo samples; what torchax does without
``register`` (the table of docs/torchax.md); a SegNet trained both ways."""

from __future__ import annotations

import copy
import itertools
import re
import subprocess
import sys
from functools import partial
from pathlib import Path
from types import SimpleNamespace

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from cases import (
    TORCH_ADAPTIVE,
    TORCH_FRACTIONAL,
    TORCH_POOLS,
    TORCH_UNPOOLS,
    TORCHAX_OPINFO,
)
from helpers import (
    assert_close,
    assert_same,
    compare_torch,
    fractional_samples,
    from_torch,
    make_planes,
    require,
    rng_for,
    to_torch,
)

import jaxpool.torchax
from jaxpool import reference

# The CPU's forms alone: these tests check the CPU's numbers; the other
# platforms' forms are traced and run in their own tests (tests/conftest.py).
pytestmark = pytest.mark.forms("cpu")

ROOT = Path(__file__).resolve().parent.parent
INDEX = jax.dtypes.canonicalize_dtype(jnp.int64)  # torchax's int64 without x64


@pytest.fixture(scope="module")
def tx():
    """torch, torchax and torchax's default environment, registered."""
    torch = require("torch")
    torchax = require("torchax")
    env = jaxpool.torchax.register()
    assert env is torchax.default_env()

    class Call(torch.nn.Module):
        """A function of tensors as a module, for ``extract_jax``."""

        def __init__(self, f):
            super().__init__()
            self.f = f

        def forward(self, *args):
            return self.f(*args)

    return SimpleNamespace(
        torch=torch, torchax=torchax, env=env, F=torch.nn.functional, Call=Call
    )


# ------------------------------------------------------------------ paths


def eager(tx, call, x, g, *extra):
    """``call(x, *extra)`` in torchax's eager mode, then ``backward(g)`` on its
    first output: (outputs, x's gradient), as NumPy."""
    torch = tx.torch
    with tx.env:
        xj = to_torch(torch, x).to("jax").requires_grad_()
        args = [to_torch(torch, e).to("jax") for e in extra]
        out = call(xj, *args)
        outs = out if isinstance(out, tuple) else (out,)
        outs[0].backward(to_torch(torch, g).to("jax"))
    return [np.asarray(o.jax()) for o in outs], np.asarray(xj.grad.jax())


def on_torch(tx, call, x, g, *extra, backward=True):
    """The same on PyTorch's CPU kernels."""
    torch = tx.torch
    xt = to_torch(torch, x).requires_grad_()
    out = call(xt, *[to_torch(torch, e) for e in extra])
    outs = out if isinstance(out, tuple) else (out,)
    if backward:
        outs[0].backward(to_torch(torch, g))
    grad = from_torch(torch, xt.grad) if backward else None
    return [from_torch(torch, o) for o in outs], grad


def jax_function(tx, call, *extra):
    """``x -> outputs`` through ``torchax.extract_jax`` (a JAX function that
    ``jax.grad`` and ``jax.jit`` take), ``extra`` JAX arrays after ``x``."""
    states, fn = tx.torchax.extract_jax(tx.Call(call), tx.env)
    return lambda x: fn(states, (x, *extra))


def aten_backward(tx, op, unsqueeze: bool, *window):
    """``(g, x, indices, **kw) -> grad`` by the ATen backward op ``op(g, x,
    *window, indices)`` through torchax (``unsqueeze``: a 1-D op, which reaches
    ATen as 2-D). ATen takes no ``algorithm``."""
    env = tx.env

    def backward(g, x, indices, **_):
        arrays = (jnp.asarray(g), jnp.asarray(x), jnp.asarray(indices))
        if unsqueeze:
            arrays = tuple(a[..., None, :] for a in arrays)
        with env:
            g, x, indices = env.j2t_iso(arrays)
            grad = env.t2j_iso(op(g, x, *window, indices))
        return grad[..., 0, :] if unsqueeze else grad

    return backward


def check_both_paths(tx, nd, call, x, rng, dtype, backward, *extra) -> None:
    """``call`` (PyTorch's ``(values, indices)``) on the registered env:
    eager, values and indices bit for bit and ``x.grad`` within rounding; and
    ``jax.grad`` of ``extract_jax`` under ``jax.jit``, by ``compare_torch``
    (with ``backward``, the ATen backward op through torchax)."""
    (tv, ti), _ = on_torch(tx, call, x, None, *extra, backward=False)
    spatial = x.shape[x.ndim - nd :]
    g = rng.standard_normal(tv.shape).astype(x.dtype)
    (values, indices), grad = eager(tx, call, x, g, *extra)
    assert_same(values, tv, "eager values")
    assert indices.dtype == INDEX, indices.dtype
    assert_same(indices.astype(np.int64), ti, "eager indices")
    in_plane = bool((ti < np.prod(spatial)).all())
    if in_plane and dtype == "float32":
        _, want = on_torch(tx, call, x, g, *extra)
        assert_close(grad, want, dtype, "eager grad vs torch")
    else:  # torch's backward writes out of the plane, or adds in 16 bits
        want = reference.scatter_add(g, ti, spatial)
        assert_close(grad, want, dtype, "eager grad vs float64 scatter")
    extra_j = [jnp.asarray(e) for e in extra]
    compare_torch(
        tx.torch,
        jax_function(tx, call, *extra_j),
        lambda xt: call(xt, *[to_torch(tx.torch, e) for e in extra]),
        backward,
        x,
        nd,
        rng,
        dtype,
    )


def _grid(table, quick, half):
    """Rows of a table: ``quick`` in float32 in the quick tier, the others in
    float32 and ``half`` in bfloat16 in the full one. (tests/test_torch.py
    runs every row and dtype on jaxpool itself; these check the way through
    torchax.)"""
    full = pytest.mark.full
    params = [
        (case, "float32")
        if case in quick
        else pytest.param(case, "float32", marks=full)
        for case in range(len(table))
    ]
    return params + [pytest.param(c, "bfloat16", marks=full) for c in half]


def _aten_list(value, nd: int) -> list[int]:
    if value is None:
        return []
    return [value] * nd if isinstance(value, int) else list(value)


# ------------------------------------------------------------------ the ops


@pytest.mark.parametrize(
    "case, dtype", _grid(TORCH_POOLS, quick=(1, 6, 8, 11), half=(1, 6))
)
def test_max_pool(tx, case, dtype):
    nd, shape, kwargs = TORCH_POOLS[case]
    rng = rng_for("torchax-pool", case, dtype)
    pool = getattr(tx.F, f"max_pool{nd}d")
    aten = 2 if nd == 1 else nd
    window = [
        _aten_list(kwargs["kernel_size"], nd),
        _aten_list(kwargs.get("stride"), nd),
        _aten_list(kwargs.get("padding", 0), nd),
        _aten_list(kwargs.get("dilation", 1), nd),
        kwargs.get("ceil_mode", False),
    ]
    if nd == 1:  # as PyTorch's max_pool1d calls the 2-D op
        window = [[1, *w] if w else w for w in window[:4]] + window[4:]
        window[2][0], window[3][0] = 0, 1
    op = getattr(tx.torch.ops.aten, f"max_pool{aten}d_with_indices_backward")
    check_both_paths(
        tx,
        nd,
        lambda x: pool(x, **kwargs, return_indices=True),
        make_planes(rng, shape, dtype),
        rng,
        dtype,
        aten_backward(tx, op, nd == 1, *window),
    )


@pytest.mark.parametrize(
    "case, dtype", _grid(TORCH_ADAPTIVE, quick=(0, 6, 8), half=(0,))
)
def test_adaptive_max_pool(tx, case, dtype):
    nd, shape, output_size = TORCH_ADAPTIVE[case]
    rng = rng_for("torchax-adaptive", case, dtype)
    pool = getattr(tx.F, f"adaptive_max_pool{nd}d")
    op = getattr(tx.torch.ops.aten, f"adaptive_max_pool{max(nd, 2)}d_backward")
    check_both_paths(
        tx,
        nd,
        lambda x: pool(x, output_size, return_indices=True),
        make_planes(rng, shape, dtype),
        rng,
        dtype,
        aten_backward(tx, op, nd == 1),
    )


@pytest.mark.parametrize(
    "case, dtype", _grid(TORCH_FRACTIONAL, quick=(1, 4), half=(3,))
)
def test_fractional_max_pool(tx, case, dtype):
    """From PyTorch's ``_random_samples``, the same on both sides."""
    nd, shape, kernel, out = TORCH_FRACTIONAL[case]
    rng = rng_for("torchax-fractional", case, dtype)
    x = make_planes(rng, shape, dtype)
    samples = fractional_samples(rng, x.shape, nd, dtype)
    pool = getattr(tx.F, f"fractional_max_pool{nd}d")
    op = getattr(tx.torch.ops.aten, f"fractional_max_pool{nd}d_backward")

    def call(x, samples):
        return pool(x, kernel, out, return_indices=True, _random_samples=samples)

    backward = aten_backward(tx, op, False, list(kernel), list(out))
    check_both_paths(tx, nd, call, x, rng, dtype, backward, samples)


def test_fractional_max_pool_draws_on_the_tensors_device(tx):
    """Without ``_random_samples`` PyTorch draws them with ``torch.rand`` on
    the input's device: torchax's generator, whose draw after the same seed
    gives the samples, and with them PyTorch's result."""
    torch, env = tx.torch, tx.env
    rng = rng_for("torchax-fractional-draw")
    x = make_planes(rng, (2, 3, 9, 8), "float32")
    with env:
        env.manual_seed(7)
        xj = to_torch(torch, x).to("jax")
        values, indices = tx.F.fractional_max_pool2d(
            xj, 2, output_size=(4, 5), return_indices=True
        )
        env.manual_seed(7)
        drawn = torch.rand(8, 3, 2, dtype=torch.float32, device="jax")
    samples = np.asarray(drawn.jax())
    assert samples.min() >= 0 and samples.max() < 1
    want = tx.F.fractional_max_pool2d(
        to_torch(torch, x),
        2,
        output_size=(4, 5),
        return_indices=True,
        _random_samples=to_torch(torch, samples),
    )
    assert_same(np.asarray(values.jax()), from_torch(torch, want[0]), "values")
    assert_same(np.asarray(indices.jax()), want[1].numpy().astype(INDEX), "indices")


@pytest.mark.parametrize(
    "case",
    [
        c if c in (0, 2) else pytest.param(c, marks=pytest.mark.full)
        for c in range(len(TORCH_UNPOOLS))
    ],
)
def test_max_unpool(tx, case):
    """Pool, then unpool to the pool's input size (PyTorch's ``output_size=
    x.size()`` idiom, or its default size), and the gradient through both:
    eager (torchax's gather for the unpool's own gradient, whose formula is
    not an ATen op) and through ``extract_jax`` (jaxpool's)."""
    nd, shape, kwargs = TORCH_UNPOOLS[case]
    rng = rng_for("torchax-unpool", case)
    x = make_planes(rng, shape, "float32")
    pool = getattr(tx.F, f"max_pool{nd}d")
    unpool = getattr(tx.F, f"max_unpool{nd}d")
    window = (kwargs["kernel_size"], kwargs.get("stride"), kwargs.get("padding", 0))
    whole = case % 2 == 0 and len(shape) == nd + 2  # torch's whole shape: batched

    def call(x):
        values, indices = pool(x, **kwargs, return_indices=True)
        return unpool(values, indices, *window, output_size=x.shape if whole else None)

    (want,), _ = on_torch(tx, call, x, None, backward=False)
    g = rng.standard_normal(want.shape).astype(np.float32)
    _, want_grad = on_torch(tx, call, x, g)
    (got,), grad = eager(tx, call, x, g)
    assert_same(got, want, "eager values")
    assert_close(grad, want_grad, "float32", "eager grad")
    forward = jax_function(tx, call)
    got, vjp = jax.jit(lambda x: jax.vjp(forward, x))(x)
    assert_same(got, want, "extract_jax values")
    assert_close(jax.jit(vjp)(g)[0], want_grad, "float32", "extract_jax grad")


def test_indices_are_int64_with_x64(tx):
    """Under ``jax_enable_x64`` (torchax's accuracy mode) the indices are
    int64, as PyTorch's, and float64 stays float64."""
    x = make_planes(rng_for("torchax-x64"), (1, 2, 7, 6), "float64")
    g = np.ones((4, 2, 4, 3))

    def call(x):
        return tx.F.max_pool2d(x, 3, 2, 1, return_indices=True)

    with jax.enable_x64(True):
        (values, indices), grad = eager(tx, call, x, g)
    (want_values, want_indices), want_grad = on_torch(tx, call, x, g)
    assert indices.dtype == np.int64 and values.dtype == grad.dtype == np.float64
    assert_same(values, want_values, "values")
    assert_same(indices, want_indices, "indices")
    assert_same(grad, want_grad, "grad")  # small-integer sums: exact


@pytest.mark.parametrize(
    "case, dtype",
    [
        (1, "int32"),
        pytest.param(6, "int64", marks=pytest.mark.full),
        pytest.param(8, "uint8", marks=pytest.mark.full),
    ],
)
def test_integer_max_pool(tx, case, dtype):
    """PyTorch's CPU max pool takes integers, jaxpool's ops do not: the
    dense-rank pool gives PyTorch's values and indices, ties (small integers)
    and the dtype's extremes included, eagerly and through ``extract_jax``
    under ``jax.jit`` (int64 with x64: without it torchax holds int32)."""
    torch = tx.torch
    nd, shape, kwargs = TORCH_POOLS[case]
    rng = rng_for("torchax-int", case, dtype)
    info = np.iinfo(dtype)
    x = rng.integers(max(info.min, -2), 3, shape).astype(dtype)
    x.flat[::5] = info.min
    x.flat[1::7] = info.max
    pool = getattr(tx.F, f"max_pool{nd}d")

    def call(x):
        return pool(x, **kwargs, return_indices=True)

    want = [t.numpy() for t in call(torch.from_numpy(x))]
    with jax.enable_x64(dtype == "int64"):
        with tx.env:
            eager_outs = call(torch.from_numpy(x).to("jax"))
        eager_outs = [np.asarray(t.jax()) for t in eager_outs]
        jitted = jax.jit(jax_function(tx, call))(x)
    for path, (values, indices) in (("eager", eager_outs), ("jit", jitted)):
        assert_same(values, want[0].astype(values.dtype), f"{path} values")
        assert_same(np.asarray(indices, np.int64), want[1], f"{path} indices")


# ----------------------------------------------------------------- errors


def test_import_needs_neither_torch_nor_torchax():
    code = (
        "import sys, jaxpool, jaxpool.torchax; "
        "print(sorted({'torch', 'torchax'} & set(sys.modules)))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "[]", out.stdout


def test_register_without_torchax_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "torchax", None)  # import torchax fails
    with pytest.raises(ImportError, match=re.escape("pip install 'jaxpool[torchax]'")):
        jaxpool.torchax.register()


def _to_jax(torch, value):
    return value.to("jax") if isinstance(value, torch.Tensor) else value


def _op_db(tx):
    require("expecttest")  # torch.testing._internal imports it
    from torch.testing._internal.common_methods_invocations import op_db

    return {(op.name, op.variant_test_name): op for op in op_db}


def test_atens_errors_for_atens_bad_input(tx):
    """PyTorch's OpInfo error inputs raise, through torchax, the error type
    and message PyTorch's CPU kernels raise; and the dtype and bad-index
    errors its CPU kernels raise at run time."""
    torch, F, aten = tx.torch, tx.F, tx.torch.ops.aten
    ops = _op_db(tx)
    count = 0
    for entry in TORCHAX_OPINFO:
        op = ops[entry]
        if op.error_inputs_func is None:
            continue
        for error in op.error_inputs("cpu"):
            sample = error.sample_input
            with tx.env, pytest.raises(error.error_type, match=error.error_regex):
                op(
                    _to_jax(torch, sample.input),
                    *(_to_jax(torch, a) for a in sample.args),
                    **{k: _to_jax(torch, v) for k, v in sample.kwargs.items()},
                )
            count += 1
    assert count >= 40, count
    x = torch.zeros(1, 2, 4, 4, dtype=torch.int32)
    pooled = torch.zeros(1, 2, 2, 2)
    cases = [  # ATen's CPU kernels check the dtype and the indices when they run
        (partial(F.adaptive_max_pool2d, output_size=2, return_indices=True), x),
        (partial(F.max_pool3d, kernel_size=2, return_indices=True), x[None] > 0),
        (partial(F.max_unpool2d, kernel_size=2), x, x.long()),
        (partial(F.max_unpool2d, kernel_size=2), pooled, torch.full((1, 2, 2, 2), 99)),
        (
            partial(F.max_unpool3d, kernel_size=2),
            pooled[None],
            torch.full((1, 1, 2, 2, 2), -1),
        ),
        # The backward ops, given a gradient of the wrong shape.
        (
            lambda g, x, i: aten.max_pool2d_with_indices_backward(
                g, x, [2, 2], [], [0, 0], [1, 1], False, i
            ),
            torch.zeros(1, 2, 3, 2),
            torch.zeros(1, 2, 4, 4),
            torch.zeros(1, 2, 2, 2, dtype=torch.long),
        ),
        (
            aten.adaptive_max_pool3d_backward,
            torch.zeros(1, 2, 2, 2, 3),
            torch.zeros(1, 2, 4, 4, 4),
            torch.zeros(1, 2, 2, 2, 2, dtype=torch.long),
        ),
    ]
    for call, *args in cases:
        with pytest.raises((NotImplementedError, RuntimeError)) as want:
            call(*args)
        with tx.env, pytest.raises(want.type) as got:
            call(*(a.to("jax") for a in args))
        # ATen's meta kernels word a few messages as the CPU's do, but for
        # punctuation ("== 2, but got :" for "== 2 but got:").
        assert _words(got.value) == _words(want.value)
    # Without a meta kernel (torch 2.13): ATen's type, jaxpool's message.
    g, x = torch.zeros(1, 2, 2, 2, 3), torch.zeros(1, 2, 4, 4, 4)
    indices = torch.zeros(1, 2, 2, 2, 2, dtype=torch.long)
    window = [2, 2, 2], [2, 2, 2]
    with pytest.raises(RuntimeError, match="gradOutput width unexpected"):
        aten.fractional_max_pool3d_backward(g, x, *window, indices)
    with tx.env, pytest.raises(RuntimeError, match="fractional_max_pool3d_backward"):
        aten.fractional_max_pool3d_backward(
            g.to("jax"), x.to("jax"), *window, indices.to("jax")
        )


def _words(error: BaseException) -> list[str]:
    return re.findall(r"[\w.\[\]=']+", str(error))


# ------------------------------------------------------------ OpInfo samples


@pytest.mark.full
@pytest.mark.parametrize(
    "name, variant",
    TORCHAX_OPINFO,
    ids=[f"{n}-{v}" if v else n for n, v in TORCHAX_OPINFO],
)
def test_opinfo_samples(tx, name, variant):
    """PyTorch's own sample for the op (one of its float32 list) through
    torchax eagerly: outputs bit for bit (int64 ones as torchax holds
    them), and the input's gradient within rounding. (The integer samples of
    the max pools are ``test_integer_max_pool``'s kind.)"""
    torch, env = tx.torch, tx.env
    torch.manual_seed(rng_for("torchax-opinfo", name, variant).integers(2**31))
    op = _op_db(tx)[name, variant]
    grad = name != "max_pool2d_with_indices_backward"  # a gradient already
    # The sixth (PyTorch's first ones are its plainest); the lists are lazy,
    # and some take seconds to make whole.
    samples = op.sample_inputs("cpu", torch.float32, requires_grad=grad)
    sample = list(itertools.islice(samples, 6))[-1]
    function, kwargs = op, dict(sample.kwargs)
    if "fractional" in name:  # PyTorch's draw, made here and passed to both
        function = getattr(tx.F, name.removeprefix("nn.functional."))
        nd, x = int(name[-2]), sample.input
        planes = x.shape[:2] if x.ndim == nd + 2 else (1, x.shape[0])
        kwargs["_random_samples"] = torch.rand((*planes, nd))
    wants = function(sample.input, *sample.args, **kwargs)
    wants = wants if isinstance(wants, tuple) else (wants,)
    with env:
        x = sample.input.detach().to("jax").requires_grad_(grad)
        args = [_to_jax(torch, a) for a in sample.args]
        gots = function(x, *args, **{k: _to_jax(torch, v) for k, v in kwargs.items()})
        gots = gots if isinstance(gots, tuple) else (gots,)
        for want, got in zip(wants, gots, strict=True):
            got, want = np.asarray(got.jax()), from_torch(torch, want)
            if want.dtype == np.int64:  # as torchax holds int64
                assert got.dtype == INDEX, got.dtype
                want = want.astype(INDEX)
            assert_same(got, want, f"{name} {sample}")
        if grad:
            g = torch.randn(wants[0].shape)
            gots[0].backward(g.to("jax"))
            wants[0].backward(g)
            got_grad = np.asarray(x.grad.jax())
            want_grad = sample.input.grad.numpy()
            assert_close(got_grad, want_grad, "float32", f"{name} grad {sample}")


# ------------------------------------------------------- without register


def _failure(error: Exception, stage: str) -> str:
    missing = re.search(r"aten::\w+", str(error))
    if type(error).__name__ == "OperatorNotFound" and missing:
        return f"`OperatorNotFound: {missing.group()}` in the {stage}"
    return f"`{type(error).__name__}` in the {stage}"


def measure(tx, env, call, x, *extra) -> str:
    """What ``call`` does in ``env``, eagerly, against PyTorch's CPU kernels:
    ``right``, or what went wrong (outputs, the backward, the gradient)."""
    torch = tx.torch
    wants, _ = on_torch(tx, call, x, None, *extra, backward=False)
    g = rng_for("torchax-measure").standard_normal(wants[0].shape).astype(x.dtype)
    _, want_grad = on_torch(tx, call, x, g, *extra)
    problems = []
    with env:
        xj = to_torch(torch, x).to("jax").requires_grad_()
        try:
            out = call(xj, *[to_torch(torch, e).to("jax") for e in extra])
        except Exception as e:
            return _failure(e, "forward")
        outs = out if isinstance(out, tuple) else (out,)
        for what, got, want in zip(("values", "indices"), outs, wants, strict=False):
            got = np.asarray(got.jax()).astype(want.dtype)
            if not np.array_equal(got, want, equal_nan=what == "values"):
                problems.append(f"wrong {what}")
        try:
            outs[0].backward(to_torch(torch, g).to("jax"))
        except Exception as e:
            return "; ".join([*problems, _failure(e, "backward")])
    grad = None if xj.grad is None else np.asarray(xj.grad.jax())
    if grad is None or not np.allclose(grad, want_grad, rtol=1e-5, atol=1e-5):
        problems.append("**wrong gradient**")
    return "; ".join(problems) or "right"


def measure_jax(tx, env, call, x) -> str:
    """The same through ``extract_jax`` and ``jax.vjp``."""
    wants, _ = on_torch(tx, call, x, None, backward=False)
    g = rng_for("torchax-measure").standard_normal(wants[0].shape).astype(x.dtype)
    _, want_grad = on_torch(tx, call, x, g)
    states, fn = tx.torchax.extract_jax(tx.Call(call), env)
    try:
        outs, vjp = jax.vjp(lambda x: fn(states, (x,)), jnp.asarray(x))
        outs = outs if isinstance(outs, tuple) else (outs,)
        cotangents = (g, *(np.zeros(o.shape, jax.dtypes.float0) for o in outs[1:]))
        (grad,) = vjp(cotangents if len(outs) > 1 else g)
    except Exception as e:
        return _failure(e, "forward or its gradient")
    problems = []
    for what, got, want in zip(("values", "indices"), outs, wants, strict=False):
        if not np.array_equal(np.asarray(got).astype(want.dtype), want, equal_nan=True):
            problems.append(f"wrong {what}")
    if not np.allclose(grad, want_grad, rtol=1e-5, atol=1e-5):
        problems.append("**wrong gradient**")
    return "; ".join(problems) or "right"


def negative_rows(tx):
    """The calls of docs/torchax.md's table: ``(call as written there, the
    call, its input, extra inputs, the path)``."""
    F = tx.F
    rng = rng_for("torchax-negative")
    # torchax's backward and unpool are loops that compile at each element
    small, tiny = (make_planes(rng, (1, 1, 4, s), "float32") for s in (4, 2))
    x2 = make_planes(rng, (1, 1, 5, 5), "float32")
    x3 = make_planes(rng, (1, 1, 4, 5, 4), "float32")
    samples = fractional_samples(rng, x2.shape, 2, "float32")

    def unpool(x):
        values, indices = F.max_pool2d(x, 2, return_indices=True)
        return F.max_unpool2d(values, indices, 2, output_size=x.shape[-2:])

    return [
        (
            "max_pool2d(x, 3, 2, 1, return_indices=True)",
            lambda x: F.max_pool2d(x, 3, 2, 1, return_indices=True),
            small,
            (),
            "eager",
        ),
        ("max_pool2d(x, 3, 2, 1)", lambda x: F.max_pool2d(x, 3, 2, 1), x2, (), "eager"),
        (
            "max_pool1d(x, 3, 2, 1, return_indices=True)",
            lambda x: F.max_pool1d(x, 3, 2, 1, return_indices=True),
            small[:, 0],
            (),
            "eager",
        ),
        (
            "max_pool3d(x, 2, return_indices=True)",
            lambda x: F.max_pool3d(x, 2, return_indices=True),
            x3,
            (),
            "eager",
        ),
        (
            "adaptive_max_pool2d(x, (4, 3), return_indices=True)",
            lambda x: F.adaptive_max_pool2d(x, (4, 3), return_indices=True),
            x2,
            (),
            "eager",
        ),
        (
            "fractional_max_pool2d(x, 2, (4, 3), _random_samples=s, "
            "return_indices=True)",
            lambda x, s: F.fractional_max_pool2d(
                x, 2, (4, 3), _random_samples=s, return_indices=True
            ),
            x2,
            (samples,),
            "eager",
        ),
        (
            "max_pool2d(x, 2, return_indices=True), then "
            "max_unpool2d(..., output_size=...)",
            unpool,
            tiny,
            (),
            "eager",
        ),
        (
            "max_pool2d(x, 3, 2, 1, return_indices=True)",
            lambda x: F.max_pool2d(x, 3, 2, 1, return_indices=True),
            x2,
            (),
            "jax",
        ),
    ]


def test_what_torchax_does_without_register(tx):
    """torchax's own definitions, in a fresh environment (``register`` changed
    only the default one), measured against PyTorch's CPU kernels, and then
    the registered environment's: the table of docs/torchax.md, row by row."""
    fresh = tx.torchax.tensor.Environment()
    page = (ROOT / "docs" / "torchax.md").read_text()
    results = []
    for written, call, x, extra, path in negative_rows(tx):
        if path == "eager":
            before = measure(tx, fresh, call, x, *extra)
            after = measure(tx, tx.env, call, x, *extra)
        else:
            before, after = (
                measure_jax(tx, fresh, call, x),
                measure_jax(tx, tx.env, call, x),
            )
        results.append((written, path, before, after))
        assert after == "right", (written, path, after)
        assert before != "right", (written, path)
    # register(env) changes the environment it is given, as it did the default.
    assert jaxpool.torchax.register(fresh) is fresh
    for written, call, x, extra, _ in negative_rows(tx):
        if written.startswith(("adaptive", "fractional")):  # compiled already
            assert measure(tx, fresh, call, x, *extra) == "right", written
    rows = [f"| `{w}` | {p} | {b} | {a} |" for w, p, b, a in results]
    table = re.findall(r"^\| `.*` \| (?:eager|jax) \| .*$", page, re.M)
    assert table == rows, "docs/torchax.md's table, as measured:\n" + "\n".join(rows)


# --------------------------------------------------------------- a model


@pytest.mark.full
def test_segnet_trains_as_on_torch(tx):
    """A SegNet-style model (convolutions, a pool with indices, the unpool at
    them, an adaptive head) trained with plain SGD: through ``extract_jax``
    (``jax.grad``, jitted) with the losses of PyTorch's CPU, step by step;
    its forward through ``JittableModule`` too."""
    torch, F = tx.torch, tx.F
    nn = torch.nn

    class SegNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.encode = nn.Conv2d(2, 6, 3, padding=1)
            self.decode = nn.Conv2d(6, 4, 3, padding=1)
            self.head = nn.Linear(4 * 3 * 3, 5)

        def forward(self, x):
            h = F.relu(self.encode(x))
            pooled, indices = F.max_pool2d(h, 2, return_indices=True)
            h = F.max_unpool2d(pooled, indices, 2, output_size=h.shape)
            h, _ = F.adaptive_max_pool2d(self.decode(h), 3, return_indices=True)
            return self.head(h.reshape(h.shape[0], -1))

    torch.manual_seed(0)
    model = SegNet()
    rng = rng_for("torchax-segnet")
    x = rng.standard_normal((4, 2, 10, 11)).astype(np.float32)
    y = rng.standard_normal((4, 5)).astype(np.float32)
    lr, steps = 0.1, 4

    reference_model = copy.deepcopy(model)
    optimizer = torch.optim.SGD(reference_model.parameters(), lr=lr)
    want = []
    for _ in range(steps):
        optimizer.zero_grad()
        loss = F.mse_loss(reference_model(torch.from_numpy(x)), torch.from_numpy(y))
        loss.backward()
        optimizer.step()
        want.append(loss.item())

    states, fn = tx.torchax.extract_jax(copy.deepcopy(model), tx.env)
    with jax.numpy_rank_promotion("allow"):  # torchax's linear broadcasts its bias
        got, got_states, out = _train_on_jax(tx, model, fn, states, x, y, lr, steps)

    np.testing.assert_allclose(got, want, rtol=1e-5)
    assert want[-1] < want[0]  # it learns
    for name, p in reference_model.state_dict().items():
        np.testing.assert_allclose(got_states[name], p.numpy(), rtol=1e-4, atol=1e-6)

    want_out = model(torch.from_numpy(x)).detach().numpy()
    np.testing.assert_allclose(out, want_out, rtol=1e-5, atol=1e-6)


def _train_on_jax(tx, model, fn, states, x, y, lr, steps):
    """``steps`` of SGD on ``extract_jax``'s function, jitted: the losses and
    the final states; and ``model``'s output through ``JittableModule``."""

    @jax.jit
    def step(states, x, y):
        loss, grads = jax.value_and_grad(lambda s: jnp.mean((fn(s, (x,)) - y) ** 2))(
            states
        )
        return loss, jax.tree.map(lambda p, g: p - lr * g, states, grads)

    losses = []
    for _ in range(steps):
        loss, states = step(states, x, y)
        losses.append(float(loss))
    jittable = copy.deepcopy(model)
    with tx.env:
        jittable.to("jax")
        module = tx.torchax.interop.JittableModule(jittable)
        out = module(tx.torch.from_numpy(x).to("jax"))
    return losses, states, np.asarray(out.jax())
