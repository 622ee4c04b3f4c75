"""The deterministic XLA backward: a fixed-order sum over covering windows.

For every input element, in a fixed order, add the gradient of each window
that covers it and chose it: no scatter in the program, so the same bits on
every run and backend (XLA's scatter-add on GPU uses atomics). Where windows
are disjoint this is an elementwise select (each window's gradient broadcast
over its positions); elsewhere one gather per covering window.
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

from ._columns import EMBEDDED, empty_windows, flat_offsets, interleave, per_window
from ._planes import _flatten, accumulation_dtype, positive_zeros, scatter
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


def _beats(v: jax.Array, i: jax.Array, w: jax.Array, j: jax.Array) -> jax.Array:
    """Whether ``(v, i)`` (a value and its flat position) beats ``(w, j)`` in
    the forward's selection, a total order (``_scan._after``)."""
    v_nan, w_nan = jnp.isnan(v), jnp.isnan(w)
    numbers = ~w_nan & ((v > w) | ((v == w) & (i < j)))
    return jnp.where(v_nan, ~w_nan | (i > j), numbers)


def _least(a: tuple[jax.Array, ...], b: tuple[jax.Array, ...]) -> Any:
    """The covering reduction's reducer, of ``(value, index, gradient)``
    triples: the one whose chosen element the forward's order ranks lower,
    with the gradients of both where they chose the same element."""
    (v, i, g), (w, j, h) = a, b
    same = i == j
    take_a = ~same & _beats(w, j, v, i)
    total = jnp.where(same, g + h, jnp.where(take_a, g, h))
    return jnp.where(take_a, v, w), jnp.where(take_a, i, j), total


