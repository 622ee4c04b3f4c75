"""The TPU's forward: one variadic window reduction over the values and a
position code.

The forward (:func:`window_argmax`) is one variadic ``lax.reduce_window``
over ``(x, code)``, whose reducer (:func:`_pick`) is the scan's selection as a
total order: a NaN beats every number and the later of two NaNs wins; a
greater number wins, and of two equal numbers the earlier. ``code`` names each
element's position by its coordinates modulo ``2 * span - 1`` per axis
(``span``: how far apart two taps of one window lie, plus one), which orders
any two elements of one window as their flat positions do (:func:`_order`), in
an int8 or int16 array (which XLA writes out and the reduction reads back: its
TPU compiler fuses no producer into a window reduction); the padding code
loses every tie, so a window of only ``-inf`` keeps its first in-bounds tap.
The chosen code and the window's first coordinate give the flat index. Past
16 bits of codes, the codes are flat positions (int32).

Adaptive windows of two sizes are reduced one axis at a time instead
(:func:`staged_argmax`), each stage reducing the values and the chosen
element's offset along the axes reduced so far: along the lanes as one window
reduction over the axis dilated, elsewhere from a copy of the axis alone in
which each window is its taps in turn (:func:`stage`).
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

from .._columns import empty_windows, fill_empty, per_window
from .._planes import gather_at
from .._windows import (
    INT32_MAX,
    AxisWindows,
    PoolSpec,
    adaptive_bounds,
    row_major_strides,
    split,
)
from . import layout


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


def _codes(
    r: _Reading, shape: tuple[int, ...], axis: int, flat: bool, sharding: Any
) -> Any:
    """Each element's code residue along ``axis`` (``flat``: its coordinate),
    int32, to broadcast against the source's ``shape``, from an iota: the
    elements read are the axis's contiguous run from ``r.positions[0]``
    (:func:`reading`). (XLA still writes the codes out before the reduction:
    it fuses no producer into one.)"""
    iota = lax.broadcasted_iota(jnp.int32, shape, axis, out_sharding=sharding)
    first = int(r.positions[0])
    if flat:
        return iota + first
    return (iota + first) % r.modulus if r.circular else (iota + r.pad[0]) % r.window


def reading(w: AxisWindows) -> _Reading:
    """The reduction's reading of the windows ``w``.

    Regular windows read the input, coded by coordinates modulo ``2 * span -
    1`` (``span``: how far apart two taps of one window lie, plus one), which
    tells the order of any two taps of one window; windows that tile the axis
    (stride = kernel, dilation 1) by tap number, fewer codes (k2 s2 in 3-D:
    8, int4). (Adaptive windows of two sizes: :func:`staged_argmax`.)"""
    first = max(0, w.offset)
    low = max(0, -w.offset)
    span = w.extent
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


def code_dtype(readings: list[_Reading]) -> Any:
    """The smallest integer dtype holding every code and the padding's (-1);
    ``None`` past 16 bits (the codes are then flat positions)."""
    count = math.prod(r.modulus for r in readings)
    if count <= 8:  # tiling windows of 8 taps or fewer: k2 s2 in 3-D
        return jnp.int4
    dtype = layout.code_type(count)
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
    reduction's body (the performance record, "The forward: where the bytes
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
    long over large 3-D stride-1 forwards (the performance record, "The forward:
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
    large stride-1 forwards: the compile times of the performance record's "The
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
      sharding: of the arrays built here (see ``_mesh.plane_sharding``).

    Returns:
      ``(values, indices)``, each ``(*B, *O, *T)``; values in ``x.dtype``,
      indices int32 offsets into the unpadded ``S`` plane.
    """
    if any(w.starts for w in spec.axes):
        return staged_argmax(x, spec, sharding)
    axes, lead = spec.axes, split(x.ndim, spec.nd, spec.trail)[0]
    readings = [reading(w) for w in axes]
    source = x
    for a, r in enumerate(readings):
        source = _read(source, lead + a, r.positions)
    dtype = code_dtype(readings)
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


def staged_argmax(
    x: jax.Array, spec: PoolSpec, sharding: Any
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
    measurements.)"""
    lead = split(x.ndim, spec.nd, spec.trail)[0]
    strides = row_major_strides(spec.in_size)
    values, code, bound = x, None, 1
    for a in reversed(range(spec.nd)):
        w, axis = spec.axes[a], lead + a
        bound += (w.size - 1) * strides[a]  # past every code so far
        dtype = layout.code_type(bound)
        static = all(isinstance(n, int) for n in values.shape)  # not jax.export's
        dilated = static and layout.lane_axis(values.shape) == axis and _dilates(w)
        values, coordinate, carried, reduce = stage(
            values, code, w, axis, sharding, dilated
        )
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
