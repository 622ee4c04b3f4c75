"""Pallas GPU kernels (the Triton backend): a one-pass forward and a
deterministic backward, for every pool the spec describes.

Every array is viewed as ``(B, P, T)``: ``B`` planes (the leading axes), ``P``
positions of the spatial plane, ``T`` trailing channels (1 when
channels-first). A program owns a tile of ``BQ`` positions by ``BT`` channels,
both powers of two (Triton's rule for every array in a kernel), and masks
what lies past the edges. Window bounds come from integer arithmetic on each
position's coordinates: strided windows from ``o * stride + offset``, adaptive
ones from ``floor(o * L / O)`` and ``ceil((o + 1) * L / O)``.

- :func:`forward`: each program reads the taps of its outputs' windows (the
  tile with its halo, once from memory, the overlaps from cache) in row-major
  order and keeps the best value and its index, the scan's rule exactly
  (``_scan``); values and int32 indices are written once.
- :func:`covering_sum`: each program, for each of its input positions, adds
  the gradients of the windows that cover the position and chose it, in a
  fixed order (windows in increasing order along each axis, the first axis
  outermost): deterministic by construction, no atomics, 16-bit gradients
  accumulated in float32. The sum is the covering part of the ``"gather"``
  backward (``_backward``), in the same order, so the two give the same bits.

With ``interpret=True`` the same kernels run on CPU through Pallas's
interpreter (slow; for tests).
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
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as plgpu

from . import _backward
from ._columns import coordinates, fill_empty
from ._planes import accumulation_dtype, gather_at, in_plane, positive_zeros
from ._windows import (
    INT32_MAX,
    AxisWindows,
    PoolSpec,
    row_major_strides,
    split,
    with_spatial,
)

# Tap loops up to this many are unrolled; longer ones are a loop.
UNROLL = 64


def _pow2(n: int) -> int:
    return 1 << max(0, n - 1).bit_length()


def _tiles(count: int, channels: int) -> tuple[int, int]:
    """Power-of-two ``(rows, channels)`` of a program's tile: about a thousand
    elements, contiguous channels first."""
    bt = min(_pow2(channels), 32)
    return min(_pow2(count), max(1, 1024 // bt)), bt


def _planes(arr: Any, nd: int, trail: int) -> tuple[int, int, int]:
    """``(B, P, T)`` of an array of ``nd`` spatial and ``trail`` trailing axes."""
    first, stop = split(len(arr.shape), nd, trail)
    shape = arr.shape
    return (
        math.prod(shape[:first]),
        math.prod(shape[first:stop]),
        math.prod(shape[stop:]),
    )


def _check_sizes(spec: PoolSpec) -> None:
    for w in spec.axes:
        if w.starts and w.size * w.out > INT32_MAX:
            raise ValueError(
                "implementation='pallas': an adaptive axis of size * output_size "
                f">= 2**31 ({w.size} -> {w.out}) overflows the kernel's int32 window "
                "arithmetic; use implementation='xla'"
            )


def _div(a: jax.Array, b: int) -> jax.Array:
    """``a // b`` for non-negative ``a`` (truncation is the floor there)."""
    return lax.div(a, jnp.int32(b))


def _program(count: int, channels: int, rows: int, cols: int) -> tuple[Any, ...]:
    """This program's plane, its ``rows`` positions and ``cols`` channels (with
    their masks), from a one-dimensional grid over planes x row tiles x
    channel tiles."""
    tiles, col_tiles = pl.cdiv(count, rows), pl.cdiv(channels, cols)
    pid = pl.program_id(0)
    b = _div(pid, tiles * col_tiles)
    rest = lax.rem(pid, jnp.int32(tiles * col_tiles))
    q = _div(rest, col_tiles) * rows + jnp.arange(rows, dtype=jnp.int32)
    t = lax.rem(rest, jnp.int32(col_tiles)) * cols + jnp.arange(cols, dtype=jnp.int32)
    return b, q, q < count, t, t < channels


