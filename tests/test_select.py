"""The TPU's select-and-scatter backward (``jaxpool._select``), run on CPU.

XLA runs the same ``SelectAndScatter`` op on every platform, in an order of
its own: on XLA:CPU it leaves row-major order once the minor axis is padded,
which the first test shows on a value-only select. The op therefore compares
keys (a 16-bit value order and a position code), which makes the selection
independent of that order; these tests check the keys, and the VJP that the
seam emits on a TPU (``platform_forms("tpu")``, and the TPU-lowered program
itself run here) against the oracle, bit for bit, with the input kinds as
planes of one call.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from cases import INPUT_KINDS
from helpers import (
    assert_same,
    cotangent,
    count_primitive,
    make_input,
    np_dtype,
    platform_forms,
    rng_for,
)
from jax import lax

import jaxpool
from jaxpool import _select, reference
from jaxpool._windows import AxisWindows, PoolSpec

# The full tier (tests/conftest.py): the TPU's select-and-scatter is a kernel form.
pytestmark = pytest.mark.full

DTYPES_16 = ["bfloat16", "float16"]

# nd, spatial shape, kernel, stride, padding, ceil_mode, channels_last: padding
# on the minor axis (where XLA:CPU's order is not row-major), ceil_mode's
# extra windows, overlapping and disjoint windows, mixed sizes per axis.
CONFIGS = {
    "1d-k3-s2-p1-ceil": (1, (10,), (3,), (2,), (1,), True, False),
    "2d-k3-s1-p1": (2, (6, 7), (3, 3), (1, 1), (1, 1), False, False),
    "2d-k2-p1": (2, (5, 6), (2, 2), (2, 2), (1, 1), False, False),
    "2d-mixed-ceil": (2, (7, 8), (3, 2), (2, 3), (1, 1), True, False),
    "3d-len3-all": (3, (7, 6, 5), (3, 2, 2), (2, 1, 3), (1, 1, 0), False, False),
    "3d-k3-s2-p1-ceil": (3, (9, 10, 11), (3, 3, 3), (2, 2, 2), (1, 1, 1), True, False),
    "3d-k2-s2": (3, (6, 6, 6), (2, 2, 2), (2, 2, 2), (0, 0, 0), False, False),
    "3d-channels-last": (3, (7, 6, 5), (3, 3, 3), (2, 2, 2), (1, 1, 1), False, True),
}

POOL = {1: jaxpool.max_pool1d_with_argmax, 2: jaxpool.max_pool2d_with_argmax}
POOL[3] = jaxpool.max_pool3d_with_argmax


def _planes(name: str, dtype: str, channels: int = 3) -> np.ndarray:
    """``(kinds, channels, *S)``: one batch plane per input kind."""
    spatial = CONFIGS[name][1]
    rng = rng_for("select", name, dtype)
    kinds = [make_input(rng, (channels, *spatial), dtype, k) for k in INPUT_KINDS]
    return np.stack(kinds)


def _oracle_grad(x: np.ndarray, g: np.ndarray, name: str) -> np.ndarray:
    """The float64 scatter of ``g`` at the oracle's indices, rounded once."""
    nd, _, kernel, stride, padding, ceil, _ = CONFIGS[name]
    _, want = reference.max_pool(x, kernel, stride, padding, (1,) * nd, ceil)
    return reference.scatter_add(g, want, x.shape[-nd:]).astype(x.dtype)


def _pool(name: str):
    nd, _, kernel, stride, padding, ceil, last = CONFIGS[name]
    return lambda x: POOL[nd](
        x, kernel, stride, padding, ceil_mode=ceil, channels_last=last
    )


