"""Argument normalisation and validation, before any computation.

Every public function turns its arguments into a hashable, static spec here (a
NamedTuple of int tuples, see ``_windows``), raising ``ValueError`` /
``TypeError`` that name the function, the argument and the value received.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Sequence
from typing import Any, cast

import jax
import jax.numpy as jnp
import numpy as np
from jax.core import Tracer
from jax.experimental import checkify

from ._windows import (
    ALGORITHMS,
    AdaptiveSpec,
    Algorithm,
    PoolSpec,
    pool_output_size,
    same_padding,
    split,
)

INT32_MAX = 2**31 - 1


def algorithm(fn: str, value: Any) -> Algorithm:
    """A backward algorithm name: ``"scatter"`` or ``"gather"``."""
    if not isinstance(value, str) or value not in ALGORITHMS:
        raise ValueError(
            f"{fn}: `algorithm` must be one of {ALGORITHMS}, got {value!r}"
        )
    return cast(Algorithm, value)


def float_array(fn: str, name: str, x: Any) -> jax.Array:
    """``jnp.asarray(x)``, which must have a floating dtype."""
    x = jnp.asarray(x)
    if not jnp.issubdtype(x.dtype, jnp.floating):
        raise TypeError(f"{fn}: `{name}` must have a floating dtype, got {x.dtype}")
    return x


def int_array(fn: str, name: str, x: Any) -> jax.Array:
    """``jnp.asarray(x)``, which must have an integer dtype (not bool).

    Without ``jax_enable_x64`` JAX turns 64-bit host integers (PyTorch's int64
    indices) into int32 by wrapping, so ``2**32 + 3`` would become a valid
    ``3``: such out-of-range values become ``-1`` first, an index every op
    drops.
    """
    if not isinstance(x, jax.Array | Tracer) and not jax.config.read("jax_enable_x64"):
        host = np.asarray(x)
        if jnp.issubdtype(host.dtype, jnp.integer) and host.dtype.itemsize == 8:
            wide = (host < -(2**31)) | (host > INT32_MAX)
            x = np.where(wide, -1, host).astype(np.int32) if wide.any() else host
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


def layout(nd: int, channels_last: bool) -> str:
    """The accepted input forms, for error messages."""
    spatial = ", ".join(("D", "H", "W")[3 - nd :]) if nd <= 3 else f"{nd} axes"
    if channels_last:
        return f"(N, {spatial}, C) or ({spatial}, C)"
    return f"(N, C, {spatial}) or (C, {spatial})"


def split_shape(
    fn: str, shape: tuple[int, ...], nd: int, channels_last: bool = False
) -> tuple[int, ...]:
    """Check a pooled array's shape (see :func:`layout`); return its spatial
    sizes."""
    if len(shape) not in (nd + 1, nd + 2):
        raise ValueError(
            f"{fn}: `x` must have {nd + 1} or {nd + 2} dimensions, "
            f"{layout(nd, channels_last)}, got shape {shape}"
        )
    first, stop = split(len(shape), nd, int(channels_last))
    spatial = tuple(shape[first:stop])
    if min(spatial) < 1:
        raise ValueError(f"{fn}: spatial sizes of `x` must be >= 1, got shape {shape}")
    if math.prod(spatial) > INT32_MAX:
        raise ValueError(
            f"{fn}: a spatial plane of `x` must have fewer than 2**31 elements "
            f"(indices are int32), got shape {shape}"
        )
    return spatial


def static_int(fn: str, name: str, value: Any, item: Any) -> int:
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


def _items(value: Any) -> tuple[Any, ...]:
    if isinstance(value, (np.ndarray, jax.Array)):
        return (value,) if value.ndim == 0 else tuple(value)
    return tuple(value) if isinstance(value, Sequence) else (value,)


def int_tuple(fn: str, name: str, value: Any, nd: int) -> tuple[int, ...]:
    """An int or a sequence of 1 or ``nd`` ints, as an ``nd``-tuple."""
    if isinstance(value, str):
        raise TypeError(f"{fn}: `{name}` must contain ints, got {value!r}")
    items = _items(value)
    if len(items) not in (1, nd):
        raise ValueError(
            f"{fn}: `{name}` must be an int or a sequence of 1 or {nd} ints, "
            f"got {value!r}"
        )
    ints = tuple(static_int(fn, name, value, v) for v in items)
    return ints * nd if len(ints) == 1 else ints


def static_bool(fn: str, name: str, value: Any) -> bool:
    if isinstance(value, Tracer):
        static_int(fn, name, value, value)
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{fn}: `{name}` must be a bool, got {value!r}")
    return bool(value)


def _padding(
    fn: str,
    padding: Any,
    nd: int,
    spatial: tuple[int, ...],
    k: tuple[int, ...],
    s: tuple[int, ...],
    d: tuple[int, ...],
) -> tuple[tuple[int, int], ...]:
    """``(lo, hi)`` per axis from any accepted ``padding`` form.

    An int ``p`` is PyTorch's ``(p, p)`` and must be at most ``kernel_size //
    2``; an explicit pair may be asymmetric, each side at most ``dilation *
    (kernel_size - 1)`` (every window then reaches the input).
    """
    if isinstance(padding, str):
        mode = padding.upper()
        if mode == "VALID":
            return ((0, 0),) * nd
        if mode == "SAME":
            return tuple(map(same_padding, spatial, k, s, d))
        raise ValueError(
            f"{fn}: `padding` must be 'SAME', 'VALID', an int, or a sequence of "
            f"ints or (lo, hi) pairs, got {padding!r}"
        )
    items = _items(padding)
    if len(items) not in (1, nd):
        raise ValueError(
            f"{fn}: `padding` must be an int, 'SAME', 'VALID', or a sequence of 1 or "
            f"{nd} ints or (lo, hi) pairs, got {padding!r}"
        )
    items = items * nd if len(items) == 1 else items
    pairs = []
    for item, ki, di in zip(items, k, d, strict=True):
        if isinstance(item, Sequence) and not isinstance(item, str):
            if len(item) != 2:
                raise ValueError(
                    f"{fn}: `padding` pairs must be (lo, hi), got {padding!r}"
                )
            lo, hi = (static_int(fn, "padding", padding, v) for v in item)
            if min(lo, hi) < 0 or max(lo, hi) > di * (ki - 1):
                raise ValueError(
                    f"{fn}: each side of a `padding` pair must be between 0 and "
                    f"dilation * (kernel_size - 1), got padding={padding!r} for "
                    f"kernel_size={k}, dilation={d}"
                )
        else:
            lo = hi = static_int(fn, "padding", padding, item)
            if not 0 <= lo <= ki // 2:
                raise ValueError(
                    f"{fn}: `padding` must be between 0 and kernel_size // 2 per "
                    f"axis, got padding={padding!r} for kernel_size={k}"
                )
        pairs.append((lo, hi))
    return tuple(pairs)


def pool_spec(
    fn: str,
    shape: tuple[int, ...],
    nd: int,
    kernel_size: Any,
    stride: Any,
    padding: Any,
    dilation: Any,
    ceil_mode: Any,
    channels_last: Any,
) -> PoolSpec:
    """Validate a strided pool's arguments for an input of ``shape``."""
    cl = static_bool(fn, "channels_last", channels_last)
    spatial = split_shape(fn, shape, nd, cl)
    k = int_tuple(fn, "kernel_size", kernel_size, nd)
    empty = stride is None or (isinstance(stride, Sequence) and len(stride) == 0)
    s = k if empty else int_tuple(fn, "stride", stride, nd)
    d = int_tuple(fn, "dilation", dilation, nd)
    ceil = static_bool(fn, "ceil_mode", ceil_mode)
    for name, given, vals in (
        ("kernel_size", kernel_size, k),
        ("stride", stride, s),
        ("dilation", dilation, d),
    ):
        if min(vals) < 1:
            raise ValueError(f"{fn}: `{name}` must be positive, got {name}={given!r}")
    p = _padding(fn, padding, nd, spatial, k, s, d)
    out = tuple(map(pool_output_size, spatial, k, s, p, d, (ceil,) * nd))
    if min(out) < 1:
        raise ValueError(
            f"{fn}: output size {out} is too small (< 1) for input spatial size "
            f"{spatial} with kernel_size={k}, stride={s}, padding={p}, "
            f"dilation={d}, ceil_mode={ceil}"
        )
    return PoolSpec(spatial, out, k, s, p, d, ceil, cl)


