"""Argument normalisation, validation and window maths: the one place for all three.

Every public function turns its arguments into a hashable, static spec here (a
NamedTuple of int tuples) before any computation, raising ``ValueError`` /
``TypeError`` that name the function, the argument and the value received. The
specs describe their windows axis by axis as :class:`AxisWindows`, which is all
the forward kernel (``_argmax``) and the scatter (``_scatter``) need to know.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Sequence
from typing import Any, Literal, NamedTuple, cast

import jax
import jax.numpy as jnp
import numpy as np
from jax.core import Tracer
from jax.sharding import AxisType, NamedSharding, PartitionSpec

_INT32_MAX = 2**31 - 1


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
    def pad(self) -> tuple[int, int]:
        """``-inf`` padding (low, high) that every regular tap slice needs."""
        if self.starts:
            return 0, 0
        last = (self.out - 1) * self.stride + (self.taps - 1) * self.dilation
        return max(0, -self.offset), max(0, last + self.offset + 1 - self.size)

    def positions(self, tap: int) -> np.ndarray:
        """Input position read by ``tap`` for every output, shape ``(out,)``."""
        if self.starts:
            return np.minimum(np.add(self.starts, tap), np.subtract(self.ends, 1))
        return np.arange(self.out) * self.stride + self.offset + tap * self.dilation

    @property
    def disjoint(self) -> bool:
        """Whether no two windows share an input position (regular windows)."""
        return not self.starts and self.stride >= (self.taps - 1) * self.dilation + 1

    def span(self) -> tuple[np.ndarray, np.ndarray]:
        """Each window's half-open range ``[lo, hi)`` of input positions."""
        if self.starts:
            return np.asarray(self.starts), np.asarray(self.ends)
        lo = np.arange(self.out) * self.stride + self.offset
        return lo, lo + (self.taps - 1) * self.dilation + 1

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

    def first_tap(self) -> np.ndarray:
        """Each window's first non-negative tap number, shape ``(out,)``."""
        if self.starts:
            return np.zeros(self.out, np.int64)
        start = np.arange(self.out) * self.stride + self.offset
        return -(np.minimum(start, 0) // self.dilation)  # ceil(max(0, -start) / d)


def flat_offsets(
    positions: Sequence[np.ndarray], in_size: tuple[int, ...]
) -> jax.Array:
    """int32 flat offsets ``sum(pos[a] * plane_stride[a])`` broadcast over axes."""
    n = len(positions)
    strides = [math.prod(in_size[a + 1 :]) for a in range(n)]
    flat = jnp.zeros((1,) * n, jnp.int32)
    for a, (pos, stride) in enumerate(zip(positions, strides, strict=False)):
        shape = [1] * n
        shape[a] = pos.size
        flat = flat + jnp.asarray((pos * stride).astype(np.int32).reshape(shape))
    return flat


def leading_sharding(arr: jax.Array, batch: int) -> NamedSharding | None:
    """Sharding for new arrays that must line up with ``arr``'s leading axes.

    Under a mesh with Explicit axes every array carries its sharding in its
    type and mixing shardings is an error, so arrays the kernels create (the
    running max, index tables, zeros) take the leading ``batch`` axes' sharding
    of the input. ``None`` elsewhere: the partitioner propagates it.
    """
    sharding = jax.typeof(arr).sharding
    mesh = sharding.mesh
    if mesh.empty or AxisType.Explicit not in mesh.axis_types:
        return None
    return NamedSharding(mesh, PartitionSpec(*tuple(sharding.spec)[:batch]))


class PoolSpec(NamedTuple):
    """A validated strided max pool over the trailing ``len(in_size)`` axes."""

    in_size: tuple[int, ...]
    out_size: tuple[int, ...]
    kernel: tuple[int, ...]
    stride: tuple[int, ...]
    padding: tuple[int, ...]
    dilation: tuple[int, ...]
    ceil_mode: bool

    @property
    def axes(self) -> tuple[AxisWindows, ...]:
        return tuple(
            AxisWindows(L, o, k, s, -p, d)
            for L, o, k, s, p, d in zip(
                self.in_size,
                self.out_size,
                self.kernel,
                self.stride,
                self.padding,
                self.dilation,
                strict=False,
            )
        )

    @property
    def args(self) -> tuple[Any, ...]:
        """The arguments that rebuild this spec: kernel, stride, padding, ..."""
        return self.kernel, self.stride, self.padding, self.dilation, self.ceil_mode


class AdaptiveSpec(NamedTuple):
    """A validated adaptive max pool from ``in_size`` to ``out_size``."""

    in_size: tuple[int, ...]
    out_size: tuple[int, ...]

    @property
    def axes(self) -> tuple[AxisWindows, ...]:
        return tuple(
            adaptive_axis(L, o)
            for L, o in zip(self.in_size, self.out_size, strict=False)
        )


Algorithm = Literal["scatter", "gather"]
ALGORITHMS = ("scatter", "gather")


def algorithm(fn: str, value: Any) -> Algorithm:
    """A backward algorithm name: ``"scatter"`` or ``"gather"``."""
    if not isinstance(value, str) or value not in ALGORITHMS:
        raise ValueError(
            f"{fn}: `algorithm` must be one of {ALGORITHMS}, got {value!r}"
        )
    return cast(Algorithm, value)


def pool_output_size(
    size: int, kernel: int, stride: int, padding: int, dilation: int, ceil_mode: bool
) -> int:
    """PyTorch's output length of a strided pool along one axis (may be < 1)."""
    span = size + 2 * padding - dilation * (kernel - 1) - 1
    out = (span + (stride - 1 if ceil_mode else 0)) // stride + 1
    if ceil_mode and (out - 1) * stride >= size + padding:
        out -= 1  # the last window would start inside the right padding
    return out


def adaptive_bounds(size: int, out: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Half-open windows ``[floor(i*size/out), ceil((i+1)*size/out))``, exactly."""
    starts = tuple(i * size // out for i in range(out))
    ends = tuple(-(-(i + 1) * size // out) for i in range(out))
    return starts, ends


def adaptive_axis(size: int, out: int) -> AxisWindows:
    """Adaptive windows along one axis, as a regular pool whenever they are one."""
    starts, ends = adaptive_bounds(size, out)
    widths = {e - s for s, e in zip(starts, ends, strict=False)}
    taps = max(widths)
    step = starts[1] - starts[0] if out > 1 else 1
    if len(widths) == 1 and starts == tuple(range(0, out * step, step)):
        return AxisWindows(size, out, taps, stride=step)
    return AxisWindows(size, out, taps, starts=starts, ends=ends)


# ---------------------------------------------------------------- validation


def float_array(fn: str, name: str, x: Any) -> jax.Array:
    """``jnp.asarray(x)``, which must have a floating dtype."""
    x = jnp.asarray(x)
    if not jnp.issubdtype(x.dtype, jnp.floating):
        raise TypeError(f"{fn}: `{name}` must have a floating dtype, got {x.dtype}")
    return x


def int_array(fn: str, name: str, x: Any) -> jax.Array:
    """``jnp.asarray(x)``, which must have an integer dtype (not bool)."""
    x = jnp.asarray(x)
    if not jnp.issubdtype(x.dtype, jnp.integer):
        raise TypeError(f"{fn}: `{name}` must have an integer dtype, got {x.dtype}")
    return x


def shape_dtype(fn: str, name: str, x: Any) -> jax.ShapeDtypeStruct:
    """Shape and floating dtype of an array or ``jax.ShapeDtypeStruct``."""
    if not (hasattr(x, "shape") and hasattr(x, "dtype")):
        x = np.asarray(x)
    dtype = jax.dtypes.canonicalize_dtype(x.dtype)
    if not jnp.issubdtype(dtype, jnp.floating):
        raise TypeError(f"{fn}: `{name}` must have a floating dtype, got {x.dtype}")
    return jax.ShapeDtypeStruct(tuple(x.shape), dtype)


def split_shape(fn: str, shape: tuple[int, ...], nd: int) -> tuple[int, ...]:
    """Check an ``(N, C, *spatial)`` or ``(C, *spatial)`` shape; return spatial."""
    if len(shape) not in (nd + 1, nd + 2):
        raise ValueError(
            f"{fn}: `x` must have {nd + 1} or {nd + 2} dimensions "
            f"((C, *spatial) or (N, C, *spatial) with {nd} spatial axes), "
            f"got shape {shape}"
        )
    spatial = tuple(shape[-nd:])
    if min(spatial) < 1:
        raise ValueError(f"{fn}: spatial sizes of `x` must be >= 1, got shape {shape}")
    if math.prod(spatial) > _INT32_MAX:
        raise ValueError(
            f"{fn}: a spatial plane of `x` must have fewer than 2**31 elements "
            f"(indices are int32), got shape {shape}"
        )
    return spatial


def _static_int(fn: str, name: str, value: Any, item: Any) -> int:
    if isinstance(item, Tracer):
        raise TypeError(
            f"{fn}: `{name}` must be a static Python int or sequence of ints, got a "
            f"traced value {value!r}. Window arguments fix the output shape: close "
            "over them (functools.partial) or mark them static "
            "(jax.jit(..., static_argnames=...))."
        )
    if isinstance(item, (bool, np.bool_)):
        raise TypeError(f"{fn}: `{name}` must contain ints, got {value!r}")
    try:
        return operator.index(item)
    except TypeError:
        raise TypeError(f"{fn}: `{name}` must contain ints, got {value!r}") from None


def int_tuple(fn: str, name: str, value: Any, nd: int) -> tuple[int, ...]:
    """An int or a sequence of 1 or ``nd`` ints, as an ``nd``-tuple."""
    items = tuple(value) if isinstance(value, Sequence) else (value,)
    if isinstance(value, (np.ndarray, jax.Array)):
        items = (value,) if value.ndim == 0 else tuple(value)
    if len(items) not in (1, nd):
        raise ValueError(
            f"{fn}: `{name}` must be an int or a sequence of 1 or {nd} ints, "
            f"got {value!r}"
        )
    ints = tuple(_static_int(fn, name, value, v) for v in items)
    return ints * nd if len(ints) == 1 else ints


def static_bool(fn: str, name: str, value: Any) -> bool:
    if isinstance(value, Tracer):
        _static_int(fn, name, value, value)
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{fn}: `{name}` must be a bool, got {value!r}")
    return bool(value)


def pool_spec(
    fn: str,
    shape: tuple[int, ...],
    nd: int,
    kernel_size: Any,
    stride: Any,
    padding: Any,
    dilation: Any,
    ceil_mode: Any,
) -> PoolSpec:
    """Validate a strided pool's arguments for an input of ``shape``."""
    spatial = split_shape(fn, shape, nd)
    k = int_tuple(fn, "kernel_size", kernel_size, nd)
    empty = stride is None or (isinstance(stride, Sequence) and len(stride) == 0)
    s = k if empty else int_tuple(fn, "stride", stride, nd)
    p = int_tuple(fn, "padding", padding, nd)
    d = int_tuple(fn, "dilation", dilation, nd)
    ceil = static_bool(fn, "ceil_mode", ceil_mode)
    for name, given, vals in (
        ("kernel_size", kernel_size, k),
        ("stride", stride, s),
        ("dilation", dilation, d),
    ):
        if min(vals) < 1:
            raise ValueError(f"{fn}: `{name}` must be positive, got {name}={given!r}")
    if min(p) < 0 or any(pi > ki // 2 for pi, ki in zip(p, k, strict=False)):
        raise ValueError(
            f"{fn}: `padding` must be between 0 and kernel_size // 2 per axis, "
            f"got padding={p} for kernel_size={k}"
        )
    out = tuple(map(pool_output_size, spatial, k, s, p, d, (ceil,) * nd))
    if min(out) < 1:
        raise ValueError(
            f"{fn}: output size {out} is too small (< 1) for input spatial size "
            f"{spatial} with kernel_size={k}, stride={s}, padding={p}, "
            f"dilation={d}, ceil_mode={ceil}"
        )
    return PoolSpec(spatial, out, k, s, p, d, ceil)


def adaptive_spec(
    fn: str, shape: tuple[int, ...], nd: int, output_size: Any
) -> AdaptiveSpec:
    """Validate an adaptive pool's ``output_size`` for an input of ``shape``.

    ``output_size`` is an int or a sequence of ``nd`` entries, each an int >= 1
    or ``None`` (keep that input size).
    """
    spatial = split_shape(fn, shape, nd)
    if output_size is None:
        raise TypeError(
            f"{fn}: `output_size` must be an int or a sequence of {nd} ints or "
            f"None, got None"
        )
    if isinstance(output_size, Tracer):
        items: tuple[Any, ...] = (output_size,) * nd
    elif isinstance(output_size, Sequence):
        items = tuple(output_size)
    else:
        items = (output_size,) * nd
    if len(items) != nd:
        raise ValueError(
            f"{fn}: `output_size` must be an int or a sequence of {nd} entries, "
            f"got {output_size!r}"
        )
    out = tuple(
        size if item is None else _static_int(fn, "output_size", output_size, item)
        for size, item in zip(spatial, items, strict=True)
    )
    if min(out) < 1:
        raise ValueError(
            f"{fn}: `output_size` entries must be >= 1 (or None), "
            f"got output_size={output_size!r}"
        )
    return AdaptiveSpec(spatial, out)


def check_backward(
    fn: str, out_shape: tuple[int, ...], grad_output: jax.Array, indices: jax.Array
) -> None:
    """``grad_output`` and ``indices`` must both have the forward output's shape."""
    for name, arr in (("grad_output", grad_output), ("indices", indices)):
        if tuple(arr.shape) != out_shape:
            raise ValueError(
                f"{fn}: `{name}` must have the forward output's shape {out_shape}, "
                f"got shape {tuple(arr.shape)}"
            )


def adaptive_out_shape(
    fn: str, x_shape: tuple[int, ...], nd: int, grad_output: jax.Array
) -> tuple[int, ...]:
    """The forward output shape an adaptive backward's ``grad_output`` implies.

    Leading axes must match ``x``'s and every spatial size must be >= 1.
    """
    lead = x_shape[: len(x_shape) - nd]
    shape = tuple(grad_output.shape)
    if (
        shape[: len(shape) - nd] != lead
        or len(shape) != len(x_shape)
        or 0 in shape[len(shape) - nd :]
    ):
        raise ValueError(
            f"{fn}: `grad_output` must have shape {lead} + ({nd} output sizes >= 1) "
            f"for `x` of shape {x_shape}, got shape {shape}"
        )
    return shape
