"""The arguments of every op, their validation, and the spec they become.

Each op family's arguments are defined once here, as a typed dataclass
(:class:`PoolArgs`, :class:`AdaptiveArgs`, :class:`UnpoolArgs`) that the public
functions, the Flax and Equinox layers and ``verify`` share. A public function
validates them once, at trace time, into a :class:`~jaxpool._windows.PoolSpec`
(:func:`pool_spec`, :func:`adaptive_spec`), raising ``ValueError`` /
``TypeError`` that name the function, the argument and the value received.
"""

from __future__ import annotations

import dataclasses
import math
import operator
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.core import Tracer
from jax.experimental import checkify

from ._windows import (
    ALGORITHMS,
    IMPLEMENTATIONS,
    INT32_MAX,
    Algorithm,
    AxisWindows,
    Implementation,
    PoolSpec,
    adaptive_axis,
    pool_output_size,
    same_padding,
    split,
    with_spatial,
)

IntOrSeq = int | Sequence[int]
Padding = str | int | Sequence[int | tuple[int, int]]
OutputSize = int | Sequence[int | None]


def frozen(value: Any) -> Any:
    """Lists (nested too) as tuples: hashable, and static to every framework."""
    if isinstance(value, (list, tuple)):
        return tuple(frozen(v) for v in value)
    return value


def static_field(default: Any = dataclasses.MISSING, *, kw_only: bool = False) -> Any:
    """A field holding a static Python value (window arguments fix shapes).

    Its metadata tells Equinox to keep the field out of the pytree and to turn
    lists into tuples; the other users of these definitions ignore it.
    """
    return dataclasses.field(
        default=default,
        kw_only=kw_only,
        metadata={"static": True, "converter": frozen},
    )


@dataclasses.dataclass(eq=False)
class PoolArgs:
    """The arguments of ``max_pool{1,2,3}d_with_argmax``, of their backward ops
    (which add ``check_indices``) and of the ``MaxPool{1,2,3}d`` layers (which
    add ``return_indices``). See :func:`jaxpool.max_pool3d_with_argmax`."""

    kernel_size: IntOrSeq = static_field()
    stride: IntOrSeq | None = static_field(None)
    padding: Padding = static_field(0)
    dilation: IntOrSeq = static_field(1)
    ceil_mode: bool = static_field(False)
    channels_last: bool = static_field(False, kw_only=True)
    algorithm: Algorithm = static_field("auto", kw_only=True)
    implementation: Implementation | None = static_field(None, kw_only=True)


@dataclasses.dataclass(eq=False)
class AdaptiveArgs:
    """The arguments of ``adaptive_max_pool{1,2,3}d`` (the backward ops take
    ``channels_last`` and ``algorithm``) and of the ``AdaptiveMaxPool{1,2,3}d``
    layers. See :func:`jaxpool.adaptive_max_pool2d`."""

    output_size: OutputSize = static_field()
    channels_last: bool = static_field(False, kw_only=True)
    algorithm: Algorithm = static_field("auto", kw_only=True)
    implementation: Implementation | None = static_field(None, kw_only=True)


@dataclasses.dataclass(eq=False)
class UnpoolArgs:
    """The arguments of the ``MaxUnpool{1,2,3}d`` layers, PyTorch's
    ``nn.MaxUnpool*d``: the pool that the unpool inverts, which sets the default
    output size (see :func:`unpool_output_size`)."""

    kernel_size: IntOrSeq = static_field()
    stride: IntOrSeq | None = static_field(None)
    padding: IntOrSeq = static_field(0)
    channels_last: bool = static_field(False, kw_only=True)


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


def check_indices(name: str, indices: jax.Array, plane: int, enabled: Any) -> None:
    """With ``enabled``, a ``checkify`` check that every index lies in ``[0,
    plane)``, reporting the first bad one and its position.

    A functional check: it needs ``jax.experimental.checkify.checkify`` around
    the caller (under ``jit`` too), which returns the error to throw outside.
    """
    if not static_bool(name, "check_indices", enabled):
        return
    bad = (indices < 0) | (indices >= plane)
    first = jnp.argmax(bad.ravel())
    checkify.check(
        ~jnp.any(bad),
        f"{name}: `indices` holds {{value}} at position {{position}}, outside the "
        f"plane [0, {plane}) (position in indices.shape={tuple(indices.shape)})",
        value=indices.ravel()[first],
        position=jnp.stack(jnp.unravel_index(first, indices.shape)),
    )


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


def _items(value: Any) -> tuple[Any, ...]:
    if isinstance(value, (np.ndarray, jax.Array)):
        return (value,) if value.ndim == 0 else tuple(value)
    return tuple(value) if isinstance(value, Sequence) else (value,)


