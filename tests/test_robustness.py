"""Hostile indices, the checkify checked mode, planes past 2**24 in 16-bit."""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import RTOL, assert_same, make_input, np_dtype, rng_for
from jax.experimental import checkify

import jaxpool
from jaxpool import reference

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


@pytest.mark.parametrize("name", INDEX_OPS)
def test_checked_mode_reports_the_first_bad_index_under_jit(name):
    fn = jax.jit(partial(INDEX_OPS[name], check_indices=True))
    err, out = checkify.checkify(fn)(G, jnp.asarray(_hostile_indices()))
    with pytest.raises(
        checkify.JaxRuntimeError,
        match=rf"{name}: `indices` holds -1 at position \[0 0 0 0\], outside the "
        r"plane \[0, 16\)",
    ):
        err.throw()
    # The result is still the unchecked one (bad indices dropped).
    assert_same(out, INDEX_OPS[name](G, jnp.asarray(_hostile_indices())))
    indices = np.tile(np.array([[0, 5], [10, 15]], np.int32), (2, 3, 1, 1))
    indices[1, 2, 0, 1] = 16
    err, _ = checkify.checkify(fn)(G, jnp.asarray(indices))
    with pytest.raises(checkify.JaxRuntimeError, match=r"16 at position \[1 2 0 1\]"):
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
