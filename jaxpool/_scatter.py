"""The backward kernel: a per-plane scatter-add of gradients to their argmax."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp


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
    size = math.prod(x.shape[batch:])
    acc = accumulation_dtype(x.dtype)

    def plane(g: jax.Array, i: jax.Array) -> jax.Array:
        zeros = jnp.zeros((size,), acc)
        return zeros.at[i.ravel()].add(
            g.ravel().astype(acc), mode="drop", wrap_negative_indices=False
        )

    for _ in range(batch):
        plane = jax.vmap(plane)
    out = plane(grad_output, indices)
    return out.reshape(x.shape).astype(x.dtype)