def _scan(sizes: tuple[int, ...], body: Any, carry: Any) -> Any:
    """``body(numbers, carry)`` over every combination of numbers below
    ``sizes``, in row-major order: unrolled up to :data:`UNROLL` combinations,
    else a loop that computes them."""
    if math.prod(sizes) <= UNROLL:
        for numbers in itertools.product(*(range(n) for n in sizes)):
            carry = body(numbers, carry)
        return carry

    def step(k: jax.Array, carry: Any) -> Any:
        return body(coordinates(k, sizes), carry)

    count = math.prod(sizes)  # int32 bounds: an int32 counter under x64 too
    return lax.fori_loop(jnp.int32(0), jnp.int32(count), step, carry)


# ---------------------------------------------------------------- forward


def _forward_kernel(x_ref, v_ref, i_ref, *, spec, Q, T, BQ, BT) -> None:
    axes = spec.axes
    b, q, q_ok, t, t_ok = _program(Q, T, BQ, BT)
    o = coordinates(jnp.where(q_ok, q, 0), spec.out_size)
    strides = row_major_strides(spec.in_size)
    starts, ends, firsts = [], [], []
    for w, oa in zip(axes, o, strict=True):
        if w.starts:  # adaptive: [floor(o L / O), ceil((o + 1) L / O))
            starts.append(_div(oa * w.size, w.out))
            ends.append(_div((oa + 1) * w.size + w.out - 1, w.out))
            firsts.append(jnp.zeros_like(oa))
        else:  # strided: o * s + offset + j * d, the first in-bounds tap forced
            start = oa * w.stride + w.offset
            starts.append(start)
            ends.append(None)
            behind = jnp.maximum(-start, 0)
            firsts.append(_div(behind + w.dilation - 1, w.dilation))
    lanes = q_ok[:, None] & t_ok[None, :]

    def tap(taps: Any, carry: Any) -> Any:
        best, arg = carry
        inside, flat, force = q_ok, jnp.zeros_like(q), q_ok
        for w, j, start, end, first, stride in zip(
            axes, taps, starts, ends, firsts, strides, strict=True
        ):
            pos = start + j * (1 if w.starts else w.dilation)
            inside = inside & (pos >= 0) & (pos < (end if w.starts else w.size))
            flat = flat + pos * stride
            force = force & (first == j)
        mask = inside[:, None] & t_ok[None, :]
        where = jnp.where(inside, flat, 0)[:, None]
        value = plgpu.load(
            x_ref.at[b, where, jnp.where(t_ok, t, 0)[None, :]],
            mask=mask,
            other=-jnp.inf,
        )
        take = (value > best) | (value != value) | force[:, None]
        return jnp.where(take, value, best), jnp.where(take, flat[:, None], arg)

    init = (
        jnp.full((BQ, BT), -jnp.inf, x_ref.dtype),
        jnp.zeros((BQ, BT), jnp.int32),
    )
    best, arg = _scan(tuple(w.taps for w in axes), tap, init)
    # Lanes past the edges write out of bounds: dropped (never aliased).
    at = (b, q[:, None], t[None, :])
    plgpu.store(v_ref.at[at], best, mask=lanes)
    plgpu.store(i_ref.at[at], arg, mask=lanes)


def _forward(x: jax.Array, spec: PoolSpec, interpret: bool) -> tuple[Any, Any]:
    _check_sizes(spec)
    B, P, T = _planes(x, spec.nd, spec.trail)
    Q = math.prod(spec.out_size)
    out_shape = with_spatial(x.shape, spec.nd, spec.trail, spec.out_size)
    if B * T == 0:  # no plane: nothing to launch
        return jnp.zeros(out_shape, x.dtype), jnp.zeros(out_shape, jnp.int32)
    BQ, BT = _tiles(Q, T)
    kernel = functools.partial(_forward_kernel, spec=spec, Q=Q, T=T, BQ=BQ, BT=BT)
    values, indices = pl.pallas_call(
        kernel,
        out_shape=[
            jax.ShapeDtypeStruct((B, Q, T), x.dtype),
            jax.ShapeDtypeStruct((B, Q, T), jnp.int32),
        ],
        grid=(B * pl.cdiv(Q, BQ) * pl.cdiv(T, BT),),
        compiler_params=plgpu.CompilerParams(num_warps=4, num_stages=1),
        interpret=interpret,
        name="jaxpool_forward",
    )(x.reshape(B, P, T))
    return values.reshape(out_shape), indices.reshape(out_shape)