def adaptive_spec(
    fn: str, shape: tuple[int, ...], nd: int, output_size: Any, channels_last: Any
) -> AdaptiveSpec:
    """Validate an adaptive pool's ``output_size`` for an input of ``shape``.

    ``output_size`` is an int or a sequence of ``nd`` entries, each an int >= 1
    or ``None`` (keep that input size).
    """
    cl = static_bool(fn, "channels_last", channels_last)
    spatial = split_shape(fn, shape, nd, cl)
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
        size if item is None else static_int(fn, "output_size", output_size, item)
        for size, item in zip(spatial, items, strict=True)
    )
    if min(out) < 1:
        raise ValueError(
            f"{fn}: `output_size` entries must be >= 1 (or None), "
            f"got output_size={output_size!r}"
        )
    return AdaptiveSpec(spatial, out, cl)


def _other_layout(shape: tuple[int, ...], nd: int, channels_last: bool) -> tuple:
    """``shape`` with its channel axis moved to the other layout."""
    first, stop = split(len(shape), nd, int(channels_last))
    if channels_last:
        return (*shape[:first], shape[-1], *shape[first:stop])
    if first == 0:
        return shape
    return (*shape[: first - 1], *shape[first:], shape[first - 1])


def check_shapes(
    fn: str,
    want: tuple[int, ...],
    nd: int,
    channels_last: bool,
    **arrays: jax.Array,
) -> None:
    """Each named array must have shape ``want`` (the forward output's, in the
    ``channels_last`` layout); a shape of the other layout is named as such."""
    for name, arr in arrays.items():
        got = tuple(arr.shape)
        if got != want:
            hint = ""
            if got == _other_layout(want, nd, channels_last) and len(got) > nd:
                other = "channels-first" if channels_last else "channels-last"
                hint = f" (that is the {other} layout: check `channels_last`)"
            raise ValueError(
                f"{fn}: `{name}` must have the forward output's shape {want}, "
                f"got shape {got}{hint}"
            )


