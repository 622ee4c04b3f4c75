"""The TPU forms: the forward as one window reduction, the backward without a
gather or a scatter.

A TPU has no vector gather and serialises scatters, and XLA compiles each
strided slice of a tiled minor axis to a relayout. So on a TPU:

- **the forward** (:func:`window_argmax`) is one variadic ``lax.reduce_window``
  over ``(x, code)``, whose reducer (:func:`_pick`) is the scan's selection as
  a total order: a NaN beats every number and the later of two NaNs wins; a
  greater number wins, and of two equal numbers the earlier. ``code`` names
  each element's position by its coordinates modulo ``2 * span - 1`` per axis
  (``span``: how far apart two taps of one window lie, plus one), which orders
  any two elements of one window as their flat positions do (:func:`_order`),
  in an int8 or int16 array (which XLA writes out and the reduction reads
  back: its TPU compiler fuses no producer into a window reduction); the
  padding code loses every tie, so a window of only ``-inf`` keeps its first
  in-bounds tap. The chosen code and the window's first coordinate give the
  flat index. Past 16 bits of codes, the codes are flat positions (int32).
  Adaptive windows of two sizes are reduced one axis at a time instead
  (:func:`_staged_argmax`), each stage reducing the values and the chosen
  element's offset along the axes reduced so far: along the lanes as one
  window reduction over the axis dilated, elsewhere from a copy of the axis
  alone in which each window is its taps in turn (:func:`_stage`);
- **the backward** (:func:`covering_sum`): each stride phase of the input
  adds, tap by tap, the gradients of the windows whose index is its position,
  read from the output grid shifted by the tap (a slice of the grid padded
  once: XLA fuses the whole phase into one loop), and the phases are
  interleaved once (a transpose): the ``"gather"`` backward's sum, in its
  order, with no gather. With more than one phase, and for channels-last
  2-D pools, it reads each window's chosen tap number (int8 for up to 127
  taps, :func:`tap_codes`) instead of its int32 index (:func:`coded`).
  Where the TPU's tiles pad the spatial axes more than the ``(n, c)`` planes
  (channels-last: where XLA lays a spatial axis in the lanes), it runs with
  the planes moved to the minor axis (:func:`planes_minor`): on their own
  axes where the channels fill the TPU's lanes, else as one axis, split into
  tiles' rows of 128 where they fill whole tiles and it reads tap numbers
  (:func:`plane_axes`).
  Mostly, every phase is computed in one loop, phase major, and interleaved
  by the transpose back (:func:`phase_major`, :func:`_phase_major_sum`).
  Dilated and adaptive windows take ``_backward``'s gather.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import NamedSharding, PartitionSpec

from ._planes import accumulation_dtype, gather_at, in_plane, positive_zeros
from ._windows import (
    INT32_MAX,
    AxisWindows,
    PoolSpec,
    adaptive_bounds,
    coordinates,
    empty_windows,
    fill_empty,
    per_window,
    row_major_strides,
    split,
    with_spatial,
)


class _Reading(NamedTuple):
    """How the window reduction reads one spatial axis, and codes positions."""

    positions: np.ndarray  # the input coordinate of each element it reads
    window: int
    stride: int
    dilation: int
    pad: tuple[int, int]  # -inf padding (low, high); high may be cut off
    base: np.ndarray  # (out,) coordinate of each window's tap 0, maybe < 0
    modulus: int  # the codes along this axis: residues 0 .. modulus - 1
    circular: bool  # coordinates modulo ``modulus``, else tap numbers
    last: np.ndarray | None = None  # (out,) each window's last coordinate

    def residues(self) -> np.ndarray:
        """The code of each element read, along this axis."""
        if self.circular:
            return self.positions % self.modulus
        return (np.arange(self.positions.size) + self.pad[0]) % self.window


def _codes(
    r: _Reading, shape: tuple[int, ...], axis: int, flat: bool, sharding: Any
) -> Any:
    """Each element's code residue along ``axis`` (``flat``: its coordinate),
    int32, to broadcast against the source's ``shape``: from an iota where it
    can, not a table (XLA still writes the codes out before the reduction:
    it fuses no producer into one)."""
    iota = lax.broadcasted_iota(jnp.int32, shape, axis, out_sharding=sharding)
    first = int(r.positions[0])
    if not flat:
        return (
            (iota + first) % r.modulus if r.circular else (iota + r.pad[0]) % r.window
        )
    if np.array_equal(r.positions, first + np.arange(r.positions.size)):
        return iota + first
    return per_window(r.positions.astype(np.int32), axis, shape)


def _reading(w: AxisWindows) -> _Reading:
    """The reduction's reading of the windows ``w``.

    Regular windows read the input, coded by coordinates modulo ``2 * span -
    1`` (``span``: how far apart two taps of one window lie, plus one), which
    tells the order of any two taps of one window; windows that tile the axis
    (stride = kernel, dilation 1) by tap number, fewer codes (k2 s2 in 3-D:
    8, int4). (Adaptive windows of two sizes: :func:`_staged_argmax`.)"""
    first = max(0, w.offset)
    low = max(0, -w.offset)
    span = (w.taps - 1) * w.dilation + 1
    high = max(0, (w.out - 1) * w.stride + span - low - (w.size - first))
    base = np.arange(w.out) * w.stride + w.offset
    positions = np.arange(first, w.size)
    pad = (low, high)
    if span == w.taps == w.stride and first == 0:  # windows that tile the axis
        last = base + w.taps - 1
        return _Reading(positions, w.taps, w.stride, 1, pad, base, w.taps, False, last)
    return _Reading(
        positions, w.taps, w.stride, w.dilation, pad, base, 2 * span - 1, True
    )


def _read(x: jax.Array, axis: int, positions: np.ndarray) -> jax.Array:
    """``x`` at the static ``positions`` along ``axis``: itself, or a
    concatenate of its contiguous runs (a gather past 64 runs)."""
    if np.array_equal(positions, np.arange(x.shape[axis])):
        return x
    cuts = np.flatnonzero(np.diff(positions) != 1) + 1
    runs = np.split(positions, cuts)
    if len(runs) > 64:
        return jnp.take(x, positions, axis=axis)
    parts = [lax.slice_in_dim(x, int(r[0]), int(r[-1]) + 1, axis=axis) for r in runs]
    return parts[0] if len(parts) == 1 else lax.concatenate(parts, axis)


def _code_type(bound: int) -> Any:
    """The narrowest of int8, int16 and int32 that holds ``0 .. bound``."""
    return jnp.int8 if bound <= 127 else jnp.int16 if bound < 2**15 else jnp.int32


def _code_dtype(readings: list[_Reading]) -> Any:
    """The smallest integer dtype holding every code and the padding's (-1);
    ``None`` past 16 bits (the codes are then flat positions)."""
    count = math.prod(r.modulus for r in readings)
    if count <= 8:  # tiling windows of 8 taps or fewer: k2 s2 in 3-D
        return jnp.int4
    dtype = _code_type(count)
    return None if dtype == jnp.int32 else dtype


@functools.cache
def _reciprocal(divisor: int, bound: int) -> tuple[int, int] | None:
    """``(magic, shift)`` with ``x * magic >> shift == x // divisor`` for every
    ``0 <= x < bound`` and no int32 overflow, checked exhaustively; ``None``
    where there is none."""
    shift = max(1, (bound * divisor).bit_length())
    magic = -(-(1 << shift) // divisor)
    x = np.arange(bound, dtype=np.int64)
    if bound * magic >= 2**31 or not np.array_equal(x * magic >> shift, x // divisor):
        return None
    return magic, shift


def _div(x: jax.Array, divisor: int, bound: int) -> jax.Array:
    """``x // divisor`` for ``0 <= x < bound`` as a multiply and a shift (or a
    shift alone): XLA's TPU compiler is slow over an integer division in a
    reduction's body (the performance page, "The forward: where the bytes
    go", has the compile times). Negative ``x`` gives a value that is never
    used."""
    if divisor & (divisor - 1) == 0:
        return x >> (divisor.bit_length() - 1)
    found = _reciprocal(divisor, bound)
    if found is None:
        return x // divisor
    magic, shift = found
    return (x * magic) >> shift


def _residues(code: jax.Array, readings: list[_Reading]) -> list[jax.Array]:
    """The residue along each axis of the int32 ``code`` (``0 <= code <`` the
    moduli's product; a negative code gives values that are never used),
    first axis first: split once, the last axis first, with a multiply and a
    shift an axis past the first (:func:`_div`); the first axis's residue is
    what is left. The comparator's codes and the chosen ones both: decoded
    with ``//`` and ``%``, they took XLA's TPU compiler up to ten times as
    long over large 3-D stride-1 forwards (the performance page, "The forward:
    where the bytes go")."""
    bound, rest = math.prod(r.modulus for r in readings), []
    for r in reversed(readings[1:]):
        quotient = _div(code, r.modulus, bound)
        rest.append(code - quotient * r.modulus)
        code, bound = quotient, -(-bound // r.modulus)
    return [code, *reversed(rest)]


def _order(c: jax.Array, d: jax.Array, readings: list[_Reading] | None) -> Any:
    """The order of the positions that codes ``c`` and ``d`` name in one
    window, as an int32: positive where ``c``'s comes first, negative where
    ``d``'s does, 0 for the same position. Flat positions subtract. Codes
    are split into their axes' residues once (:func:`_residues`); each
    axis's step from ``c`` to ``d`` is the residues' difference, taken into
    ``[-(m // 2), m // 2]`` for coordinate residues (two taps of one window
    lie at most ``m // 2`` apart), and the steps are weighted as the codes
    are: ``|step| < m`` on every axis, so the first axis that differs
    outweighs all later ones and the sum's sign is the row-major order.
    (Split twice an axis, a quotient and a remainder, for each direction of
    the comparison, they took XLA's TPU compiler several times as long over
    large stride-1 forwards: the compile times of the performance page's "The
    forward: where the bytes go".)"""
    if readings is None:
        return d - c
    c, d = c.astype(jnp.int32), d.astype(jnp.int32)
    order = jnp.zeros((), jnp.int32)
    steps = zip(readings, _residues(c, readings), _residues(d, readings), strict=True)
    for r, rc, rd in steps:
        m, step = r.modulus, rd - rc
        if r.circular:
            step = jnp.where(step > m // 2, step - m, step)
            step = jnp.where(step < -(m // 2), step + m, step)
        order = order * m + step
    return order


def _pick(readings: list[_Reading] | None) -> Any:
    """The reducer: of two ``(value, code)`` candidates, the one the scan
    keeps (see ``_scan._after``); of two positions, the earlier
    (:func:`_order`), the padding's code (negative where ``readings`` code
    residues, else past every position) coming last."""

    def pick(a: tuple[jax.Array, ...], b: tuple[jax.Array, ...]) -> Any:
        (v, c), (w, d) = a, b
        order = _order(c, d, readings)
        c_first, d_first = order > 0, order < 0
        if readings is not None:
            padding = (c < 0) | (d < 0)
            c_first = jnp.where(padding, d < 0, c_first)
            d_first = jnp.where(padding, c < 0, d_first)
        v_nan, w_nan = jnp.isnan(v), jnp.isnan(w)
        numbers = ~w_nan & ((v > w) | ((v == w) & c_first))
        take = jnp.where(v_nan, ~w_nan | d_first, numbers)
        return jnp.where(take, v, w), jnp.where(take, c, d)

    return pick


@functools.partial(jax.custom_jvp, nondiff_argnums=(1, 2))
def window_argmax(
    x: jax.Array, spec: PoolSpec, sharding: Any = None
) -> tuple[jax.Array, jax.Array]:
    """Max and flat argmax of every window over the spatial axes of ``x``,
    as ``_scan.window_argmax`` (the same values and indices, bit for bit),
    in one variadic window reduction. Its JVP (:func:`_window_argmax_jvp`) is
    the scan's, so grad of grad works through it.

    Args:
      x: ``(*B, *S, *T)`` input, ``S`` matching ``spec.axes``' sizes, ``T``
        the channels of a channels-last array.
      spec: the pool.
      sharding: of the arrays built here (see ``_platform.plane_sharding``).

    Returns:
      ``(values, indices)``, each ``(*B, *O, *T)``; values in ``x.dtype``,
      indices int32 offsets into the unpadded ``S`` plane.
    """
    if any(w.starts for w in spec.axes):
        return _staged_argmax(x, spec, sharding)
    axes, lead = spec.axes, split(x.ndim, spec.nd, spec.trail)[0]
    readings = [_reading(w) for w in axes]
    source = x
    for a, r in enumerate(readings):
        source = _read(source, lead + a, r.positions)
    dtype = _code_dtype(readings)
    coded = readings if dtype is not None else None
    strides = row_major_strides(spec.in_size)
    code = jnp.zeros((), jnp.int32)
    weight = 1
    for a in reversed(range(len(axes))):
        r = readings[a]
        column = _codes(r, source.shape, lead + a, coded is None, sharding)
        if coded is None:  # flat positions
            column = column * strides[a]
        else:
            column, weight = column * weight, weight * r.modulus
        code = code + column
    dtype = jnp.int32 if dtype is None else dtype
    code = jnp.broadcast_to(code.astype(dtype), source.shape, out_sharding=sharding)
    padding_code = -1 if coded is not None else INT32_MAX
    ones = [1] * x.ndim
    dims, steps, dilation, pads = list(ones), list(ones), list(ones), [(0, 0)] * x.ndim
    for a, r in enumerate(readings):
        dims[lead + a], steps[lead + a] = r.window, r.stride
        dilation[lead + a], pads[lead + a] = r.dilation, r.pad
    values, chosen = lax.reduce_window(
        (source, code),
        (jnp.array(-jnp.inf, x.dtype), jnp.array(padding_code, dtype)),
        _pick(coded),
        dims,
        steps,
        pads,
        window_dilation=dilation,
    )
    for a, w in enumerate(axes):  # a cut-off high padding may leave extra windows
        values = lax.slice_in_dim(values, 0, w.out, axis=lead + a)
        chosen = lax.slice_in_dim(chosen, 0, w.out, axis=lead + a)
    index = chosen.astype(jnp.int32)
    if coded is not None:
        index = jnp.zeros((), jnp.int32)
        residues = _residues(chosen.astype(jnp.int32), readings)
        for a, (r, residue) in enumerate(zip(readings, residues, strict=True)):
            if r.circular:  # base: o * stride + offset, from an iota
                o = lax.broadcasted_iota(
                    jnp.int32, values.shape, lead + a, out_sharding=sharding
                )
                base = o * r.stride + int(r.base[0])
                coordinate = base + jnp.remainder(residue - base, r.modulus)
            else:
                assert r.last is not None
                base = per_window(r.base.astype(np.int32), lead + a, values.shape)
                last = per_window(r.last.astype(np.int32), lead + a, values.shape)
                coordinate = jnp.minimum(base + residue, last)
            index = index + coordinate * strides[a]
    hollow = empty_windows(axes, lead, values.shape)
    if hollow is not None:  # no in-bounds tap: PyTorch's index, value -inf
        target = jnp.zeros((), jnp.int32)
        for a, (w, s) in enumerate(zip(axes, strides, strict=True)):
            first = (w.positions(0) + w.first_tap() * w.dilation) * s
            target = target + per_window(first.astype(np.int32), lead + a, values.shape)
        index = jnp.where(hollow, target, index)
    return values, index


def _staged_argmax(
    x: jax.Array, spec: PoolSpec, sharding: Any
) -> tuple[jax.Array, jax.Array]:
    """:func:`window_argmax` of adaptive windows: one reduction per spatial
    axis, the last first. Each reduces the values and one code: the chosen
    element's offset in the plane along the axes reduced so far (its
    coordinates times their row-major strides; the narrowest integer that
    holds them, :func:`_code_type`). Two elements of one window a stage
    compares share every coordinate it has not reduced, so the smaller code is
    the earlier in row-major order: the reducer's order (the larger value, the
    earlier of equals, the last NaN) is the scan's, whatever the order of the
    stages, and the last stage's code is the index. (Carried beside a code of
    the stage's axis alone, as a third operand, the offsets cost more bytes:
    XLA writes every operand of a window reduction out.)

    Along the axis XLA lays in the TPU's lanes (:func:`_lane_axis`), an
    adaptive pool's windows are one window reduction over the axis dilated
    (:func:`_stage`, where :func:`_dilates`). Along the others, the reduction
    reads a copy of the axis alone in which every window is its ``taps``
    elements in turn (a short window repeats its last, which changes no
    choice; windows that tile the axis need no copy); the taps split off into
    an axis of their own, a plain reduction codes them from an iota, which
    XLA's TPU compiler fuses into it (:func:`_stage`; one window reduction
    over a copy of every axis at once had its codes written out, as every
    window reduction does). Along the lanes, XLA writes each contiguous run of
    that copy as a slice of its own, each padded to whole lanes, so the copy's
    bytes grow with the output's size, and the dilated reduction's hardly do.
    (The performance page, "Adaptive windows of two sizes", has the
    measurements.)"""
    lead = split(x.ndim, spec.nd, spec.trail)[0]
    strides = row_major_strides(spec.in_size)
    values, code, bound = x, None, 1
    for a in reversed(range(spec.nd)):
        w, axis = spec.axes[a], lead + a
        bound += (w.size - 1) * strides[a]  # past every code so far
        dtype = _code_type(bound)
        static = all(isinstance(n, int) for n in values.shape)  # not jax.export's
        dilated = static and _lane_axis(values.shape) == axis and _dilates(w)
        stage = _stage(values, code, w, axis, sharding, dilated)
        values, coordinate, carried, reduce = stage
        code = coordinate.astype(dtype) * jnp.array(strides[a], dtype)
        if carried is not None:
            code = carried.astype(dtype) + code
        inits = (
            jnp.array(-jnp.inf, values.dtype),
            jnp.array(jnp.iinfo(dtype).max, dtype),
        )
        values, code = reduce((values, code), inits, _pick(None))
    assert code is not None
    return values, code.astype(jnp.int32)


# A stage of :func:`_staged_argmax` (:func:`_stage`): ``(values, coordinate,
# carried, reduce)``, the operands as the stage reduces them, each element's
# coordinate along the stage's axis, and ``reduce(operands, inits, reducer)``.
_Stage = tuple[jax.Array, jax.Array, jax.Array | None, Callable[..., Any]]


def _dilates(w: AxisWindows) -> bool:
    """Whether :func:`_stage` reads the windows ``w``: an adaptive
    pool's, ``[floor(o * size / out), ceil((o + 1) * size / out))`` for
    output ``o``, of more than one element, whose dilated window is at most
    16 times their taps: its reduction visits every hole, so the bound caps
    the flops spent on them (the performance page, "Adaptive windows of two
    sizes")."""
    if not w.starts or w.taps == 1:
        return False
    p, q = _ratio(w)
    return (w.starts, w.ends) == adaptive_bounds(w.size, w.out) and (
        p + q - 1 <= 16 * w.taps
    )


def _ratio(w: AxisWindows) -> tuple[int, int]:
    """``(p, q)``: ``size / out`` of the windows ``w`` in lowest terms."""
    common = math.gcd(w.size, w.out)
    return w.size // common, w.out // common


def _stage(
    values: jax.Array,
    carried: jax.Array | None,
    w: AxisWindows,
    axis: int,
    sharding: Any,
    dilated: bool,
) -> _Stage:
    """A stage of :func:`_staged_argmax`: the windows ``w`` along ``axis``.

    ``dilated`` (:func:`_dilates`): one window reduction over the axis dilated
    ``q``-fold, with ``p / q = size / out`` in lowest terms (``q - 1`` holes
    between two elements, each holding the reduction's initial value, which
    every element beats): element ``i`` lies at ``i * q``, and window ``o``
    is the dilated positions ``o * p - q + 1`` to ``(o + 1) * p - 1``, whose
    elements are exactly those with ``floor(o * p / q) <= i < ceil((o + 1) *
    p / q)``. The coordinates are an iota, which XLA writes out (in the code,
    beside the values): it fuses no producer into a window reduction.

    Otherwise a copy of the axis in which every window is its ``w.taps``
    elements in turn (a short window repeats its last): the taps split off
    into an axis of their own, reduced by a plain reduction, into which XLA
    fuses the coordinates (each window's first plus the tap, at most its
    last), an iota and per-window tables."""
    if dilated:
        p, q = _ratio(w)
        coordinate = lax.broadcasted_iota(
            jnp.int32, values.shape, axis, out_sharding=sharding
        )
        window, steps, dilation = ([1] * values.ndim for _ in range(3))
        padding = [(0, 0)] * values.ndim
        window[axis], steps[axis], dilation[axis] = p + q - 1, p, q
        padding[axis] = (q - 1, q - 1)
        reduce = functools.partial(
            lax.reduce_window,
            window_dimensions=window,
            window_strides=steps,
            padding=padding,
            base_dilation=dilation,
        )
        return values, coordinate, carried, reduce
    positions = np.stack([w.positions(j) for j in range(w.taps)], axis=1).ravel()
    shape = (*values.shape[:axis], w.out, w.taps, *values.shape[axis + 1 :])
    values = _read(values, axis, positions).reshape(shape)
    if carried is not None:
        carried = _read(carried, axis, positions).reshape(shape)
    if sharding is not None:  # the taps' axis is spatial: not sharded
        spec = tuple(sharding.spec)
        parts = PartitionSpec(*spec[: axis + 1], None, *spec[axis + 1 :])
        sharding = NamedSharding(sharding.mesh, parts)
    tap = lax.broadcasted_iota(jnp.int32, shape, axis + 1, out_sharding=sharding)
    first, end = (per_window(e.astype(np.int32), axis, shape) for e in w.span())
    coordinate = jnp.minimum(first + tap, end - 1)
    reduce = functools.partial(lax.reduce, dimensions=(axis + 1,))
    return values, coordinate, carried, reduce


@window_argmax.defjvp
def _window_argmax_jvp(
    spec: PoolSpec, sharding: Any, primals: tuple[Any, ...], tangents: tuple[Any, ...]
) -> tuple[Any, Any]:
    """The scan's JVP: each value's tangent is the input's tangent at the
    chosen index (0 for a window with no in-bounds tap, whose value is the
    padding's); the indices have none. (JAX's rule for a variadic window
    reduction does not take an integer operand's symbolic zero tangent.)"""
    (x,), (t,) = primals, tangents
    values, index = window_argmax(x, spec, sharding)
    lead = split(x.ndim, spec.nd, spec.trail)[0]
    chosen = gather_at(t, index, spec.nd, spec.trail, 0.0)
    chosen = fill_empty(chosen, spec.axes, lead, 0.0)
    return (values, index), (chosen, lax.full_like(index, 0, jax.dtypes.float0))


def dense(spec: PoolSpec) -> bool:
    """Whether :func:`covering_sum` takes the dense form: regular windows
    whose every in-bounds position is a tap (dilation 1), so that the taps
    find every index the ``"gather"`` backward counts. (Adaptive windows
    summed where the forward reads them, ``large`` elements each, then folded
    back, compiled to more bytes than the gather: their phases interleave
    along the TPU's tiled minor axes at strides of 8 or 9.)"""
    return all(not w.starts and (w.dilation == 1 or w.taps == 1) for w in spec.axes)


class _Tap(NamedTuple):
    """Tap ``j`` of every window along one axis, seen from the input: window
    ``o``'s tap reads the row ``o + shift`` of stride phase ``phase`` (input
    coordinate ``(o + shift) * stride + phase``)."""

    phase: int
    shift: int
    number: int  # j


def _taps(w: AxisWindows) -> tuple[list[_Tap], int]:
    """The taps of the regular windows ``w`` in reversed order (so that each
    position adds its windows in increasing order) and the rows per phase."""
    taps = []
    for j in range(w.taps - 1, -1, -1):
        start = w.offset + j * w.dilation
        taps.append(_Tap(start % w.stride, start // w.stride, j))
    return taps, -(-w.size // w.stride)


_TILE = 8 * 128  # 32-bit elements in one of a TPU's tiles


def _padded(shape: tuple[int, ...]) -> int:
    """Elements of a 32-bit array of ``shape`` as a TPU stores it: its two
    minor axes in tiles of 8 x 128."""
    if len(shape) < 2:
        return -(-math.prod(shape) // 128) * 128
    *major, rows, lanes = shape
    return math.prod(major) * -(-rows // 8) * 8 * -(-lanes // 128) * 128


def _lane_axis(shape: tuple[int, ...]) -> int:
    """The axis XLA's TPU default layout stores minor, in the 128 lanes: the
    one that pads them least, the last of equals (v5e: 32x112²x64 and
    8x64³x32 channels-last keep W there, 32x256x28² and 4x256x40³ C; a
    row-major 8x32³x64 keeps C, as 32x64x112² keeps W)."""
    waste = [(-(-n // 128) * 128 / max(n, 1), -a) for a, n in enumerate(shape)]
    return -min(waste)[1]


def _planes(spec: PoolSpec, shape: tuple[int, ...]) -> tuple[int, ...]:
    """The sizes of the ``(n, c)`` planes' axes of an array of ``shape``: the
    leading ones, then channels-last's trailing ones."""
    first, stop = split(len(shape), spec.nd, spec.trail)
    return (*shape[:first], *shape[stop:])


def planes_minor(spec: PoolSpec, shape: tuple[int, ...]) -> bool:
    """Whether :func:`covering_sum` runs with the ``(n, c)`` planes moved
    behind the spatial axes, ``(*S, N * C)``, for arrays of ``shape`` (the
    output grid's): where the input and output grids then pad a TPU's 8 x 128
    tiles less (8x32x64³ k3 s2: W = 64 fills half of 128 lanes, the output's
    32 a quarter; N * C = 256 fills two lane tiles), and for channels-last
    arrays only where XLA lays the input out with a spatial axis in the lanes
    (:func:`_lane_axis`; where the channels stay in the lanes, moving costs
    more); nor where XLA lays the batch in the lanes (a batch of 128 or more
    that pads them least), whose planes are minor already: moving them
    transposed the indices, the gradients and the sum for nothing. Not for
    symbolic sizes (``jax.export``'s). The performance page's "The planes
    moved to the minor axis", "Channels-last planes moved where XLA lays W in
    the lanes" and "The planes in place where the batch takes the lanes"
    give the measurements."""
    first, stop = split(len(shape), spec.nd, spec.trail)
    if first == 0 or not all(isinstance(n, int) for n in shape):
        return False
    spatial = (spec.in_size, spec.out_size)
    grids = [with_spatial(shape, spec.nd, spec.trail, s) for s in spatial]
    lanes = _lane_axis(grids[0])
    batch = first if spec.trail else first - 1  # the leading axes but C
    if lanes < batch or (spec.trail and lanes >= stop):
        return False
    planes = math.prod(_planes(spec, shape))
    return sum(_padded((*s, planes)) for s in spatial) < sum(map(_padded, grids))


def plane_axes(spec: PoolSpec, shape: tuple[int, ...]) -> tuple[int, ...]:
    """The axes the ``(n, c)`` planes of an array of ``shape`` take behind
    the spatial ones when :func:`planes_minor`: their own, ``(*S, N, C)``,
    where the channels fill the TPU's 128 lanes, as XLA's TPU default layout
    often already holds them (4x256x40³ is ``{1,4,3,2,0}``, 32x256x28² is
    ``{1,0,3,2}``), so that moving them is a bitcast or moves whole tiles;
    else one axis of ``N * C`` planes, ``(*S, N * C / 128, 128)`` where they
    fill whole 8 x 128 tiles and the sum reads tap numbers (:func:`coded`:
    with stride phases to interleave, every spatial axis is then major, and
    interleaving the phases moves whole tiles instead of shuffling sublanes;
    with stride 1 there is nothing to interleave, and tiles' rows cost more),
    ``(*S, N * C)`` otherwise. The performance page's "The planes in tiles'
    rows" and "The planes on their own axes where the channels fill the
    lanes" give the measurements."""
    planes = _planes(spec, shape)
    if planes[-1] % 128 == 0:
        return planes
    if coded(spec) and math.prod(planes) % _TILE == 0:
        return (math.prod(planes) // 128, 128)
    return (math.prod(planes),)


def coded(spec: PoolSpec) -> bool:
    """Whether :func:`covering_sum` reads tap numbers (:func:`tap_codes`)
    instead of the indices: where some stride exceeds 1, so that each of
    several phases reads them again; and for channels-last 2-D pools (Flax's
    layout), where the int8 numbers cross the planes' transpose and tiles in
    place of the int32 indices. Elsewhere with stride 1, one loop reads the
    one padded index array for every tap, and the codes' arithmetic costs
    more than its int8 reads save on some shape measured (in 1-D, two shapes
    of three). The performance page's "Tap
    numbers instead of indices" and "Tap numbers at stride 1, in
    channels-last 2-D pools" give the measurements
    (``benchmarks/tpu_rules.py --rule codes``)."""
    return any(w.stride > 1 for w in spec.axes) or (spec.nd == 2 and spec.trail > 0)


def tap_codes(indices: jax.Array, spec: PoolSpec, lead: int) -> jax.Array:
    """Which tap of its window each index is, row-major over the window's
    taps; -1 where it is none (an index out of range, or outside the window:
    one the ``"gather"`` backward drops too). int8 up to 127 taps."""
    valid = in_plane(indices, math.prod(spec.in_size))
    flat = jnp.where(valid, indices, 0).astype(jnp.int32)
    number = jnp.zeros(indices.shape, jnp.int32)
    for a, (w, coordinate) in enumerate(
        zip(spec.axes, coordinates(flat, spec.in_size), strict=True)
    ):
        o = lax.broadcasted_iota(jnp.int32, indices.shape, lead + a)
        j = coordinate - (o * w.stride + w.offset)
        valid = valid & (j >= 0) & (j < w.taps)
        number = number * w.taps + j
    taps = math.prod(w.taps for w in spec.axes)
    return jnp.where(valid, number, -1).astype(_code_type(taps))


def phase_major(spec: PoolSpec, in_one_axis: bool) -> bool:
    """Whether :func:`covering_sum` computes the stride phases in one loop,
    phase major (:func:`_phase_major_sum`): wherever it reads tap numbers
    (:func:`coded`; with stride 1, one phase), except where the planes move
    behind the spatial axes as one axis (the last spatial axis is then the
    rows of the TPU's tiles, and the transpose back would interleave along
    them).

    16-bit 2-D pools whose channels do not fill whole lanes are summed phase
    major as well, though the pool alone costs more so. Alone, the pool's
    input is an entry parameter, which XLA's memory-space assignment
    prefetches into VMEM for the forward in four slices, and the cost model
    counts the prefetch. Between two convolutions, as a network holds it
    (``benchmarks/compiled.py --context``), there is no such prefetch, and the
    whole step costs less. The performance page's "Phases summed
    phase-major" and "Between two convolutions" give the measurements."""
    return coded(spec) and not in_one_axis


def covering_sum(
    grad_output: jax.Array,
    indices: jax.Array,
    x: jax.ShapeDtypeStruct,
    spec: PoolSpec,
    sharding: Any,
) -> jax.Array:
    """``_backward.covering_sum`` (the same sum, in the same order) without a
    gather, for the windows :func:`dense` accepts (the seam's choice); where
    :func:`coded` says so, by tap numbers; where :func:`planes_minor` says
    so, over the planes moved behind the spatial axes (a transpose of the
    gradients and keys in, of the sum out; channels-last's channels go with
    the batch)."""
    acc = accumulation_dtype(x.dtype)
    indices = indices.astype(jnp.promote_types(indices.dtype, jnp.int32))
    lead = split(grad_output.ndim, spec.nd, spec.trail)[0]
    by_number = coded(spec)
    keys = tap_codes(indices, spec, lead) if by_number else indices
    planes = _planes(spec, grad_output.shape)
    if sharding is not None or not planes_minor(spec, grad_output.shape):
        if sharding is None and phase_major(spec, in_one_axis=False):
            return _phase_major_sum(grad_output, keys, acc, spec, lead)
        return _phase_sum(grad_output, keys, acc, spec, lead, sharding)

    # (*B, *S, *C) -> (*B, *C, *S) -> (*S, *T), T the planes' axes of
    # plane_axes (C: channels-last's trailing channels).
    tiles = plane_axes(spec, grad_output.shape)
    starts = tuple(range(len(tiles)))
    ends = tuple(range(-len(tiles), 0))
    stop = lead + spec.nd
    order = (*range(lead), *range(stop, grad_output.ndim), *range(lead, stop))

    def moved(arr: jax.Array) -> jax.Array:
        arr = arr.transpose(order)
        return jnp.moveaxis(arr.reshape(*tiles, *arr.shape[-spec.nd :]), starts, ends)

    if by_number:
        # Barriers on both sides of the codes' transpose: without them XLA's
        # TPU layout assignment moves the codes' int32 arithmetic past it, or
        # the taps' selects before it (the performance page, "Tap numbers
        # instead of indices").
        keys = lax.optimization_barrier(keys)
        keys = lax.optimization_barrier(moved(keys))
    else:
        keys = moved(keys)
    grads = moved(grad_output)
    if grads.dtype != acc:
        # 16-bit gradients are moved as they are and widened in the sum:
        # without the barrier XLA widens them first and moves twice the
        # bytes (the performance page, "16-bit gradients moved as they are").
        grads = lax.optimization_barrier(grads)
    # Widened where each tap reads them, they are never written in float32
    # (the performance page, "16-bit gradients widened where each tap reads
    # them").
    if phase_major(spec, in_one_axis=len(tiles) == 1):
        total = _phase_major_sum(grads, keys, acc, spec, 0)
    else:
        total = _phase_sum(grads, keys, acc, spec, 0, None)
    total = jnp.moveaxis(total, ends, starts)
    return total.reshape(*planes, *spec.in_size).transpose(
        tuple(order.index(a) for a in range(len(order)))
    )


class _Grid(NamedTuple):
    """The output grid's gradients and keys (indices or tap numbers) padded
    once by the largest shift of a tap each way (keys with -1: no index;
    16-bit gradients as they are), seen from the input's stride phases:
    ``shape`` is the grid with ``rows`` of each phase on each spatial axis
    (from ``lead``)."""

    plans: list[tuple[list[_Tap], int]]
    low: list[int]
    lead: int
    grads: jax.Array
    keys: jax.Array
    shape: tuple[int, ...]

    @classmethod
    def of(cls, grad_output, keys, spec: PoolSpec, lead: int) -> _Grid:
        plans = [_taps(w) for w in spec.axes]
        low = [max(0, *(t.shift for t in taps)) for taps, _ in plans]
        high = [
            max(0, *(rows - w.out - t.shift for t in taps))
            for (taps, rows), w in zip(plans, spec.axes, strict=True)
        ]
        config = [(0, 0, 0)] * grad_output.ndim
        shape = list(grad_output.shape)
        for a, (_, rows) in enumerate(plans):
            config[lead + a] = (low[a], high[a], 0)
            shape[lead + a] = rows
        grads = lax.pad(grad_output, jnp.zeros((), grad_output.dtype), config)
        keys = lax.pad(keys, jnp.array(-1, keys.dtype), config)
        return cls(plans, low, lead, grads, keys, tuple(shape))

    def shifted(self, taps: tuple[_Tap, ...]) -> tuple[jax.Array, jax.Array]:
        """The gradients and keys of the windows whose taps ``taps`` (one per
        spatial axis) read each position of their phase."""
        start = [0] * len(self.shape)
        for a, tap in enumerate(taps):
            start[self.lead + a] = self.low[a] - tap.shift
        stop = [b + n for b, n in zip(start, self.shape, strict=True)]
        return lax.slice(self.grads, start, stop), lax.slice(self.keys, start, stop)


def _number(taps: tuple[_Tap, ...], axes: Any) -> int:
    """The tap number (:func:`tap_codes`) of one tap per axis."""
    number = 0
    for tap, w in zip(taps, axes, strict=True):
        number = number * w.taps + tap.number
    return number


def _phase_sum(
    grad_output: jax.Array,
    keys: jax.Array,
    acc: Any,
    spec: PoolSpec,
    lead: int,
    sharding: Any,
) -> jax.Array:
    """:func:`covering_sum` over arrays whose spatial axes start at ``lead``,
    given the windows' indices or, where :func:`coded`, their tap numbers.
    16-bit gradients are widened to ``acc`` where each tap reads them.

    Tap ``j`` of window ``o`` along an axis reads coordinate ``o * stride +
    offset + j = (o + shift) * stride + phase``. So each stride phase's
    positions gather their windows' gradients from the output grid shifted by
    ``shift`` rows (a slice of it padded once, which XLA fuses into the sum),
    one term per tap of that phase: the gradient where the shifted window's
    index is the position (its tap number is the tap's), else zero. Taps are
    visited in reversed row-major order, so each element adds its windows in
    increasing order, as the covering windows do; the phases are then
    interleaved once."""
    axes = spec.axes
    grid = _Grid.of(grad_output, keys, spec, lead)
    plans, keys, shape = grid.plans, grid.keys, grid.shape
    zero = jnp.zeros((), acc)
    by_number = coded(spec)
    strides = row_major_strides(spec.in_size)
    phases: dict[tuple[int, ...], jax.Array] = {}
    for key in itertools.product(*(range(w.stride) for w in axes)):
        here = jnp.zeros((), keys.dtype)  # each position's flat index
        if not by_number:  # (tap numbers compare a constant instead)
            for a, w in enumerate(axes):
                row = lax.broadcasted_iota(keys.dtype, tuple(shape), lead + a)
                here = here + (row * w.stride + key[a]) * strides[a]
        ours = [
            [t for t in taps if t.phase == p]
            for (taps, _), p in zip(plans, key, strict=True)
        ]
        for taps in itertools.product(*ours):
            g, k = grid.shifted(taps)
            number = _number(taps, axes)
            wanted = jnp.array(number, keys.dtype) if by_number else here
            part = jnp.where(k == wanted, positive_zeros(g).astype(acc), zero)
            phases[key] = phases[key] + part if key in phases else part
    like = next(iter(phases.values()))
    zeros = jnp.zeros(like.shape, acc, out_sharding=sharding)
    every = itertools.product(*(range(w.stride) for w in axes))
    stacked = jnp.stack([phases.get(key, zeros) for key in every])
    return _interleave(
        stacked.reshape(*(w.stride for w in axes), *like.shape), spec, lead
    )


def _phase_major_sum(
    grad_output: jax.Array, keys: jax.Array, acc: Any, spec: PoolSpec, lead: int
) -> jax.Array:
    """:func:`_phase_sum` by tap numbers, over arrays whose spatial axes start
    at ``lead``, with every stride phase computed in one loop over
    ``(*strides, *B, *rows, *T)``, phase major, and interleaved by the
    transpose back.

    XLA's TPU compiler fuses a broadcast over the major axes into that loop,
    but not one that inserts the phase axes between the rows (it writes the
    broadcasts out), nor the phases' stack into the loops that compute them
    (it copies them once to stack them, again to interleave them). So each
    term reads its shifted gradients and tap numbers broadcast over the
    phase axes, and counts only where the phase is the tap's: a tap of
    another phase adds +0.0, which leaves every nonzero sum as it is, so each
    position adds its own phase's terms in their order, the ``"gather"``
    backward's sum, bit for bit; and makes a zero sum +0.0, as the spec's is
    (``_planes.positive_zeros``), with no operation of its own (every
    position has such a term where the taps fall in more than one phase;
    elsewhere the terms are made +0.0). The tap number each term
    compares is -2 (no key) on the other phases, so the comparison is made
    on the phase grid, which keeps XLA from writing it out per tap before
    the broadcast; the barrier keeps XLA from moving the interleave into the
    loop (where it writes the broadcasts out). The performance page's
    "Phases summed phase-major" gives the measurements."""
    axes = spec.axes
    nd = len(axes)
    grid = _Grid.of(grad_output, keys, spec, lead)
    strides = tuple(w.stride for w in axes)
    domain = (*strides, *grid.shape)
    dims = tuple(range(nd, len(domain)))
    phase = [lax.broadcasted_iota(jnp.int32, domain, a) for a in range(nd)]
    other = jnp.zeros((), acc)
    every = list(itertools.product(*(taps for taps, _ in grid.plans)))
    one_phase = len({tuple(t.phase for t in taps) for taps in every}) == 1
    parts = []
    for taps in every:
        ours = functools.reduce(
            jnp.logical_and, (p == t.phase for p, t in zip(phase, taps, strict=True))
        )
        g, k = (lax.broadcast_in_dim(a, domain, dims) for a in grid.shifted(taps))
        g = positive_zeros(g) if one_phase else g
        wanted = jnp.where(ours, jnp.array(_number(taps, axes), k.dtype), -2)
        take = k == wanted.astype(k.dtype)
        part = jnp.where(take, g, jnp.zeros((), g.dtype)).astype(acc)
        parts.append(jnp.where(ours, part, other))
    total = lax.optimization_barrier(functools.reduce(jnp.add, parts))
    return _interleave(total, spec, lead)


def _interleave(stacked: jax.Array, spec: PoolSpec, lead: int) -> jax.Array:
    """The stride phases stacked phase-major, ``(*strides, *B, *rows, *T)``,
    interleaved along each spatial axis (moved beside their axes, merged)
    and cut to the input's size: ``(*B, *S, *T)``."""
    nd = spec.nd
    order = list(range(nd, nd + lead))
    for a in range(nd):
        order += [nd + lead + a, a]
    order += list(range(2 * nd + lead, stacked.ndim))
    shape = stacked.shape[nd:]
    rows = (shape[lead + a] * w.stride for a, w in enumerate(spec.axes))
    merged = stacked.transpose(order).reshape(*shape[:lead], *rows, *shape[lead + nd :])
    for a, w in enumerate(spec.axes):
        merged = lax.slice_in_dim(merged, 0, w.size, axis=lead + a)
    return merged
