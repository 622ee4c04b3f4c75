"""Per-window constants and flat offsets as arrays: what the kernels build
from a spec's windows.

The window maths (``_windows``) gives numpy columns, one value per window or
position along an axis; here they become arrays that broadcast against a
kernel's operands (:func:`per_window`, computed from an iota where the column
is long and regular, so that a program's size does not grow with a long
axis), masks of the windows with no in-bounds tap (:func:`empty_windows`,
:func:`fill_empty`), and the conversions between flat in-plane offsets and
row-major coordinates (:func:`flat_offsets`, :func:`coordinates`).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ._windows import AxisWindows, row_major_strides


def coordinates(flat: jax.Array, sizes: Sequence[int]) -> list[jax.Array]:
    """Row-major coordinates of non-negative int32 flat offsets into ``sizes``
    (truncating division: the floor there, and plain in Triton too)."""
    return [
        lax.rem(lax.div(flat, jnp.int32(s)), jnp.int32(n))
        for s, n in zip(row_major_strides(sizes), sizes, strict=True)
    ]


@functools.cache
def _reciprocal(divisor: int, bound: int) -> tuple[int, int] | None:
    """``(magic, shift)`` with ``x * magic >> shift == x // divisor`` for every
    ``0 <= x < bound`` and no int32 overflow, checked exhaustively; ``None``
    where there is none."""
    shift = max(1, (bound * divisor).bit_length())
    magic = -(-(1 << shift) // divisor)
    x = np.arange(bound, dtype=np.int64)
    if bound * magic >= 2**31 or not np.array_equal(x * magic >> shift, x // divisor):
        return None
    return magic, shift


def divide(x: jax.Array, divisor: int, bound: int) -> jax.Array:
    """``x // divisor`` for ``0 <= x < bound`` as a multiply and a shift (or a
    shift alone): XLA's TPU compiler is slow over an integer division (the
    performance record, "The forward: where the bytes go", has the compile
    times)."""
    if divisor & (divisor - 1) == 0:
        return x >> (divisor.bit_length() - 1)
    found = _reciprocal(divisor, bound)
    if found is None:
        return x // divisor
    magic, shift = found
    return (x * magic) >> shift


# A per-window column longer than this is computed from an iota where it is
# an arithmetic progression or one run of True, rather than embedded: the
# program's size then does not grow with the axis (the design page, "The
# forward", has the measurements). Shorter ones stay constants, as every
# compiled figure measured them (4 KB at most).
EMBEDDED = 1024


def per_window(column: np.ndarray, axis: int, shape: tuple[int, ...]) -> jax.Array:
    """A per-window constant ``column`` along ``axis``, shaped to broadcast
    against an array of ``shape``: the same values, of the dtype
    ``jnp.asarray`` gives them, computed from an iota where :data:`EMBEDDED`
    says so."""
    column = np.asarray(column)
    keep = [1] * len(shape)
    keep[axis] = column.size
    if column.size <= EMBEDDED:
        return jnp.asarray(column.reshape(keep))
    dtype = jax.dtypes.canonicalize_dtype(column.dtype)
    i = lax.broadcasted_iota(jnp.int32, keep, axis)
    if column.dtype == np.bool_:
        run = np.flatnonzero(column)
        lo, hi = (int(run[0]), int(run[-1]) + 1) if run.size else (0, 0)
        if run.size == hi - lo:
            return (i >= lo) & (i < hi)
    elif np.issubdtype(column.dtype, np.integer):
        start, step = int(column[0]), int(column[1] - column[0])
        if np.array_equal(column, start + step * np.arange(column.size)):
            return (i * step + start).astype(dtype)
    return jnp.asarray(column.reshape(keep))


def empty_windows(
    axes: tuple[AxisWindows, ...], lead: int, shape: tuple[int, ...]
) -> jax.Array | None:
    """Whether each window has no in-bounds tap (possible with dilation), shaped
    to broadcast against an array of ``shape`` whose spatial axes start at
    ``lead``; ``None`` when every window has one."""
    empty = [w.empty() for w in axes]
    if not any(e.any() for e in empty):
        return None
    masks = [per_window(e, lead + a, shape) for a, e in enumerate(empty)]
    return functools.reduce(jnp.logical_or, masks)


def fill_empty(
    arr: jax.Array, axes: tuple[AxisWindows, ...], lead: int, fill: float
) -> jax.Array:
    """``arr``, pooled (its spatial axes start at ``lead``), with ``fill`` for
    every window with no in-bounds tap: ``-inf`` for its value, 0 for its
    tangent, whatever element its index lands on."""
    hollow = empty_windows(axes, lead, arr.shape)
    if hollow is None:
        return arr
    return jnp.where(hollow, jnp.array(fill, arr.dtype), arr)


def flat_offsets(
    positions: Sequence[np.ndarray],
    in_size: tuple[int, ...],
    trail: int = 0,
    lead: int = 0,
) -> jax.Array:
    """int32 flat offsets ``sum(pos[a] * plane_stride[a])``, shape ``(1 *
    lead, *P, 1 * trail)`` where ``P`` are the positions' lengths."""
    n = len(positions)
    strides = row_major_strides(in_size)
    shape = (1,) * (lead + n + trail)
    flat = jnp.zeros(shape, jnp.int32)
    for a, (pos, stride) in enumerate(zip(positions, strides, strict=True)):
        flat = flat + per_window((pos * stride).astype(np.int32), lead + a, shape)
    return flat


def interleave(
    stacked: jax.Array,
    strides: Sequence[int],
    sizes: Sequence[int],
    lead: int,
    sharding: Any = None,
) -> jax.Array:
    """Stride phases stacked phase-major, ``(*strides, *B, *rows, *T)``,
    interleaved along each spatial axis (each phase axis moved beside its
    axis, the two merged: row ``r`` of phase ``q`` becomes position ``r *
    stride + q``) and cut to ``sizes``: ``(*B, *S, *T)``, sharded as
    ``sharding`` says where the arrays carry theirs (Explicit axes)."""
    nd = len(strides)
    order = list(range(nd, nd + lead))
    for a in range(nd):
        order += [nd + lead + a, a]
    order += list(range(2 * nd + lead, stacked.ndim))
    shape = stacked.shape[nd:]
    rows = (shape[lead + a] * s for a, s in enumerate(strides))
    merged = jnp.reshape(
        stacked.transpose(order),
        (*shape[:lead], *rows, *shape[lead + nd :]),
        out_sharding=sharding,
    )
    for a, size in enumerate(sizes):
        merged = lax.slice_in_dim(merged, 0, size, axis=lead + a)
    return merged
