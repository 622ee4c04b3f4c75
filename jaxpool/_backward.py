"""The deterministic XLA backward: a fixed-order sum over covering windows.

For every input element, in a fixed order, add the gradient of each window
that covers it and chose it: no scatter in the program, so the same bits on
every run and backend (XLA's scatter-add on GPU uses atomics). Where windows
are disjoint this is an elementwise select (each window's gradient broadcast
over its positions); elsewhere one gather per covering window.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import NamedSharding, PartitionSpec

from ._columns import EMBEDDED, flat_offsets, interleave, per_window
from ._planes import _flatten, accumulation_dtype, positive_zeros
from ._scan import padded_tap
from ._windows import AxisWindows, PoolSpec, row_major_strides, split, with_spatial


def covering_sum(
    grad_output: jax.Array,
    indices: jax.Array,
    x: jax.ShapeDtypeStruct,
    spec: PoolSpec,
    sharding: Any = None,
    tangent: bool = False,
    partitioned: bool = False,
) -> jax.Array:
    """Deterministic backward, without the aliased empty windows: for each
    input element, in a fixed order, the gradient of every window that covers
    it and chose it, in the accumulation dtype (then :func:`add_aliased`, and
    round once); -0.0 gradients as +0.0 (``_planes.positive_zeros``), except
    in a ``tangent`` (the sum's JVP, which must stay linear for JAX to
    transpose it; the spec signs no zero of a derivative of the backward).

    Windows are visited in increasing index order along each axis (at most
    ``ceil(span / stride)`` per axis), each a gather of one window per input
    element; no scatter. An index counts only inside its own window's span:
    true of every index the forward returns, while any other index (outside
    its window, outside the plane, negative) contributes nothing.

    Args:
      grad_output: ``(*B, *O, *T)`` gradients of the pooled values.
      indices: ``(*B, *O, *T)`` integer flat offsets into each ``S`` plane.
      x: shape ``(*B, *S, *T)`` and dtype of the result.
      spec: the pool.
      sharding: of the arrays built here (see ``_mesh.plane_sharding``).
      tangent: the sum of tangents, their zeros as they are.
      partitioned: along axes of regular windows, each covering window's
        gradient and index read per stride phase by shifting the outputs
        into place (:func:`phased`), not by a gather: XLA's partitioner
        splits that along a sharded spatial axis with halo exchanges. The
        same sum, in the same order, to the bit.
    """
    axes, nd, trail = spec.axes, spec.nd, spec.trail
    batch, _ = split(grad_output.ndim, nd, trail)
    acc = accumulation_dtype(x.dtype)
    grads = grad_output.astype(acc)
    indices = indices.astype(jnp.promote_types(indices.dtype, jnp.int32))
    if partitioned:

        def add(total: jax.Array, g: jax.Array, i: jax.Array, here: Any) -> Any:
            g = g if tangent else positive_zeros(g)
            return total + jnp.where(i == here, g, jnp.zeros((), acc))

        return phased(grads, indices, spec, sharding, add)
    here = _positions(indices.dtype, x, spec, sharding)
    tables = [w.covering() for w in axes]
    total = jnp.zeros(x.shape, acc, out_sharding=sharding)
    for slots in itertools.product(*(range(len(t)) for t in tables)):
        g, i = grads, indices
        for a, (w, table, m) in enumerate(zip(axes, tables, slots, strict=True)):
            window = _covering_row(w, table, m)
            g = _spread(g, batch + a, w, window, 0)
            i = _spread(i, batch + a, w, window, -1)
        g = g if tangent else positive_zeros(g)
        total = total + jnp.where(i == here, g, jnp.zeros((), acc))
    return total


class _Phase(NamedTuple):
    """The positions ``r * stride + phase`` of one stride phase of an axis
    (``stride`` 1, phase 0: every position, for adaptive windows), and the
    windows that cover them in increasing order: for regular windows, window
    ``r + first + m`` covers row ``r`` for each slot ``m < slots``; for
    adaptive ones, the covering table's rows."""

    stride: int
    phase: int
    first: int
    slots: int


