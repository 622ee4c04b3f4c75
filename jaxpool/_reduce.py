"""The forward as one variadic window reduction over the values and a code of
each element's position.

:func:`window_argmax` is one variadic ``lax.reduce_window`` over ``(x,
code)``, whose reducer (:func:`_pick`) is the scan's selection as a total
order: a NaN beats every number and the later of two NaNs wins; a greater
number wins, and of two equal numbers the earlier. So the order in which XLA
reduces a window does not matter, and the program is one reduction whatever
the window's size: it grows with the window's rank, not its volume. Two kinds
of code (:class:`Codes`):

- **flat** (GPU, and every platform under a mesh): each element's int32 flat
  offset in its plane, from iotas that XLA fuses into the reduction on a GPU
  and on a CPU; the padding's code is past every position, so it loses every
  tie and a window of only ``-inf`` keeps its first in-bounds tap. XLA's SPMD
  partitioner splits the reduction along a sharded spatial axis with halo
  exchanges, and an iota there with each shard's offset.
- **compact** (TPU, which writes every operand of a window reduction out):
  the fewest bits that still order any two elements of one window. Windows
  that tile the axes number each element by its tap (int4 up to 8 taps);
  others by ``sum(coordinate[a] * weight[a])`` modulo ``2 ** bits``, the
  weights a mixed radix of ``2 * extent - 1`` per axis, in which two
  elements of one window differ by less than half the modulus, so the sign
  of their codes' difference, wrapped to ``bits`` bits, is their row-major
  order (a 3x3x3 window: 7 bits, int8): one subtraction and a shift in the
  reducer, whose size XLA's TPU compiler is slow over. The padding's code,
  -1, comes after every position (tap numbers with no padding before any
  window use 0, tap 0, and no select on it). The chosen code and the
  window's first tap give the flat index.

On a TPU, a 1-D pool of disjoint windows whose planes and axis fill whole
rows of its tiles is reduced in those rows (:func:`_in_rows`): its compiler
is slow over a long reduced axis. Windows with no in-bounds tap (dilation)
get PyTorch's index after the reduction. Adaptive windows of two sizes are
reduced one axis at a time (:func:`staged_argmax`), each stage reducing the
values and the chosen element's offset along the axes reduced so far.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import NamedSharding, PartitionSpec

from ._columns import divide, empty_windows, fill_empty, per_window
from ._mesh import whole
from ._planes import gather_at
from ._tpu import layout
from ._windows import (
    INT32_MAX,
    AxisWindows,
    PoolSpec,
    adaptive_bounds,
    row_major_strides,
    split,
)


class ReduceForm(NamedTuple):
    """How :func:`window_argmax` runs, chosen per platform by ``_policy``."""

    compact: bool  # the TPU's narrow codes (:func:`codes`), else flat positions
    # Adaptive windows of two sizes copied by a gather (:func:`stage`; the
    # CPU's), else by slices.
    gathers: bool = False


class Codes(NamedTuple):
    """How :func:`window_argmax` codes positions (see the module docstring)."""

    kind: str  # "flat", "taps" (windows that tile the axes) or "circular"
    radix: tuple[int, ...]  # per axis: taps ("taps") or 2 * extent - 1
    bits: int  # "circular": the codes' width; else 0
    dtype: Any


def codes(axes: tuple[AxisWindows, ...], compact: bool) -> Codes:
    """The codes of the regular windows ``axes``: flat positions unless
    ``compact``; then tap numbers for windows that tile every axis (stride =
    kernel, dilation 1), else circular codes, or flat ones past 16 bits."""
    flat = Codes("flat", (), 0, jnp.int32)
    if not compact:
        return flat
    if all(w.extent == w.taps == w.stride for w in axes):
        count = math.prod(w.taps for w in axes)
        dtype = jnp.int4 if count <= 8 else layout.code_type(count - 1)
        radix = tuple(w.taps for w in axes)
        return flat if dtype == jnp.int32 else Codes("taps", radix, 0, dtype)
    radix = tuple(2 * w.extent - 1 for w in axes)
    bits = (math.prod(radix) - 1).bit_length()
    if bits > 15:
        return flat
    return Codes("circular", radix, bits, jnp.int8 if bits <= 7 else jnp.int16)


def _pick(bits: int, padding: bool) -> Callable[..., Any]:
    """The reducer: of two ``(value, code)`` candidates, the one the scan
    keeps (see ``_scan._after``). Codes order as integers (flat positions,
    tap numbers; ``bits`` 0) or, ``bits`` wide, circularly: the sign of their
    difference wrapped to ``bits`` bits; with ``padding``, a negative code
    (the padding's) comes after every other."""

    def pick(a: tuple[jax.Array, ...], b: tuple[jax.Array, ...]) -> Any:
        (v, c), (w, d) = a, b
        if c.dtype != jnp.int32:
            c, d = c.astype(jnp.int32), d.astype(jnp.int32)
        if bits:
            step = d - c
            step = (step << (32 - bits)) >> (32 - bits)
            c_first, d_first = step > 0, step < 0
        else:
            c_first, d_first = c < d, d < c
        if padding:  # ties only with -inf: d_first, for two NaNs, needs none
            c_first = (c_first & (c >= 0)) | (d < 0)
        # False where w is a NaN (every comparison with a NaN is).
        numbers = (v > w) | ((v == w) & c_first)
        take = jnp.where(jnp.isnan(v), ~jnp.isnan(w) | d_first, numbers)
        return jnp.where(take, v, w), jnp.where(take, a[1], b[1])

    return pick


def _code_array(
    shape: tuple[int, ...],
    spec: PoolSpec,
    lead: int,
    first: list[int],
    c: Codes,
    sharding: Any,
) -> jax.Array:
    """Each element's code, ``(*B, *S', *T)`` for the elements read
    (coordinates from ``first`` on along each axis)."""
    strides = row_major_strides(spec.in_size)
    code = jnp.zeros((), jnp.int32)
    weight = 1
    for a in reversed(range(spec.nd)):
        coordinate = lax.broadcasted_iota(
            jnp.int32, shape, lead + a, out_sharding=sharding
        )
        coordinate = coordinate + first[a]
        if c.kind == "flat":
            code = code + coordinate * strides[a]
        elif c.kind == "taps":  # the tap that reads the element, from 0
            w = spec.axes[a]
            shifted = coordinate - w.offset
            bound = first[a] + shape[lead + a] - w.offset
            tap = shifted - divide(shifted, c.radix[a], bound) * c.radix[a]
            code = code + tap * weight
        else:
            code = code + coordinate * weight
        weight *= c.radix[a] if c.kind != "flat" else 1
    if c.kind == "circular":
        code = code & ((1 << c.bits) - 1)
    return jnp.broadcast_to(code.astype(c.dtype), shape, out_sharding=sharding)


def _chosen(
    code: jax.Array, spec: PoolSpec, lead: int, c: Codes, sharding: Any
) -> jax.Array:
    """The int32 flat index of each window's chosen code: the window's first
    tap (perhaps in the padding) plus the chosen element's offset from it,
    whose mixed-radix digits are read by comparisons, with additions and
    per-window constants alone (XLA's TPU compiler is several times slower
    over a division, even as a multiply and a shift, and over products of
    iotas)."""
    code = code.astype(jnp.int32)
    if c.kind == "flat":
        return code
    axes, strides = spec.axes, row_major_strides(spec.in_size)
    shape = code.shape
    weights = [math.prod(c.radix[a + 1 :]) for a in range(spec.nd)]
    index, base = jnp.zeros((), jnp.int32), jnp.zeros((), jnp.int32)
    for a, w in enumerate(axes):
        first = np.arange(w.out) * w.stride + w.offset  # tap 0 of each window
        index = index + per_window(
            (first * strides[a]).astype(np.int32), lead + a, shape
        )
        base = base + per_window((first * weights[a]).astype(np.int32), lead + a, shape)
    offset = code if c.kind == "taps" else (code - base) & ((1 << c.bits) - 1)
    for a, w in enumerate(axes):
        for _ in range(1, w.taps if c.kind == "taps" else w.extent):
            passed = offset >= weights[a]
            index = jnp.where(passed, index + strides[a], index)
            offset = jnp.where(passed, offset - weights[a], offset)
    return jnp.broadcast_to(index, shape, out_sharding=sharding)


@functools.partial(jax.custom_jvp, nondiff_argnums=(1, 2, 3, 4))
def window_argmax(
    x: jax.Array,
    spec: PoolSpec,
    compact: bool = False,
    sharding: Any = None,
    gathers: bool = False,
) -> tuple[jax.Array, jax.Array]:
    """Max and flat argmax of every window over the spatial axes of ``x``,
    as ``_scan.window_argmax`` (the same values and indices, bit for bit),
    in one variadic window reduction. Its JVP (:func:`_window_argmax_jvp`) is
    the scan's, so grad of grad works through it.

    Args:
      x: ``(*B, *S, *T)`` input, ``S`` matching ``spec.axes``' sizes, ``T``
        the channels of a channels-last array.
      spec: the pool.
      compact: the TPU's narrow codes (:func:`codes`), else flat positions.
      sharding: of the arrays built here (see ``_mesh.plane_sharding``).
      gathers: adaptive windows of two sizes read by a gather (the CPU's
        form under a mesh), else by slices (:func:`stage`).

    Returns:
      ``(values, indices)``, each ``(*B, *O, *T)``; values in ``x.dtype``,
      indices int32 offsets into the unpadded ``S`` plane.
    """
    if any(w.starts for w in spec.axes):
        return staged_argmax(x, spec, compact, sharding, gathers)
    row = layout.row_windows(x.shape, spec) if compact and sharding is None else None
    if row is not None:
        return _in_rows(x, spec, row)
    axes, lead = spec.axes, split(x.ndim, spec.nd, spec.trail)[0]
    c = codes(axes, compact)
    source, first = x, []
    ones = [1] * x.ndim
    dims, steps, dilation, pads = list(ones), list(ones), list(ones), [(0, 0)] * x.ndim
    for a, w in enumerate(axes):
        start = max(0, w.offset)  # elements before the first window: not read
        source = lax.slice_in_dim(source, start, w.size, axis=lead + a)
        first.append(start)
        low = max(0, -w.offset)
        reach = (w.out - 1) * w.stride + w.extent - low
        high = max(0, reach - (w.size - start))
        dims[lead + a], steps[lead + a] = w.taps, w.stride
        dilation[lead + a], pads[lead + a] = w.dilation, (low, high)
    code = _code_array(source.shape, spec, lead, first, c, sharding)
    # The padding's code, which only a -inf ties with: past every flat
    # position; for tap numbers with no padding before any window 0 (tap 0,
    # in bounds, is the first already); else -1, a code of its own that the
    # reducer orders after every other (the select this took had cost XLA's
    # TPU compiler a third of the reduction's compile time; its two
    # comparisons and two logical operations a fifth).
    before = any(low for low, _ in pads)
    own = c.kind == "circular" or (c.kind == "taps" and before)
    padding = -1 if own else INT32_MAX if c.kind == "flat" else 0
    values, chosen = lax.reduce_window(
        (source, code),
        (jnp.array(-jnp.inf, x.dtype), jnp.array(padding, c.dtype)),
        _pick(c.bits, own),
        dims,
        steps,
        pads,
        window_dilation=dilation,
    )
    for a, w in enumerate(axes):  # a cut-off high padding may leave extra windows
        values = lax.slice_in_dim(values, 0, w.out, axis=lead + a)
        chosen = lax.slice_in_dim(chosen, 0, w.out, axis=lead + a)
    index = _chosen(chosen, spec, lead, c, sharding)
    hollow = empty_windows(axes, lead, values.shape)
    if hollow is not None:  # no in-bounds tap: PyTorch's index, value -inf
        strides = row_major_strides(spec.in_size)
        target = jnp.zeros((), jnp.int32)
        for a, (w, s) in enumerate(zip(axes, strides, strict=True)):
            at = (w.positions(0) + w.first_tap() * w.dilation) * s
            target = target + per_window(at.astype(np.int32), lead + a, values.shape)
        index = jnp.where(hollow, target, index)
    return values, index


def _in_rows(
    x: jax.Array, spec: PoolSpec, row: AxisWindows
) -> tuple[jax.Array, jax.Array]:
    """:func:`window_argmax` of a 1-D pool over ``(*B, C, L)`` in rows of the
    TPU's tiles (``layout.row_windows``; ``row``: one row's windows, none of
    which crosses into the next row): ``x`` seen as ``(*B, C / 8, rows, 8,
    lanes)``, a bitcast on a TPU, each row pooled as a plane of its own, and
    the results seen back as ``(*B, C, out)``, each index moved by its row's
    offset in the plane."""
    (w,) = spec.axes
    count = w.size // row.size
    *batch, planes, _ = x.shape
    view = x.reshape(*batch, planes // layout.ROWS, layout.ROWS, count, row.size)
    view = jnp.moveaxis(view, -2, -3)  # (*B, C / 8, rows, 8, lanes)
    values, index = window_argmax(view, spec._replace(axes=(row,)), True)
    r = lax.broadcasted_iota(jnp.int32, index.shape, index.ndim - 3)
    index = index + r * row.size

    def back(a: jax.Array) -> jax.Array:
        return jnp.moveaxis(a, -2, -3).reshape(*batch, planes, w.out)

    return back(values), back(index)


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


def staged_argmax(
    x: jax.Array, spec: PoolSpec, compact: bool, sharding: Any, gathers: bool
) -> tuple[jax.Array, jax.Array]:
    """:func:`window_argmax` of adaptive windows: one reduction per spatial
    axis, the last first. Each reduces the values and one code: the chosen
    element's offset in the plane along the axes reduced so far (its
    coordinates times their row-major strides; the narrowest integer that
    holds them, :func:`layout.code_type`). Two elements of one window a stage
    compares share every coordinate it has not reduced, so the smaller code is
    the earlier in row-major order: the reducer's order (the larger value, the
    earlier of equals, the last NaN) is the scan's, whatever the order of the
    stages, and the last stage's code is the index. (Carried beside a code of
    the stage's axis alone, as a third operand, the offsets cost more bytes:
    XLA writes every operand of a window reduction out.)

    Along the axis XLA lays in the TPU's lanes (:func:`layout.lane_axis`), an
    adaptive pool's windows are one window reduction over the axis dilated
    (:func:`stage`, where :func:`_dilates`). Along the others, the reduction
    reads a copy of the axis alone in which every window is its ``taps``
    elements in turn (a short window repeats its last, which changes no
    choice; windows that tile the axis need no copy); the taps split off into
    an axis of their own, a plain reduction codes them from an iota, which
    XLA's TPU compiler fuses into it (:func:`stage`; one window reduction
    over a copy of every axis at once had its codes written out, as every
    window reduction does). Along the lanes, XLA writes each contiguous run of
    that copy as a slice of its own, each padded to whole lanes, so the copy's
    bytes grow with the output's size, and the dilated reduction's hardly do.
    (The performance record, "Adaptive windows of two sizes", has the
    measurements.)

    With the TPU's codes, leading plane axes of which one is shorter than a
    sublane tile (8) are merged into one first (the lane axis is still read
    from the array as given): between two dilated stages XLA's TPU compiler
    laid such an axis in the sublanes, and its code generation took 11-15 s
    for 2x3x8³ → 3x5x3 (0.3-0.6 s merged, the cost model's bytes no more:
    the performance record, "Plane axes merged before the staged
    reduction")."""
    lead = split(x.ndim, spec.nd, spec.trail)[0]
    planes = x.shape[:lead]
    static = all(isinstance(n, int) for n in x.shape)  # not jax.export's
    if compact and static and sharding is None and lead > 1 and min(planes) < 8:
        x = x.reshape(math.prod(planes), *x.shape[lead:])
        lead = 1
    strides = row_major_strides(spec.in_size)
    values, code, bound = x, None, 1
    for a in reversed(range(spec.nd)):
        w, axis = spec.axes[a], lead + a
        bound += (w.size - 1) * strides[a]  # past every code so far
        dtype = layout.code_type(bound)
        given = (*planes, *values.shape[lead:])  # the planes' axes unmerged
        lanes = compact and static and layout.lane_axis(given) == a + len(planes)
        dilated = lanes and _dilates(w)
        values, coordinate, carried, reduce = stage(
            values, code, w, axis, sharding, dilated, gathers
        )
        code = coordinate.astype(dtype) * jnp.array(strides[a], dtype)
        if carried is not None:
            code = carried.astype(dtype) + code
        inits = (
            jnp.array(-jnp.inf, values.dtype),
            jnp.array(jnp.iinfo(dtype).max, dtype),
        )
        values, code = reduce((values, code), inits, _pick(0, False))
    assert code is not None
    if lead != len(planes):
        values = values.reshape(*planes, *values.shape[1:])
        code = code.reshape(*planes, *code.shape[1:])
    return values, code.astype(jnp.int32)


# A stage of :func:`staged_argmax` (:func:`stage`): ``(values, coordinate,
# carried, reduce)``, the operands as the stage reduces them, each element's
# coordinate along the stage's axis, and ``reduce(operands, inits, reducer)``.
_Stage = tuple[jax.Array, jax.Array, jax.Array | None, Callable[..., Any]]


def _dilates(w: AxisWindows) -> bool:
    """Whether :func:`stage` reads the windows ``w``: an adaptive
    pool's, ``[floor(o * size / out), ceil((o + 1) * size / out))`` for
    output ``o``, of more than one element, whose dilated window is at most
    16 times their taps: its reduction visits every hole, so the bound caps
    the flops spent on them (the performance record, "Adaptive windows of two
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


def stage(
    values: jax.Array,
    carried: jax.Array | None,
    w: AxisWindows,
    axis: int,
    sharding: Any,
    dilated: bool,
    gathers: bool = False,
) -> _Stage:
    """A stage of :func:`staged_argmax`: the windows ``w`` along ``axis``.

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
    last), an iota and per-window tables; the copy a gather with
    ``gathers``, else a concatenate of the axis's contiguous runs."""
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
    tiles = _positions(w) is None

    def read(arr: jax.Array) -> jax.Array:
        return window_taps(arr if tiles else whole(arr, (axis,)), w, axis, gathers)

    values = read(values)
    if carried is not None:
        carried = read(carried)
    shape = values.shape
    if sharding is not None:  # the taps' axis is spatial: not sharded
        spec = tuple(sharding.spec)
        parts = PartitionSpec(*spec[: axis + 1], None, *spec[axis + 1 :])
        sharding = NamedSharding(sharding.mesh, parts)
    tap = lax.broadcasted_iota(jnp.int32, shape, axis + 1, out_sharding=sharding)
    first, end = (per_window(e.astype(np.int32), axis, shape) for e in w.span())
    coordinate = jnp.minimum(first + tap, end - 1)
    reduce = functools.partial(lax.reduce, dimensions=(axis + 1,))
    return values, coordinate, carried, reduce


def _positions(w: AxisWindows) -> np.ndarray | None:
    """Every window's ``w.taps`` input positions in turn, flat; None where
    they are the axis's own positions in turn (the windows tile it)."""
    positions = np.stack([w.positions(j) for j in range(w.taps)], axis=1).ravel()
    return None if np.array_equal(positions, np.arange(w.size)) else positions


def window_taps(arr: jax.Array, w: AxisWindows, axis: int, gathers: bool) -> jax.Array:
    """``arr`` with ``axis`` (the windows ``w``'s) read as ``(w.out,
    w.taps)``: every window's elements in turn, a window shorter than
    ``w.taps`` repeating its last (which changes no choice: of equal values
    the first is kept, and a NaN read again is the one already chosen). The
    axis itself, seen so, where the windows tile it; else a copy, a gather
    with ``gathers`` or a concatenate of the axis's contiguous runs."""
    shape = (*arr.shape[:axis], w.out, w.taps, *arr.shape[axis + 1 :])
    positions = _positions(w)
    if positions is None:
        return arr.reshape(shape)
    if gathers:
        return jnp.take(arr, positions, axis=axis).reshape(shape)
    return _read(arr, axis, positions).reshape(shape)


@window_argmax.defjvp
def _window_argmax_jvp(
    spec: PoolSpec,
    compact: bool,
    sharding: Any,
    gathers: bool,
    primals: tuple[Any, ...],
    tangents: tuple[Any, ...],
) -> tuple[Any, Any]:
    """The scan's JVP: each value's tangent is the input's tangent at the
    chosen index (0 for a window with no in-bounds tap, whose value is the
    padding's); the indices have none. (JAX's rule for a variadic window
    reduction does not take an integer operand's symbolic zero tangent.)"""
    (x,), (t,) = primals, tangents
    values, index = window_argmax(x, spec, compact, sharding, gathers)
    lead = split(x.ndim, spec.nd, spec.trail)[0]
    chosen = gather_at(t, index, spec.nd, spec.trail, 0.0)
    chosen = fill_empty(chosen, spec.axes, lead, 0.0)
    return (values, index), (chosen, lax.full_like(index, 0, jax.dtypes.float0))