@pytest.mark.parametrize("dtype", DTYPES_16)
@pytest.mark.parametrize("name", CONFIGS)
def test_vjp_is_the_oracles_on_a_tpu(name, dtype):
    """``jax.vjp``'s gradient in the TPU's form (the select-and-scatter),
    eager and jitted, equals the float64 scatter at the oracle's indices,
    on every input kind: ties, NaN (the last wins), ``-inf`` windows, ``+inf``."""
    x = _planes(name, dtype)
    last = CONFIGS[name][6]
    pool = _pool(name)
    moved = np.moveaxis(x, 1, -1) if last else x
    with platform_forms("tpu"):
        (values, indices), vjp = jax.vjp(pool, jnp.asarray(moved))
        g = cotangent(rng_for("select-g", name, dtype), values.shape, dtype)
        zero = np.zeros(indices.shape, jax.dtypes.float0)
        grad = vjp((jnp.asarray(g), zero))[0]
        jitted = jax.jit(lambda x, g: jax.vjp(pool, x)[1]((g, zero))[0])(moved, g)
        program = jax.make_jaxpr(lambda x, g: jax.vjp(pool, x)[1]((g, zero)))
        assert count_primitive(program(moved, g), "select_and_scatter") == 1
    if last:
        grad, jitted, g = (np.moveaxis(np.asarray(a), -1, 1) for a in (grad, jitted, g))
    want = _oracle_grad(x, np.asarray(g), name)
    assert_same(grad, want, "grad")
    assert_same(jitted, want, "jitted grad")


def test_value_only_select_is_not_pytorchs_on_xla_cpu():
    """Why the op compares keys: with a select on values alone, XLA:CPU sends
    tied windows' gradients elsewhere than the first maximum (its order is
    its own: here it visits H before D), while the keyed select does not."""
    name, dtype = "3d-len3-all", "bfloat16"
    x = _planes(name, dtype)[INPUT_KINDS.index("ties")]
    g = cotangent(rng_for("select-order"), (3, 4, 7, 2), dtype).astype(np.float32)
    # D: 7 -> 4 (k3 s2 p1), H: 6 -> 7 (k2 s1 p1), W: 5 -> 2 (k2 s3).
    windows = AxisWindows(7, 4, 3, 2, -1), AxisWindows(6, 7, 2, 1, -1)
    spec = PoolSpec((*windows, AxisWindows(5, 2, 2, 3)), False, "auto")
    win = _select.window(spec, 4)
    want = _oracle_grad(x, g.astype(np_dtype(dtype)), name).astype(np.float32)

    def value_only(source, operand):
        scalar = jax.ShapeDtypeStruct((), jnp.float32)
        keeps = jax.make_jaxpr(lambda a, b: a >= b)(scalar, scalar)
        add = jax.make_jaxpr(lax.add)(scalar, scalar)
        return lax.select_and_scatter_p.bind(
            operand,
            source,
            jnp.zeros((), jnp.float32),
            select_jaxpr=keeps.jaxpr,
            select_consts=(),
            scatter_jaxpr=add.jaxpr,
            scatter_consts=(),
            window_dimensions=win.dims,
            window_strides=win.strides,
            padding=win.padding,
        )

    plain = jax.jit(value_only)(g, jnp.asarray(x, jnp.float32))
    assert not np.array_equal(np.asarray(plain), want)
    keyed = _select.bind(
        jnp.asarray(g), _select.key(jnp.asarray(x), spec), win, spec.axes
    )
    assert_same(keyed, want, "keyed select")


