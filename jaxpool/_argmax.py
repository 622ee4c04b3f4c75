"""The forward kernel: a fused running max/argmax over window taps, and the VJP.

Both ops (strided and adaptive pools, any number of spatial axes) are a
:func:`window_argmax` over per-axis :class:`~jaxpool._spec.AxisWindows`, wrapped
in a ``jax.custom_vjp`` by :func:`argmax_pool` whose backward rule is the op's
public backward function.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ._fusion import materialize
from ._scatter import gather_at
from ._windows import Algorithm, AxisWindows, plane_sharding, split, with_spatial


def _tap(
    x: jax.Array, axis: int, windows: AxisWindows, tap: int, phased: bool = False
) -> jax.Array:
    """The ``(..., out, ...)`` values that tap ``tap`` reads along ``axis`` of
    ``x``, already padded by ``windows.pad`` along it (and split into phases
    there when ``phased``: see :func:`_split_phases`)."""
    if windows.starts:
        return jnp.take(x, windows.positions(tap), axis=axis)
    start = tap * windows.dilation
    if phased:
        x = lax.index_in_dim(x, start % windows.stride, axis, keepdims=False)
        first = start // windows.stride
        return lax.slice_in_dim(x, first, first + windows.out, axis=axis)
    limit = start + (windows.out - 1) * windows.stride + 1
    return lax.slice_in_dim(x, start, limit, windows.stride, axis)


def _phased(axes: tuple[AxisWindows, ...], trail: int) -> bool:
    """Whether to split the minor axis into phases (:func:`_split_phases`):
    one fused pass (see :func:`_stages`) over overlapping strided windows
    along a contiguous last spatial axis.

    LLVM vectorises a strided read of the minor axis only for two disjoint taps
    (kernel 2, stride 2); with kernel 3, stride 2 the 27-tap scan ran scalar, at
    1 ns a tap against 0.14, taking 6.5 ms on 2x32x32^3; split, 1.5 ms with the
    copy. The copy does not pay for disjoint windows (0.3 ms against 1.0 with
    it), nor for the axis-at-a-time passes, which read each element about once
    (an adaptive 50 -> 7 head: 1.13 ms against 1.29). All measured.
    """
    w = axes[-1]
    overlapping = not w.starts and w.stride > 1 and not w.disjoint
    return not trail and overlapping and len(_stages(axes)) == 1


def _split_phases(
    x: jax.Array, pads: list[tuple[int, int, int]], stride: int
) -> jax.Array:
    """``x`` padded by ``pads`` with ``-inf``, its last axis ``(L,)`` (padded
    further to a multiple of ``stride``) as ``(stride, ceil(L / stride))``,
    phase first: a strided tap becomes a contiguous slice of one phase.

    Each phase is a strided slice of ``x`` padded on its own, so XLA builds the
    whole array in one pass (padding first, then splitting, took two); it is
    materialised, so the scan reads it rather than recomputing it per tap.
    """
    lo, hi, _ = pads[-1]
    size = x.shape[-1]
    length = -(-(lo + size + hi) // stride)
    phases = []
    for r in range(stride):
        first = max(0, -(-(lo - r) // stride))  # first m with r + m*s - lo >= 0
        start = r + first * stride - lo
        count = max(0, -(-(size - start) // stride)) if start < size else 0
        part = lax.slice_in_dim(
            x, min(start, size), min(start + count * stride, size), stride, -1
        )
        high = length - first - count
        phases.append(
            lax.pad(part, jnp.array(-jnp.inf, x.dtype), [*pads[:-1], (first, high, 0)])
        )
    return materialize(jnp.stack(phases, axis=-2), x)


def _per_window(column: np.ndarray, axis: int, ndim: int, size: int) -> jax.Array:
    """A per-window constant ``column`` of length ``size``, shaped to broadcast
    along ``axis`` of an ``ndim``-array."""
    keep = [1] * ndim
    keep[axis] = size
    return jnp.asarray(column.reshape(keep))


def _after(v: jax.Array, i: jax.Array, b: jax.Array, j: jax.Array) -> jax.Array:
    """Whether candidate ``(v, i)`` (value, flat position) beats ``(b, j)`` in
    the selection's total order: NaN above every number and the later of two
    NaNs, the earlier of two equal numbers (what the row-major scan picks)."""
    v_nan, b_nan = jnp.isnan(v), jnp.isnan(b)
    numbers = ~b_nan & ((v > b) | ((v == b) & (i < j)))
    return jnp.where(v_nan, ~b_nan | (i > j), numbers)


def _stages(axes: tuple[AxisWindows, ...]) -> list[tuple[int, ...]]:
    """Which spatial axes each pass reduces, in order.

    One fused pass over every tap keeps temporaries near zero (measured) but
    costs a select per tap and output, ``k**d`` of them, and XLA compiles the
    unrolled chain slowly. Past 27 taps (a 3x3x3 cube), reduce one axis at a
    time instead (D, then H, then W, carrying the index): ``d * k`` taps and a
    fast compile, for intermediates up to half the input (a 7x7 adaptive head
    on 56x56 keeps an eighth of it). The outer axes go first: their taps are
    contiguous rows, which vectorise, and the minor axis, whose strided taps do
    not, is read last from the smallest array (adaptive 56 -> 7 heads: 0.6 ms
    against 1.3 for W first, measured).
    """
    if math.prod(w.taps for w in axes) <= 27:
        return [tuple(range(len(axes)))]
    return [(a,) for a in range(len(axes))]


def window_argmax(
    x: jax.Array, axes: tuple[AxisWindows, ...], trail: int = 0
) -> tuple[jax.Array, jax.Array]:
    """Max and flat argmax of every window over the spatial axes of ``x``.

    Each window is scanned in row-major tap order from (``-inf``, its first
    in-bounds tap), replacing the best when ``value > best`` or ``value`` is
    NaN: the first maximum wins ties, the last NaN wins, the ``-inf`` padding is
    never chosen. This selection is a maximum under a total order on (value,
    position) (see :func:`_after`), so it may run in passes, some axes at a
    time, each carrying the flat index of its choice (see :func:`_stages`); a
    later pass, whose candidates are not in row-major order, compares their
    positions.

    Args:
      x: ``(*B, *S, *T)`` input, ``S`` matching ``axes``' sizes, ``T`` the
        ``trail`` trailing axes (channels-last).
      axes: windows of each spatial axis.
      trail: number of trailing non-spatial axes, 0 or 1.

    Returns:
      ``(values, indices)``, each ``(*B, *O, *T)``; values in ``x.dtype``,
      indices int32 offsets into the unpadded ``S`` plane.
    """
    if not _phased(axes, trail):
        return _scan(x, axes, trail, phased=False)
    # The phases fix LLVM's vectorisation on CPU; accelerators keep the scan
    # measured on the H200.
    return lax.platform_dependent(
        x,
        cpu=functools.partial(_scan, axes=axes, trail=trail, phased=True),
        default=functools.partial(_scan, axes=axes, trail=trail, phased=False),
    )


def _scan(
    x: jax.Array, axes: tuple[AxisWindows, ...], trail: int, phased: bool
) -> tuple[jax.Array, jax.Array]:
    """:func:`window_argmax`, reading the minor axis split into phases
    (:func:`_split_phases`) when ``phased``."""
    nd = len(axes)
    lead, _ = split(x.ndim, nd, trail)
    in_size = tuple(w.size for w in axes)
    strides = [math.prod(in_size[a + 1 :]) for a in range(nd)]
    sharding = plane_sharding(x, nd, trail, nd)
    # -inf padding, never chosen. (Padding each tap's slice instead avoids this
    # copy, but XLA then materialises every padded tap: a k**d patch tensor, 2x
    # faster at stride 2, 10x slower at stride 1. Measured, not kept.)
    pads = [(0, 0, 0)] * lead + [(*w.pad, 0) for w in axes] + [(0, 0, 0)] * trail
    neg_inf = jnp.array(-jnp.inf, x.dtype)
    padded = tuple(n + lo + hi for n, (lo, hi, _) in zip(x.shape, pads, strict=True))
    if phased:
        best = _split_phases(x, pads, axes[-1].stride)
    else:
        best = lax.pad(x, neg_inf, pads) if any(any(p) for p in pads) else x
    index = None  # partial flat offsets of the axes reduced so far

    for group in _stages(axes):
        shape = list(padded)
        for a in group:
            shape[lead + a] = axes[a].out
        padded = tuple(shape)

        def along(a: int, column: np.ndarray, shape: list[int] = shape) -> jax.Array:
            """A per-window constant of axis ``a``, broadcast to the pass's shape."""
            const = _per_window(column, lead + a, len(shape), shape[lead + a])
            return jnp.broadcast_to(const, tuple(shape), out_sharding=sharding)

        values = jnp.full(shape, -jnp.inf, x.dtype, out_sharding=sharding)
        chosen = jnp.zeros(shape, jnp.int32, out_sharding=sharding)
        firsts = {a: axes[a].first_tap() for a in group}
        for taps in itertools.product(*(range(axes[a].taps) for a in group)):
            value, tap_index = best, index
            for a, j in zip(group, taps, strict=True):
                value = _tap(value, lead + a, axes[a], j, phased and a == nd - 1)
                if tap_index is not None:
                    tap_index = _tap(tap_index, lead + a, axes[a], j)
            offset = sum(
                along(a, (axes[a].positions(j) * strides[a]).astype(np.int32))
                for a, j in zip(group, taps, strict=True)
            )
            if tap_index is None:  # taps in row-major order: the scan's rule
                tap_index = offset
                take = (value > values) | jnp.isnan(value)
            else:  # a later pass: compare positions. (Padding ties a window
                # of only -inf, whose candidates all share the earlier axes'
                # first in-bounds taps: low padding precedes the forced first
                # tap along this axis, high padding comes after every real one.)
                tap_index = tap_index + offset
                take = _after(value, tap_index, values, chosen)
            # The window's first in-bounds tap is taken whatever it holds: all
            # taps before it are padding, so this starts the scan from it.
            force = [firsts[a] == j for a, j in zip(group, taps, strict=True)]
            if all(f.any() for f in force):
                masks = [along(a, f) for a, f in zip(group, force, strict=True)]
                take = take | functools.reduce(jnp.logical_and, masks)
            values = jnp.where(take, value, values)
            chosen = jnp.where(take, tap_index, chosen)
        # Computed once each: XLA would fuse a pass into every read of the
        # next (k of them), and the indices into the backward's loops.
        best, index, phased = materialize(values, x), materialize(chosen, x), False
    assert index is not None
    values = gather_at(x, index, nd, trail, -jnp.inf)
    # A window with no in-bounds tap keeps -inf, whatever element its index
    # (the first non-negative tap, out of bounds along some axis) lands on.
    empty = [w.empty() for w in axes]
    if any(e.any() for e in empty):
        masks = [
            _per_window(e, lead + a, values.ndim, axes[a].out)
            for a, e in enumerate(empty)
        ]
        values = jnp.where(functools.reduce(jnp.logical_or, masks), neg_inf, values)
    return values, index


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

    @functools.partial(jax.custom_vjp, nondiff_argnums=(1, 2))
    def pool(x: jax.Array, spec: Any, algorithm: Algorithm) -> tuple[Any, Any]:
        del algorithm  # the backward's choice
        return window_argmax(x, spec.axes, int(spec.channels_last))

    def pool_fwd(x: jax.Array, spec: Any, algorithm: Algorithm) -> tuple[Any, Any]:
        out, indices = window_argmax(x, spec.axes, int(spec.channels_last))
        return (out, indices), indices

    def pool_bwd(
        spec: Any, algorithm: Algorithm, indices: jax.Array, cts: Any
    ) -> tuple[jax.Array]:
        grad_output = cts[0]
        nd, trail = len(spec.in_size), int(spec.channels_last)
        shape = with_spatial(indices.shape, nd, trail, spec.in_size)
        x = jax.ShapeDtypeStruct(shape, grad_output.dtype)
        return (backward(grad_output, x, indices, spec, algorithm),)

    pool.defvjp(pool_fwd, pool_bwd)
    # Jitted so that an eager call compiles one program per configuration
    # rather than dispatching (and compiling) each of the scan's ops.
    return jax.jit(pool, static_argnums=(1, 2))