@functools.partial(jax.custom_jvp, nondiff_argnums=(1, 2))
def forward(
    x: jax.Array, spec: PoolSpec, interpret: bool
) -> tuple[jax.Array, jax.Array]:
    """``(values, indices)`` of the pool ``spec`` over ``x``: one kernel.

    Differentiable in forward mode too (the ``custom_vjp`` around it is
    differentiated again for grad of grad): the values' tangent is the input's
    tangent at each index, zero for a window with no in-bounds tap.
    """
    return _forward(x, spec, interpret)


@forward.defjvp
def _forward_jvp(spec: PoolSpec, interpret: bool, primals: Any, tangents: Any) -> Any:
    (x,), (x_dot,) = primals, tangents
    values, indices = _forward(x, spec, interpret)
    values_dot = gather_at(x_dot, indices, spec.nd, spec.trail, 0.0)
    lead, _ = split(values.ndim, spec.nd, spec.trail)
    values_dot = fill_empty(values_dot, spec.axes, lead, 0.0)
    indices_dot = np.zeros(indices.shape, jax.dtypes.float0)
    return (values, indices), (values_dot, indices_dot)


# --------------------------------------------------------------- backward


def _covering(w: AxisWindows, c: jax.Array) -> tuple[jax.Array, jax.Array, int]:
    """The first and last window whose span holds coordinate ``c`` (clipped to
    the outputs), and the most windows any coordinate lies in."""
    slots = len(w.covering())
    if w.starts:  # o covers c iff floor(o L / O) <= c < ceil((o + 1) L / O)
        low = _div(c * w.out, w.size)
        high = _div((c + 1) * w.out + w.size - 1, w.size) - 1
    else:  # o covers c iff o s + offset <= c < o s + offset + span
        span = w.extent
        lift = -(-(span - w.offset) // w.stride) + 1  # keeps numerators >= 0
        low = _div(c - w.offset - span + lift * w.stride, w.stride) - lift + 1
        high = _div(c - w.offset, w.stride)
    return jnp.maximum(low, 0), jnp.minimum(high, w.out - 1), slots


def _backward_kernel(g_ref, i_ref, o_ref, *, spec, P, T, BP, BT) -> None:
    b, p, p_ok, t, t_ok = _program(P, T, BP, BT)
    c = coordinates(jnp.where(p_ok, p, 0), spec.in_size)
    bounds = [_covering(w, ca) for w, ca in zip(spec.axes, c, strict=True)]
    out_strides = row_major_strides(spec.out_size)
    t_at = jnp.where(t_ok, t, 0)[None, :]
    zero = jnp.zeros((), o_ref.dtype)

    def window(slots: Any, total: jax.Array) -> jax.Array:
        valid, q = p_ok, jnp.zeros_like(p)
        for (low, high, _), m, stride in zip(bounds, slots, out_strides, strict=True):
            valid = valid & (low + m <= high)
            q = q + (low + m) * stride
        mask = valid[:, None] & t_ok[None, :]
        at = (b, jnp.where(valid, q, 0)[:, None], t_at)
        index = plgpu.load(i_ref.at[at], mask=mask, other=-1)
        grad = plgpu.load(g_ref.at[at], mask=mask, other=0).astype(o_ref.dtype)
        # The sum's terms (_planes.positive_zeros; its function alone: the
        # kernel is not differentiated, covering_sum has its own JVP).
        grad = positive_zeros.fun(grad)
        return total + jnp.where(index == p[:, None], grad, zero)

    sizes = tuple(n for _, _, n in bounds)
    total = _scan(sizes, window, jnp.zeros((BP, BT), o_ref.dtype))
    lanes = p_ok[:, None] & t_ok[None, :]
    plgpu.store(o_ref.at[b, p[:, None], t[None, :]], total, mask=lanes)


@functools.partial(jax.custom_jvp, nondiff_argnums=(2, 3, 4))
def covering_sum(
    grad_output: jax.Array,
    indices: jax.Array,
    x: jax.ShapeDtypeStruct,
    spec: PoolSpec,
    interpret: bool,
) -> jax.Array:
    """For each input element, the gradients of the windows that cover it and
    chose it, added in a fixed order, in the accumulation dtype (unrounded):
    ``_backward.covering_sum``, in one kernel.

    Linear in ``grad_output``. A Pallas call has neither a JVP nor a
    transpose, so the tangent is ``_backward.covering_sum`` of the input's
    tangent (the same sum in XLA, the same bits but for the sign of a
    zero, which the spec gives no derivative): plain JAX, which JAX
    transposes for reverse mode (the cotangent read at each index that
    counts) and differentiates again in forward mode. That is what lets the
    pool's backward rule, which calls this, be differentiated by ``jvp``:
    ``jax.hessian`` (forward over reverse) and Hessian-vector products.
    """
    _check_sizes(spec)
    acc = accumulation_dtype(x.dtype)
    B, Q, T = _planes(grad_output, spec.nd, spec.trail)
    P = math.prod(spec.in_size)
    if B * T == 0:  # no plane: nothing to launch
        return jnp.zeros(x.shape, acc)
    BP, BT = _tiles(P, T)
    kernel = functools.partial(_backward_kernel, spec=spec, P=P, T=T, BP=BP, BT=BT)
    total = pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((B, P, T), acc),
        grid=(B * pl.cdiv(P, BP) * pl.cdiv(T, BT),),
        compiler_params=plgpu.CompilerParams(num_warps=4, num_stages=1),
        interpret=interpret,
        name="jaxpool_backward",
    )(
        grad_output.reshape(B, Q, T),
        # -1 (no position) outside the plane, compared before int32 narrowing.
        jnp.where(in_plane(indices, P), indices, -1).astype(jnp.int32).reshape(B, Q, T),
    )
    return total.reshape(x.shape)