@functools.partial(jax.custom_jvp, nondiff_argnums=(3, 4, 5, 6))
def covering_reduction(
    grad_output: jax.Array,
    values: jax.Array,
    indices: jax.Array,
    x: jax.ShapeDtypeStruct,
    spec: PoolSpec,
    sharding: Any = None,
    phased: tuple[bool, ...] | None = None,
) -> jax.Array:
    """:func:`covering_sum` of the forward's own ``values`` and ``indices``, as
    one variadic window reduction: the program does not grow with the
    window's size.

    The forward's choice is a maximum under a total order on (value,
    position), so a window that covers an element ``e`` (holds it as a tap)
    chose ``e`` or an element the order ranks above it: the windows that
    chose ``e`` are those whose choice ranks lowest among the windows that
    cover it, if that choice is ``e``. So the gradient at ``e`` is one
    reduction over the windows that cover it, keeping the lowest ranked
    choice and summing the gradients of the windows that made it
    (:func:`_least`), then kept where that choice is ``e``. Those windows
    are a window of the output grid dilated by the stride (holes hold the
    reduction's initial value, which ranks above every element: a NaN at a
    position past every other), their taps a window dilated by the pool's
    dilation, visited in increasing window order: the sum adds in the order
    of :func:`covering_sum`. Windows with no in-bounds tap cover no element
    (:func:`add_aliased` adds theirs). In the accumulation dtype, -0.0
    gradients as +0.0; regular windows only (``spec.axes`` without
    ``starts``).

    ``phased``: the axes read per stride phase of the input instead
    (:func:`_phase_reading`: along one phase, the windows that cover a row
    are a window of the output grid shifted, with no holes), one reduction
    per combination of their phases, interleaved once. XLA's partitioner
    splits a reduction over a dilated base along a sharded spatial axis into
    an invalid program where its outputs do not divide among the devices
    (the seam's ``_mesh.uneven``).

    Args:
      grad_output: ``(*B, *O, *T)`` gradients of the pooled values.
      values: ``(*B, *O, *T)`` the forward's values.
      indices: ``(*B, *O, *T)`` the forward's indices.
      x: shape ``(*B, *S, *T)`` and dtype of the result.
      spec: the pool.
      sharding: of the arrays built here (see ``_mesh.plane_sharding``).
      phased: per spatial axis, whether it is read per stride phase.
    """
    nd, trail = spec.nd, spec.trail
    lead, _ = split(grad_output.ndim, nd, trail)
    acc = accumulation_dtype(x.dtype)
    phased = phased or (False,) * nd
    operands = (
        values,
        indices.astype(jnp.int32),
        positive_zeros(grad_output.astype(acc)),
    )
    inits = (
        jnp.array(jnp.nan, values.dtype),
        jnp.array(np.iinfo(np.int32).max, jnp.int32),
        jnp.zeros((), acc),
    )
    ones = [1] * grad_output.ndim
    axes = list(spec.axes)
    for a, w in enumerate(spec.axes):
        if phased[a] and w.disjoint:
            # At most one window covers each element along this axis: its
            # entries placed there (phase by phase), nothing reduced.
            operands = _placed(operands, inits, w, lead + a, sharding)
            axes[a] = AxisWindows(w.size, w.size, 1)
    spec = spec._replace(axes=tuple(axes))
    phased = tuple(p and w.stride > 1 for p, w in zip(phased, spec.axes, strict=True))
    # Per phase of the phased axes (stride 1 elsewhere): rows of each axis.
    strides = [w.stride if p else 1 for w, p in zip(spec.axes, phased, strict=True)]
    rows = [-(-w.size // s) for w, s in zip(spec.axes, strides, strict=True)]
    shape = with_spatial(grad_output.shape, nd, trail, rows)
    results = []
    for phase in itertools.product(*(range(s) for s in strides)):
        reading, dims, base, dilation = (
            list(operands),
            list(ones),
            list(ones),
            list(ones),
        )
        pads = [(0, 0)] * len(ones)
        empty = False
        for a, (w, p, q) in enumerate(zip(spec.axes, phased, phase, strict=True)):
            axis = lead + a
            if p:  # a shifted window of the output grid, no holes
                first, count, step = _phase_reading(w, q)
                empty = empty or count == 0
                length = rows[a] + (max(count, 1) - 1) * step
                config = [(0, 0, 0)] * grad_output.ndim
                config[axis] = (-first, length - (w.out - first), 0)
                reading = [
                    lax.pad(o, i, config) for o, i in zip(reading, inits, strict=True)
                ]
                dims[axis], dilation[axis] = max(count, 1), step
                continue
            # Window o's tap j reads o * stride + offset + j * dilation:
            # element e is covered by the windows at (e - offset - j *
            # dilation) / stride, the taps reversed (windows increasing).
            low = w.offset + (w.taps - 1) * w.dilation
            dilated = (w.out - 1) * w.stride + 1
            high = max(0, w.size + (w.taps - 1) * w.dilation - low - dilated)
            dims[axis], base[axis] = w.taps, w.stride
            dilation[axis], pads[axis] = w.dilation, (low, high)
        if empty:  # no window covers this phase
            results.append(jnp.zeros(shape, acc, out_sharding=sharding))
            continue
        _, chosen, total = lax.reduce_window(
            tuple(reading),
            inits,
            _least,
            dims,
            ones,
            pads,
            base_dilation=base,
            window_dilation=dilation,
        )
        for a, n in enumerate(rows):
            chosen = lax.slice_in_dim(chosen, 0, n, axis=lead + a)
            total = lax.slice_in_dim(total, 0, n, axis=lead + a)
        positions = [
            np.arange(n) * s + q for n, s, q in zip(rows, strides, phase, strict=True)
        ]
        here = flat_offsets(positions, spec.in_size, trail, lead)
        results.append(jnp.where(chosen == here, total, jnp.zeros((), acc)))
    if len(results) == 1:
        return results[0]
    split_sharding = None
    if sharding is not None:  # the phases' axes lead, unsharded
        parts = PartitionSpec(*(None,) * nd, *sharding.spec)
        split_sharding = NamedSharding(sharding.mesh, parts)
    stacked = jnp.reshape(
        jnp.stack(results), (*strides, *shape), out_sharding=split_sharding
    )
    return interleave(stacked, strides, spec.in_size, lead, sharding)


def _placed(
    operands: tuple[jax.Array, ...],
    inits: tuple[jax.Array, ...],
    w: AxisWindows,
    axis: int,
    sharding: Any,
) -> tuple[jax.Array, ...]:
    """``operands`` (the output grid's) placed along ``axis``, whose regular
    windows ``w`` are disjoint, at the positions of the input's: each
    element the entries of the window whose tap it is, ``inits`` where there
    is none. One shifted slice per stride phase (:func:`_phase_reading`),
    interleaved once."""
    rows = -(-w.size // w.stride)
    lead = axis  # the phases' interleave sees the axis as the only one
    placed = []
    for operand, init in zip(operands, inits, strict=True):
        phases = []
        for q in range(w.stride):
            first, count, _ = _phase_reading(w, q)
            config = [(0, 0, 0)] * operand.ndim
            config[axis] = (-first, rows - (w.out - first), 0)
            shifted = lax.pad(operand, init, config)
            phases.append(shifted if count else jnp.full_like(shifted, init))
        stacked = jnp.stack(phases)
        merged = jnp.moveaxis(stacked, 0, axis + 1)
        shape = list(operand.shape)
        shape[axis] = rows * w.stride
        merged = jnp.reshape(merged, shape, out_sharding=sharding)
        placed.append(lax.slice_in_dim(merged, 0, w.size, axis=lead))
    return tuple(placed)


def _phase_reading(w: AxisWindows, q: int) -> tuple[int, int, int]:
    """``(first, count, step)``: the windows that cover row ``r`` of stride
    phase ``q`` (input position ``r * stride + q``) as taps are ``r + first +
    m * step`` for ``m < count``, increasing. Tap ``j`` of window ``o`` reads
    ``o * stride + offset + j * dilation``: the taps that land in the phase
    are every ``stride / g``-th (``g = gcd(stride, dilation)``), their
    windows every ``dilation / g``-th."""
    taps = [j for j in range(w.taps) if (q - w.offset - j * w.dilation) % w.stride == 0]
    if not taps:
        return 0, 0, 1
    first = (q - w.offset - taps[-1] * w.dilation) // w.stride
    return first, len(taps), w.dilation // math.gcd(w.stride, w.dilation)


@covering_reduction.defjvp
def _covering_reduction_jvp(
    x: jax.ShapeDtypeStruct,
    spec: PoolSpec,
    sharding: Any,
    phased: tuple[bool, ...] | None,
    primals: tuple[jax.Array, ...],
    tangents: tuple[Any, ...],
) -> tuple[jax.Array, jax.Array]:
    """Linear in the gradients, constant in the values and indices (the
    choices are piecewise constant). A window reduction has no transpose, so
    the tangent is plain JAX, which JAX transposes for reverse mode and
    differentiates again in forward mode (grad of grad, ``jax.hessian``):
    the tangents added at the indices of the windows with an in-bounds tap
    (a scatter-add), or under a mesh (``phased`` given) the covering sum on
    the stride phases, which XLA's partitioner splits with halo exchanges
    (:func:`covering_sum`)."""
    grad_output, values, indices = primals
    total = covering_reduction(grad_output, values, indices, x, spec, sharding, phased)
    dot = tangents[0].astype(total.dtype)
    if phased is not None:
        tangent = covering_sum(dot, indices, x, spec, sharding, True, True)
        return total, tangent
    lead, _ = split(indices.ndim, spec.nd, spec.trail)
    hollow = empty_windows(spec.axes, lead, indices.shape)
    kept = indices if hollow is None else jnp.where(hollow, -1, indices)
    like = jax.ShapeDtypeStruct(x.shape, total.dtype)
    tangent = scatter(
        dot, kept, like, nd=spec.nd, trail=spec.trail, accumulate=True, flat=False
    )
    return total, tangent


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
    values: jax.Array | None = None,
) -> jax.Array:
    """The ``"gather"`` backward with XLA's ``covering`` sum (:func:`covering_sum`,
    :func:`covering_reduction` given the forward's ``values``, or on a TPU
    ``_tpu.covering_sum``): the windows that cover each element, then the
    windows with no in-bounds tap (:func:`add_aliased`), rounded once.
    ``sharding``: of the arrays built here (``_mesh.plane_sharding``)."""
    if values is None:
        total = covering(grad_output, indices, x, spec, sharding)
    else:
        total = covering(grad_output, values, indices, x, spec, sharding)
    spans = values is None  # the covering sum counts indices in their spans
    total = add_aliased(total, grad_output, indices, spec, sharding, spans)
    return total.astype(x.dtype)


def add_aliased(
    total: jax.Array,
    grad_output: jax.Array,
    indices: jax.Array,
    spec: PoolSpec,
    sharding: Any = None,
    spans: bool = True,
) -> jax.Array:
    """``total`` (a covering sum, in the accumulation dtype) plus the
    gradients of the windows with no in-bounds tap whose index lands outside
    their own span (see :func:`_alias_table`), or anywhere in the plane where
    ``total`` counted indices at the taps alone, not the ``spans``
    (:func:`covering_reduction`), in the same dtype: the deterministic
    backward, to be rounded once."""
    table = _alias_table(spec.axes, spans)
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


def _alias_table(axes: tuple[AxisWindows, ...], spans: bool) -> np.ndarray | None:
    """``(slots, P)``: for each plane position, the flat output indices of the
    windows with no in-bounds tap whose index (the first non-negative tap, out
    of bounds along some axis) still lands on it, in increasing order; ``Q``
    (no such window) elsewhere. ``None`` when no index lands in the plane.

    Such a window takes its index from the position rule alone, so it may lie
    outside the window's own span, where the covering windows do not look
    (with ``spans``, targets inside the span are theirs: :func:`covering_sum`
    counts an index anywhere in its window's span).
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
    coords = np.unravel_index(np.where(landed, targets, 0), in_size)
    bounds = [np.meshgrid(*(w.span()[k] for w in axes), indexing="ij") for k in (0, 1)]
    inside = np.logical_and.reduce(
        [(lo <= c) & (c < hi) for c, lo, hi in zip(coords, *bounds, strict=True)]
    )
    windows = np.flatnonzero(landed & ~inside if spans else landed)
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
