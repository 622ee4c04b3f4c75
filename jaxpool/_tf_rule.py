"""TensorFlow's choice of a window's maximum, on the kernels' PyTorch rule.

TensorFlow's CPU kernel (``MaxPoolWithArgmax``) scans a window's in-bounds
elements in row-major order from the first, which it replaces when ``current
< candidate``. IEEE ``<`` is false when either side is NaN, so a NaN never
replaces, and a NaN first element is never replaced:

- if the window's first in-bounds element is NaN, the result is that NaN at
  its index, whatever follows;
- otherwise it is the first maximum (row-major) of the window with NaN ranked
  below ``-inf``: every NaN is skipped.

The second is the kernels' rule (PyTorch's: the first in-bounds element, then
replace when ``value > best`` or ``value`` is NaN) applied to ``x`` with NaN
made ``-inf`` (:func:`nan_to_lowest`): no NaN is left to propagate, ties keep
the first maximum under both (-0.0 and +0.0 tie), and the index it chooses is
never at a NaN of ``x``: when the maximum is above ``-inf`` a NaN (now
``-inf``) is below it, and when it is ``-inf`` the first element, which is not
NaN, is ``-inf`` and is chosen. So its value is ``x``'s own at that index. The
first case is :func:`first_nan`'s: ``x`` read at every window's first
in-bounds element by slicing, and where that is NaN, it and its index replace
the kernel's. ``_core.tf_pool`` composes the two.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ._windows import AxisWindows, PoolSpec, row_major_strides, split, with_spatial


def nan_to_lowest(x: jax.Array) -> jax.Array:
    """``x`` with every NaN made ``-inf``."""
    return jnp.where(jnp.isnan(x), jnp.array(-jnp.inf, x.dtype), x)


def first_positions(w: AxisWindows) -> np.ndarray:
    """Each window's first in-bounds position along its axis, ``(out,)``;
    for a window with none (dilation) the axis's last position (the window is
    left as the kernel gave it: see :func:`first_nan`)."""
    if w.starts:
        return np.asarray(w.starts)
    start = np.arange(w.out) * w.stride + w.offset
    return np.minimum(start + w.first_tap() * w.dilation, w.size - 1)


def take(arr: jax.Array, positions: np.ndarray, axis: int) -> jax.Array:
    """``jnp.take(arr, positions, axis)`` for static ``positions``: a run of
    the first position, then a strided slice where the rest step evenly, as
    every regular window's do (no gather); a gather otherwise (adaptive
    windows of two sizes)."""
    differ = positions != positions[0]
    run = int(np.argmax(differ)) if differ.any() else len(positions)
    head = int(positions[0])
    parts = [jnp.repeat(lax.slice_in_dim(arr, head, head + 1, 1, axis), run, axis)]
    rest = positions[run:]
    if len(rest):
        step = int(rest[1] - rest[0]) if len(rest) > 1 else 1
        if step > 0 and np.array_equal(rest, rest[0] + step * np.arange(len(rest))):
            stop = int(rest[-1]) + 1
            parts.append(lax.slice_in_dim(arr, int(rest[0]), stop, step, axis))
        else:
            parts.append(jnp.take(arr, rest, axis=axis))
    return parts[0] if len(parts) == 1 else jnp.concatenate(parts, axis)


def first_taps(x: jax.Array, spec: PoolSpec) -> tuple[jax.Array, jax.Array]:
    """``x`` at each window's first in-bounds element, shaped like the
    outputs, and that element's in-plane index, shaped to broadcast against
    them (ones for the batch and channel axes)."""
    first, _ = split(x.ndim, spec.nd, spec.trail)
    plane = functools.reduce(
        jnp.add,
        (
            lax.broadcasted_iota(jnp.int32, spec.in_size, a) * stride
            for a, stride in enumerate(row_major_strides(spec.in_size))
        ),
    )
    for a, w in enumerate(spec.axes):
        positions = first_positions(w)
        x = take(x, positions, first + a)
        plane = take(plane, positions, a)
    ones = (1,) * x.ndim
    return x, plane.reshape(with_spatial(ones, spec.nd, spec.trail, spec.out_size))


def _empty_windows(spec: PoolSpec, ndim: int) -> jax.Array | None:
    """Which outputs have no in-bounds tap (possible with dilation), shaped
    to broadcast against them; ``None`` when none has."""
    if not any(w.empty().any() for w in spec.axes):
        return None
    ones = (1,) * spec.nd
    empty = np.zeros(ones, bool)
    for a, w in enumerate(spec.axes):
        column = w.empty().reshape((*ones[:a], w.out, *ones[a + 1 :]))
        empty = empty | column
    return jnp.asarray(empty).reshape(
        with_spatial((1,) * ndim, spec.nd, spec.trail, spec.out_size)
    )


def first_nan(
    x: jax.Array, spec: PoolSpec, values: jax.Array, indices: jax.Array
) -> tuple[jax.Array, jax.Array]:
    """The kernels' ``(values, indices)`` of :func:`nan_to_lowest`'s ``x``,
    with each window whose first in-bounds element is NaN given that NaN
    (its bits, from ``x``) and its in-plane index."""
    taps, where = first_taps(x, spec)
    nan = jnp.isnan(taps)
    empty = _empty_windows(spec, x.ndim)
    if empty is not None:
        nan = nan & ~empty
    return jnp.where(nan, taps, values), jnp.where(nan, where, indices)