@covering_sum.defjvp
def _covering_sum_jvp(
    x: jax.ShapeDtypeStruct,
    spec: PoolSpec,
    interpret: bool,
    primals: tuple[jax.Array, jax.Array],
    tangents: tuple[jax.Array, Any],
) -> tuple[jax.Array, jax.Array]:
    (grad_output, indices), (grad_output_dot, _) = primals, tangents
    total = covering_sum(grad_output, indices, x, spec, interpret)
    tangent = _backward.covering_sum(grad_output_dot, indices, x, spec, tangent=True)
    return total, tangent


def gather_sum(
    grad_output: jax.Array,
    indices: jax.Array,
    spec: PoolSpec,
    x: jax.ShapeDtypeStruct,
    interpret: bool,
) -> jax.Array:
    """The ``"gather"`` backward with Pallas's covering sum, then the windows
    with no in-bounds tap (``_backward.add_aliased``), rounded once."""
    total: jax.Array = covering_sum(grad_output, indices, x, spec, interpret)
    return _backward.add_aliased(total, grad_output, indices, spec).astype(x.dtype)


def form(kernel: Callable[..., Any], *static: Any) -> Callable[[bool], Any]:
    """``kernel``'s form per platform, for ``_platform.by_platform``:
    interpreted (``True``) on CPU, compiled for the GPU elsewhere."""

    def emit(interpret: bool) -> Callable[..., Any]:
        return lambda *arrays: kernel(*arrays, *static, interpret=interpret)

    return emit
