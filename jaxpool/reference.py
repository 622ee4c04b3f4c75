"""A NumPy for-loop oracle for every jaxpool op, written for clarity, not speed.

Use it to check your own port: it follows the semantics page of the docs
(``docs/semantics.md``: PyTorch's CPU kernels) line by line and imports
nothing from the rest of jaxpool, so it cannot agree with a bug there by
construction. Loops run over output positions and window
taps; every ``(n, c)`` plane is processed at once with NumPy.

Every function takes and returns NumPy arrays, ``(*B, *S)`` with any number of
leading axes ``B``; spatial arguments are full tuples, one entry per axis of
``S`` (no broadcasting of scalars, no defaults: say what you mean).

>>> import numpy as np
>>> from jaxpool import reference
>>> x = np.arange(16.0).reshape(1, 4, 4)
>>> values, indices = reference.max_pool(x, (2, 2), (2, 2), (0, 0), (1, 1), False)
>>> indices.tolist()
[[[5, 7], [13, 15]]]
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence

import numpy as np

__all__ = [
    "adaptive_max_pool",
    "fractional_max_pool",
    "fractional_starts",
    "max_pool",
    "max_unpool",
    "output_size",
    "scatter_add",
]


Padding = int | tuple[int, int]


def _pair(padding: Padding) -> tuple[int, int]:
    if isinstance(padding, int):
        return padding, padding
    lo, hi = padding
    return lo, hi


def output_size(
    size: int,
    kernel: int,
    stride: int,
    padding: Padding,
    dilation: int,
    ceil_mode: bool,
) -> int:
    """Output length of a strided pool along one axis (PyTorch's rule).

    ``padding`` is PyTorch's ``p`` (both sides) or a ``(lo, hi)`` pair.
    """
    lo, hi = _pair(padding)
    numerator = size + lo + hi - dilation * (kernel - 1) - 1
    if ceil_mode:
        out = -(-numerator // stride) + 1
        if (out - 1) * stride >= size + lo:
            out -= 1
    else:
        out = numerator // stride + 1
    return out


def _flat_offset(position: Sequence[int], shape: Sequence[int]) -> int:
    """Row-major offset of ``position`` in ``shape``; positions may lie outside."""
    offset = 0
    for p, size in zip(position, shape, strict=False):
        offset = offset * size + p
    return offset


def _select(planes: np.ndarray, windows: list[list[int]], first: list[int]):
    """Max and argmax of one window per plane.

    ``windows[a]`` lists the in-bounds positions along axis ``a`` in scan order;
    the scan starts from (-inf, ``first``) and takes a tap when ``value > best``
    or ``value`` is NaN.
    """
    shape = planes.shape[1:]
    best = np.full(planes.shape[0], -np.inf, planes.dtype)
    arg = np.full(planes.shape[0], _flat_offset(tuple(first), shape), np.int64)
    for position in itertools.product(*windows):
        value = planes[(slice(None), *position)]
        with np.errstate(invalid="ignore"):  # NaN compares False, as intended
            take = (value > best) | np.isnan(value)
        best = np.where(take, value, best)
        arg = np.where(take, _flat_offset(position, shape), arg)
    return best, arg


Window = Callable[[tuple[int, ...]], tuple[list[list[int]], list[int]]]


def _pool(
    x: np.ndarray, out_size: tuple[int, ...], window_of: Window
) -> tuple[np.ndarray, np.ndarray]:
    nd = len(out_size)
    lead, spatial = x.shape[: x.ndim - nd], x.shape[x.ndim - nd :]
    n_planes = math.prod(lead)
    planes = x.reshape((n_planes, *spatial))
    values = np.empty((n_planes, *out_size), x.dtype)
    indices = np.empty((n_planes, *out_size), np.int64)
    for o in itertools.product(*(range(n) for n in out_size)):
        positions, first = window_of(o)
        best, arg = _select(planes, positions, first)
        values[(slice(None), *o)] = best
        indices[(slice(None), *o)] = arg
    return (
        values.reshape(lead + tuple(out_size)),
        indices.reshape(lead + tuple(out_size)).astype(np.int32),
    )


def max_pool(
    x: np.ndarray,
    kernel_size: tuple[int, ...],
    stride: tuple[int, ...],
    padding: tuple[Padding, ...],
    dilation: tuple[int, ...],
    ceil_mode: bool,
) -> tuple[np.ndarray, np.ndarray]:
    """Max pool with argmax over the trailing ``len(kernel_size)`` axes.

    ``padding`` entries are ints (both sides) or ``(lo, hi)`` pairs. Tap ``j``
    of output ``o`` along an axis sits at ``o * stride - lo + j * dilation``;
    taps outside the input are skipped (padding is never chosen). A window's
    scan starts at its first non-negative tap, which lies outside the input
    when the window has no in-bounds tap at all.

    Returns:
      ``(values, indices)``: values in ``x.dtype``, int32 flat offsets into each
      unpadded plane.
    """
    nd = len(kernel_size)
    spatial = x.shape[x.ndim - nd :]
    out = tuple(
        output_size(*args, ceil_mode)
        for args in zip(spatial, kernel_size, stride, padding, dilation, strict=False)
    )

    def window_of(o: tuple[int, ...]) -> tuple[list[list[int]], list[int]]:
        positions: list[list[int]] = []
        first: list[int] = []
        for a in range(nd):
            start = o[a] * stride[a] - _pair(padding[a])[0]
            taps = [start + j * dilation[a] for j in range(kernel_size[a])]
            positions.append([t for t in taps if 0 <= t < spatial[a]])
            first.append(next(t for t in taps if t >= 0))
        return positions, first

    return _pool(x, out, window_of)


def adaptive_max_pool(
    x: np.ndarray, output_size: tuple[int, ...]
) -> tuple[np.ndarray, np.ndarray]:
    """Adaptive max pool with argmax over the trailing ``len(output_size)`` axes.

    Window ``i`` along an axis of length ``L`` with ``O`` outputs is the
    half-open range ``[floor(i * L / O), ceil((i + 1) * L / O))``.
    """
    nd = len(output_size)
    spatial = x.shape[x.ndim - nd :]

    def window_of(o: tuple[int, ...]) -> tuple[list[list[int]], list[int]]:
        positions: list[list[int]] = []
        for a in range(nd):
            size, out = spatial[a], output_size[a]
            start = (o[a] * size) // out
            end = -((-(o[a] + 1) * size) // out)
            positions.append(list(range(start, end)))
        return positions, [p[0] for p in positions]

    return _pool(x, tuple(output_size), window_of)


def scatter_add(
    grad_output: np.ndarray, indices: np.ndarray, spatial: tuple[int, ...]
) -> np.ndarray:
    """Backward of every pool: ``grad[b].flat[indices[b, q]] += grad_output[b, q]``.

    ``spatial`` is the input's spatial shape; ``grad_output`` and ``indices``
    are ``(*B, *O)`` and the result ``(*B, *spatial)``, float64 (accumulated in
    float64: round it to the input dtype yourself). Indices outside
    ``[0, prod(spatial))`` are dropped.
    """
    nd = len(spatial)
    lead = grad_output.shape[: grad_output.ndim - nd]
    size = math.prod(spatial)
    grads = np.asarray(grad_output, np.float64)
    grads = grads.reshape(math.prod(lead), math.prod(grads.shape[len(lead) :]))
    where = np.asarray(indices, np.int64).reshape(grads.shape)
    result = np.zeros((grads.shape[0], size))
    for b in range(grads.shape[0]):
        keep = (where[b] >= 0) & (where[b] < size)
        np.add.at(result[b], where[b][keep], grads[b][keep])
    return result.reshape(lead + tuple(spatial))


def max_unpool(
    x: np.ndarray, indices: np.ndarray, spatial: tuple[int, ...]
) -> np.ndarray:
    """Unpool: ``out[b].flat[indices[b, q]] = x[b, q]``, zeros elsewhere.

    ``x`` and ``indices`` are ``(*B, *O)``; the result is ``(*B, *spatial)`` in
    ``x.dtype``. Indices outside ``[0, prod(spatial))`` are dropped; for equal
    indices the last write wins.
    """
    nd = len(spatial)
    lead = x.shape[: x.ndim - nd]
    size = math.prod(spatial)
    values = x.reshape(math.prod(lead), -1)
    where = np.asarray(indices, np.int64).reshape(values.shape)
    result = np.zeros((values.shape[0], size), x.dtype)
    for b in range(values.shape[0]):
        for q in range(values.shape[1]):
            if 0 <= where[b, q] < size:
                result[b, where[b, q]] = values[b, q]
    return result.reshape(lead + tuple(spatial))


def fractional_starts(u: np.ndarray, size: int, out: int, kernel: int) -> np.ndarray:
    """PyTorch's fractional window starts along one axis, ``(*u.shape, out)``.

    ``generate_intervals<scalar_t>`` in ``u``'s dtype: window ``i < out - 1``
    starts at ``int((i + u) * alpha) - int(u * alpha)``, ``alpha = (size -
    kernel) / (out - 1)``, and the last at ``size - kernel``. Every operation
    (the int-to-float conversions too) is done as C++ does it for that dtype:
    float32 and float64 natively, float16 and bfloat16 (``c10::Half``,
    ``c10::BFloat16``) in float32 with the result rounded to the dtype. Starts
    past ``size - kernel`` (where PyTorch's kernel fails an assertion) are
    clipped to it.
    """
    dtype = u.dtype
    calc = np.float64 if dtype == np.float64 else np.float32

    def rounded(v):
        return np.asarray(v, calc).astype(dtype).astype(calc)

    starts = np.full((*u.shape, out), size - kernel, np.int64)
    if out > 1:
        alpha = rounded(rounded(size - kernel) / rounded(out - 1))
        uc = u.astype(calc)
        for i in range(out - 1):
            high = np.trunc(rounded(rounded(rounded(i) + uc) * alpha))
            low = np.trunc(rounded(uc * alpha))
            starts[..., i] = np.clip(high - low, 0, size - kernel)
    return starts


def fractional_max_pool(
    x: np.ndarray, kernel_size: tuple[int, ...], starts: Sequence[np.ndarray]
) -> tuple[np.ndarray, np.ndarray]:
    """Fractional max pool with argmax over the trailing ``len(kernel_size)``
    axes, given each axis's window starts ``(*B, out)`` (one row per plane,
    from ``fractional_starts``): window ``o`` covers ``[starts[a][o[a]],
    + kernel_size[a])`` along each axis ``a``, the scan and its rule as for
    ``max_pool``.

    Mind the samples' order in PyTorch: in 2-D its ``samples[..., 0]`` drives W
    and ``samples[..., 1]`` H; in 3-D entries 0, 1, 2 drive D, H, W.
    """
    nd = len(kernel_size)
    lead, spatial = x.shape[: x.ndim - nd], x.shape[x.ndim - nd :]
    out = tuple(s.shape[-1] for s in starts)
    planes = x.reshape((-1, *spatial))
    rows = [np.asarray(s).reshape(-1, s.shape[-1]) for s in starts]
    values = np.empty((planes.shape[0], *out), x.dtype)
    indices = np.empty((planes.shape[0], *out), np.int32)
    for b in range(planes.shape[0]):
        for o in itertools.product(*(range(n) for n in out)):
            first = [int(rows[a][b, o[a]]) for a in range(nd)]
            windows = [
                list(range(f, f + k)) for f, k in zip(first, kernel_size, strict=True)
            ]
            best, arg = _select(planes[b : b + 1], windows, first)
            values[(b, *o)] = best[0]
            indices[(b, *o)] = arg[0]
    return values.reshape(lead + out), indices.reshape(lead + out)
