"""The checks of every op's arguments and arrays: coercion, shapes, static values.

Each raises ``ValueError`` (shapes, values) or ``TypeError`` (dtypes, traced
or non-integer window arguments) with a message that names the function, the
argument and the value received. The spec builders (``_spec``,
``_fractional_spec``) and the public functions call them at trace time, once.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.core import Tracer
from jax.experimental import checkify

from ._columns import coordinates, per_window
from ._windows import (
    ALGORITHMS,
    IMPLEMENTATIONS,
    INT32_MAX,
    Algorithm,
    Implementation,
    PoolSpec,
    split,
)

# ------------------------------------------------------------------ arrays


def float_array(name: str, arg: str, x: Any) -> jax.Array:
    """``jnp.asarray(x)``, which must have a floating dtype."""
    x = jnp.asarray(x)
    if not jnp.issubdtype(x.dtype, jnp.floating):
        raise TypeError(f"{name}: `{arg}` must have a floating dtype, got {x.dtype}")
    return x


def int_array(name: str, arg: str, x: Any) -> jax.Array:
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
        raise TypeError(f"{name}: `{arg}` must have an integer dtype, got {x.dtype}")
    return x


def shape_dtype(name: str, arg: str, x: Any) -> jax.ShapeDtypeStruct:
    """Shape and floating dtype of an array or ``jax.ShapeDtypeStruct``."""
    if not (hasattr(x, "shape") and hasattr(x, "dtype")):
        x = np.asarray(x)
    dtype = jax.dtypes.canonicalize_dtype(x.dtype)
    if not jnp.issubdtype(dtype, jnp.floating):
        raise TypeError(f"{name}: `{arg}` must have a floating dtype, got {x.dtype}")
    return jax.ShapeDtypeStruct(tuple(x.shape), dtype)


def backward_arrays(
    name: str, grad_output: Any, x: Any, indices: Any
) -> tuple[jax.Array, jax.ShapeDtypeStruct, jax.Array]:
    """A backward op's arrays: floating ``grad_output``, the shape and floating
    dtype of ``x``, integer ``indices``."""
    x = shape_dtype(name, "x", x)
    grad_output = float_array(name, "grad_output", grad_output)
    return grad_output, x, int_array(name, "indices", indices)


def layout_forms(nd: int, channels_last: bool) -> str:
    """The accepted input forms, for error messages."""
    spatial = ", ".join(("D", "H", "W")[3 - nd :]) if nd <= 3 else f"{nd} axes"
    if channels_last:
        return f"(N, {spatial}, C) or ({spatial}, C)"
    return f"(N, C, {spatial}) or (C, {spatial})"


def spatial_sizes(
    name: str, shape: tuple[int, ...], nd: int, channels_last: bool
) -> tuple[int, ...]:
    """Check a pooled array's shape (see :func:`layout_forms`); return its
    spatial sizes."""
    if len(shape) not in (nd + 1, nd + 2):
        raise ValueError(
            f"{name}: `x` must have {nd + 1} or {nd + 2} dimensions, "
            f"{layout_forms(nd, channels_last)}, got shape {shape}"
        )
    first, stop = split(len(shape), nd, int(channels_last))
    spatial = tuple(shape[first:stop])
    if not all(isinstance(size, int) for size in spatial):
        raise ValueError(
            f"{name}: the spatial sizes of `x` must be static ints (they fix every "
            f"window); only the batch and channel axes may be symbolic, "
            f"got shape {shape}"
        )
    if min(spatial) < 1:
        raise ValueError(
            f"{name}: spatial sizes of `x` must be >= 1, got shape {shape}"
        )
    if math.prod(spatial) > INT32_MAX:
        raise ValueError(
            f"{name}: a spatial plane of `x` must have fewer than 2**31 elements "
            f"(indices are int32), got shape {shape}"
        )
    return spatial


def _other_layout(shape: tuple[int, ...], nd: int, channels_last: bool) -> tuple:
    """``shape`` with its channel axis moved to the other layout."""
    first, stop = split(len(shape), nd, int(channels_last))
    if channels_last:
        return (*shape[:first], shape[-1], *shape[first:stop])
    if first == 0:
        return shape
    return (*shape[: first - 1], *shape[first:], shape[first - 1])


def check_shapes(
    name: str,
    want: tuple[int, ...],
    nd: int,
    channels_last: bool,
    of: str = "the forward output's",
    **arrays: jax.Array,
) -> None:
    """Each named array must have shape ``want`` (``of`` says whose shape that
    is); a shape of the other layout is named as such."""
    for arg, arr in arrays.items():
        got = tuple(arr.shape)
        if got != want:
            hint = ""
            if got == _other_layout(want, nd, channels_last) and len(got) > nd:
                other = "channels-first" if channels_last else "channels-last"
                hint = f" (that is the {other} layout: check `channels_last`)"
            raise ValueError(
                f"{name}: `{arg}` must have {of} shape {want}, got shape {got}{hint}"
            )


def pooled_spatial(
    name: str,
    x_shape: tuple[int, ...],
    nd: int,
    channels_last: bool,
    arg: str,
    pooled: jax.Array,
) -> tuple[int, ...]:
    """The spatial sizes of a pooled array (an adaptive backward's
    ``grad_output``, an unpool's ``x``) whose other axes must match ``x``'s."""
    shape = tuple(pooled.shape)
    first, stop = split(len(x_shape), nd, int(channels_last))
    if (
        len(shape) != len(x_shape)
        or shape[:first] + shape[stop:] != x_shape[:first] + x_shape[stop:]
        or 0 in shape[first:stop]
    ):
        raise ValueError(
            f"{name}: `{arg}` must have the shape of `x` ({x_shape}) with its {nd} "
            f"spatial sizes >= 1 ({layout_forms(nd, channels_last)}), "
            f"got shape {shape}"
        )
    return shape[first:stop]


def backward_sizes(
    name: str,
    nd: int,
    arrays: tuple[jax.Array, jax.ShapeDtypeStruct, jax.Array],
    channels_last: bool,
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The spatial sizes of ``x`` and of ``grad_output`` of a backward op whose
    pool's output size is ``grad_output``'s (``arrays``: its ``(grad_output, x,
    indices)``): ``grad_output`` with ``x``'s other axes, ``indices`` of
    ``grad_output``'s shape."""
    grad_output, x, indices = arrays
    spatial = spatial_sizes(name, x.shape, nd, channels_last)
    out = pooled_spatial(name, x.shape, nd, channels_last, "grad_output", grad_output)
    of = "`grad_output`'s"
    check_shapes(name, grad_output.shape, nd, channels_last, of=of, indices=indices)
    return spatial, out


def check_indices(
    name: str,
    indices: jax.Array,
    plane: int,
    enabled: Any,
    windows: PoolSpec | None = None,
) -> None:
    """With ``enabled``, a ``checkify`` check that every index lies in ``[0,
    plane)``, and with ``windows`` within its own window of them (what an
    unpool under a mesh requires), reporting the first bad one and its
    position.

    A functional check: it needs ``jax.experimental.checkify.checkify`` around
    the caller (under ``jit`` too), which returns the error to throw outside.
    """
    if not static_bool(name, "check_indices", enabled):
        return
    bad = (indices < 0) | (indices >= plane)
    where = f"outside the plane [0, {plane})"
    if windows is not None:
        bad = bad | ~_in_window(indices, windows)
        where = "outside its window (under a mesh an unpool places each value there)"
    first = jnp.argmax(bad.ravel())
    checkify.check(
        ~jnp.any(bad),
        f"{name}: `indices` holds {{value}} at position {{position}}, {where} "
        f"(position in indices.shape={tuple(indices.shape)})",
        value=indices.ravel()[first],
        position=jnp.stack(jnp.unravel_index(first, indices.shape)),
    )


def _in_window(indices: jax.Array, windows: PoolSpec) -> jax.Array:
    """Whether each index's coordinates lie in its own window's span."""
    lead, _ = split(indices.ndim, windows.nd, windows.trail)
    flat = jnp.clip(indices, 0, max(0, math.prod(windows.in_size) - 1))
    inside = jnp.ones(indices.shape, bool)
    at = coordinates(flat.astype(jnp.int32), windows.in_size)
    for a, (w, c) in enumerate(zip(windows.axes, at, strict=True)):
        lo, hi = (
            per_window(b.astype(np.int32), lead + a, indices.shape) for b in w.span()
        )
        inside = inside & (c >= lo) & (c < hi)
    return inside


# ------------------------------------------------------------ static values


def static_int(name: str, arg: str, value: Any, item: Any) -> int:
    if isinstance(item, Tracer):
        raise TypeError(
            f"{name}: `{arg}` must be a static Python int or sequence of ints, got "
            f"a traced value {value!r}. Window arguments fix the output shape: "
            "close over them (functools.partial) or mark them static "
            "(jax.jit(..., static_argnames=...))."
        )
    if isinstance(item, (bool, np.bool_)):
        raise TypeError(f"{name}: `{arg}` must contain ints, got {value!r}")
    try:
        return operator.index(item)
    except TypeError:
        raise TypeError(f"{name}: `{arg}` must contain ints, got {value!r}") from None


def static_bool(name: str, arg: str, value: Any) -> bool:
    if isinstance(value, Tracer):
        static_int(name, arg, value, value)
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name}: `{arg}` must be a bool, got {value!r}")
    return bool(value)


