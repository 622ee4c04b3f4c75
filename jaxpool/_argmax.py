"""The forward kernel: a fused running max/argmax over window taps, and the VJP.

Both ops (strided and adaptive pools, any number of spatial axes) are a
:func:`window_argmax` over per-axis :class:`~jaxpool._spec.AxisWindows`, wrapped
in a ``jax.custom_vjp`` by :func:`argmax_pool` whose backward rule is the op's
public backward function.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ._spec import Algorithm, AxisWindows, flat_offsets, leading_sharding


def _tap(x: jax.Array, axis: int, windows: AxisWindows, tap: int) -> jax.Array:
    """The ``(..., out, ...)`` values that tap ``tap`` reads along ``axis``."""
    if windows.starts:
        return jnp.take(x, windows.positions(tap), axis=axis)
    start = tap * windows.dilation
    limit = start + (windows.out - 1) * windows.stride + 1
    return lax.slice_in_dim(x, start, limit, windows.stride, axis)


def window_argmax(
    x: jax.Array, axes: tuple[AxisWindows, ...]
) -> tuple[jax.Array, jax.Array]:
    """Max and flat argmax of every window over the trailing ``len(axes)`` axes.

    Scans the taps in row-major order from (``-inf``, the window's first
    in-bounds tap), replacing the best when ``value > best`` or ``value`` is NaN:
    the first maximum wins ties, the last NaN wins, padding is never chosen.

    Args:
      x: ``(*B, *S)`` input, ``S`` matching ``axes``' sizes.
      axes: windows of each spatial axis.

    Returns:
      ``(values, indices)``, each ``(*B, *O)``; values in ``x.dtype``, indices
      int32 offsets into the unpadded ``S`` plane.
    """
    lead = x.ndim - len(axes)
    in_size = tuple(w.size for w in axes)
    out_shape = x.shape[:lead] + tuple(w.out for w in axes)
    sharding = leading_sharding(x, lead)
    pads = [(0, 0, 0)] * lead + [(*w.pad, 0) for w in axes]
    neg_inf = jnp.array(-jnp.inf, x.dtype)
    xp = lax.pad(x, neg_inf, pads) if any(any(p) for p in pads) else x

    def offsets(positions: list[np.ndarray]) -> jax.Array:
        flat = flat_offsets(positions, in_size)
        return jnp.broadcast_to(flat, out_shape, out_sharding=sharding)

    best = jnp.full(out_shape, -jnp.inf, x.dtype, out_sharding=sharding)
    index = offsets([w.first() for w in axes])
    for taps in itertools.product(*(range(w.taps) for w in axes)):
        value = xp
        for a, (w, j) in enumerate(zip(axes, taps, strict=True)):
            value = _tap(value, lead + a, w, j)
        take = (value > best) | jnp.isnan(value)
        best = jnp.where(take, value, best)
        tap_index = offsets([w.positions(j) for w, j in zip(axes, taps, strict=True)])
        index = jnp.where(take, tap_index, index)
    return best, index


Backward = Callable[
    [jax.Array, jax.ShapeDtypeStruct, jax.Array, Any, Algorithm], jax.Array
]


def argmax_pool(backward: Backward) -> Callable[[jax.Array, Any, Algorithm], Any]:
    """A ``custom_vjp`` pool ``(x, spec, algorithm) -> (values, indices)``.

    Its residuals are the indices alone; its backward rule is ``backward(
    grad_output, x_struct, indices, spec, algorithm)``, the op's public backward
    function, given a ``jax.ShapeDtypeStruct`` for ``x``. The cotangent of the
    integer indices (``float0`` or an integer array) is ignored.
    """

    @partial(jax.custom_vjp, nondiff_argnums=(1, 2))
    def pool(x: jax.Array, spec: Any, algorithm: Algorithm) -> tuple[Any, Any]:
        del algorithm  # the backward's choice
        return window_argmax(x, spec.axes)

    def pool_fwd(x: jax.Array, spec: Any, algorithm: Algorithm) -> tuple[Any, Any]:
        out, indices = window_argmax(x, spec.axes)
        return (out, indices), indices

    def pool_bwd(
        spec: Any, algorithm: Algorithm, indices: jax.Array, cts: Any
    ) -> tuple[jax.Array]:
        grad_output = cts[0]
        lead = indices.shape[: indices.ndim - len(spec.in_size)]
        x = jax.ShapeDtypeStruct(lead + spec.in_size, grad_output.dtype)
        return (backward(grad_output, x, indices, spec, algorithm),)

    pool.defvjp(pool_fwd, pool_bwd)
    return pool