@pytest.mark.parametrize("dtype", DTYPES_16)
def test_keys_order_every_16bit_value_as_the_scan(dtype):
    """Every one of the 65,536 bit patterns, sorted: the keys' value order is
    the order this platform's comparisons give, which the forward's are (NaNs
    above ``+inf`` and equal to each other, ``-0 == +0``, and on XLA:CPU,
    which flushes them, subnormals equal to zero); each key is a normal
    positive float32's bits, which no platform flushes or canonicalises."""
    bits = np.arange(2**16, dtype=np.uint16)
    values = bits.view(np_dtype(dtype))
    spec = PoolSpec((AxisWindows(2**16, 2**15, 2, 2),), False, "auto")
    keys = np.asarray(_select.key(jnp.asarray(values), spec)).view(np.int32)
    assert (keys >= _select.BASE).all() and (keys < 0x7F800000).all()  # normal
    width = sum(_select.digits(spec.axes))
    order, code = (keys - _select.BASE) >> width, keys & ((1 << width) - 1)
    assert width == 2 and np.array_equal(code, np.arange(2**16) % 4)
    nan = np.isnan(values.astype(np.float32))
    assert (order[nan] == _select.NAN_ORDER).all()
    assert (order[~nan] < _select.NAN_ORDER).all()
    numbers = values[~nan][np.argsort(values[~nan].astype(np.float32), kind="stable")]
    here = jnp.asarray(numbers)
    less = np.asarray(here[:-1] < here[1:])  # this platform's comparison
    equal = np.asarray(here[:-1] == here[1:])
    ranked = order[~nan][np.argsort(values[~nan].astype(np.float32), kind="stable")]
    assert np.array_equal(ranked[:-1] < ranked[1:], less)
    assert np.array_equal(ranked[:-1] == ranked[1:], equal)
    assert equal.sum() >= 1  # -0 == +0 at least


def test_subnormals_follow_the_forward():
    """Zeros and subnormals of both signs, which XLA:CPU's comparisons (the
    forward's) flush to zero: the gradient goes to the forward's own index."""
    tiny = np.array([0.0, -0.0, 1e-40, -1e-40, 2e-40, 1.0], np.float32)
    rng = rng_for("select-subnormal")
    x = rng.choice(tiny, (2, 3, 6, 7)).astype(np_dtype("bfloat16"))
    pool = _pool("2d-k3-s1-p1")
    with platform_forms("tpu"):
        (values, indices), vjp = jax.vjp(pool, jnp.asarray(x))
        g = cotangent(rng, values.shape, "bfloat16")
        zero = np.zeros(indices.shape, jax.dtypes.float0)
        grad = vjp((jnp.asarray(g), zero))[0]
    want = reference.scatter_add(g, np.asarray(indices), (6, 7)).astype(x.dtype)
    assert_same(grad, want, "grad at the forward's indices")


@pytest.mark.parametrize("dtype", DTYPES_16)
def test_tpu_program_run_here(dtype):
    """The program lowered for a TPU (``jax.export``; every platform branch
    takes the TPU's form) run on XLA:CPU: one select-and-scatter, no scatter,
    and the oracle's gradient. A float32 step keeps the dense gather."""
    name = "3d-k3-s2-p1-ceil"
    x = _planes(name, dtype)
    pool = _pool(name)
    g = cotangent(rng_for("select-export", dtype), pool(x)[0].shape, dtype)

    def grad(x, g):
        return jax.grad(lambda x: jnp.sum(pool(x)[0].astype(jnp.float32) * g))(x)

    checks = [jax.export.DisabledSafetyCheck.platform()]
    exported = jax.export.export(
        jax.jit(grad), platforms=["tpu"], disabled_checks=checks
    )(x, g.astype(np.float32))
    text = exported.mlir_module()
    assert text.count("stablehlo.select_and_scatter") == 1
    assert "stablehlo.scatter" not in text
    result = exported.call(x, g.astype(np.float32))
    assert_same(result, _oracle_grad(x, g, name), "TPU program's grad")
    x32 = x.astype(np.float32)
    f32 = jax.export.export(jax.jit(grad), platforms=["tpu"], disabled_checks=checks)
    assert "select_and_scatter" not in f32(x32, g.astype(np.float32)).mlir_module()