def entries(value: Any) -> tuple[Any, ...]:
    """``value``'s entries: a sequence's or an array's items, else ``(value,)``."""
    if isinstance(value, (np.ndarray, jax.Array)):
        return (value,) if value.ndim == 0 else tuple(value)
    return tuple(value) if isinstance(value, Sequence) else (value,)


def int_tuple(name: str, arg: str, value: Any, nd: int) -> tuple[int, ...]:
    """An int or a sequence of 1 or ``nd`` ints, as an ``nd``-tuple."""
    if isinstance(value, str):
        raise TypeError(f"{name}: `{arg}` must contain ints, got {value!r}")
    items = entries(value)
    if len(items) not in (1, nd):
        raise ValueError(
            f"{name}: `{arg}` must be an int or a sequence of 1 or {nd} ints, "
            f"got {value!r}"
        )
    ints = tuple(static_int(name, arg, value, v) for v in items)
    return ints * nd if len(ints) == 1 else ints


def check_implementation(name: str, value: Any) -> Implementation | None:
    """``None`` (the platform's choice), ``"xla"`` or ``"pallas"``."""
    for implementation in (None, *IMPLEMENTATIONS):
        if value is implementation or (
            isinstance(value, str) and value == implementation
        ):
            return implementation
    raise ValueError(
        f"{name}: `implementation` must be None, 'xla' or 'pallas', got {value!r}"
    )


def check_algorithm(name: str, value: Any) -> Algorithm:
    """A backward algorithm name: ``"auto"``, ``"scatter"`` or ``"gather"``."""
    for algorithm in ALGORITHMS:
        if isinstance(value, str) and value == algorithm:
            return algorithm
    raise ValueError(f"{name}: `algorithm` must be one of {ALGORITHMS}, got {value!r}")
