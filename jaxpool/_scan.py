"""The XLA forward kernel: a running max/argmax over the taps of each window.

:func:`window_argmax` scans each window in row-major tap order from (``-inf``,
its first in-bounds tap), replacing the best when ``value > best`` or ``value``
is NaN (:func:`_replaces`): the first maximum wins ties, the last NaN wins, the
``-inf`` padding is never chosen. That selection is a maximum under a total
order on (value, position) (:func:`_after`), so it may run in passes, some axes
at a time, each carrying the flat index of its choice (:func:`stages`).

The steps, each a function below: the input the taps read (:func:`_source`:
padded with ``-inf``, its minor axis perhaps split into phases, or left as it
is when each tap pads itself: :func:`padded_tap`); one pass over the taps of
some axes (:func:`_pass`), starting every window at its first in-bounds tap
(:func:`_first_tap`), or, along an axis of adaptive windows of two sizes, a
running max of the smaller size extended by one tap, or for many windows one
over a copy of their taps (:func:`_two_size_pass`);
and the values of windows with no in-bounds tap set to ``-inf``
(``_columns.fill_empty``). How XLA should lay the scan out on each platform
(:class:`ScanForm`) is the platform seam's choice.
"""

from __future__ import annotations

import functools
import itertools
import math
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ._columns import fill_empty, per_window
from ._fusion import materialize
from ._planes import gather_at
from ._reduce import window_taps
from ._windows import (
    AxisWindows,
    PoolSpec,
    row_major_strides,
    split,
)


class ScanForm(NamedTuple):
    """How XLA lays the scan out, chosen per platform by ``_platform``."""

    materialize: bool  # each pass and the indices computed into own buffers
    phases: bool  # the minor axis read from a phase-split copy (splits_phases)
    read_back: bool  # the values gathered at the indices, not carried
    pad_taps: bool = False  # one pass: each tap pads itself, no padded copy
    # Under a mesh: every pass's taps pad themselves, so that XLA's partitioner
    # splits a sharded spatial axis with halo exchanges (a padded copy it
    # splits unevenly, and exchanges whole shards).
    partitioned: bool = False


def _replaces(value: jax.Array, best: jax.Array) -> jax.Array:
    """The scan's rule, for taps in row-major order: a greater value or a NaN
    replaces the best so far."""
    return (value > best) | jnp.isnan(value)


def _after(v: jax.Array, i: jax.Array, b: jax.Array, j: jax.Array) -> jax.Array:
    """Whether candidate ``(v, i)`` (value, flat position) beats ``(b, j)`` in
    the selection's total order: NaN above every number and the later of two
    NaNs, the earlier of two equal numbers (what the row-major scan picks)."""
    v_nan, b_nan = jnp.isnan(v), jnp.isnan(b)
    numbers = ~b_nan & ((v > b) | ((v == b) & (i < j)))
    return jnp.where(v_nan, ~b_nan | (i > j), numbers)


def stages(axes: tuple[AxisWindows, ...]) -> list[tuple[int, ...]]:
    """Which spatial axes each pass reduces, in order.

    One pass over every tap keeps temporaries near zero, but costs a select per
    tap and output, ``k**d`` of them, and XLA compiles a long unrolled chain
    slowly. Past 27 taps (a 3x3x3 cube), reduce one axis at a time instead (D,
    then H, then W, carrying the index): ``d * k`` taps and a fast compile, for
    intermediates up to half the input. The outer axes go first: their taps
    are contiguous rows, and the minor axis, whose strided taps are not, is
    read last from the smallest array. Adaptive windows of two sizes are always
    reduced one axis at a time (:func:`_two_size_pass`).
    """
    if math.prod(w.taps for w in axes) <= 27 and not any(w.starts for w in axes):
        return [tuple(range(len(axes)))]
    return [(a,) for a in range(len(axes))]


def splits_phases(axes: tuple[AxisWindows, ...], trail: int) -> bool:
    """Whether the scan may read the minor axis split into phases
    (:func:`_split_phases`): one pass over overlapping strided windows along a
    contiguous last spatial axis."""
    w = axes[-1]
    overlapping = not w.starts and w.stride > 1 and not w.disjoint
    return not trail and overlapping and len(stages(axes)) == 1


