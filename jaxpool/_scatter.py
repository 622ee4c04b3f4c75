"""The backward kernels: gradients summed at their argmax, two ways.

``scatter`` (the default) is a per-plane scatter-add: fast everywhere, but on
GPU XLA's scatter-add uses atomics, so overlapping windows sum in a varying
order. ``gather`` visits, for every input element, the windows that cover it in
a fixed order and adds the gradients of those that chose it: no scatter, so the
same bits on every run and backend.
"""

from __future__ import annotations

import itertools
import math

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ._spec import Algorithm, AxisWindows, flat_offsets, leading_sharding


def accumulation_dtype(dtype: jnp.dtype) -> jnp.dtype:
    """float32 for 16-bit floats (rounded once at the end), else ``dtype``."""
    return jnp.promote_types(dtype, jnp.float32)


def scatter_add(
    grad_output: jax.Array, indices: jax.Array, x: jax.ShapeDtypeStruct, nd: int
) -> jax.Array:
    """``grad_input[b].flat[indices[b, q]] += grad_output[b, q]`` for every plane.

    Each leading ``(n, c)`` plane scatters into its own ``prod(S)`` elements
    (a batched scatter, one vmap per leading axis): no global offsets that could
    overflow int32 or let a bad index reach a neighbouring plane, and leading
    axes stay separate so sharding over them needs no communication. Indices
    outside ``[0, prod(S))``, negative ones included, are dropped.

    Args:
      grad_output: ``(*B, *O)`` gradients of the pooled values.
      indices: ``(*B, *O)`` integer flat offsets into each ``S`` plane.
      x: shape ``(*B, *S)`` and dtype of the result.
      nd: number of spatial axes, ``len(S)``.

    Returns:
      ``(*B, *S)`` gradient in ``x.dtype``, accumulated in
      :func:`accumulation_dtype`.
    """
    batch = grad_output.ndim - nd
    lead = grad_output.shape[:batch]
    size = math.prod(x.shape[batch:])
    acc = accumulation_dtype(x.dtype)
    zeros = jnp.zeros((*lead, size), acc, out_sharding=leading_sharding(indices, batch))

    def plane(z: jax.Array, g: jax.Array, i: jax.Array) -> jax.Array:
        return z.at[i.ravel()].add(
            g.ravel().astype(acc), mode="drop", wrap_negative_indices=False
        )

    for _ in range(batch):
        plane = jax.vmap(plane)
    out = plane(zeros, grad_output, indices)
    return out.reshape(x.shape).astype(x.dtype)


def gather_sum(
    grad_output: jax.Array,
    indices: jax.Array,
    x: jax.ShapeDtypeStruct,
    axes: tuple[AxisWindows, ...],
) -> jax.Array:
    """Deterministic backward: for each input element, in a fixed order, add the
    gradient of every window that covers it and chose it.

    Windows are visited in increasing index order along each axis (at most
    ``ceil(span / stride)`` per axis), each a gather of one window per input
    element; no scatter. An index counts only inside its own window's span:
    true of every index the forward returns, while any other index (outside
    its window, outside the plane, negative) contributes nothing.

    Args:
      grad_output: ``(*B, *O)`` gradients of the pooled values.
      indices: ``(*B, *O)`` integer flat offsets into each ``S`` plane.
      x: shape ``(*B, *S)`` and dtype of the result.
      axes: the windows of each spatial axis.

    Returns:
      ``(*B, *S)`` gradient in ``x.dtype``, accumulated in
      :func:`accumulation_dtype`.
    """
    batch = grad_output.ndim - len(axes)
    acc = accumulation_dtype(x.dtype)
    grads = grad_output.astype(acc)
    index_dtype = jnp.promote_types(indices.dtype, jnp.int32)
    indices = indices.astype(index_dtype)
    in_size = tuple(w.size for w in axes)
    sharding = leading_sharding(indices, batch)
    here = flat_offsets([np.arange(n) for n in in_size], in_size).astype(index_dtype)
    here = jnp.broadcast_to(here, x.shape, out_sharding=sharding)
    tables = [w.covering() for w in axes]
    total = jnp.zeros(x.shape, acc, out_sharding=sharding)
    for slots in itertools.product(*(range(len(t)) for t in tables)):
        g, i = grads, indices
        for a, (w, table, m) in enumerate(zip(axes, tables, slots, strict=True)):
            g = _spread(g, batch + a, w, table[m], 0)
            i = _spread(i, batch + a, w, table[m], -1)
        total = total + jnp.where(i == here, g, jnp.zeros((), acc))
    return total.astype(x.dtype)


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


def backward(
    grad_output: jax.Array,
    indices: jax.Array,
    x: jax.ShapeDtypeStruct,
    axes: tuple[AxisWindows, ...],
    algorithm: Algorithm,
) -> jax.Array:
    """The backward of every pool with the chosen ``algorithm``."""
    if algorithm == "gather":
        return gather_sum(grad_output, indices, x, axes)
    return scatter_add(grad_output, indices, x, len(axes))
