"""Window maths and layouts: where each window lies, and the spec that says so.

A public function validates its arguments once (``_spec``) into a
:class:`PoolSpec`: the windows of each spatial axis as :class:`AxisWindows`,
the layout and the chosen algorithm. That spec travels unchanged to the
kernels, which need nothing else. A fractional pool's :class:`FractionalSpec`
(``_fractional_spec``) holds its sizes: its windows come from its samples,
arrays. The spatial axes of an array are ``nd`` consecutive axes followed by
``trail`` trailing ones: ``trail`` is 1 for a channels-last array, 0
otherwise.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal, NamedTuple

import numpy as np

# Indices are int32: the largest plane, and the largest flat offset into a
# whole array that the CPU scatter forms (see ``_planes``).
INT32_MAX = 2**31 - 1

Algorithm = Literal["auto", "scatter", "gather"]
ALGORITHMS: tuple[Algorithm, ...] = ("auto", "scatter", "gather")
Implementation = Literal["xla", "pallas"]
IMPLEMENTATIONS: tuple[Implementation, ...] = ("xla", "pallas")


class AxisWindows(NamedTuple):
    """The windows of one spatial axis.

    Tap ``j`` of output ``o`` reads input position ``o * stride + offset + j *
    dilation`` (a regular pool; positions outside ``[0, size)`` are padding) or,
    when ``starts`` is set (an adaptive pool), ``min(starts[o] + j, ends[o] - 1)``:
    revisiting a window's last element changes no result under the selection
    rule, so short windows need no mask.
    """

    size: int
    out: int
    taps: int
    stride: int = 1
    offset: int = 0
    dilation: int = 1
    starts: tuple[int, ...] = ()
    ends: tuple[int, ...] = ()

    @property
    def extent(self) -> int:
        """The input positions one regular window reaches, first tap to last
        (``(taps - 1) * dilation + 1``)."""
        return (self.taps - 1) * self.dilation + 1

    @property
    def pad(self) -> tuple[int, int]:
        """``-inf`` padding (low, high) that every regular tap slice needs."""
        if self.starts:
            return 0, 0
        end = (self.out - 1) * self.stride + self.extent
        return max(0, -self.offset), max(0, end + self.offset - self.size)

    def positions(self, tap: int) -> np.ndarray:
        """Input position read by ``tap`` for every output, shape ``(out,)``."""
        if self.starts:
            return np.minimum(np.add(self.starts, tap), np.subtract(self.ends, 1))
        return np.arange(self.out) * self.stride + self.offset + tap * self.dilation

    @property
    def disjoint(self) -> bool:
        """Whether no two windows share an input position (regular windows)."""
        return not self.starts and self.stride >= self.extent

    def span(self) -> tuple[np.ndarray, np.ndarray]:
        """Each window's half-open range ``[lo, hi)`` of input positions."""
        if self.starts:
            return np.asarray(self.starts), np.asarray(self.ends)
        lo = np.arange(self.out) * self.stride + self.offset
        return lo, lo + self.extent

    def covering(self) -> np.ndarray:
        """``(slots, size)`` table: the ``m``-th window whose span holds position
        ``p``, in increasing order, or ``out`` where ``p`` lies in fewer windows.
        """
        lo, hi = self.span()  # both non-decreasing in the window index
        p = np.arange(self.size)
        first = np.searchsorted(hi, p, side="right")
        last = np.searchsorted(lo, p, side="right") - 1
        slots = max(1, int((last - first + 1).max()))
        table = first + np.arange(slots)[:, None]
        return np.where(table <= last, table, self.out)

    def empty(self) -> np.ndarray:
        """Which windows have no in-bounds tap (possible with dilation), shape
        ``(out,)``: its first non-negative tap is past its last tap, or past
        the axis (and so is every tap after it)."""
        if self.starts:
            return np.zeros(self.out, np.bool_)  # every one holds its start
        first = self.first_tap()
        start = np.arange(self.out) * self.stride + self.offset
        return (first >= self.taps) | (start + first * self.dilation >= self.size)

    def first_tap(self) -> np.ndarray:
        """Each window's first non-negative tap number, shape ``(out,)``."""
        if self.starts:
            return np.zeros(self.out, np.int64)
        start = np.arange(self.out) * self.stride + self.offset
        return -(np.minimum(start, 0) // self.dilation)  # ceil(max(0, -start) / d)


class PoolSpec(NamedTuple):
    """A validated pool, strided or adaptive, as every kernel receives it.

    Hashable and static: it is a ``nondiff_argnums`` of the ``custom_vjp`` and a
    static argument of the jitted kernels.
    """

    axes: tuple[AxisWindows, ...]
    channels_last: bool
    algorithm: Algorithm
    implementation: Implementation | None = None  # None: the platform seam's

    @property
    def nd(self) -> int:
        return len(self.axes)

    @property
    def trail(self) -> int:
        """Trailing non-spatial axes: 1 (the channels) when channels-last."""
        return int(self.channels_last)

    @property
    def in_size(self) -> tuple[int, ...]:
        return tuple(w.size for w in self.axes)

    @property
    def out_size(self) -> tuple[int, ...]:
        return tuple(w.out for w in self.axes)


class FractionalSpec(NamedTuple):
    """A validated fractional pool: the sizes per spatial axis (order D, H, W),
    the layout and the backward algorithm. Its windows depend on the samples,
    which are arrays, so they are not part of it: window ``o`` along an axis
    is ``[start[o], start[o] + kernel_size)``, for starts computed under
    ``jit`` (``_fractional.window_starts``)."""

    in_size: tuple[int, ...]
    out_size: tuple[int, ...]
    kernel_size: tuple[int, ...]
    channels_last: bool
    algorithm: Algorithm

    @property
    def nd(self) -> int:
        return len(self.in_size)

    trail = PoolSpec.trail  # the same layout: read from ``channels_last``

    def every_window(self) -> PoolSpec:
        """The stride-1 pool of the same kernel, without padding: every window
        that fits the input, output ``s`` along an axis the window that starts
        at ``s``, so each fractional window is one of its outputs."""
        axes = tuple(
            AxisWindows(n, n - k + 1, k)
            for n, k in zip(self.in_size, self.kernel_size, strict=True)
        )
        return PoolSpec(axes, self.channels_last, self.algorithm, "xla")


def pool_output_size(
    size: int,
    kernel: int,
    stride: int,
    padding: tuple[int, int],
    dilation: int,
    ceil_mode: bool,
) -> int:
    """PyTorch's output length of a strided pool along one axis (may be < 1),
    with padding ``(lo, hi)`` (PyTorch's ``p`` is ``(p, p)``)."""
    lo, hi = padding
    span = size + lo + hi - dilation * (kernel - 1) - 1
    out = (span + (stride - 1 if ceil_mode else 0)) // stride + 1
    if ceil_mode and (out - 1) * stride >= size + lo:
        out -= 1  # the last window would start inside the right padding
    return out


def same_padding(size: int, kernel: int, stride: int, dilation: int) -> tuple[int, int]:
    """``"SAME"`` padding as ``lax.padtype_to_pads``: ``ceil(size / stride)``
    outputs, the extra element on the high side."""
    out = -(-size // stride)
    total = max(0, (out - 1) * stride + dilation * (kernel - 1) + 1 - size)
    return total // 2, total - total // 2


def adaptive_bounds(size: int, out: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Half-open windows ``[floor(i*size/out), ceil((i+1)*size/out))``, exactly."""
    starts = tuple(i * size // out for i in range(out))
    ends = tuple(-(-(i + 1) * size // out) for i in range(out))
    return starts, ends


def adaptive_axis(size: int, out: int) -> AxisWindows:
    """Adaptive windows along one axis, as a regular pool whenever they are one."""
    starts, ends = adaptive_bounds(size, out)
    widths = {e - s for s, e in zip(starts, ends, strict=True)}
    taps = max(widths)
    # One window steps over the whole axis; step 0: more outputs than inputs,
    # the first two windows equal (size 1).
    step = starts[1] - starts[0] if out > 1 else size
    if len(widths) == 1 and step and starts == tuple(range(0, out * step, step)):
        return AxisWindows(size, out, taps, stride=step)
    return AxisWindows(size, out, taps, starts=starts, ends=ends)


# ------------------------------------------------------------------- layouts


def split(ndim: int, nd: int, trail: int) -> tuple[int, int]:
    """``(first, stop)``: the spatial axes of an ``ndim``-array are
    ``first..stop-1``."""
    return ndim - nd - trail, ndim - trail


def with_spatial(
    shape: Sequence[int], nd: int, trail: int, sizes: Sequence[int]
) -> tuple[int, ...]:
    """``shape`` with its ``nd`` spatial sizes replaced by ``sizes``."""
    first, stop = split(len(shape), nd, trail)
    return (*shape[:first], *sizes, *shape[stop:])


def row_major_strides(sizes: Sequence[int]) -> list[int]:
    """The flat-offset stride of each axis of a row-major array of ``sizes``."""
    return [math.prod(sizes[a + 1 :]) for a in range(len(sizes))]
