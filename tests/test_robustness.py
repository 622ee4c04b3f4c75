"""Hostile indices, the checkify checked mode, planes past 2**24 in 16-bit."""

from __future__ import annotations

import itertools
import re
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import (
    RTOL,
    assert_same,
    check_pool,
    form_options,
    make_input,
    np_dtype,
    rng_for,
)
from jax import export
from jax.experimental import checkify

import jaxpool
from jaxpool import _backward, _columns, _windows, reference

# Every op that takes user indices, as (name, fn(values, indices, x) -> result,
# the plane size P of x) on x of shape (2, 3, 4, 4) and indices (2, 3, 2, 2).
X = jnp.asarray(make_input(rng_for("hostile"), (2, 3, 4, 4), "float32", "random"))
G = jnp.arange(1.0, 25.0).reshape(2, 3, 2, 2)
INDEX_OPS = {
    "max_pool2d_with_argmax_backward": lambda g, i, **kw: (
        jaxpool.max_pool2d_with_argmax_backward(g, X, i, 2, **kw)
    ),
    "adaptive_max_pool2d_backward": lambda g, i, **kw: (
        jaxpool.adaptive_max_pool2d_backward(g, X, i, **kw)
    ),
    "max_unpool2d": lambda g, i, **kw: jaxpool.max_unpool2d(
        g, i, output_size=(4, 4), **kw
    ),
    # A 3-D plane of 4 x 4 x 1, x as a ShapeDtypeStruct (as the VJP keeps it).
    "max_pool3d_with_argmax_backward": lambda g, i, **kw: (
        jaxpool.max_pool3d_with_argmax_backward(
            g[..., None],
            jax.ShapeDtypeStruct((*X.shape, 1), X.dtype),
            i[..., None],
            (2, 2, 1),
            **kw,
        )[..., 0]
    ),
    "fractional_max_pool2d_backward": lambda g, i, **kw: (
        jaxpool.fractional_max_pool2d_backward(g, X, i, **kw)
    ),
}


def _hostile_indices(dtype=np.int32):
    """Valid offsets with -1, the plane size 16 and a huge value planted."""
    indices = np.tile(np.array([[0, 5], [10, 15]], dtype), (2, 3, 1, 1))
    indices[0, 0, 0, 0] = -1  # would wrap to 15
    indices[0, 1, 0, 1] = 16  # the next plane's first element, if flattened
    indices[1, 2, 1, 1] = 2**31 - 1 if dtype == np.int32 else 2**40
    return indices


@pytest.mark.parametrize(
    "jit, dtype",
    # A jitted function's int64 NumPy argument is cast to int32 by JAX itself
    # (wrapping 2**40 to 0) unless x64 is on: eager calls guard against that.
    [(False, np.int32), (True, np.int32), (False, np.int64)],
    ids=["eager-int32", "jit-int32", "eager-int64"],
)
@pytest.mark.parametrize("name", INDEX_OPS)
def test_bad_indices_are_dropped_exactly(name, jit, dtype):
    """The result is exactly what the in-plane indices alone give: nothing
    wraps, nothing reaches another plane or batch element."""
    indices = _hostile_indices(dtype)
    fn = jax.jit(INDEX_OPS[name]) if jit else INDEX_OPS[name]
    got = np.asarray(fn(G, indices))
    want = reference.scatter_add(np.asarray(G), indices, (4, 4)).astype(np.float32)
    if name == "max_unpool2d":
        want = reference.max_unpool(np.asarray(G), indices, (4, 4))
    assert_same(got, want)
    assert got[0, 0, 3, 3] == G[0, 0, 1, 1]  # -1 did not wrap onto offset 15
    assert got[0, 2].sum() == G[0, 2].sum()  # the next plane got only its own
    if name == "max_unpool2d":  # its gradient reads nothing at a dropped index
        grad = jax.grad(lambda g: fn(g, indices).sum())(G)
        assert grad[0, 0, 0, 0] == 0 and grad[0, 1, 0, 1] == 0 and grad[1, 2, 1, 1] == 0
        assert float(grad.sum()) == G.size - 3


