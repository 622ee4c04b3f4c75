"""max_pool3d_with_argmax and its backward: the rules of the semantics one at a
time (the oracle grids are in tests/test_oracle.py)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from cases import DTYPES, POOLS
from helpers import (
    assert_same,
    make_input,
    make_planes,
    np_dtype,
    pool_oracle,
    precision,
    rng_for,
)

import jaxpool
from jaxpool import _policy
from jaxpool._args import PoolArgs
from jaxpool._spec import pool_spec

POOLS_3D = {name: case for name, case in POOLS.items() if case[0] == 3}
# Plans (how the axes are grouped into passes, in which order), each in a
# dtype.
PLANS = [
    ([(2,), (1,), (0,)], "float32"),
    ([(0,), (1,), (2,)], "bfloat16"),
    ([(0,), (1, 2)], "float32"),
    ([(1, 2), (0,)], "float32"),
]


@pytest.mark.forms("cpu")  # the numbers of the CPU's scan under each plan
@pytest.mark.parametrize("plan, dtype", PLANS, ids=str)
@pytest.mark.parametrize("name", POOLS_3D)
def test_multi_pass_plans_match_oracle(monkeypatch, retrace, name, plan, dtype):
    # Large kernels reduce one axis at a time, carrying the index; the passes
    # may group axes in any way and in any order (a later pass compares
    # positions). Force each plan on every config, each on every input kind,
    # so that multi-pass plans meet every rule.
    from jaxpool import _scan

    monkeypatch.setattr(_scan, "stages", lambda axes: plan)
    _, shape, kwargs = POOLS_3D[name]
    x = make_planes(rng_for("two-pass", name, str(plan)), shape, dtype)
    with precision(dtype):
        values, indices = jaxpool.max_pool3d_with_argmax(x, **kwargs)
    want_values, want_indices = pool_oracle(x, 3, **kwargs)
    assert_same(values, want_values, "values")
    assert_same(indices, want_indices, "indices")


def test_ceil_mode_drops_window_starting_in_padding():
    # L=5, k=2, s=2, p=1: ceil gives 4 windows, the 4th starts at 6 >= L + p.
    x = jnp.arange(125.0).reshape(1, 1, 5, 5, 5)
    values, indices = jaxpool.max_pool3d_with_argmax(x, 2, 2, 1, ceil_mode=True)
    assert values.shape == (1, 1, 3, 3, 3)
    # Windows along d: taps (-1, 0), (1, 2), (3, 4); the dropped one is (5, 6).
    assert indices[0, 0, :, 0, 0].tolist() == [0, 50, 100]  # d = 0, 2, 4
    assert indices[0, 0, 2, 2, 2].tolist() == 124


def test_window_without_in_bounds_tap():
    # L=2, k=2, s=1, p=1, d=3: taps -1 and 2, both outside: -inf at index 14.
    x = jnp.ones((1, 1, 2, 2, 2))
    values, indices = jaxpool.max_pool3d_with_argmax(x, 2, 1, 1, 3)
    assert values.shape == (1, 1, 1, 1, 1)
    assert values.item() == -np.inf
    assert indices.item() == 2 * 4 + 2 * 2 + 2
    grad = jaxpool.max_pool3d_with_argmax_backward(values + 5, x, indices, 2, 1, 1, 3)
    assert_same(grad, np.zeros((1, 1, 2, 2, 2), np.float32), "dropped gradient")


def test_all_neg_inf_window_takes_first_in_bounds_tap():
    x = np.full((1, 1, 3, 3, 3), -np.inf, np.float32)
    x[0, 0, 2, 2, 2] = 1.0
    values, indices = jaxpool.max_pool3d_with_argmax(x, 3, 2, 1)
    # Window (0,0,0) covers taps -1..1 on each axis: first in-bounds tap is 0.
    assert values[0, 0, 0, 0, 0] == -np.inf
    assert indices[0, 0, 0, 0, 0] == 0
    # Window (0,0,1) covers w = 1..3: first in-bounds tap w = 1.
    assert indices[0, 0, 0, 0, 1] == 1
    assert values[0, 0, 1, 1, 1] == 1.0 and indices[0, 0, 1, 1, 1] == 26


def test_padding_is_neg_inf_not_zero():
    x = -1.0 - jnp.arange(8.0).reshape(1, 1, 2, 2, 2)
    values, indices = jaxpool.max_pool3d_with_argmax(x, 2, 2, 1)
    assert values.ravel().tolist() == (-1.0 - jnp.arange(8.0)).tolist()
    assert indices.ravel().tolist() == list(range(8))


def test_ties_keep_first_and_nan_keeps_last():
    x = np.zeros((1, 1, 2, 2, 2), np.float32)
    _, indices = jaxpool.max_pool3d_with_argmax(x, 2)
    assert indices.item() == 0
    x[0, 0, 0, 1, 0] = x[0, 0, 1, 0, 1] = 5.0
    _, indices = jaxpool.max_pool3d_with_argmax(x, 2)
    assert indices.item() == 2
    x[0, 0, 0, 0, 1] = x[0, 0, 1, 0, 0] = np.nan
    values, indices = jaxpool.max_pool3d_with_argmax(x, 2)
    assert np.isnan(values.item()) and indices.item() == 4


def test_four_d_input_matches_five_d():
    x = make_input(np.random.default_rng(1), (3, 5, 6, 7), "float32", "ties")
    v4, i4 = jaxpool.max_pool3d_with_argmax(x, 3, 2, 1)
    v5, i5 = jaxpool.max_pool3d_with_argmax(x[None], 3, 2, 1)
    assert v4.shape == i4.shape == (3, 3, 3, 4)
    assert_same(v4, v5[0])
    assert_same(i4, i5[0])
    g = jaxpool.max_pool3d_with_argmax_backward(v4, x, i4, 3, 2, 1)
    assert g.shape == x.shape


def test_empty_batch():
    x = jnp.zeros((0, 4, 6, 6, 6), jnp.bfloat16)
    values, indices = jaxpool.max_pool3d_with_argmax(x, 2)
    assert values.shape == indices.shape == (0, 4, 3, 3, 3)
    assert values.dtype == jnp.bfloat16 and indices.dtype == jnp.int32
    grad = jax.grad(lambda x: jaxpool.max_pool3d_with_argmax(x, 2)[0].sum())(x)
    assert grad.shape == x.shape and grad.dtype == x.dtype


@pytest.mark.parametrize("dtype", DTYPES)
def test_dtypes_are_kept(dtype):
    with precision(dtype):
        x = jnp.ones((1, 1, 4, 4, 4), np_dtype(dtype))
        values, indices = jaxpool.max_pool3d_with_argmax(x, 2)
        grad = jax.grad(lambda x: jaxpool.max_pool3d_with_argmax(x, 2)[0].sum())(x)
    assert values.dtype == x.dtype and grad.dtype == x.dtype
    assert indices.dtype == jnp.int32


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_16bit_gradients_accumulate_in_float32(dtype):
    # One element chosen by all 27 overlapping windows; 1 + 2**-7 per window.
    # A 16-bit running sum drifts from the float64 sum rounded once.
    x = np.zeros((1, 1, 5, 5, 5), np_dtype(dtype))
    x[0, 0, 2, 2, 2] = 1.0
    _, indices = jaxpool.max_pool3d_with_argmax(x, 3, 1, 0)
    assert (np.asarray(indices) == 62).all() and indices.size == 27
    g = np.full(indices.shape, 1 + 2**-7, np_dtype(dtype))
    grad = jaxpool.max_pool3d_with_argmax_backward(g, x, indices, 3, 1, 0)
    exact = np.asarray(27 * (1 + 2**-7), np_dtype(dtype))
    running = np.zeros((), np_dtype(dtype))
    for v in g.ravel():
        running = (running + v).astype(np_dtype(dtype))
    assert running != exact  # the test discriminates
    assert np.asarray(grad)[0, 0, 2, 2, 2] == exact


class TestBackwardIndices:
    """Only ``indices`` decides where gradients go; bad ones are dropped."""

    def test_any_in_plane_index_is_honoured_and_summed(self):
        x = jnp.zeros((1, 1, 4, 4, 4))
        indices = jnp.array([0, 63, 63, 5, 5, 5, 40, 0]).reshape(1, 1, 2, 2, 2)
        g = jnp.arange(1.0, 9.0).reshape(1, 1, 2, 2, 2)
        grad = jaxpool.max_pool3d_with_argmax_backward(g, x, indices, 2)
        want = np.zeros(64, np.float32)
        want[[0, 63, 5, 40]] = [1 + 8, 2 + 3, 4 + 5 + 6, 7]
        assert_same(grad, want.reshape(1, 1, 4, 4, 4))

    def test_gather_algorithm_counts_an_index_only_inside_its_window(self):
        x = jnp.zeros((1, 1, 4, 4, 4))
        # Window (0,0,0) covers offsets {0,1,4,5,16,17,20,21}; 63 is in the
        # plane but in another window, -1 and 64 are outside the plane.
        indices = jnp.array([21, 63, -1, 64, 0, 0, 0, 0]).reshape(1, 1, 2, 2, 2)
        g = jnp.arange(1.0, 9.0).reshape(1, 1, 2, 2, 2)
        gather = jaxpool.max_pool3d_with_argmax_backward(
            g, x, indices, 2, algorithm="gather"
        )
        scatter = jaxpool.max_pool3d_with_argmax_backward(g, x, indices, 2)
        want = np.zeros(64, np.float32)
        want[21] = 1.0
        assert_same(gather, want.reshape(x.shape))
        want[63] = 2.0  # the scatter honours any in-plane index
        want[0] = 5 + 6 + 7 + 8
        assert_same(scatter, want.reshape(x.shape))

    @pytest.mark.parametrize("dtype", ["uint8", "int16", "int32"])
    def test_integer_index_dtypes(self, dtype):
        x = jnp.zeros((1, 1, 2, 2, 2))
        indices = np.array(5, dtype).reshape(1, 1, 1, 1, 1)
        grad = jaxpool.max_pool3d_with_argmax_backward(
            jnp.ones((1,) * 5), x, indices, 2
        )
        assert np.asarray(grad).ravel().tolist() == [0, 0, 0, 0, 0, 1, 0, 0]


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_vjp_residuals_are_the_indices_only(dtype):
    """Where no platform's backward reads the forward's values (disjoint
    windows: an elementwise select everywhere), the VJP keeps the indices
    alone: the input is not kept, 16-bit inputs included."""
    x = jnp.asarray(
        make_input(np.random.default_rng(2), (1, 2, 6, 6, 6), dtype, "random")
    )
    _, vjp = jax.vjp(lambda x: jaxpool.max_pool3d_with_argmax(x, 2)[0], x)
    leaves = jax.tree_util.tree_leaves(vjp)
    assert [leaf.dtype for leaf in leaves] == [jnp.int32]
    assert leaves[0].shape == (1, 2, 3, 3, 3)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_vjp_keeps_the_values_where_a_backward_reads_them(dtype):
    """Where a platform's backward is the covering reduction (windows that
    more than 8 windows cover: a GPU's deterministic backward on jaxlib
    0.10.2), the VJP keeps the forward's values beside its indices, and
    still never the input; where none is (k3 s2: 8), the indices alone."""
    x = jnp.asarray(
        make_input(np.random.default_rng(2), (1, 2, 6, 6, 6), dtype, "random")
    )
    env = _policy.environment(False)
    for stride, reads in (
        (1, _policy.JAXLIB < _policy.NATIVE_ATOMICS_FROM),
        (2, False),
    ):
        spec = pool_spec("t", 3, x.shape, PoolArgs(3, stride, 1))
        assert _policy.reads_values(spec, env) == reads
        pool = lambda x, s=stride: jaxpool.max_pool3d_with_argmax(x, 3, s, 1)[0]  # noqa: E731
        _, vjp = jax.vjp(pool, x)
        leaves = jax.tree_util.tree_leaves(vjp)
        want = [jnp.dtype(dtype), jnp.int32] if reads else [jnp.int32]
        assert [leaf.dtype for leaf in leaves] == want
        out = 6 if stride == 1 else 3
        assert all(leaf.shape == (1, 2, out, out, out) for leaf in leaves)


@pytest.mark.parametrize("index_ct", ["float0", "int32"])
def test_backward_rule_accepts_float0_or_integer_index_cotangent(index_ct):
    from jaxpool._core import _pool

    x = jnp.asarray(
        make_input(np.random.default_rng(3), (1, 1, 4, 4, 4), "float32", "random")
    )
    (values, indices), vjp = jax.vjp(lambda x: jaxpool.max_pool3d_with_argmax(x, 2), x)
    ct = np.zeros(
        indices.shape, jax.dtypes.float0 if index_ct == "float0" else np.int32
    )
    (want,) = vjp((jnp.ones_like(values), np.zeros(indices.shape, jax.dtypes.float0)))
    spec = pool_spec("t", 3, x.shape, PoolArgs(2))
    (grad,) = _pool.bwd(spec, (None, indices), (jnp.ones_like(values), ct))
    assert_same(grad, want)
    assert float(grad.sum()) == values.size
