"""A fusion boundary that XLA:CPU keeps: :func:`materialize`.

XLA fuses a cheap producer into every consumer that reads it and, on CPU,
recomputes the producer once per read. The forward's 27-tap scan fused into an
8-slot gather backward ran 8 times per input element (a train step 30x slower
than the forward plus the backward, measured), and fused behind the scatter's
flattening of its indices it ran without vectorisation (10x slower).
``lax.optimization_barrier`` does not help: XLA:CPU removes it before fusion.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

from ._windows import under_mesh


def _loop(x: jax.Array, source: jax.Array) -> jax.Array:
    """``x`` through a ``while`` loop that XLA cannot see through.

    The trip count depends on the data (1 if the first element of ``source``
    equals an arbitrary sentinel, else 0), and the body maps the sentinel to
    itself: the result is ``x`` for any input and trip count, while XLA must
    compute ``x`` into a buffer before the loop.
    """
    flag = lax.index_in_dim(source.reshape(-1), 0, keepdims=False)
    trips = (flag == jnp.array(3, source.dtype)).astype(jnp.int32)
    sentinel = jnp.array(3, x.dtype)
    return lax.fori_loop(
        0, trips, lambda _, c: jnp.where(c == sentinel, sentinel, c), x
    )


def materialize(x: jax.Array, source: jax.Array | None = None) -> jax.Array:
    """``x``, computed once into its own buffer on CPU; unchanged elsewhere.

    Args:
      x: any array.
      source: a non-empty array whose first element the loop's trip count
        reads; by default ``x``. Pass an input that is already in memory:
        XLA rewrites a read of ``x``'s first element into a read of its
        producer, which then has two users and is materialised twice.

    Returns:
      ``x`` (the same values); on CPU its producer is no longer fused into
      its consumers. Under a mesh (:func:`~jaxpool._windows.under_mesh`)
      ``x`` itself: reading one element of a sharded array is not local.
    """
    source = x if source is None else source
    if x.size == 0 or source.size == 0 or under_mesh(source):
        return x
    return lax.platform_dependent(x, source, cpu=_loop, default=lambda x, source: x)