@pytest.mark.parametrize("name", INDEX_OPS)
def test_checked_mode_reports_the_first_bad_index_under_jit(name):
    fn = jax.jit(partial(INDEX_OPS[name], check_indices=True))
    err, out = checkify.checkify(fn)(G, jnp.asarray(_hostile_indices()))
    with pytest.raises(
        checkify.JaxRuntimeError,
        match=rf"{name}: `indices` holds -1 at position \[0 0 0 0( 0)?\], outside the "
        r"plane \[0, 16\)",
    ):
        err.throw()
    # The result is still the unchecked one (bad indices dropped).
    assert_same(out, INDEX_OPS[name](G, jnp.asarray(_hostile_indices())))
    indices = np.tile(np.array([[0, 5], [10, 15]], np.int32), (2, 3, 1, 1))
    indices[1, 2, 0, 1] = 16
    err, _ = checkify.checkify(fn)(G, jnp.asarray(indices))
    with pytest.raises(
        checkify.JaxRuntimeError, match=r"16 at position \[1 2 0 1( 0)?\]"
    ):
        err.throw()
    indices[1, 2, 0, 1] = 1
    err, _ = checkify.checkify(fn)(G, jnp.asarray(indices))
    assert err.get() is None  # valid indices: no error


def test_checked_mode_needs_checkify_under_jit():
    """Without ``checkify.checkify`` a staged check cannot trace (JAX's rule):
    the checked mode is opt-in, and the default adds nothing to the program."""
    fn = partial(INDEX_OPS["max_unpool2d"], check_indices=True)
    with pytest.raises(ValueError, match="checkify"):
        jax.jit(fn)(G, jnp.asarray(_hostile_indices()))
    hlo = jax.jit(INDEX_OPS["max_unpool2d"]).lower(G, _hostile_indices()).as_text()
    assert "outside the plane" not in hlo


# Windows along an axis longer than _windows.EMBEDDED (padding, dilation,
# ceil_mode; overlapping, and disjoint with gaps), whose positions, masks and
# covering windows the forms compute from an iota instead of embedding them.
LONG_AXIS = {
    "k4 s2 p1": dict(kernel_size=4, stride=2, padding=1),
    "k3 s1 p1 d2": dict(kernel_size=3, stride=1, padding=1, dilation=2),
    "k3 s2 ceil": dict(kernel_size=3, stride=2, ceil_mode=True),
    "k2 s3 p1": dict(kernel_size=2, stride=3, padding=1),  # disjoint, with gaps
    "k2 s3 p1 d3 ceil": dict(
        kernel_size=2, stride=3, padding=1, dilation=3, ceil_mode=True
    ),
}


@pytest.mark.parametrize(
    "form",
    ["cpu", *(pytest.param(f, marks=pytest.mark.full) for f in ("default", "tpu"))],
)
@pytest.mark.parametrize("name", LONG_AXIS)
def test_long_axis_matches_the_oracle(name, form):
    """A 1-D pool over 2,501 samples against the oracle, bit for bit: values,
    indices, the vjp, the backward op and the deterministic backward."""
    rng = rng_for("long axis", name)
    check_pool(1, (2, 3, 2501), LONG_AXIS[name], rng, "float32", **form_options(form))


def _largest_constant(fn, *shapes) -> int:
    """The most elements of any constant in ``fn``'s program as each platform
    lowers it (``jax.export``: every form, no compile)."""
    largest = 0
    for platform in ("cpu", "cuda", "tpu"):
        exported = export.export(
            jax.jit(fn),
            platforms=[platform],
            disabled_checks=[export.DisabledSafetyCheck.platform()],
        )(*(jax.ShapeDtypeStruct(s, jnp.float32) for s in shapes))
        for dims in re.findall(
            r"stablehlo.constant dense<[^>]*> : tensor<([\dx]+)x\w+>",
            exported.mlir_module(),
        ):
            largest = max(largest, int(np.prod([int(d) for d in dims.split("x")])))
    return largest


@pytest.mark.parametrize("name", LONG_AXIS)
def test_a_long_axis_embeds_no_constant_of_its_length(name):
    """A program's size does not grow with a long axis: the positions, masks
    and covering windows of regular windows are computed, not embedded, in
    every platform's forward, gradient, deterministic backward and unpool
    (before: 393,216 int32 and bool elements in the GPU's gradient of a pool
    over 65,536 samples; a pool over 2**24 took 7 s to lower and compile)."""
    kwargs = LONG_AXIS[name]
    pool = partial(jaxpool.max_pool1d_with_argmax, **kwargs)

    def step(x):
        values, indices = pool(x)
        grad = jax.grad(lambda x: jnp.sum(pool(x)[0] ** 2))(x)
        gather = jaxpool.max_pool1d_with_argmax_backward(
            values, x, indices, **kwargs, algorithm="gather"
        )
        return grad, gather, jaxpool.max_unpool1d(values, indices, 2)

    largest = _largest_constant(step, (2, 4 * _columns.EMBEDDED))
    assert largest <= _columns.EMBEDDED, largest


