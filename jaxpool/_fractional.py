"""The fractional max pooling kernels (Graham, 2015): PyTorch's windows, the
forward's two forms and the deterministic backward.

The windows depend on the samples, which are arrays: :func:`window_starts`
computes them under ``jit``, in PyTorch's arithmetic, and :func:`axis_starts`
shapes them like the pooled array. Arrays are ``(*B, *S, *T)``, as every
kernel's (``T``: the channels of a channels-last array); the samples are one
``(N, C, nd)`` row per ``(n, c)`` plane. The forward's forms, which
``_platform`` picks per platform:

- :func:`gather_taps`: one axis at a time from the last, a running
  max/argmax over the axis's taps: along the last axis over every window,
  whose starts are then picked, along the others each tap whole rows picked
  by a gather;
- :func:`pick_windows`: the windows of the stride-1 pool of the same kernel
  (``FractionalSpec.every_window``, jaxpool's own pool forward) picked at the
  starts, one axis at a time, whole rows at once: by a gather
  (:func:`take_rows`) or, on a TPU, which has no vector gather, by one-hot
  int8 matmuls of the elements' bytes (:func:`matmul_rows`, exact to the
  bit; :data:`TPU_TAKES` says along which axes). That pool chooses as
  PyTorch's fractional kernel does: the first maximum in row-major order,
  the last NaN, a window of ``-inf`` at its first element.

The backward is the scatter-add to the indices (``_platform``'s scatter) or,
with ``algorithm="gather"``, a deterministic sum without a scatter. It cannot
be the covering-window gather of the fractional windows themselves: in
float16 and bfloat16 PyTorch's window starts may repeat (``int((i + u) *
alpha)`` rounds to the same value for consecutive ``i`` once the sizes pass
2048 or 256), so no static bound limits how many windows cover a position.
Two forms:

- :func:`spread_windows`, in ``jax.grad`` (the indices are the forward's):
  the transpose of :func:`pick_windows`, each window's gradient placed at its
  start on the stride-1 pool's grid (windows that start together summed by a
  segmented scan along the axis), after which the stride-1 pool's covering
  sum, whose windows are regular, is the gradient;
- :func:`gather_sum`, for the public backward ops, whose indices may be any
  in the plane: per plane, the gradients sorted (stably) by their index and
  summed per index with a segmented scan, a fixed order that depends only on
  the shapes.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax

from ._mesh import whole
from ._planes import (
    _flatten,
    accumulation_dtype,
    in_plane,
    per_plane,
    positive_zeros,
)
from ._windows import (
    INT32_MAX,
    FractionalSpec,
    row_major_strides,
    split,
)

# (exponent bits, mantissa bits) of the 16-bit floats: PyTorch's c10::Half and
# c10::BFloat16 compute each operation in float32 and round the result.
_REDUCED = {jnp.dtype(jnp.float16): (5, 10), jnp.dtype(jnp.bfloat16): (8, 7)}

# Which entry of the samples' last axis drives each spatial axis (D, H, W
# order): PyTorch's 2-D kernel reads (W, H), its 3-D kernel (D, H, W).
SAMPLE_AXIS = {2: (1, 0), 3: (0, 1, 2)}


def window_starts(u: jax.Array, size: int, out: int, kernel: int) -> jax.Array:
    """PyTorch's window starts along one axis, int32 ``(*u.shape, out)``.

    Window ``i < out - 1`` starts at ``int((i + u) * alpha) - int(u * alpha)``
    with ``alpha = (size - kernel) / (out - 1)``, the last at ``size - kernel``,
    computed as ``at::native::generate_intervals<scalar_t>`` does: every
    operation (the int-to-float conversions too) rounded to ``u``'s dtype, and
    ``int`` truncating. Starts past ``size - kernel``, where PyTorch's kernel
    would fail its bounds assertion (16-bit rounding, samples outside [0, 1)),
    are clipped to it.
    """
    last = jnp.full((*u.shape, 1), size - kernel, jnp.int32)
    if out == 1:
        return last
    bits = _REDUCED.get(jnp.dtype(u.dtype))
    calc = u.dtype if bits is None else jnp.float32

    def rounded(v: jax.Array) -> jax.Array:
        return v if bits is None else lax.reduce_precision(v, *bits)

    def scalar(n: int) -> jax.Array:
        return rounded(jnp.asarray(n, calc))

    u = u.astype(calc)[..., None]
    alpha = rounded(scalar(size - kernel) / scalar(out - 1))
    i = rounded(jnp.arange(out - 1, dtype=calc)).reshape((1,) * (u.ndim - 1) + (-1,))
    high = rounded(rounded(i + u) * alpha).astype(jnp.int32)
    low = rounded(u * alpha).astype(jnp.int32)
    starts = jnp.clip(high - low, 0, size - kernel)
    return jnp.concatenate([starts, jnp.broadcast_to(last, u.shape)], axis=-1)


def axis_starts(
    samples: jax.Array, spec: FractionalSpec, ndim: int
) -> tuple[jax.Array, ...]:
    """The window starts of each spatial axis for an input of ``ndim`` axes,
    from ``samples`` ``(N, C, nd)`` (``N = 1`` for an unbatched input): one
    int32 array per axis, ``(*B, out, *T)`` like the pooled array (its other
    spatial axes left out)."""
    nd, rows = spec.nd, []
    for a, (n, o, k) in enumerate(
        zip(spec.in_size, spec.out_size, spec.kernel_size, strict=True)
    ):
        row = window_starts(samples[..., SAMPLE_AXIS[nd][a]], n, o, k)  # (N, C, o)
        row = row if ndim == nd + 2 else row[0]
        rows.append(jnp.swapaxes(row, -1, -2) if spec.channels_last else row)
    return tuple(rows)


def _along(row: jax.Array, a: int, nd: int, lead: int) -> jax.Array:
    """A row of starts ``(*B, out, *T)`` of spatial axis ``a``, with the other
    spatial axes inserted (size 1) to broadcast against a pooled array."""
    shape = row.shape
    return row.reshape(
        *shape[:lead], *(1,) * a, -1, *(1,) * (nd - a - 1), *shape[lead + 1 :]
    )


def gather_taps(
    x: jax.Array, rows: tuple[jax.Array, ...], spec: FractionalSpec
) -> tuple[jax.Array, jax.Array]:
    """``(values, indices)`` of the windows that start at ``rows`` (see
    :func:`axis_starts`) over ``x`` ``(*B, *S, *T)``.

    Separable, one spatial axis at a time from the last, each a running
    max/argmax over the axis's taps, from the first, the tap replacing the
    best when its value is greater or NaN. Within a window the later axes are
    reduced first, so this picks what a scan of the window's taps in
    row-major order picks (PyTorch's rule): the first maximum, the last NaN,
    a window of ``-inf`` at its first element. Along the last axis, whose
    element gathers are the slowest to read, the scan runs over every window
    (slices of the whole axis) and the starts are picked from it; along each
    other axis each tap is one pick of whole rows (:func:`take_rows`) of the
    values and of the indices chosen so far. The program holds
    ``sum(kernel_size)`` taps, not their product.
    """
    nd = spec.nd
    lead, _ = split(x.ndim, nd, spec.trail)
    x = whole(x, range(lead, lead + nd))
    strides = row_major_strides(spec.in_size)
    axis, k = lead + nd - 1, spec.kernel_size[-1]
    size = spec.in_size[-1] - k + 1  # the windows along the last axis
    here = lax.broadcasted_iota(jnp.int32, (size,) + (1,) * (x.ndim - axis - 1), 0)

    def slide(j: int) -> tuple[jax.Array, jax.Array]:
        value = lax.slice_in_dim(x, j, j + size, axis=axis)
        return value, jnp.broadcast_to(here + j, value.shape)

    every = functools.reduce(_running, [slide(j) for j in range(k)])
    pick = _rows(take_rows, lead, spec.trail, nd - 1)
    best = pick(every[0], rows[-1]), pick(every[1], rows[-1])
    for a in reversed(range(nd - 1)):
        pick = _rows(take_rows, lead, spec.trail, a)
        taps = []
        for j in range(spec.kernel_size[a]):
            flat = _along(rows[a] + j, a, nd, lead) * strides[a]
            taps.append((pick(best[0], rows[a] + j), pick(best[1], rows[a] + j) + flat))
        best = functools.reduce(_running, taps)
    return best


def _running(
    best: tuple[jax.Array, jax.Array], tap: tuple[jax.Array, jax.Array]
) -> tuple[jax.Array, jax.Array]:
    """One step of the running max/argmax: the tap replaces the best when its
    value is greater or NaN."""
    take = (tap[0] > best[0]) | jnp.isnan(tap[0])
    return jnp.where(take, tap[0], best[0]), jnp.where(take, tap[1], best[1])


def _rows(fn: Any, lead: int, trail: int, a: int) -> Any:
    """``fn(plane, ..., start)`` of one ``(n, c)`` plane and its starts along
    spatial axis ``a`` (``(out,)``), over every plane (``_planes.per_plane``)."""
    return per_plane(functools.partial(fn, axis=a), lead, trail)


def take_rows(plane: jax.Array, rows: jax.Array, axis: int) -> jax.Array:
    """``plane``'s slices at ``rows`` along ``axis`` (clipped into it): a gather
    whose slices are whole rows (GPU, CPU)."""
    return jnp.take(plane, rows, axis=axis, mode="clip")


def matmul_rows(plane: jax.Array, rows: jax.Array, axis: int) -> jax.Array:
    """:func:`take_rows` without a gather, for a TPU (which has no vector
    gather, and whose gathers of rows XLA's cost model rates at more bytes:
    the performance record, "Fractional pools"): per byte of the elements, a
    matmul of the int8 bytes with the one-hot rows, which sums one nonzero
    product, so every bit (NaN payloads, signed zeros) is kept. A row outside
    the axis picks zero bits."""
    size, width = plane.shape[axis], plane.dtype.itemsize
    one_hot = rows[:, None] == jnp.arange(size, dtype=rows.dtype)[None]
    one_hot = one_hot.astype(jnp.int8)
    unsigned = jnp.dtype(f"uint{8 * width}")
    bits = lax.bitcast_convert_type(plane, unsigned)
    picked = jnp.zeros((), unsigned)
    for k in range(width):
        byte = lax.bitcast_convert_type(
            ((bits >> 8 * k) & 0xFF).astype(jnp.uint8), jnp.int8
        )
        dims = (((1,), (axis,)), ((), ()))
        part = lax.dot_general(one_hot, byte, dims, preferred_element_type=jnp.int8)
        part = lax.bitcast_convert_type(jnp.moveaxis(part, 0, axis), jnp.uint8)
        picked = picked | part.astype(unsigned) << 8 * k
    return lax.bitcast_convert_type(picked, plane.dtype)


# How each spatial axis's rows are picked: None for :func:`take_rows` along
# every axis.
Takes = tuple[Callable[..., jax.Array], ...] | None
# On a TPU (``matmul=True``): one-hot matmuls along both axes of a 2-D pool,
# gathers in 3-D, whichever XLA's cost model for the v5e rates at fewer bytes
# (the fractional programs of ``benchmarks/compiled.py``; the performance
# record, "Fractional pools").
TPU_TAKES: dict[int, Takes] = {2: (matmul_rows, matmul_rows), 3: None}


def _take(matmul: bool, nd: int, a: int) -> Callable[..., jax.Array]:
    """How spatial axis ``a``'s rows are picked (``matmul``: as on a TPU)."""
    takes = TPU_TAKES[nd] if matmul else None
    return take_rows if takes is None else takes[a]


def pick_windows(
    values: jax.Array,
    indices: jax.Array,
    rows: tuple[jax.Array, ...],
    spec: FractionalSpec,
    matmul: bool = False,
) -> tuple[jax.Array, jax.Array]:
    """The windows that start at ``rows`` (see :func:`axis_starts`), picked from
    the ``(values, indices)`` of ``spec.every_window()``, whose output ``s``
    is the window that starts at ``s`` (its indices are already flat offsets
    into the input's plane).

    One spatial axis at a time, per plane, whole rows (size 1 along the picked
    axis, every element of the other spatial axes), by :func:`take_rows`,
    or with ``matmul`` as :data:`TPU_TAKES` says, vmapped over the planes.
    """
    lead, _ = split(values.ndim, spec.nd, spec.trail)
    for a, row in enumerate(rows):
        pick = _rows(_take(matmul, spec.nd, a), lead, spec.trail, a)
        values, indices = (whole(arr, (lead + a,)) for arr in (values, indices))
        values, indices = pick(values, row), pick(indices, row)
    return values, indices


def spread_windows(
    grad_output: jax.Array,
    indices: jax.Array,
    rows: tuple[jax.Array, ...],
    spec: FractionalSpec,
    matmul: bool = False,
    values: jax.Array | None = None,
) -> tuple[jax.Array, jax.Array, jax.Array | None]:
    """The transpose of :func:`pick_windows`, for the forward's own indices:
    the gradients of the windows that start at ``rows`` placed on the output
    grid of ``spec.every_window()``, as ``(grads, indices, values)`` of that
    pool, whose backward of its own indices is then the gradient
    (``_platform``).

    One spatial axis at a time, per plane. Starts never decrease along an
    axis, but with 16-bit rounding consecutive windows may start at the same
    position (see the module's docstring); such windows, once every axis is
    spread, are one window of the stride-1 pool with one index, so their
    gradients are summed: a segmented scan along the axis over the runs of
    equal starts (a fixed order), whose sum at each run's last window is then
    read as in :func:`pick_windows`. Where no window starts the
    gradient is zero, the index past every position (``INT32_MAX``: it
    matches none) and the value NaN: the stride-1 pool's backward of its own
    values (``_backward.covering_reduction``) ranks that window above every
    other. ``values`` (the forward's) are spread as the indices, when given.
    16-bit gradients are returned in float32, for the covering sum to round
    once.
    """
    lead, _ = split(grad_output.ndim, spec.nd, spec.trail)
    grads = grad_output.astype(accumulation_dtype(grad_output.dtype))

    keyed = values is not None

    def spread(
        g: jax.Array, i: jax.Array, v: jax.Array, start: jax.Array, axis: int
    ) -> tuple[jax.Array, jax.Array, jax.Array]:
        take = _take(matmul, spec.nd, axis)
        size = spec.in_size[axis] - spec.kernel_size[axis] + 1
        along = (1,) * axis + (-1,) + (1,) * (g.ndim - axis - 1)
        opens = jnp.concatenate([jnp.ones(1, bool), start[1:] != start[:-1]])
        opens = jnp.broadcast_to(opens.reshape(along), g.shape)
        sums = _run_sums(opens, g, axis)
        here = jnp.arange(size, dtype=start.dtype)
        last = jnp.sum(start[None] <= here[:, None], axis=1, dtype=jnp.int32) - 1
        starts = jnp.any(start[None] == here[:, None], axis=1).reshape(along)
        g, i = take(sums, last, axis=axis), take(i, last, axis=axis)
        g, i = jnp.where(starts, g, 0), jnp.where(starts, i, INT32_MAX)
        if keyed:
            v = jnp.where(starts, take(v, last, axis=axis), jnp.nan)
        return g, i, v

    spare = values if keyed else jnp.zeros((), grads.dtype)
    for a, row in enumerate(rows):
        grads, indices = (whole(arr, (lead + a,)) for arr in (grads, indices))
        if keyed:
            spare = whole(spare, (lead + a,))
            grads, indices, spare = _rows(spread, lead, spec.trail, a)(
                grads, indices, spare, row
            )
        else:
            fn = lambda g, i, r, axis: spread(g, i, g, r, axis)[:2]  # noqa: E731
            grads, indices = _rows(fn, lead, spec.trail, a)(grads, indices, row)
    return grads, indices, spare if keyed else None


def _run_sums(opens: jax.Array, sums: jax.Array, axis: int) -> jax.Array:
    """The segmented sum along ``axis`` (a segment opens where ``opens``; the
    first element opens one), each element the sum of its segment so far:
    Hillis and Steele's scan, ``ceil(log2(n))`` steps of :func:`_segmented`
    with the element ``2**j`` before, each a shift and a select, which XLA
    fuses into a few loops, where ``lax.associative_scan`` slices and
    interleaves the array at each level (the compile-only H200's 2-D
    fractional step of 16x64x112² → 79²: 15 kernels, not 26; its compile
    time the same within noise). A fixed order, which depends only on the
    shapes. Where no element ``2**j`` before exists, the segment opened
    within the last ``2**j`` elements (the first element opens one), so the
    padding is never added."""
    n = sums.shape[axis]
    step = 1
    while step < n:
        shift = [(0, 0, 0)] * sums.ndim
        shift[axis] = (step, -step, 0)
        before = (
            lax.pad(opens, True, shift),
            lax.pad(sums, jnp.zeros((), sums.dtype), shift),
        )
        opens, sums = _segmented(before, (opens, sums))
        step *= 2
    return sums


def _segmented(a: Any, b: Any) -> Any:
    """The segmented sum's combine, of ``(opens, sums)`` pairs: ``b``'s sum
    alone where a segment opens in ``b``."""
    (open_a, sum_a), (open_b, sum_b) = a, b
    return open_a | open_b, jnp.where(open_b, sum_b, sum_a + sum_b)


def gather_sum(
    grad_output: jax.Array,
    indices: jax.Array,
    x: jax.ShapeDtypeStruct,
    nd: int,
    trail: int,
) -> jax.Array:
    """Deterministic backward: per plane, the gradients sorted stably by index
    and summed per index by a segmented scan (a fixed order), read at each
    position; no scatter. Honours every index inside the plane, like the
    scatter; others are dropped. 16-bit gradients add in float32, rounded once.

    Args:
      grad_output: ``(*B, *O, *T)`` gradients of the pooled values.
      indices: ``(*B, *O, *T)`` integer flat offsets into each ``S`` plane.
      x: shape ``(*B, *S, *T)`` and dtype of the result.
      nd: number of spatial axes, ``len(S)``.
      trail: number of trailing axes ``T`` (0, or 1 for channels-last).
    """
    first, stop = split(len(x.shape), nd, trail)
    plane = math.prod(x.shape[first:stop])
    acc = accumulation_dtype(x.dtype)
    here = jnp.arange(plane, dtype=jnp.int32)

    def one_plane(grads: jax.Array, where: jax.Array) -> jax.Array:
        where = jnp.where(in_plane(where, plane), where, plane).astype(jnp.int32)
        keys, grads = lax.sort((where, grads), is_stable=True, num_keys=1)
        opens = jnp.concatenate([jnp.ones(1, bool), keys[1:] != keys[:-1]])
        _, sums = lax.associative_scan(_segmented, (opens, grads))
        # Unrolled: the default method is a while loop, serial on an accelerator.
        end = jnp.searchsorted(keys, here, side="right", method="scan_unrolled")
        end = jnp.maximum(end - 1, 0)  # each position's segment's last entry
        return jnp.where(keys[end] == here, sums[end], 0)

    grads = _flatten(positive_zeros(grad_output).astype(acc), nd, trail)
    total = per_plane(one_plane, first, trail)(grads, _flatten(indices, nd, trail))
    return total.reshape(x.shape).astype(x.dtype)