def pooled_spatial(
    fn: str,
    x_shape: tuple[int, ...],
    nd: int,
    channels_last: bool,
    name: str,
    pooled: jax.Array,
) -> tuple[int, ...]:
    """The spatial sizes of a pooled array (an adaptive backward's
    ``grad_output``, an unpool's ``x``) whose other axes must match ``x``'s."""
    trail = int(channels_last)
    shape = tuple(pooled.shape)
    first, stop = split(len(x_shape), nd, trail)
    if (
        len(shape) != len(x_shape)
        or shape[:first] + shape[stop:] != x_shape[:first] + x_shape[stop:]
        or 0 in shape[first:stop]
    ):
        raise ValueError(
            f"{fn}: `{name}` must have the shape of `x` ({x_shape}) with its {nd} "
            f"spatial sizes >= 1 ({layout(nd, channels_last)}), got shape {shape}"
        )
    return shape[first:stop]


def check_indices(fn: str, indices: jax.Array, plane: int, enabled: Any) -> None:
    """With ``enabled``, a ``checkify`` check that every index lies in ``[0,
    plane)``, reporting the first bad one and its position.

    A functional check: it needs ``jax.experimental.checkify.checkify`` around
    the caller (under ``jit`` too), which returns the error to throw outside.
    """
    if not static_bool(fn, "check_indices", enabled):
        return
    bad = (indices < 0) | (indices >= plane)
    first = jnp.argmax(bad.ravel())
    checkify.check(
        ~jnp.any(bad),
        f"{fn}: `indices` holds {{value}} at position {{position}}, outside the "
        f"plane [0, {plane}) (position in indices.shape={tuple(indices.shape)})",
        value=indices.ravel()[first],
        position=jnp.stack(jnp.unravel_index(first, indices.shape)),
    )