def test_columns_computed_for_long_axes_are_the_embedded_ones(monkeypatch):
    """The computed columns equal the ones they replace, with
    ``_columns.EMBEDDED`` at 0 so that every axis computes them: the windows
    with no in-bounds tap (from their first non-negative tap), each row of the
    deterministic backward's covering table (from an iota), and per-window
    columns of each kind (a progression, a run of True; others embedded)."""
    monkeypatch.setattr(_columns, "EMBEDDED", 0)
    monkeypatch.setattr(_backward, "EMBEDDED", 0)
    for size, taps, stride, offset, dilation in itertools.product(
        (5, 12), (1, 2, 3), (1, 2, 3), (-4, -1, 0, 2), (1, 3)
    ):
        for out in (1, 4):
            w = _windows.AxisWindows(size, out, taps, stride, offset, dilation)
            at = np.stack([w.positions(j) for j in range(taps)])
            assert np.array_equal(w.empty(), ~((at >= 0) & (at < size)).any(0)), w
            table = w.covering()
            for m, row in enumerate(table):
                computed = np.asarray(_backward._covering_row(w, table, m))
                assert np.array_equal(computed, row), (w, m)
    columns = [
        np.arange(7) * 3 - 5,
        np.arange(7, dtype=np.int32)[::-1],
        np.array([5, 5, 5]),
        np.array([False, True, True, False]),
        np.array([True, False, True]),  # two runs: embedded
        np.zeros(3, bool),
        np.array([0, 1, 3]),  # no progression: embedded
    ]
    for column in columns:
        got = _columns.per_window(column, 1, (2, column.size, 3))
        want = jnp.asarray(column.reshape(1, -1, 1))
        assert got.shape == want.shape and got.dtype == want.dtype, column
        assert np.array_equal(got, want), column


@pytest.mark.full  # a plane of 2**24 elements: a minute
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_16bit_plane_past_2_24_gets_exact_int32_indices(dtype):
    """Offsets past 2**24 are not representable in float32 (let alone the input
    dtype): an index carried in a float would round. Here the maximum sits at
    odd offsets just past 2**24, in a 1-D and a 3-D plane."""
    length = 2**24 + 64
    x = np.zeros((1, length), np_dtype(dtype))
    x[0, 2**24 + 1] = 1.0
    x[0, 2**24 + 35] = 2.0
    values, indices = jaxpool.max_pool1d_with_argmax(x, 4, 2, 1)
    assert indices.dtype == jnp.int32
    assert indices[0, 2**23 : 2**23 + 2].tolist() == [2**24 + 1] * 2
    assert indices[0, 2**23 + 17 : 2**23 + 19].tolist() == [2**24 + 35] * 2
    grad = jaxpool.max_pool1d_with_argmax_backward(
        jnp.ones_like(values), x, indices, 4, 2, 1
    )
    assert np.flatnonzero(np.asarray(grad[0], np.float32) == 2).tolist() == [
        2**24 + 1,
        2**24 + 35,
    ]
    x3 = np.zeros((1, 1, 258, 256, 256), np_dtype(dtype))  # 16.9M > 2**24
    flat = 2**24 + 2 * 256 + 3
    x3.reshape(-1)[flat] = 1.0
    _, i3 = jaxpool.max_pool3d_with_argmax(x3, 2)
    assert int(i3[0, 0, 128, 1, 1]) == flat


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_16bit_gradients_within_one_rounding_of_float64(dtype):
    """Random cotangents, overlapping windows (up to 27 per element): the
    gradient is the float64 scatter of the same indices, rounded once (PyTorch's
    CPU backward sums in 16 bits and drifts)."""
    rng = rng_for("rounding", dtype)
    x = make_input(rng, (2, 3, 7, 8, 6), dtype, "ties")
    values, indices = jaxpool.max_pool3d_with_argmax(x, 3, 1, 1)
    g = rng.standard_normal(values.shape).astype(np_dtype(dtype))
    for algorithm in ("scatter", "gather"):
        grad = jaxpool.max_pool3d_with_argmax_backward(
            g, x, indices, 3, 1, 1, algorithm=algorithm
        )
        exact = reference.scatter_add(g, np.asarray(indices), x.shape[2:])
        np.testing.assert_allclose(
            np.asarray(grad, np.float64), exact, rtol=RTOL[dtype], atol=0
        )
