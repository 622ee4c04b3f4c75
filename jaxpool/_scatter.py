"""Per-plane indexing: the backward kernels, the value read-back, the unpool.

The backward sums gradients at their argmax, two ways.

``scatter`` (the default) is a scatter-add: fast everywhere, but on
GPU XLA's scatter-add uses atomics, so overlapping windows sum in a varying
order. ``gather`` visits, for every input element, the windows that cover it in
a fixed order and adds the gradients of those that chose it: no scatter, so the
same bits on every run and backend.

Every kernel here works plane by plane: an index is an offset into its own
``(n, c)`` plane, and an index outside the plane (negative ones included) is
dropped, never reaching a neighbouring plane. On CPU the scatter runs as one
op over the array flattened whole, at offsets formed here from in-plane indices
only (``_global_offsets``); under a mesh (so that sharding over the non-spatial
axes needs no communication), past int32 offsets and on accelerators it is
batched over the non-spatial axes.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ._windows import (
    Algorithm,
    AxisWindows,
    flat_offsets,
    plane_sharding,
    split,
    under_mesh,
)


def accumulation_dtype(dtype: jnp.dtype) -> jnp.dtype:
    """float32 for 16-bit floats (rounded once at the end), else ``dtype``."""
    return jnp.promote_types(dtype, jnp.float32)


def per_plane(fn: Callable[..., jax.Array], lead: int, trail: int) -> Callable:
    """``fn`` over flat planes, vmapped over ``lead`` leading and ``trail``
    trailing axes of every argument and of the result."""
    for _ in range(trail):
        fn = jax.vmap(fn, in_axes=-1, out_axes=-1)
    for _ in range(lead):
        fn = jax.vmap(fn)
    return fn


# Global offsets, and the out-of-bounds offset that drops an index, fit int32.
FLAT_LIMIT = 2**31 - 1


def _in_plane(indices: jax.Array, size: int) -> jax.Array:
    """Whether each index lies in ``[0, size)``, compared in its own dtype."""
    inside = indices >= jnp.array(0, indices.dtype)
    if size <= jnp.iinfo(indices.dtype).max:
        inside = inside & (indices < jnp.array(size, indices.dtype))
    return inside


def _flat(indices: jax.Array, shape: tuple[int, ...]) -> bool:
    """Whether the scatter may run over the array flattened whole: not under a
    mesh (the partitioner cannot shard a flat buffer along N or C) and within
    int32 offsets."""
    return 0 < math.prod(shape) < FLAT_LIMIT and not under_mesh(indices)


def _global_offsets(
    indices: jax.Array, shape: tuple[int, ...], nd: int, trail: int
) -> jax.Array:
    """``(M, 1)`` int32 offsets into an array of ``shape`` flattened whole, for
    the per-plane ``indices``; ``prod(shape)`` (out of bounds) for an index
    outside its plane. Needs :func:`_flat`."""
    first, stop = split(len(shape), nd, trail)
    size = math.prod(shape[first:stop])
    # (planes, Q, T): one division per element to delinearize, not one per axis.
    planar = indices.reshape(math.prod(shape[:first]), -1, math.prod(shape[stop:]))
    inside = _in_plane(planar, size)
    plane = lax.broadcasted_iota(jnp.int32, planar.shape, 0)
    channel = lax.broadcasted_iota(jnp.int32, planar.shape, 2)
    offsets = plane * size + jnp.where(inside, planar, 0).astype(jnp.int32)
    offsets = offsets * planar.shape[2] + channel
    return jnp.where(inside, offsets, math.prod(shape)).reshape(-1, 1)


def _flatten(arr: jax.Array, nd: int, trail: int) -> jax.Array:
    """``(*B, *S, *T)`` to ``(*B, prod(S), *T)``."""
    first, stop = split(arr.ndim, nd, trail)
    return arr.reshape(
        *arr.shape[:first], math.prod(arr.shape[first:stop]), *arr.shape[stop:]
    )


def gather_at(
    x: jax.Array, indices: jax.Array, nd: int, trail: int, fill: float
) -> jax.Array:
    """``x[b].flat[indices[b, q]]`` for every plane, ``fill`` outside it.

    Args:
      x: ``(*B, *S, *T)``.
      indices: ``(*B, *O, *T)`` integer flat offsets into each ``S`` plane.
      nd: number of spatial axes, ``len(S)``.
      trail: number of trailing axes ``T`` (0, or 1 for channels-last).
      fill: the value for indices outside ``[0, prod(S))``.

    Returns:
      ``(*B, *O, *T)`` in ``x.dtype``.
    """

    def plane(p: jax.Array, i: jax.Array) -> jax.Array:
        return (
            p.at[i.ravel()]
            .get(mode="fill", fill_value=fill, wrap_negative_indices=False)
            .reshape(i.shape)
        )

    lead, _ = split(indices.ndim, nd, trail)
    return per_plane(plane, lead, trail)(_flatten(x, nd, trail), indices)


def scatter_to(
    updates: jax.Array,
    indices: jax.Array,
    x: jax.ShapeDtypeStruct,
    nd: int,
    trail: int,
    accumulate: bool,
) -> jax.Array:
    """Zeros like ``x``, then ``out[b].flat[indices[b, q]] += updates[b, q]`` (or
    ``=`` when not ``accumulate``) for every plane.

    On CPU, one scatter into the array flattened whole, at offsets computed
    here: 1.5-2.7x faster than the same scatter batched over the non-spatial
    axes, which XLA rewrites with an iota index column per batch axis
    (measured). Under a mesh, past int32 offsets and on accelerators, batched:
    the non-spatial axes stay separate, so sharding over them needs no
    communication. Indices outside ``[0, prod(S))``, negative ones included,
    are dropped either way.

    Args:
      updates: ``(*B, *O, *T)`` values.
      indices: ``(*B, *O, *T)`` integer flat offsets into each ``S`` plane.
      x: shape ``(*B, *S, *T)`` and dtype of the result.
      nd: number of spatial axes, ``len(S)``.
      trail: number of trailing axes ``T`` (0, or 1 for channels-last).
      accumulate: add (the backward; in :func:`accumulation_dtype`, rounded
        once) or place (the unpool: equal indices must carry equal values, or
        which one lands is unspecified).

    Returns:
      ``(*B, *S, *T)`` in ``x.dtype``.
    """
    acc = accumulation_dtype(x.dtype) if accumulate else x.dtype

    def flat(updates: jax.Array, indices: jax.Array) -> jax.Array:
        # Already in the form XLA's scatter wants, so it copies nothing.
        dims = lax.ScatterDimensionNumbers(
            update_window_dims=(1,),
            inserted_window_dims=(),
            scatter_dims_to_operand_dims=(0,),
        )
        op = lax.scatter_add if accumulate else lax.scatter
        out = op(
            jnp.zeros(math.prod(x.shape), acc),
            _global_offsets(indices, x.shape, nd, trail),
            updates.reshape(-1, 1).astype(acc),
            dims,
            mode=lax.GatherScatterMode.FILL_OR_DROP,
        )
        return out.reshape(x.shape).astype(x.dtype)

    def batched(updates: jax.Array, indices: jax.Array) -> jax.Array:
        return _batched_scatter(updates, indices, x, nd, trail, acc, accumulate)

    if not _flat(indices, x.shape):
        return batched(updates, indices)
    # Measured on CPU only; accelerators keep the form measured on the H200.
    return lax.platform_dependent(updates, indices, cpu=flat, default=batched)


def _batched_scatter(
    updates: jax.Array,
    indices: jax.Array,
    x: jax.ShapeDtypeStruct,
    nd: int,
    trail: int,
    acc: jnp.dtype,
    accumulate: bool,
) -> jax.Array:
    """:func:`scatter_to` batched over the non-spatial axes (one vmap each),
    accumulating in ``acc``."""
    first, stop = split(len(x.shape), nd, trail)
    size = math.prod(x.shape[first:stop])
    shape = (*x.shape[:first], size, *x.shape[stop:])
    flat = jnp.zeros(shape, acc, out_sharding=plane_sharding(indices, nd, trail, 1))

    def plane(z: jax.Array, u: jax.Array, i: jax.Array) -> jax.Array:
        at = z.at[i.ravel()]
        u = u.ravel().astype(acc)
        if accumulate:
            return at.add(u, mode="drop", wrap_negative_indices=False)
        return at.set(u, mode="drop", wrap_negative_indices=False)

    out = per_plane(plane, first, trail)(flat, updates, indices)
    return out.reshape(x.shape).astype(x.dtype)


def gather_sum(
    grad_output: jax.Array,
    indices: jax.Array,
    x: jax.ShapeDtypeStruct,
    axes: tuple[AxisWindows, ...],
    trail: int,
) -> jax.Array:
    """Deterministic backward: for each input element, in a fixed order, add the
    gradient of every window that covers it and chose it.

    Windows are visited in increasing index order along each axis (at most
    ``ceil(span / stride)`` per axis), each a gather of one window per input
    element; no scatter. An index counts only inside its own window's span:
    true of every index the forward returns, while any other index (outside
    its window, outside the plane, negative) contributes nothing.

    Args:
      grad_output: ``(*B, *O, *T)`` gradients of the pooled values.
      indices: ``(*B, *O, *T)`` integer flat offsets into each ``S`` plane.
      x: shape ``(*B, *S, *T)`` and dtype of the result.
      axes: the windows of each spatial axis.
      trail: number of trailing axes ``T`` (0, or 1 for channels-last).

    Returns:
      ``(*B, *S, *T)`` gradient in ``x.dtype``, accumulated in
      :func:`accumulation_dtype`.
    """
    nd = len(axes)
    batch, _ = split(grad_output.ndim, nd, trail)
    acc = accumulation_dtype(x.dtype)
    grads = grad_output.astype(acc)
    index_dtype = jnp.promote_types(indices.dtype, jnp.int32)
    indices = indices.astype(index_dtype)
    in_size = tuple(w.size for w in axes)
    sharding = plane_sharding(indices, nd, trail, nd)
    here = flat_offsets([np.arange(n) for n in in_size], in_size, trail)
    here = here.astype(index_dtype)
    here = jnp.broadcast_to(here, x.shape, out_sharding=sharding)
    tables = [w.covering() for w in axes]
    total = jnp.zeros(x.shape, acc, out_sharding=sharding)
    for slots in itertools.product(*(range(len(t)) for t in tables)):
        g, i = grads, indices
        for a, (w, table, m) in enumerate(zip(axes, tables, slots, strict=True)):
            g = _spread(g, batch + a, w, table[m], 0)
            i = _spread(i, batch + a, w, table[m], -1)
        total = total + jnp.where(i == here, g, jnp.zeros((), acc))
    table = _alias_table(axes)
    if table is not None:  # windows with no in-bounds tap whose index aliases
        flat_g, flat_i = _flatten(grads, nd, trail), _flatten(indices, nd, trail)
        for row in table:
            g = jnp.take(flat_g, row, axis=batch, mode="fill", fill_value=0)
            i = jnp.take(flat_i, row, axis=batch, mode="fill", fill_value=-1)
            g, i = g.reshape(x.shape), i.reshape(x.shape)
            total = total + jnp.where(i == here, g, jnp.zeros((), acc))
    return total.astype(x.dtype)


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
    targets = sum(g * math.prod(in_size[a + 1 :]) for a, g in enumerate(grids))
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


def _spread(
    arr: jax.Array, axis: int, w: AxisWindows, window: np.ndarray, fill: int
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
    mask_shape = [1] * len(shape)
    mask_shape[axis] = w.size
    covered = jnp.asarray((window < w.out).reshape(mask_shape))
    return jnp.where(covered, spread, fill_value)


@functools.partial(jax.jit, static_argnums=(2, 3, 4, 5))
def backward(
    grad_output: jax.Array,
    indices: jax.Array,
    x: jax.ShapeDtypeStruct,
    axes: tuple[AxisWindows, ...],
    trail: int,
    algorithm: Algorithm,
) -> jax.Array:
    """The backward of every pool with the chosen ``algorithm``."""
    if algorithm == "gather":
        return gather_sum(grad_output, indices, x, axes, trail)
    return scatter_to(grad_output, indices, x, len(axes), trail, accumulate=True)