def test_transformations_through_the_tpu_form():
    """vmap of grad, jacrev, and grad of grad (forward over reverse equal to
    reverse over reverse: the tangent is the scatter at the indices) through
    the select-and-scatter."""
    x = _planes("2d-k3-s1-p1", "float16", channels=1)[:2]  # random, ties
    pool = _pool("2d-k3-s1-p1")
    w = jnp.asarray(cotangent(rng_for("select-w"), pool(x)[0].shape, "float16"))

    def loss(x):
        return jnp.sum((w * pool(x)[0]).astype(jnp.float32) ** 2)

    with platform_forms("tpu"):
        grads = jax.vmap(jax.grad(loss))(jnp.stack([x, -x]))
        one = [jax.grad(loss)(jnp.asarray(v)) for v in (x, -x)]
        jac = jax.jacrev(lambda x: pool(x)[0])(jnp.asarray(x))
        fwd_rev = jax.jacfwd(jax.grad(loss))(jnp.asarray(x))
        rev_rev = jax.jacrev(jax.grad(loss))(jnp.asarray(x))
    with platform_forms("cpu"):
        want_jac = jax.jacrev(lambda x: pool(x)[0])(jnp.asarray(x))
    assert_same(grads, np.stack(one), "vmap of grad")
    assert_same(jac, want_jac, "jacrev")
    assert_same(fwd_rev, rev_rev, "hessian")
    assert np.abs(np.asarray(fwd_rev, np.float32)).sum() > 0


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_vjp_keeps_the_input_where_a_tpu_reads_it(dtype):
    """The VJP's residuals: the indices, and the input for 16-bit inputs (the
    TPU's select-and-scatter reads it), not for float32 (every backward of
    float32 reads the indices alone)."""
    x = jnp.asarray(_planes("2d-k3-s1-p1", dtype))
    _, vjp = jax.vjp(lambda x: _pool("2d-k3-s1-p1")(x)[0], x)
    leaves = jax.tree_util.tree_leaves(vjp)
    want = [(jnp.int32, (4, 3, 6, 7))]
    if dtype == "bfloat16":
        want.append((x.dtype, x.shape))
    assert [(leaf.dtype, leaf.shape) for leaf in leaves] == want


def test_binding_is_jaxs_own():
    """``_select.bind`` binds ``select_and_scatter_p`` with the parameters
    ``jax.lax``'s own ``_select_and_scatter`` gives it (a jax release that
    changes them fails here, not on a TPU), to the same result."""
    from jax._src.lax import windowed_reductions

    win = _select.Window((1, 3, 2), (1, 2, 1), ((0, 0), (1, 1), (0, 1)))
    spec_axes = (AxisWindows(5, 3, 3, 2, -1), AxisWindows(4, 4, 2, 1, 0))
    keys = _select.key(
        jnp.arange(20.0, dtype=jnp.bfloat16).reshape(1, 5, 4),
        PoolSpec(spec_axes, False, "auto"),
    )
    source = jnp.arange(1.0, 13.0).reshape(1, 3, 4)

    def theirs(source, keys):
        return windowed_reductions._select_and_scatter(
            keys,
            lax.ge,
            win.dims,
            win.strides,
            win.padding,
            source,
            jnp.zeros((), jnp.float32),
            lax.add,
        )

    ours = jax.make_jaxpr(lambda s, k: _select.bind(s, k, win, spec_axes))(source, keys)
    jaxs = jax.make_jaxpr(theirs)(source, keys)
    (eqn,) = [e for e in ours.eqns if e.primitive is lax.select_and_scatter_p]
    (ref,) = [e for e in jaxs.eqns if e.primitive is lax.select_and_scatter_p]
    assert eqn.params.keys() == ref.params.keys()
    for name in ("window_dimensions", "window_strides", "padding"):
        assert eqn.params[name] == ref.params[name]
    assert [v.aval for v in eqn.invars] == [v.aval for v in ref.invars]
    # Distinct increasing keys: both selects pick the same (the last) element.
    assert_same(
        _select.bind(source, keys, win, spec_axes), jax.jit(theirs)(source, keys)
    )
