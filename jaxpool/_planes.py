"""Per-plane indexing: read at, and write to, in-plane flat offsets.

An index is an offset into its own ``(n, c)`` plane of ``P = prod(S)``
elements. Every function here drops an index outside ``[0, P)``, negative ones
included: it never wraps and never reaches a neighbouring plane. The forward's
value read-back, the scatter backward and the unpool are built on these.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax

from ._windows import split


def accumulation_dtype(dtype: jnp.dtype) -> jnp.dtype:
    """float32 for 16-bit floats (rounded once at the end), else ``dtype``."""
    return jnp.promote_types(dtype, jnp.float32)


@jax.custom_jvp
def positive_zeros(grads: jax.Array) -> jax.Array:
    """``grads`` with their zeros +0.0: the terms of a deterministic backward.
    The spec's gradient is zeros to which each window's gradient is added, so
    a -0.0 gradient adds as +0.0 does (``0 + -0.0`` is ``+0.0``) and no sum is
    -0.0, as none of the scatter's or PyTorch's is. A fixed-order sum starts
    from its first term instead (XLA drops an added zero: ``0 + x`` folds to
    ``x``); with no -0.0 term it cannot end at -0.0 either. Its derivative is
    the identity's (-0.0 and +0.0 are one number), so a Hessian through the
    backward sees every tangent, at zero cotangents too."""
    return jnp.where(grads == 0, jnp.zeros((), grads.dtype), grads)


@positive_zeros.defjvp
def _positive_zeros_jvp(primals: Any, tangents: Any) -> Any:
    return positive_zeros(*primals), tangents[0]


def per_plane(fn: Callable[..., jax.Array], lead: int, trail: int) -> Callable:
    """``fn`` over flat planes, vmapped over ``lead`` leading and ``trail``
    trailing axes of every argument and of the result."""
    for _ in range(trail):
        fn = jax.vmap(fn, in_axes=-1, out_axes=-1)
    for _ in range(lead):
        fn = jax.vmap(fn)
    return fn


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


def in_plane(indices: jax.Array, size: int) -> jax.Array:
    """Whether each index lies in ``[0, size)``, compared in its own dtype."""
    inside = indices >= jnp.array(0, indices.dtype)
    if size <= jnp.iinfo(indices.dtype).max:
        inside = inside & (indices < jnp.array(size, indices.dtype))
    return inside


def _global_offsets(
    indices: jax.Array, shape: tuple[int, ...], nd: int, trail: int
) -> jax.Array:
    """``(M, 1)`` int32 offsets into an array of ``shape`` flattened whole, for
    the per-plane ``indices``; ``prod(shape)`` (out of bounds) for an index
    outside its plane. ``prod(shape)`` must fit int32."""
    first, stop = split(len(shape), nd, trail)
    size = math.prod(shape[first:stop])
    # (planes, Q, T): one division per element to delinearize, not one per axis.
    planar = indices.reshape(math.prod(shape[:first]), -1, math.prod(shape[stop:]))
    inside = in_plane(planar, size)
    plane = lax.broadcasted_iota(jnp.int32, planar.shape, 0)
    channel = lax.broadcasted_iota(jnp.int32, planar.shape, 2)
    offsets = plane * size + jnp.where(inside, planar, 0).astype(jnp.int32)
    offsets = offsets * planar.shape[2] + channel
    return jnp.where(inside, offsets, math.prod(shape)).reshape(-1, 1)


def scatter(
    updates: jax.Array,
    indices: jax.Array,
    x: jax.ShapeDtypeStruct,
    *,
    nd: int,
    trail: int,
    accumulate: bool,
    flat: bool,
    sharding: Any = None,
) -> jax.Array:
    """Zeros like ``x``, then ``out[b].flat[indices[b, q]] += updates[b, q]`` (or
    ``=`` when not ``accumulate``) for every plane.

    Args:
      updates: ``(*B, *O, *T)`` values.
      indices: ``(*B, *O, *T)`` integer flat offsets into each ``S`` plane.
      x: shape ``(*B, *S, *T)`` and dtype of the result.
      nd: number of spatial axes, ``len(S)``.
      trail: number of trailing axes ``T`` (0, or 1 for channels-last).
      accumulate: add (the backward; in :func:`accumulation_dtype`, rounded
        once) or place (the unpool: equal indices must carry equal values, or
        which one lands is unspecified).
      flat: one scatter into the array flattened whole, at offsets formed here
        from checked in-plane offsets (``prod(x.shape)`` must fit int32);
        else a scatter batched over the non-spatial axes, which keeps them
        separate (so sharding over them needs no communication).
      sharding: of the batched form's zeros (see ``_mesh.plane_sharding``).

    Returns:
      ``(*B, *S, *T)`` in ``x.dtype``.
    """
    acc = accumulation_dtype(x.dtype) if accumulate else x.dtype
    if flat:
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

    first, stop = split(len(x.shape), nd, trail)
    size = math.prod(x.shape[first:stop])
    shape = (*x.shape[:first], size, *x.shape[stop:])

    def plane(z: jax.Array, u: jax.Array, i: jax.Array) -> jax.Array:
        at = z.at[i.ravel()]
        u = u.ravel().astype(acc)
        if accumulate:
            return at.add(u, mode="drop", wrap_negative_indices=False)
        return at.set(u, mode="drop", wrap_negative_indices=False)

    zeros = jnp.zeros(shape, acc, out_sharding=sharding)
    out = per_plane(plane, first, trail)(zeros, updates, indices)
    return out.reshape(x.shape).astype(x.dtype)