def window_argmax(
    x: jax.Array, spec: PoolSpec, form: ScanForm, sharding: Any = None
) -> tuple[jax.Array, jax.Array]:
    """Max and flat argmax of every window over the spatial axes of ``x``.

    Args:
      x: ``(*B, *S, *T)`` input, ``S`` matching ``spec.axes``' sizes, ``T``
        the channels of a channels-last array.
      spec: the pool.
      form: how XLA lays the scan out.
      sharding: of the arrays built here (see ``_mesh.plane_sharding``).

    Returns:
      ``(values, indices)``, each ``(*B, *O, *T)``; values in ``x.dtype``,
      indices int32 offsets into the unpadded ``S`` plane.
    """
    axes, lead = spec.axes, split(x.ndim, spec.nd, spec.trail)[0]
    plan = stages(axes)
    phased = form.phases
    pad_taps = form.pad_taps and (len(plan) == 1 or form.partitioned)
    best, index = _source(x, axes, lead, phased, pad_taps, form), None
    for group in plan:
        if axes[group[0]].starts:
            values, chosen = _two_size_pass(best, index, axes, group[0], lead, sharding)
        else:
            values, chosen = _pass(
                best, index, axes, group, lead, phased, pad_taps, sharding
            )
        if form.materialize:  # computed once each, not in every later read
            values, chosen = materialize(values, x), materialize(chosen, x)
        best, index, phased = values, chosen, False
    assert index is not None
    if form.read_back:
        best = gather_at(x, index, spec.nd, spec.trail, -jnp.inf)
    return fill_empty(best, axes, lead, -jnp.inf), index


def _source(
    x: jax.Array,
    axes: tuple[AxisWindows, ...],
    lead: int,
    phased: bool,
    pad_taps: bool,
    form: ScanForm,
) -> jax.Array:
    """The array the taps read: ``x`` padded with ``-inf`` (never chosen), its
    minor axis split into phases when ``phased``; ``x`` itself when each tap
    pads itself (``pad_taps``)."""
    if pad_taps:
        return x
    pads = [(0, 0, 0)] * x.ndim
    for a, w in enumerate(axes):
        pads[lead + a] = (*w.pad, 0)
    if phased:
        return _split_phases(x, pads, axes[-1].stride, form.materialize)
    if not any(any(p) for p in pads):
        return x
    return lax.pad(x, jnp.array(-jnp.inf, x.dtype), pads)


