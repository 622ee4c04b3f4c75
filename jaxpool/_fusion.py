"""A fusion boundary that XLA:CPU keeps: :func:`materialize`.

XLA fuses a cheap producer into every consumer that reads it and, on CPU,
recomputes the producer once per read: the forward's scan fused into the
backward's loops ran once per gradient slot. ``lax.optimization_barrier`` does
not help, because XLA:CPU removes it before fusion. The platform seam
(``_platform``) asks for this boundary on CPU only, and never under a mesh
(reading one element of a sharded array is not local); the performance docs
give the measurements that chose it.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax


def materialize(x: jax.Array, source: jax.Array | None = None) -> jax.Array:
    """``x``, computed once into its own buffer: a ``while`` loop that XLA
    cannot see through.

    The loop's trip count depends on the data (1 if the first element of
    ``source`` equals an arbitrary sentinel, else 0), and its body maps the
    sentinel to itself: the result is ``x`` for any input and trip count,
    while XLA must compute ``x`` into a buffer before the loop.

    Args:
      x: any array.
      source: a non-empty array whose first element the trip count reads; by
        default ``x``. Pass an input that is already in memory: XLA rewrites a
        read of ``x``'s first element into a read of its producer, which then
        has two users and is materialised twice.

    Returns:
      ``x``, bit for bit (empty arrays as they are).
    """
    source = x if source is None else source
    if x.size == 0 or source.size == 0:
        return x
    flag = lax.index_in_dim(source.reshape(-1), 0, keepdims=False)
    trips = (flag == jnp.array(3, source.dtype)).astype(jnp.int32)
    sentinel = jnp.array(3, x.dtype)
    return lax.fori_loop(
        0, trips, lambda _, c: jnp.where(c == sentinel, sentinel, c), x
    )