def _phases(w: AxisWindows) -> list[_Phase]:
    """The stride phases of the axis of windows ``w`` (one of stride 1 for
    adaptive windows). Position ``p`` lies in the span of window ``o`` when
    ``o * stride + offset <= p <= o * stride + c``, ``c`` the first window's
    last position, so along phase ``q`` the first covering window of row
    ``r`` is ``r + ceil((q - c) / stride)``, and the last ``r +
    floor((q - offset) / stride)``: a constant shift per phase."""
    if w.starts:
        return [_Phase(1, 0, 0, len(w.covering()))]
    s, span = w.stride, w.extent
    c = w.offset + span - 1
    phases = []
    for q in range(s):
        first = -(-(q - c) // s)
        phases.append(_Phase(s, q, first, (q - w.offset) // s - first + 1))
    return phases


def phased(
    values: jax.Array,
    indices: jax.Array,
    spec: PoolSpec,
    sharding: Any,
    combine: Callable[..., jax.Array],
) -> jax.Array:
    """For each input element, ``combine(acc, value, index, here)`` over the
    windows that cover it, in increasing order (``here``: the element's flat
    offset; ``acc`` starts at zeros of ``values``' dtype): :func:`covering_sum`
    where ``combine`` adds the values whose index is here, the window-local
    unpool (:func:`place`) where it puts them.

    Computed on each stride phase of the input (the positions ``r * stride +
    q`` of each axis), whose covering windows are the output rows shifted by
    a constant: each term a slice of the values and indices padded back to
    the phase's rows (no gather, no repeat), the phases then interleaved
    once. XLA's partitioner splits every step along a sharded spatial axis
    with halo exchanges: the phases' rows divide among the devices as the
    input does where the stride divides each device's share of the axis.
    Axes of adaptive windows read their covering windows by a gather, as
    :func:`covering_sum` does."""
    axes, nd, trail = spec.axes, spec.nd, spec.trail
    lead, _ = split(values.ndim, nd, trail)
    plans = [_phases(w) for w in axes]
    rows = [-(-w.size // plan[0].stride) for w, plan in zip(axes, plans, strict=True)]
    results = []
    for phases in itertools.product(*plans):
        shape = with_spatial(values.shape, nd, trail, rows)
        positions = [
            np.arange(n) * ph.stride + ph.phase
            for n, ph in zip(rows, phases, strict=True)
        ]
        here = flat_offsets(positions, spec.in_size, trail, lead).astype(indices.dtype)
        acc = jnp.zeros(shape, values.dtype, out_sharding=sharding)
        for slots in itertools.product(*(range(ph.slots) for ph in phases)):
            v, i = values, indices
            for a, (w, ph, m) in enumerate(zip(axes, phases, slots, strict=True)):
                if w.starts:
                    window = _covering_row(w, w.covering(), m)
                    v = _spread(v, lead + a, w, window, 0)
                    i = _spread(i, lead + a, w, window, -1)
                else:  # output rows first + m on: a tap of stride 1
                    shift = AxisWindows(w.out, rows[a], 1, offset=ph.first + m)
                    v = padded_tap(v, lead + a, shift, 0, 0)
                    i = padded_tap(i, lead + a, shift, 0, -1)
            acc = combine(acc, v, i, here)
        results.append(acc)
    counts = tuple(len(p) for p in plans)
    split_sharding = None
    if sharding is not None:  # the phases' axes lead, unsharded
        parts = PartitionSpec(*(None,) * nd, *sharding.spec)
        split_sharding = NamedSharding(sharding.mesh, parts)
    stacked = jnp.reshape(
        jnp.stack(results), (*counts, *results[0].shape), out_sharding=split_sharding
    )
    strides = [p[0].stride for p in plans]
    return interleave(stacked, strides, spec.in_size, lead, sharding)


def place(
    values: jax.Array, indices: jax.Array, spec: PoolSpec, sharding: Any = None
) -> jax.Array:
    """The unpool under a mesh: each value at its index within its own window
    of ``spec`` (the pool's, as PyTorch's unpool arguments give it), zeros
    elsewhere; an index outside its window is dropped. Where overlapping
    windows chose one element, the last window's value (a pool's indices
    give them the same value). :func:`phased`: no scatter, so XLA's
    partitioner moves only halos."""
    indices = indices.astype(jnp.promote_types(indices.dtype, jnp.int32))

    def put(acc: jax.Array, v: jax.Array, i: jax.Array, here: Any) -> jax.Array:
        return jnp.where(i == here, v, acc)

    return phased(values, indices, spec, sharding, put)


def read(arr: jax.Array, indices: jax.Array, spec: PoolSpec) -> jax.Array:
    """``arr`` (``(*B, *S, *T)``) at each window's index within its own window
    of ``spec``, 0 for an index outside it (the window-local unpool's
    gradient, the transpose of :func:`place`): each position of a window read
    as the forward reads its taps (``_scan.padded_tap``: a strided slice,
    padded with zeros outside the axis, where no index points), and kept
    where it is the index. No gather."""
    axes, nd, trail = spec.axes, spec.nd, spec.trail
    lead, _ = split(arr.ndim, nd, trail)
    indices = indices.astype(jnp.promote_types(indices.dtype, jnp.int32))
    spans = [w.extent for w in axes]
    dense = tuple(
        w._replace(taps=n, dilation=1) for w, n in zip(axes, spans, strict=True)
    )
    out = jnp.zeros(indices.shape, arr.dtype)
    for taps in itertools.product(*map(range, spans)):
        value = arr
        for a, (w, j) in enumerate(zip(dense, taps, strict=True)):
            value = padded_tap(value, lead + a, w, j, 0)
        positions = [w.positions(j) for w, j in zip(dense, taps, strict=True)]
        here = flat_offsets(positions, spec.in_size, trail, lead).astype(indices.dtype)
        out = jnp.where(indices == here, value, out)
    return out


def gather_sum(
    grad_output: jax.Array,
    indices: jax.Array,
    covering: Callable[..., jax.Array],
    x: jax.ShapeDtypeStruct,
    spec: PoolSpec,
    sharding: Any,
) -> jax.Array:
    """The ``"gather"`` backward with XLA's ``covering`` sum (:func:`covering_sum`
    or, on a TPU, ``_tpu.covering_sum``): the windows that cover each element,
    then the windows with no in-bounds tap (:func:`add_aliased`), rounded
    once. ``sharding``: of the arrays built here (``_mesh.plane_sharding``)."""
    total = covering(grad_output, indices, x, spec, sharding)
    total = add_aliased(total, grad_output, indices, spec, sharding)
    return total.astype(x.dtype)


def add_aliased(
    total: jax.Array,
    grad_output: jax.Array,
    indices: jax.Array,
    spec: PoolSpec,
    sharding: Any = None,
) -> jax.Array:
    """``total`` (a covering sum, in the accumulation dtype) plus the
    gradients of the windows with no in-bounds tap whose index lands outside
    their own span (see :func:`_alias_table`), in the same dtype: the
    deterministic backward, to be rounded once."""
    table = _alias_table(spec.axes)
    if table is not None:
        nd, trail = spec.nd, spec.trail
        batch, _ = split(grad_output.ndim, nd, trail)
        indices = indices.astype(jnp.promote_types(indices.dtype, jnp.int32))
        here = _positions(indices.dtype, total, spec, sharding)
        flat_g = _flatten(grad_output.astype(total.dtype), nd, trail)
        flat_i = _flatten(indices, nd, trail)
        for row in table:
            g = jnp.take(flat_g, row, axis=batch, mode="fill", fill_value=0)
            i = jnp.take(flat_i, row, axis=batch, mode="fill", fill_value=-1)
            g, i = g.reshape(total.shape), i.reshape(total.shape)
            g = positive_zeros(g)
            total = total + jnp.where(i == here, g, jnp.zeros((), total.dtype))
    return total


def _positions(dtype: Any, like: Any, spec: PoolSpec, sharding: Any) -> jax.Array:
    """Each input element's own flat offset in its plane, broadcast to the
    shape of ``like``."""
    in_size = spec.in_size
    here = flat_offsets([np.arange(n) for n in in_size], in_size, spec.trail)
    return jnp.broadcast_to(here.astype(dtype), like.shape, out_sharding=sharding)


def _alias_table(axes: tuple[AxisWindows, ...]) -> np.ndarray | None:
    """``(slots, P)``: for each plane position, the flat output indices of the
    windows with no in-bounds tap whose index (the first non-negative tap, out
    of bounds along some axis) still lands on it, in increasing order; ``Q``
    (no such window) elsewhere. ``None`` when no index lands in the plane.

    Such a window takes its index from the position rule alone, so it may lie
    outside the window's own span, where the covering windows do not look
    (targets inside the span are theirs).
    """
    empty = [w.empty() for w in axes]
    if not any(e.any() for e in empty):
        return None
    in_size = tuple(w.size for w in axes)
    starts = [w.positions(0) + w.first_tap() * w.dilation for w in axes]
    grids = np.meshgrid(*starts, indexing="ij")
    strides = row_major_strides(in_size)
    targets = sum(g * s for g, s in zip(grids, strides, strict=True))
    hollow = np.logical_or.reduce(np.meshgrid(*empty, indexing="ij"))
    plane = math.prod(in_size)
    landed = hollow & (targets < plane)
    # Targets inside the window's span are found by the covering windows.
    coords = np.unravel_index(np.where(landed, targets, 0), in_size)
    spans = [np.meshgrid(*(w.span()[k] for w in axes), indexing="ij") for k in (0, 1)]
    inside = np.logical_and.reduce(
        [(lo <= c) & (c < hi) for c, lo, hi in zip(coords, *spans, strict=True)]
    )
    windows = np.flatnonzero(landed & ~inside)
    if windows.size == 0:
        return None
    hits = np.asarray(targets).ravel()[windows]
    slots = int(np.bincount(hits).max())
    table = np.full((slots, plane), hollow.size, np.int64)
    for w, t in zip(windows, hits, strict=True):  # windows ascend: a fixed order
        table[np.argmax(table[:, t] == hollow.size), t] = w
    return table


def _covering_row(w: AxisWindows, table: np.ndarray, m: int) -> Any:
    """Row ``m`` of ``table``, ``w.covering()``: embedded, or for regular
    windows along an axis longer than ``_columns.EMBEDDED`` the same int32
    values computed from an iota (windows ``first(p) .. last(p)`` hold
    position ``p``: those that end after it and start at or before it)."""
    if w.starts or w.size <= EMBEDDED:
        return table[m]
    p = lax.iota(jnp.int32, w.size) - w.offset
    span = w.extent
    first = jnp.clip((p - span) // w.stride + 1, 0, w.out)
    last = jnp.clip(p // w.stride + 1, 0, w.out) - 1
    return jnp.where(first + m <= last, first + m, w.out)


def _spread(
    arr: jax.Array, axis: int, w: AxisWindows, window: Any, fill: int
) -> jax.Array:
    """``arr[..., window[p], ...]`` for each input position ``p`` along ``axis``,
    ``fill`` where ``window[p] == w.out`` (no such window).

    Disjoint regular windows need no gather: each output repeated ``stride``
    times and shifted into place is an elementwise (fusible) broadcast.
    """
    fill_value = jnp.array(fill, arr.dtype)
    if not w.disjoint:
        return jnp.take(arr, window, axis=axis, mode="fill", fill_value=fill)
    shape = list(arr.shape)
    tiled = [*shape[: axis + 1], w.stride, *shape[axis + 1 :]]
    repeated = jnp.broadcast_to(jnp.expand_dims(arr, axis + 1), tiled)
    repeated = repeated.reshape([*shape[:axis], w.out * w.stride, *shape[axis + 1 :]])
    low = w.offset  # input position of the first repeated element
    config = [(0, 0, 0)] * arr.ndim
    config[axis] = (low, w.size - (low + w.out * w.stride), 0)
    spread = lax.pad(repeated, fill_value, config)
    covered = window < w.out
    if isinstance(covered, np.ndarray):
        covered = per_window(covered, axis, spread.shape)
    else:
        covered = jnp.expand_dims(covered, [d for d in range(arr.ndim) if d != axis])
    return jnp.where(covered, spread, fill_value)
