"""The TPU's kernel forms, run here on CPU, against the oracle.

On a TPU the platform seam emits forms of its own (``jaxpool._tpu``): the
forward as one variadic window reduction over the input and a code of each
element's position, the deterministic backward as per-tap selects placed by
stride phase. ``platform_forms("tpu")`` makes the seam emit those forms on
CPU: here the parts of those forms that the oracle grids and the sweeps
(``tests/test_oracle.py``, form ``tpu``) would not reach (each width of the
position codes, the order of the backward's sums, grad of grad);
``tests/test_tpu_programs.py`` checks that they are what a TPU gets.
"""

from __future__ import annotations

import functools
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import (
    assert_same,
    lowered,
    make_input,
    make_planes,
    platform_forms,
    pool_oracle,
    rng_for,
)

import jaxpool
from jaxpool import _columns, _reduce
from jaxpool._args import PoolArgs
from jaxpool._spec import pool_spec
from jaxpool._tpu import backward, layout
from jaxpool._windows import AxisWindows, PoolSpec

# Every test here runs with the TPU's forms (tests/conftest.py); the oracle
# grids and the sweeps run them as their ``tpu`` form (tests/test_oracle.py).
pytestmark = [pytest.mark.forms("tpu"), pytest.mark.full]


# The codes take the smallest integer type that names every position of a
# window (int8, int16), or flat int32 positions past 16 bits; each width must
# choose as the scan does.
CODE_WIDTHS = {
    "int4 (k2 s2: 2**3 tap codes)": ((1, 2, 7, 8, 9), (2, 2, 0)),
    "int4 (k2 s2 p1: 2**3 tap codes, padded)": ((1, 2, 7, 8, 9), (2, 2, 1)),
    "int8 (k3: 5**3 codes)": ((1, 2, 7, 8, 9), (3, 2, 1)),
    "int16 (k4: 7**3 codes)": ((1, 2, 9, 8, 9), (4, 2, 2)),
    "flat int32 (k17: 33**3 codes)": ((1, 2, 17, 18, 19), (17, 4, 8)),
}


@pytest.mark.parametrize("name", CODE_WIDTHS)
def test_every_code_width_chooses_as_the_scan(name):
    shape, args = CODE_WIDTHS[name]
    x = make_planes(rng_for("tpu-codes", name), shape, "float32")
    values, indices = jaxpool.max_pool3d_with_argmax(x, *args)  # the TPU form
    with platform_forms("cpu"):
        want = jaxpool.max_pool3d_with_argmax(x, *args)
    assert_same(values, want[0], "values")
    assert_same(indices, want[1], "indices")


@pytest.mark.parametrize(
    "args",
    [(2, 2, 0, 1, True), (2, 2, 1), (3, 2, 1, 1, True)],
    ids=["tap codes, padded after", "tap codes, padded before", "circular codes"],
)
def test_windows_of_only_minus_inf_keep_their_first_tap_in_bounds(args):
    """A window whose every element is -inf ties them with the padding: its
    index is PyTorch's, the first tap in bounds, whether the padding comes
    after the windows (tap codes, whose code 0 is tap 0, then need no
    padding code) or before (tap 0 out of bounds) and for circular codes."""
    x = np.full((2, 2, 7, 8, 9), -np.inf, np.float32)
    x[1, 1, ::3, 1::2] = np.nan
    x[1, 0, 2:5, 3:7, 1:4] = 1.5
    values, indices = jaxpool.max_pool3d_with_argmax(x, *args)  # the TPU form
    want = pool_oracle(x, 3, *args)
    assert_same(values, want[0], "values")
    assert_same(indices, want[1], "indices")


