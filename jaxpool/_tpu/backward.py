"""The TPU's deterministic backward: the ``"gather"`` backward's sum with no
gather and no scatter.

The backward (:func:`covering_sum`): each stride phase of the input adds,
tap by tap, the gradients of the windows whose index is its position, read
from the output grid shifted by the tap (a slice of the grid padded once: XLA
fuses the whole phase into one loop), and the phases are interleaved once (a
transpose): the ``"gather"`` backward's sum, in its order, with no gather.
With more than one phase, and for channels-last 2-D pools, it reads each
window's chosen tap number (int8 for up to 127 taps, :func:`tap_codes`)
instead of its int32 index (``layout.coded``). Where the TPU's tiles pad the
spatial axes more than the ``(n, c)`` planes (channels-last: where XLA lays a
spatial axis in the lanes), it runs with the planes moved to the minor axis
(``layout.planes_minor``): on their own axes where the channels fill the
TPU's lanes, else as one axis, split into tiles' rows of 128 where they fill
whole tiles and it reads tap numbers (``layout.plane_axes``). Mostly, every
phase is computed in one loop, phase major, and interleaved by the transpose
back (``layout.phase_major``, :func:`phase_major_sum`). Dilated and adaptive
windows take ``_backward``'s gather (:func:`dense` says which).
"""

from __future__ import annotations

import functools
import itertools
import math
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

from .._columns import interleave
from .._planes import accumulation_dtype, in_plane, positive_zeros
from .._reduce import divide
from .._windows import AxisWindows, PoolSpec, row_major_strides, split
from . import layout


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


def _coordinates(flat: jax.Array, sizes: tuple[int, ...]) -> list[jax.Array]:
    """``_columns.coordinates`` of offsets in ``[0, prod(sizes))``, each
    division a multiply and a shift (``_columns.divide``): XLA's TPU compiler
    is slow over an integer division."""
    bound, found = math.prod(sizes), []
    for n in reversed(sizes[1:]):
        quotient = divide(flat, n, bound)
        found.append(flat - quotient * n)
        flat, bound = quotient, -(-bound // n)
    return [flat, *reversed(found)]


def tap_codes(indices: jax.Array, spec: PoolSpec, lead: int) -> jax.Array:
    """Which tap of its window each index is, row-major over the window's
    taps; -1 where it is none (an index out of range, or outside the window:
    one the ``"gather"`` backward drops too). int8 up to 127 taps."""
    valid = in_plane(indices, math.prod(spec.in_size))
    flat = jnp.where(valid, indices, 0).astype(jnp.int32)
    number = jnp.zeros(indices.shape, jnp.int32)
    for a, (w, coordinate) in enumerate(
        zip(spec.axes, _coordinates(flat, spec.in_size), strict=True)
    ):
        o = lax.broadcasted_iota(jnp.int32, indices.shape, lead + a)
        j = coordinate - (o * w.stride + w.offset)
        valid = valid & (j >= 0) & (j < w.taps)
        number = number * w.taps + j
    taps = math.prod(w.taps for w in spec.axes)
    return jnp.where(valid, number, -1).astype(layout.code_type(taps))


def covering_sum(
    grad_output: jax.Array,
    indices: jax.Array,
    x: jax.ShapeDtypeStruct,
    spec: PoolSpec,
    sharding: Any,
) -> jax.Array:
    """``_backward.covering_sum`` (the same sum, in the same order) without a
    gather, for the windows :func:`dense` accepts (the seam's choice); where
    ``layout.coded`` says so, by tap numbers; where ``layout.planes_minor`` says
    so, over the planes moved behind the spatial axes (a transpose of the
    gradients and keys in, of the sum out; channels-last's channels go with
    the batch)."""
    acc = accumulation_dtype(x.dtype)
    indices = indices.astype(jnp.promote_types(indices.dtype, jnp.int32))
    lead = split(grad_output.ndim, spec.nd, spec.trail)[0]
    by_number = layout.coded(spec)
    keys = tap_codes(indices, spec, lead) if by_number else indices
    planes = layout.plane_sizes(spec, grad_output.shape)
    if sharding is not None or not layout.planes_minor(spec, grad_output.shape):
        if sharding is None and layout.phase_major(spec, in_one_axis=False):
            return phase_major_sum(grad_output, keys, acc, spec, lead)
        return phase_sum(grad_output, keys, acc, spec, lead, sharding)

    # (*B, *S, *C) -> (*B, *C, *S) -> (*S, *T), T the planes' axes of
    # plane_axes (C: channels-last's trailing channels).
    tiles = layout.plane_axes(spec, grad_output.shape)
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
        # the taps' selects before it (the performance record, "Tap numbers
        # instead of indices").
        keys = lax.optimization_barrier(keys)
        keys = lax.optimization_barrier(moved(keys))
    else:
        keys = moved(keys)
    grads = moved(grad_output)
    if grads.dtype != acc:
        # 16-bit gradients are moved as they are and widened in the sum:
        # without the barrier XLA widens them first and moves twice the
        # bytes (the performance record, "16-bit gradients moved as they are").
        grads = lax.optimization_barrier(grads)
    # Widened where each tap reads them, they are never written in float32
    # (the performance record, "16-bit gradients widened where each tap reads
    # them").
    if layout.phase_major(spec, in_one_axis=len(tiles) == 1):
        total = phase_major_sum(grads, keys, acc, spec, 0)
    else:
        total = phase_sum(grads, keys, acc, spec, 0, None)
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


def phase_sum(
    grad_output: jax.Array,
    keys: jax.Array,
    acc: Any,
    spec: PoolSpec,
    lead: int,
    sharding: Any,
) -> jax.Array:
    """:func:`covering_sum` over arrays whose spatial axes start at ``lead``,
    given the windows' indices or, where ``layout.coded``, their tap numbers.
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
    by_number = layout.coded(spec)
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
    return _phases_interleaved(
        stacked.reshape(*(w.stride for w in axes), *like.shape), spec, lead
    )


def phase_major_sum(
    grad_output: jax.Array, keys: jax.Array, acc: Any, spec: PoolSpec, lead: int
) -> jax.Array:
    """:func:`phase_sum` by tap numbers, over arrays whose spatial axes start
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
    loop (where it writes the broadcasts out). The performance record's
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
    return _phases_interleaved(total, spec, lead)


def _phases_interleaved(stacked: jax.Array, spec: PoolSpec, lead: int) -> jax.Array:
    """The stride phases stacked phase-major, ``(*strides, *B, *rows, *T)``,
    interleaved into the input's ``(*B, *S, *T)`` (``_columns.interleave``)."""
    strides = [w.stride for w in spec.axes]
    return interleave(stacked, strides, spec.in_size, lead)