def int_tuple(name: str, arg: str, value: Any, nd: int) -> tuple[int, ...]:
    """An int or a sequence of 1 or ``nd`` ints, as an ``nd``-tuple."""
    if isinstance(value, str):
        raise TypeError(f"{name}: `{arg}` must contain ints, got {value!r}")
    items = _items(value)
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


# ----------------------------------------------------------------- the specs


def _padding(
    name: str,
    padding: Any,
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
    nd = len(spatial)
    if isinstance(padding, str):
        mode = padding.upper()
        if mode == "VALID":
            return ((0, 0),) * nd
        if mode == "SAME":
            return tuple(map(same_padding, spatial, k, s, d))
        raise ValueError(
            f"{name}: `padding` must be 'SAME', 'VALID', an int, or a sequence of "
            f"ints or (lo, hi) pairs, got {padding!r}"
        )
    items = _items(padding)
    if len(items) not in (1, nd):
        raise ValueError(
            f"{name}: `padding` must be an int, 'SAME', 'VALID', or a sequence of 1 "
            f"or {nd} ints or (lo, hi) pairs, got {padding!r}"
        )
    items = items * nd if len(items) == 1 else items
    pairs = []
    for item, ki, di in zip(items, k, d, strict=True):
        if isinstance(item, Sequence) and not isinstance(item, str):
            if len(item) != 2:
                raise ValueError(
                    f"{name}: `padding` pairs must be (lo, hi), got {padding!r}"
                )
            lo, hi = (static_int(name, "padding", padding, v) for v in item)
            if min(lo, hi) < 0 or max(lo, hi) > di * (ki - 1):
                raise ValueError(
                    f"{name}: each side of a `padding` pair must be between 0 and "
                    f"dilation * (kernel_size - 1), got padding={padding!r} for "
                    f"kernel_size={k}, dilation={d}"
                )
        else:
            lo = hi = static_int(name, "padding", padding, item)
            if not 0 <= lo <= ki // 2:
                raise ValueError(
                    f"{name}: `padding` must be between 0 and kernel_size // 2 per "
                    f"axis, got padding={padding!r} for kernel_size={k}"
                )
        pairs.append((lo, hi))
    return tuple(pairs)


def _spec(
    name: str, axes: Any, channels_last: bool, algorithm: Any, implementation: Any
) -> PoolSpec:
    """The spec of validated windows, with the algorithm and implementation
    checked."""
    algorithm = check_algorithm(name, algorithm)
    return PoolSpec(
        axes, channels_last, algorithm, check_implementation(name, implementation)
    )


def pool_spec(name: str, nd: int, shape: tuple[int, ...], args: PoolArgs) -> PoolSpec:
    """Validate a strided pool's arguments for an input of ``shape``."""
    channels_last = static_bool(name, "channels_last", args.channels_last)
    spatial = spatial_sizes(name, shape, nd, channels_last)
    k = int_tuple(name, "kernel_size", args.kernel_size, nd)
    stride = args.stride
    empty = stride is None or (isinstance(stride, Sequence) and len(stride) == 0)
    s = k if empty else int_tuple(name, "stride", stride, nd)
    d = int_tuple(name, "dilation", args.dilation, nd)
    ceil = static_bool(name, "ceil_mode", args.ceil_mode)
    for arg, given, values in (
        ("kernel_size", args.kernel_size, k),
        ("stride", stride, s),
        ("dilation", args.dilation, d),
    ):
        if min(values) < 1:
            raise ValueError(f"{name}: `{arg}` must be positive, got {arg}={given!r}")
    p = _padding(name, args.padding, spatial, k, s, d)
    out = tuple(map(pool_output_size, spatial, k, s, p, d, (ceil,) * nd))
    if min(out) < 1:
        raise ValueError(
            f"{name}: output size {out} is too small (< 1) for input spatial size "
            f"{spatial} with kernel_size={k}, stride={s}, padding={p}, "
            f"dilation={d}, ceil_mode={ceil}"
        )
    axes = tuple(
        AxisWindows(*a)
        for a in zip(spatial, out, k, s, (-lo for lo, _ in p), d, strict=True)
    )
    return _spec(name, axes, channels_last, args.algorithm, args.implementation)


def pool_backward_spec(
    name: str,
    nd: int,
    args: PoolArgs,
    grad_output: jax.Array,
    x: jax.ShapeDtypeStruct,
    indices: jax.Array,
) -> PoolSpec:
    """Validate a strided pool's backward: its arguments for an input of
    ``x``'s shape, and ``grad_output`` and ``indices`` of the output's."""
    spec = pool_spec(name, nd, x.shape, args)
    want = with_spatial(x.shape, nd, spec.trail, spec.out_size)
    check_shapes(
        name, want, nd, spec.channels_last, grad_output=grad_output, indices=indices
    )
    return spec


def _output_size(
    name: str, nd: int, spatial: tuple[int, ...], output_size: Any
) -> tuple[int, ...]:
    """``output_size``: an int or ``nd`` entries, each an int >= 1 or ``None``
    (keep that input size)."""
    if output_size is None:
        raise TypeError(
            f"{name}: `output_size` must be an int or a sequence of {nd} ints or "
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
            f"{name}: `output_size` must be an int or a sequence of {nd} entries, "
            f"got {output_size!r}"
        )
    out = tuple(
        size if item is None else static_int(name, "output_size", output_size, item)
        for size, item in zip(spatial, items, strict=True)
    )
    if min(out) < 1:
        raise ValueError(
            f"{name}: `output_size` entries must be >= 1 (or None), "
            f"got output_size={output_size!r}"
        )
    return out


def adaptive_spec(
    name: str, nd: int, shape: tuple[int, ...], args: AdaptiveArgs
) -> PoolSpec:
    """Validate an adaptive pool's arguments for an input of ``shape``."""
    channels_last = static_bool(name, "channels_last", args.channels_last)
    spatial = spatial_sizes(name, shape, nd, channels_last)
    out = _output_size(name, nd, spatial, args.output_size)
    axes = tuple(map(adaptive_axis, spatial, out))
    return _spec(name, axes, channels_last, args.algorithm, args.implementation)


def adaptive_backward_spec(
    name: str,
    nd: int,
    arrays: tuple[jax.Array, jax.ShapeDtypeStruct, jax.Array],
    channels_last: Any,
    algorithm: Any,
    implementation: Any,
) -> PoolSpec:
    """Validate an adaptive backward: with ``arrays`` its ``(grad_output, x,
    indices)``, the pool from ``x``'s shape to the spatial sizes of
    ``grad_output``, and ``indices`` of ``grad_output``'s shape."""
    grad_output, x, indices = arrays
    channels_last = static_bool(name, "channels_last", channels_last)
    spatial = spatial_sizes(name, x.shape, nd, channels_last)
    out = pooled_spatial(name, x.shape, nd, channels_last, "grad_output", grad_output)
    of = "`grad_output`'s"
    check_shapes(name, grad_output.shape, nd, channels_last, of=of, indices=indices)
    axes = tuple(map(adaptive_axis, spatial, out))
    return _spec(name, axes, channels_last, algorithm, implementation)


def unpool_output_size(
    name: str, nd: int, shape: tuple[int, ...], args: UnpoolArgs
) -> tuple[int, ...]:
    """PyTorch's default unpool size for pooled values of ``shape``: ``(in - 1)
    * stride - 2 * padding + kernel_size`` per axis."""
    channels_last = static_bool(name, "channels_last", args.channels_last)
    spatial_sizes(name, shape, nd, channels_last)
    k = int_tuple(name, "kernel_size", args.kernel_size, nd)
    s = k if args.stride is None else int_tuple(name, "stride", args.stride, nd)
    p = int_tuple(name, "padding", args.padding, nd)
    first, stop = split(len(shape), nd, int(channels_last))
    return tuple(
        (n - 1) * si - 2 * pi + ki
        for n, ki, si, pi in zip(shape[first:stop], k, s, p, strict=True)
    )


def unpool_sizes(
    name: str, nd: int, shape: tuple[int, ...], output_size: Any, channels_last: bool
) -> tuple[int, ...]:
    """An unpool's ``output_size``: ``nd`` spatial sizes, or a whole shape like
    ``x.shape`` (PyTorch accepts both) whose spatial sizes are used."""
    if not isinstance(output_size, Sequence) or isinstance(output_size, str):
        raise TypeError(
            f"{name}: `output_size` must be a sequence of {nd} ints, "
            f"got {output_size!r}"
        )
    sizes = tuple(static_int(name, "output_size", output_size, v) for v in output_size)
    if len(sizes) == len(shape):
        first, stop = split(len(sizes), nd, int(channels_last))
        sizes = sizes[first:stop]
    if len(sizes) != nd or min(sizes) < 1:
        raise ValueError(
            f"{name}: `output_size` must be {nd} spatial sizes >= 1 (or a shape of "
            f"x.ndim={len(shape)} entries), got {output_size!r}"
        )
    if math.prod(sizes) > INT32_MAX:
        raise ValueError(
            f"{name}: `output_size` must have fewer than 2**31 elements per plane "
            f"(indices are int32), got {output_size!r}"
        )
    return sizes