@pytest.mark.parametrize(
    "bits, codes",
    [
        (0, [0, 1, 2, 3]),
        (0, [5, 6, 7]),
        (4, [14, 15, 0, 1, 2, 3, 4]),
        (7, [126, 127, 0]),
    ],
    ids=["tap numbers", "tap numbers, not from 0", "circular, wrapping", "int8"],
)
def test_the_reducer_is_the_scans_order_whatever_the_order_of_reduction(bits, codes):
    """``_reduce._pick`` with a padding code: of any two candidates of one
    window (codes within half the modulus, padding's -1 included) it keeps
    the scan's, and its result does not depend on the order in which XLA
    pairs them (commutative, associative): XLA:CPU reduces a window from its
    initial value and skips the padding, so the tests that run the TPU's
    form here never pair an element with the padding after it, as a TPU's
    reduction may."""
    pick = _reduce._pick(bits, True)
    dtype = jnp.int8 if bits else jnp.int32
    values = [-np.inf, -0.0, 0.0, 1.5, np.nan]
    cands = [(v, c) for v in values for c in codes] + [(-np.inf, -1)]
    n = len(cands)
    v = np.array([c[0] for c in cands], np.float32)
    c = np.array([c[1] for c in cands], np.int32)

    def run(a, b):
        return pick(
            (jnp.asarray(v[a]), jnp.asarray(c[a], dtype)),
            (jnp.asarray(v[b]), jnp.asarray(c[b], dtype)),
        )

    def scan_keeps(i, j):  # the later of two NaNs, else the greater, else the earlier
        (vi, ci), (vj, cj) = cands[i], cands[j]
        ci = codes.index(ci) if ci >= 0 else n  # the padding after every tap
        cj = codes.index(cj) if cj >= 0 else n
        if np.isnan(vi) or np.isnan(vj):
            return i if np.isnan(vi) and (not np.isnan(vj) or ci > cj) else j
        return i if vi > vj or (vi == vj and ci < cj) else j

    a, b = np.meshgrid(np.arange(n), np.arange(n), indexing="ij")
    a, b = a.ravel(), b.ravel()
    kept = np.array([scan_keeps(i, j) for i, j in zip(a, b, strict=True)])
    got_v, got_c = run(a, b)
    np.testing.assert_array_equal(np.asarray(got_c, np.int32), c[kept])
    assert (np.asarray(got_v).view(np.int32) == v[kept].view(np.int32)).all()
    # Commutative for two elements of a window (each has a code of its own),
    # and associative over every triple, given it keeps the scan's of each pair.
    distinct = c[a] != c[b]
    swapped = np.array([scan_keeps(j, i) for i, j in zip(a, b, strict=True)])
    np.testing.assert_array_equal(kept[distinct], swapped[distinct])
    t = np.stack(np.meshgrid(*[np.arange(n)] * 3, indexing="ij")).reshape(3, -1)
    first = np.array([scan_keeps(scan_keeps(i, j), k) for i, j, k in t.T])
    second = np.array([scan_keeps(i, scan_keeps(j, k)) for i, j, k in t.T])
    np.testing.assert_array_equal(first, second)