def _split_phases(
    x: jax.Array, pads: list[tuple[int, int, int]], stride: int, keep: bool
) -> jax.Array:
    """``x`` padded by ``pads`` with ``-inf``, its last axis ``(L,)`` (padded
    further to a multiple of ``stride``) as ``(stride, ceil(L / stride))``,
    phase first: a strided tap becomes a contiguous slice of one phase.

    Each phase is a strided slice of ``x`` padded on its own, so XLA builds the
    whole array in one pass (padding first, then splitting, takes two). With
    ``keep`` it is materialised, so the scan reads it rather than recomputing
    it per tap.
    """
    lo, hi, _ = pads[-1]
    size = x.shape[-1]
    length = -(-(lo + size + hi) // stride)
    phases = []
    for r in range(stride):
        first = max(0, -(-(lo - r) // stride))  # first m with r + m*s - lo >= 0
        start = r + first * stride - lo
        count = max(0, -(-(size - start) // stride)) if start < size else 0
        part = lax.slice_in_dim(
            x, min(start, size), min(start + count * stride, size), stride, -1
        )
        high = length - first - count
        phases.append(
            lax.pad(part, jnp.array(-jnp.inf, x.dtype), [*pads[:-1], (first, high, 0)])
        )
    split_x = jnp.stack(phases, axis=-2)
    return materialize(split_x, x) if keep else split_x


def _tap(
    x: jax.Array, axis: int, windows: AxisWindows, tap: int, phased: bool = False
) -> jax.Array:
    """The ``(..., out, ...)`` values that tap ``tap`` reads along ``axis`` of
    ``x``, already padded by ``windows.pad`` along it (and split into phases
    there when ``phased``: see :func:`_split_phases`)."""
    start = tap * windows.dilation
    if phased:
        x = lax.index_in_dim(x, start % windows.stride, axis, keepdims=False)
        first = start // windows.stride
        return lax.slice_in_dim(x, first, first + windows.out, axis=axis)
    limit = start + (windows.out - 1) * windows.stride + 1
    return lax.slice_in_dim(x, start, limit, windows.stride, axis)


def padded_tap(
    x: jax.Array, axis: int, windows: AxisWindows, tap: int, fill: Any = -jnp.inf
) -> jax.Array:
    """:func:`_tap` read from the unpadded ``x``: the in-bounds part sliced,
    then padded with ``fill``, so that XLA can fold the padding into the
    consumer instead of a padded copy of the input."""
    positions = windows.positions(tap)  # increasing: low padding, inside, high
    low = int((positions < 0).sum())
    high = int((positions >= windows.size).sum())
    inside = windows.out - low - high
    start = int(positions[low]) if inside else 0
    stride = windows.stride if inside > 1 else 1
    part = lax.slice_in_dim(x, start, start + (inside - 1) * stride + 1, stride, axis)
    config = [(0, 0, 0)] * x.ndim
    config[axis] = (low, high, 0)
    return lax.pad(part, jnp.array(fill, x.dtype), config)


def _pass(
    best: jax.Array,
    index: jax.Array | None,
    axes: tuple[AxisWindows, ...],
    group: tuple[int, ...],
    lead: int,
    phased: bool,
    pad_taps: bool,
    sharding: Any,
) -> tuple[jax.Array, jax.Array]:
    """One pass: the best ``(value, flat index)`` over the taps of the axes in
    ``group``, for every window along them.

    ``best`` holds the candidates (the padded input, or an earlier pass's
    values) and ``index`` their partial flat indices (``None`` in the first
    pass, whose taps are in row-major order: :func:`_replaces`; a later pass
    compares positions: :func:`_after`). With ``pad_taps`` ``best`` and
    ``index`` are unpadded and each tap pads itself; a later pass then never
    takes a tap in the padding (the padded copy's ``-inf`` there loses every
    tie with a later position, and one before the window's first in-bounds
    tap gives way to it).
    """
    strides = row_major_strides([w.size for w in axes])
    values = chosen = None
    for taps in itertools.product(*(range(axes[a].taps) for a in group)):
        value, tap_index = best, index
        for a, j in zip(group, taps, strict=True):
            if pad_taps:
                value = padded_tap(value, lead + a, axes[a], j)
            else:
                minor = phased and a == len(axes) - 1
                value = _tap(value, lead + a, axes[a], j, minor)
            if tap_index is not None and pad_taps:
                tap_index = padded_tap(tap_index, lead + a, axes[a], j, 0)
            elif tap_index is not None:
                tap_index = _tap(tap_index, lead + a, axes[a], j)
        shape = value.shape
        offset = sum(
            per_window(axes[a].positions(j) * strides[a], lead + a, shape)
            for a, j in zip(group, taps, strict=True)
        )
        offset = jnp.broadcast_to(
            jnp.asarray(offset, jnp.int32), shape, out_sharding=sharding
        )
        if values is None or chosen is None:
            values = jnp.full(shape, -jnp.inf, best.dtype, out_sharding=sharding)
            chosen = jnp.zeros(shape, jnp.int32, out_sharding=sharding)
        if tap_index is None:
            tap_index = offset
            take = _replaces(value, values)
        else:
            # (Padding ties a window of only -inf, whose candidates all share
            # the earlier axes' first in-bounds taps: low padding precedes the
            # forced first tap along this axis, high padding comes after every
            # real one.)
            tap_index = tap_index + offset
            take = _after(value, tap_index, values, chosen)
            if pad_taps:
                for a, j in zip(group, taps, strict=True):
                    at = axes[a].positions(j)
                    inside = (at >= 0) & (at < axes[a].size)
                    take = take & per_window(inside, lead + a, shape)
        take = _first_tap(take, axes, group, taps, lead, shape)
        values = jnp.where(take, value, values)
        chosen = jnp.where(take, tap_index, chosen)
    assert values is not None and chosen is not None
    return values, chosen


# The most taps (windows times their largest size) along an axis of adaptive
# windows that :func:`_two_size_pass` reads as slices; a copy past them.
FEW_TAPS = 64


def _two_size_pass(
    best: jax.Array,
    index: jax.Array | None,
    axes: tuple[AxisWindows, ...],
    a: int,
    lead: int,
    sharding: Any,
) -> tuple[jax.Array, jax.Array]:
    """A pass along axis ``a`` of adaptive windows, which take at most two sizes
    (``small`` and ``small + 1``), in one of two forms:

    - few windows (at most :data:`FEW_TAPS` taps in all): the best ``(value,
      flat index)`` of every window of ``small`` taps starting anywhere along
      the axis (a running max, one tap at a time), extended by one tap for the
      windows of the larger size, then each output's window picked by its
      start, a slice. XLA:CPU fuses the running max into each pick, so that
      only the picked windows are computed, in a program that grows with
      their taps;
    - more (:func:`_copied_pass`): one gather copies every window's elements
      in turn, then a running max over the copy's taps. The copy costs a
      write and a read of it, but the program no longer grows with the
      windows: 96x131 → 13x17 compiles in 0.3 s, not 1.0 s (463
      instructions, not 4,147; the performance record, "Adaptive windows of
      two sizes on the CPU").

    Every adaptive window holds at least one element, and its first tap (the
    start) begins the scan; ``best`` and ``index`` are as in :func:`_pass`.
    """
    w = axes[a]
    if w.out * w.taps > FEW_TAPS:
        return _copied_pass(best, index, axes, a, lead, sharding)
    axis = lead + a
    stride = row_major_strides([w.size for w in axes])[a]
    starts, sizes = np.asarray(w.starts), np.subtract(w.ends, w.starts)
    small, large = int(sizes.min()), int(sizes.max())

    def candidates(tap: int, count: int) -> tuple[jax.Array, jax.Array]:
        """Tap ``tap`` of the windows starting at ``0 .. count - 1``."""
        value = lax.slice_in_dim(best, tap, tap + count, axis=axis)
        offset = per_window((np.arange(count) + tap) * stride, axis, value.shape)
        offset = jnp.broadcast_to(
            jnp.asarray(offset, jnp.int32), value.shape, out_sharding=sharding
        )
        if index is None:
            return value, offset
        return value, lax.slice_in_dim(index, tap, tap + count, axis=axis) + offset

    def scan(values: jax.Array, chosen: jax.Array, tap: int, count: int) -> Any:
        return _keep(*candidates(tap, count), values, chosen, index is None)

    count = w.size - small + 1
    values, chosen = candidates(0, count)
    for tap in range(1, small):
        values, chosen = scan(values, chosen, tap, count)
    pick = starts
    if large > small:  # one more tap for the windows of the larger size
        extended = (
            lax.slice_in_dim(values, 0, count - 1, axis=axis),
            lax.slice_in_dim(chosen, 0, count - 1, axis=axis),
        )
        extended = scan(*extended, small, count - 1)
        values = jnp.concatenate([values, extended[0]], axis=axis)
        chosen = jnp.concatenate([chosen, extended[1]], axis=axis)
        pick = np.where(sizes == small, starts, count + starts)
    return _select(values, pick, axis), _select(chosen, pick, axis)


def _copied_pass(
    best: jax.Array,
    index: jax.Array | None,
    axes: tuple[AxisWindows, ...],
    a: int,
    lead: int,
    sharding: Any,
) -> tuple[jax.Array, jax.Array]:
    """:func:`_two_size_pass` over a copy of every window's elements in turn
    (``_reduce.window_taps``: a short window repeats its last, which changes
    no choice)."""
    w, axis = axes[a], lead + a
    stride = row_major_strides([w.size for w in axes])[a]
    copies = [
        window_taps(arr, w, axis, True) for arr in (best, index) if arr is not None
    ]

    def candidates(tap: int) -> tuple[jax.Array, jax.Array]:
        """Tap ``tap`` of every window: its values and flat indices."""
        value, *carried = (lax.index_in_dim(c, tap, axis + 1, False) for c in copies)
        offset = per_window(
            (w.positions(tap) * stride).astype(np.int32), axis, value.shape
        )
        offset = jnp.broadcast_to(
            jnp.asarray(offset, jnp.int32), value.shape, out_sharding=sharding
        )
        return value, offset + carried[0] if carried else offset

    values, chosen = candidates(0)
    for tap in range(1, w.taps):
        values, chosen = _keep(*candidates(tap), values, chosen, index is None)
    return values, chosen


def _keep(
    value: jax.Array,
    tap_index: jax.Array,
    values: jax.Array,
    chosen: jax.Array,
    in_order: bool,
) -> tuple[jax.Array, jax.Array]:
    """The best ``(values, chosen)`` so far after the candidate ``(value,
    tap_index)``: by the scan's rule (:func:`_replaces`) where the taps come
    in row-major order (``in_order``), else by the total order
    (:func:`_after`)."""
    if in_order:
        take = _replaces(value, values)
    else:
        take = _after(value, tap_index, values, chosen)
    return jnp.where(take, value, values), jnp.where(take, tap_index, chosen)


def _select(arr: jax.Array, positions: np.ndarray, axis: int) -> jax.Array:
    """``arr`` at static ``positions`` along ``axis``: a concatenate of slices,
    one a position (:func:`_two_size_pass` picks so at most
    :data:`FEW_TAPS` windows)."""
    rows = [lax.slice_in_dim(arr, int(p), int(p) + 1, axis=axis) for p in positions]
    return lax.concatenate(rows, axis)


def _first_tap(
    take: jax.Array,
    axes: tuple[AxisWindows, ...],
    group: tuple[int, ...],
    taps: tuple[int, ...],
    lead: int,
    shape: tuple[int, ...],
) -> jax.Array:
    """``take``, forced where ``taps`` is each window's first in-bounds tap:
    every tap before it is padding, so this starts the scan there."""
    force = [axes[a].first_tap() == j for a, j in zip(group, taps, strict=True)]
    if not all(f.any() for f in force):
        return take
    masks = [per_window(f, lead + a, shape) for a, f in zip(group, force, strict=True)]
    return take | functools.reduce(jnp.logical_and, masks)