def test_code_widths_are_the_ones_named():
    """The cases above reach each width: int4 (windows that tile the axis),
    int8, int16, flat int32 (``None``)."""
    widths = []
    for k, s in ((2, 2), (3, 2), (4, 2), (17, 4)):
        codes = _reduce.codes((AxisWindows(19, 4, k, s, -(k // 2)),) * 3, True)
        widths.append(None if codes.kind == "flat" else codes.dtype)
    assert widths == [jnp.int4, jnp.int8, jnp.int16, None]


def _one_d(size: int, k: int, s: int, p: int = 0, d: int = 1) -> PoolSpec:
    """The spec of a 1-D pool over an axis of ``size``."""
    return pool_spec("t", 1, (8, size), PoolArgs(k, s, p, d))


# 1-D pools that a TPU reduces in rows of its tiles (``layout.row_windows``):
# (shape, dtype, (kernel, stride, padding, dilation)); make_planes stacks
# every input kind along the first axis.
ROW_CASES = {
    "k2 s2, 3 rows": ((1, 8, 768), "float32", (2, 2, 0, 1)),
    "k2 s3, circular codes, 5 rows": ((1, 16, 1920), "float32", (2, 3, 0, 1)),
    "k2 s3 d2, dilated": ((1, 8, 1152), "float32", (2, 3, 0, 2)),
    "k4 s4, unbatched": ((8, 1536), "float32", (4, 4, 0, 1)),
    "k2 s2, bfloat16, 9 rows": ((1, 8, 2304), "bfloat16", (2, 2, 0, 1)),
}


@pytest.mark.parametrize("name", ROW_CASES)
def test_one_dimensional_pools_in_rows_choose_as_the_scan(name):
    """The TPU reduces these pools in rows of its tiles: each row a plane of
    its own, its indices moved by the row's offset. The values, the indices
    and the gradients are the CPU's forms', bit for bit."""
    shape, dtype, (k, s, p, d) = ROW_CASES[name]
    x = make_planes(rng_for("tpu-rows", name), shape, dtype)
    assert layout.row_windows(x.shape, _one_d(x.shape[-1], k, s, p, d)) is not None

    def pool(x):
        return jaxpool.max_pool1d_with_argmax(x, k, s, p, dilation=d)

    def grad(x):
        return jax.grad(lambda x: jnp.sum(pool(x)[0].astype(jnp.float32) ** 2))(x)

    found = (*pool(x), grad(x))  # the TPU forms
    with platform_forms("cpu"):
        want = (*pool(x), grad(x))
    for what, a, b in zip(("values", "indices", "gradient"), found, want, strict=True):
        assert_same(a, b, what)


def test_rows_only_where_the_view_is_free_and_no_window_crosses_a_row():
    """``layout.row_windows``: a row's windows where the planes fill whole
    tiles' rows of 8, the axis whole rows of ``128 * stride`` (at least two,
    and a number XLA's layout assignment would not take for the sublanes)
    and no window crosses from one row into the next; else None."""
    row = layout.row_windows((2, 8, 768), _one_d(768, 2, 2))
    assert row == AxisWindows(256, 128, 2, 2, 0, 1)
    assert layout.row_windows((8, 1536), _one_d(1536, 3, 3)) == AxisWindows(
        384, 128, 3, 3, 0, 1
    )
    declined = {
        "windows that overlap": ((2, 8, 768), _one_d(768, 3, 2, 1)),
        "padding": ((2, 8, 768), _one_d(768, 2, 2, 1)),
        "planes not whole rows of 8": ((2, 12, 768), _one_d(768, 2, 2)),
        "one row": ((2, 8, 256), _one_d(256, 2, 2)),
        "no whole rows": ((2, 8, 700), _one_d(700, 2, 2)),
        "8 rows": ((2, 8, 2048), _one_d(2048, 2, 2)),
        "a partial last window": ((2, 8, 769), _one_d(769, 2, 2)),
        "no planes": ((768,), _one_d(768, 2, 2)),
        "channels-last": ((2, 768, 8), _one_d(768, 2, 2)._replace(channels_last=True)),
    }
    for why, (shape, spec) in declined.items():
        assert layout.row_windows(shape, spec) is None, why


@pytest.mark.parametrize(
    "divisor, bound, reciprocal",
    [(8, 1000, True), (3, 1000, True), (127, 4_000, True), (3, 50_000, False)],
    ids=["power of two", "small", "int8 codes", "past int32"],
)
def test_division_by_a_constant_is_floor_division(divisor, bound, reciprocal):
    """The codes' decoding divides by a multiply and a shift where one holds
    for every code below ``bound`` without overflowing int32 (a shift alone
    for a power of two), else by ``//``: each equals floor division."""
    found = _columns._reciprocal(divisor, bound)
    assert (found is not None) == reciprocal
    x = jnp.arange(bound, dtype=jnp.int32)
    assert np.array_equal(
        _columns.divide(x, divisor, bound), np.arange(bound) // divisor
    )


# The dense backward runs in the arrays' own layout, or with the (n, c) planes
# moved behind the spatial axes where that pads a TPU's tiles less (not where
# XLA lays the batch in the lanes, and channels-last only where it lays a
# spatial axis there: layout.planes_minor),
# on the axes of layout.plane_axes: their own where the channels fill the lanes,
# else one, or tiles' rows; it matches the windows'
# indices (stride 1) or, with several stride phases, their tap numbers
# (layout.coded). Cases: (shape, args, channels_last, the planes' axes or None
# where they stay, coded).
ORDER_CASES = {
    "own layout, k3 s1 p1, indices": ((2, 3, 9, 10, 11), (3, 1, 1), False, None, False),
    "own layout, channels-last k3 s2 p1, tap numbers": (
        (2, 5, 6, 7, 64),
        (3, 2, 1),
        True,
        None,
        True,
    ),
    "channels-last planes minor, k3 s1 p1, indices": (
        (2, 9, 10, 11, 6),
        (3, 1, 1),
        True,
        (12,),
        False,
    ),
    "channels-last planes minor in tiles, k3 s2 p1, tap numbers": (
        (16, 3, 4, 120, 64),
        (3, 2, 1),
        True,
        (8, 128),
        True,
    ),
    "planes minor, k3 s2 p1, tap numbers": (
        (4, 64, 7, 9, 10),
        (3, 2, 1),
        False,
        (256,),
        True,
    ),
    "planes minor, k3 s1 p1, indices": (
        (4, 64, 7, 9, 10),
        (3, 1, 1),
        False,
        (256,),
        False,
    ),
    "planes minor in tiles, k3 s2 p1, tap numbers": (
        (16, 64, 5, 6, 7),
        (3, 2, 1),
        False,
        (8, 128),
        True,
    ),
    "planes minor on their own axes, k3 s2 p1, tap numbers": (
        (2, 128, 5, 6, 7),
        (3, 2, 1),
        False,
        (2, 128),
        True,
    ),
    "planes minor on their own axes, k3 s1 p1, indices": (
        (2, 256, 5, 6, 7),
        (3, 1, 1),
        False,
        (2, 256),
        False,
    ),
    "planes in place where the batch fills the lanes, k3 s2 p1": (
        (128, 2, 5, 6, 7),
        (3, 2, 1),
        False,
        None,
        True,
    ),
    "planes minor, k2 s3 p1 (a phase no tap reads), tap numbers": (
        (2, 80, 11, 7, 9),
        (2, 3, 1),
        False,
        (160,),
        True,
    ),
}


def _assert_planes(spec, shape, planes):
    """The dense backward keeps the planes in place (``planes`` None) or moves
    them onto the axes ``planes``."""
    assert layout.planes_minor(spec, shape) == (planes is not None)
    if planes is not None:
        assert layout.plane_axes(spec, shape) == planes


@pytest.mark.parametrize("name", ORDER_CASES)
def test_backward_order_is_the_gathers(name):
    """Non-integer gradients summed over overlapping windows: the TPU's dense
    backward adds each element's windows in the gather's order, so its bits
    are the gather's, not merely close; in either layout, by index or by tap
    number."""
    shape, args, channels_last, planes, by_number = ORDER_CASES[name]
    pool = functools.partial(
        jaxpool.max_pool3d_with_argmax, channels_last=channels_last
    )
    x = make_input(rng_for("tpu-order", name), shape, "float32", "ties")
    values, indices = pool(x, *args)
    spec = pool_spec("t", 3, x.shape, PoolArgs(*args, channels_last=channels_last))
    _assert_planes(spec, indices.shape, planes)
    assert layout.coded(spec) == by_number
    w = jnp.asarray(np.random.default_rng(5).standard_normal(values.shape), jnp.float32)

    def grad(x):
        loss = lambda x: jnp.sum(w * pool(x, *args)[0])  # noqa: E731
        return jax.grad(loss)(x)

    got = grad(x)
    with platform_forms("default"):
        gathered = grad(x)  # the accelerators' gather: overlapping windows
    assert_same(got, gathered)


# With stride phases, the phases are summed phase-major in one loop
# (backward.phase_major_sum; a tap of another phase adds +0.0), in the arrays' own
# layout and where the planes take two axes behind the spatial ones (tiles'
# rows or their own), 16-bit gradients too, but not where they take one
# (layout.phase_major).
# Channels-last 2-D pools read tap numbers with stride 1 too (layout.coded): one
# phase, in the same loops.
# Cases: (shape, args, channels_last, dtype, the planes' axes or None where
# they stay, phase-major).
PHASE_MAJOR_CASES = {
    "2-D in tiles, k3 s2 p1": (
        (16, 64, 9, 10),
        (3, 2, 1),
        False,
        "float32",
        (8, 128),
        True,
    ),
    "2-D in tiles, k1 s2 (every tap in one phase)": (
        (16, 64, 9, 10),
        (1, 2, 0),
        False,
        "float32",
        (8, 128),
        True,
    ),
    "2-D in tiles, k2 s2, bfloat16": (
        (16, 64, 9, 10),
        (2, 2, 0),
        False,
        "bfloat16",
        (8, 128),
        True,
    ),
    "channels-last 2-D in tiles, k3 s2 p1": (
        (16, 9, 120, 64),
        (3, 2, 1),
        True,
        "float32",
        (8, 128),
        True,
    ),
    "3-D in tiles, k3 s2 p1, bfloat16": (
        (16, 64, 5, 6, 7),
        (3, 2, 1),
        False,
        "bfloat16",
        (8, 128),
        True,
    ),
    "2-D in tiles, k (3, 2) s (2, 3) p (1, 0) ceil_mode": (
        (16, 64, 11, 13),
        ((3, 2), (2, 3), (1, 0), 1, True),
        False,
        "float32",
        (8, 128),
        True,
    ),
    "own layout, k3 s2 p1": (
        (2, 3, 9, 10, 11),
        (3, 2, 1),
        False,
        "float32",
        None,
        True,
    ),
    "own layout, channels-last 2-D, k3 s2 p1, bfloat16": (
        (4, 9, 10, 64),
        (3, 2, 1),
        True,
        "bfloat16",
        None,
        True,
    ),
    "own layout, channels-last 2-D, k3 s2 p1, bfloat16, 128 channels": (
        (2, 9, 10, 128),
        (3, 2, 1),
        True,
        "bfloat16",
        None,
        True,
    ),
    "own layout, channels-last 2-D, k3 s1 p1 (one phase)": (
        (2, 9, 10, 128),
        (3, 1, 1),
        True,
        "float32",
        None,
        True,
    ),
    "channels-last 2-D in tiles, k3 s1 p1 (one phase)": (
        (16, 9, 112, 64),
        (3, 1, 1),
        True,
        "float32",
        (8, 128),
        True,
    ),
    "channels-last 2-D in tiles, k3 s1 p1, bfloat16 (one phase)": (
        (16, 9, 112, 64),
        (3, 1, 1),
        True,
        "bfloat16",
        (8, 128),
        True,
    ),
    "3-D as one axis, k3 s2 p1 (the phases' own loops)": (
        (4, 32, 6, 6, 6),
        (3, 2, 1),
        False,
        "float32",
        (128,),
        False,
    ),
    "own layout, channels-last 3-D, k2 s3 p1": (
        (2, 7, 8, 9, 64),
        (2, 3, 1),
        True,
        "float32",
        None,
        True,
    ),
    "3-D on their own axes, k2 s3 p1": (
        (2, 128, 7, 8, 9),
        (2, 3, 1),
        False,
        "float32",
        (2, 128),
        True,
    ),
}


@pytest.mark.parametrize("name", PHASE_MAJOR_CASES)
def test_phase_major_sum_is_the_phases_to_the_sign_of_zero(name, monkeypatch):
    """Gradients of -0.0, +0.0, infinities and NaN over tied windows: the
    phase-major sum adds +0.0 for the other phases' taps, which leaves every
    nonzero sum as it is, so each position's sum is the phases' own loops'
    bit for bit, and the gather's; and every zero is +0.0, the spec's, also
    where only -0.0 gradients land (before +0.0 took them, the phases' loops
    gave -0.0 there, and the phase-major sum added -0.0 to keep it)."""
    shape, args, channels_last, dtype, planes, phase_major = PHASE_MAJOR_CASES[name]
    nd = len(shape) - 2
    pool = functools.partial(
        getattr(jaxpool, f"max_pool{nd}d_with_argmax"), channels_last=channels_last
    )
    x = make_input(rng_for("tpu-phase-major", name), shape, dtype, "ties")
    values, indices = pool(x, *args)
    spec = pool_spec("t", nd, x.shape, PoolArgs(*args, channels_last=channels_last))
    _assert_planes(spec, indices.shape, planes)
    rng = np.random.default_rng(7)
    specials = np.array([-0.0, 0.0, -0.0, np.inf, -np.inf, np.nan, 1.5, -2.25])
    w = jnp.asarray(rng.choice(specials, values.shape), values.dtype)

    def grad(x):
        loss = lambda x: jnp.sum(w * pool(x, *args)[0])  # noqa: E731
        jax.clear_caches()
        return np.asarray(jax.grad(loss)(x), np.float32)

    calls = []
    phase_major_sum = backward.phase_major_sum
    monkeypatch.setattr(
        backward, "phase_major_sum", lambda *a: calls.append(1) or phase_major_sum(*a)
    )
    got = grad(x)
    assert bool(calls) == phase_major
    monkeypatch.setattr(  # the phases' own loops, as before it
        backward,
        "phase_major_sum",
        lambda g, k, acc, spec, lead: backward.phase_sum(g, k, acc, spec, lead, None),
    )
    phases = grad(x)
    assert_same(got, phases)  # to the sign of zero
    zeros = got == 0
    assert zeros.any() and not np.signbit(got)[zeros].any()
    with platform_forms("default"):
        gathered = grad(x)  # the accelerators' gather
    assert_same(got, gathered)


@pytest.mark.parametrize(
    "shape, planes",
    [
        ((1, 2, 7, 8, 9), None),
        ((4, 64, 7, 8, 9), (256,)),
        ((16, 64, 7, 8, 9), (8, 128)),
        ((2, 128, 7, 8, 9), (2, 128)),
    ],
    ids=["own layout", "planes minor", "planes minor in tiles", "on their own axes"],
)
def test_tap_numbers_drop_what_the_gather_drops(shape, planes):
    """The public backward's ``"gather"`` counts an index only inside its own
    window. By tap number too: an index out of the plane (negative, the plane
    size, 2**31 - 1) or in the plane but outside its window names no tap,
    and is not wrapped into one."""
    args = (3, 2, 1)
    x = make_input(rng_for("tpu-drop", str(shape)), shape, "float32", "random")
    values, indices = jaxpool.max_pool3d_with_argmax(x, *args)
    spec = pool_spec("t", 3, x.shape, PoolArgs(*args))
    _assert_planes(spec, indices.shape, planes)
    assert layout.coded(spec)
    plane = 7 * 8 * 9
    hostile = np.array(indices)
    # Each out-of-plane index planted where floor division would wrap it into
    # the window: -1 to (6, 7, 8), the plane size to (0, 0, 0), 2**31 - 1 to
    # (1, 6, 1).
    hostile[0, 0, 3, 3, 4] = -1
    hostile[0, 0, 0, 0, 0] = plane
    hostile[0, 1, 0, 3, 0] = 2**31 - 1
    hostile[0, 1, 0, 0, 0] = hostile[0, 1, 3, 3, 3]  # another window's tap
    hostile[0, 1, 1, 2, 3] += 3 * 8 * 9  # its row and column, 3 slices deeper
    # Window (2, 2, 2) starts at (3, 3, 3): an index one slice past its start
    # and one row before it, offsets (1, -1, 0), has the row-major tap number
    # 9 - 3 = 6 of the tap (0, 2, 0) unless the window's bounds are checked.
    hostile[0, 1, 2, 2, 2] = np.ravel_multi_index((4, 2, 3), (7, 8, 9))
    g = jnp.arange(1.0, values.size + 1).reshape(values.shape)

    def backward(indices):
        return jaxpool.max_pool3d_with_argmax_backward(
            g, x, indices, *args, algorithm="gather"
        )

    got = backward(hostile)
    with platform_forms("default"):
        want = backward(hostile)  # XLA's covering sum
    assert_same(got, want)
    assert not np.array_equal(got, backward(indices))  # the planted ones mattered


@pytest.mark.parametrize(
    "shape, args",
    [((2, 3, 7, 8, 9), (3, 2, 1)), ((1, 2, 5, 6, 7), (2, 1, 1, 3))],  # d3: empty
    ids=["k3 s2 p1", "k2 s1 p1 d3"],
)
def test_grad_of_grad_is_the_scans(shape, args):
    """Grad of grad differentiates the forward itself, through the window
    reduction's own JVP rule (JAX's does not take the integer codes): the same
    second derivatives as the scan's."""
    x = make_input(rng_for("tpu-grad2", str(args)), shape, "float32", "random")
    c = make_input(rng_for("tpu-grad2-c", str(args)), shape, "float32", "random")

    def loss(x):
        values = jaxpool.max_pool3d_with_argmax(x, *args)[0]
        return jnp.sum(jnp.where(jnp.isinf(values), 0, values) ** 2)

    def second(x):
        return jax.grad(lambda x: jnp.sum(c * jax.grad(loss)(x)))(x)

    got = second(x)
    with platform_forms("cpu"):
        want = second(x)
    assert np.abs(np.asarray(want)).max() > 0  # the check can fail
    assert_same(got, want, "grad of grad")


# The adaptive forward's stages code the chosen element's offset along the
# axes reduced so far in the narrowest integer holding every offset and, past
# them, the initial value (``layout.code_type``): each width at its edges, in
# the copied form and the dilated one. Rows: (shape, output_size).
STAGE_WIDTHS = {
    "int8, offsets 0..126 (1d 127 -> 50, copied)": ((1, 1, 127), (50,)),
    "int16, offsets 0..128 (1d 129 -> 86, dilated)": ((1, 1, 129), (86,)),
    "int16, offsets 0..32,759 (2d 182x180 -> 91x120)": ((1, 1, 182, 180), (91, 120)),
    "int32, offsets 0..32,941 (2d 182x181 -> 91x120)": ((1, 1, 182, 181), (91, 120)),
}


@pytest.mark.parametrize("name", STAGE_WIDTHS)
def test_every_stage_code_width_chooses_as_the_scan(name):
    """Values and indices bit for bit the scan's, on every input kind at once
    (ties, NaN, ±inf): an offset that wrapped around its integer, or met the
    initial value, would reorder a tie."""
    shape, output_size = STAGE_WIDTHS[name]
    nd = len(output_size)
    x = make_planes(rng_for("tpu-stage-widths", name), shape, "float32")
    pool = functools.partial(
        getattr(jaxpool, f"adaptive_max_pool{nd}d"), output_size=output_size
    )
    got = pool(x)
    with platform_forms("cpu"):
        want = pool(x)
    assert_same(got[0], want[0], "values")
    assert_same(got[1], want[1], "indices")


# Adaptive pools whose axis in the TPU's lanes is one window reduction over
# that axis dilated (``_reduce.stage``): sizes with a common factor
# (16 -> 6: dilated 3-fold) and without, channels-last, 3-D, 16-bit, an
# output larger than the input, and an axis after it carrying its offsets.
# Rows: (nd, shape, output_size, channels_last, dtype).
DILATED = {
    "2d 16x16 -> 6x6 (16/6 = 8/3)": (2, (1, 3, 16, 16), (6, 6), False, "float32"),
    "2d 13x13 -> 7x7 (coprime)": (2, (1, 2, 13, 13), (7, 7), False, "bfloat16"),
    "2d channels-last 14x20x3 -> 5x8": (2, (1, 14, 20, 3), (5, 8), True, "float32"),
    "3d 5x7x12 -> 3x4x5": (3, (1, 2, 5, 7, 12), (3, 4, 5), False, "float16"),
    "1d 5 -> 8 (upsampling)": (1, (1, 1, 5), (8,), False, "float32"),
}


@pytest.mark.parametrize("name", DILATED)
def test_dilated_adaptive_windows_choose_as_the_scan(name):
    """The TPU's forward reduces such an axis dilated (the lowered program's
    window reductions dilate their input), and chooses as the scan does on
    every input kind at once (ties, NaN, ±inf among them), values and
    indices bit for bit: the seam's TPU form, and the program exported for a
    TPU, run here by XLA:CPU."""
    nd, shape, output_size, channels_last, dtype = DILATED[name]
    x = make_planes(rng_for("tpu-dilated", name), shape, dtype)
    pool = functools.partial(
        getattr(jaxpool, f"adaptive_max_pool{nd}d"),
        output_size=output_size,
        channels_last=channels_last,
    )
    text = lowered(pool, (x,), "tpu")
    assert re.search(r"base_dilations = array<i64: (1, )*[2-9]", text), name
    with platform_forms(None):  # the platforms' own forms, to export
        exported = jax.export.export(
            jax.jit(pool),
            platforms=["tpu"],
            disabled_checks=[jax.export.DisabledSafetyCheck.platform()],
        )(jax.ShapeDtypeStruct(x.shape, x.dtype))
        on_tpu = exported.call(x)
    with platform_forms("cpu"):
        want = pool(x)
    for got in (pool(x), on_tpu):
        assert_same(got[0], want[0], "values")
        assert_same(got[1], want[1], "indices")
