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
from typing import Any, NamedTuple

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
    """The arguments of ``max_unpool{1,2,3}d`` (which add ``output_size`` and
    ``check_indices``) and of the ``MaxUnpool{1,2,3}d`` layers (whose call takes
    ``output_size``), PyTorch's ``max_unpool*d`` / ``nn.MaxUnpool*d``: the pool
    that the unpool inverts, which sets the default output size and the sizes
    allowed (see :func:`unpool_output`). The functions accept
    ``kernel_size=None`` with an explicit output size."""

    kernel_size: IntOrSeq | None = static_field()
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


def _window_ints(
    name: str, nd: int, args: UnpoolArgs
) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    """An unpool's ``kernel_size``, ``stride`` and ``padding``, each an
    ``nd``-tuple, checked as the pools check them (an int per axis)."""
    k = int_tuple(name, "kernel_size", args.kernel_size, nd)
    stride = args.stride
    empty = stride is None or (isinstance(stride, Sequence) and len(stride) == 0)
    s = k if empty else int_tuple(name, "stride", stride, nd)
    for arg, given, values in (
        ("kernel_size", args.kernel_size, k),
        ("stride", stride, s),
    ):
        if min(values) < 1:
            raise ValueError(f"{name}: `{arg}` must be positive, got {arg}={given!r}")
    p = int_tuple(name, "padding", args.padding, nd)
    if not all(0 <= pi <= ki // 2 for pi, ki in zip(p, k, strict=True)):
        raise ValueError(
            f"{name}: `padding` must be between 0 and kernel_size // 2 per axis, "
            f"got padding={args.padding!r} for kernel_size={k}"
        )
    return k, s, p


def _given_output_size(
    name: str, nd: int, shape: tuple[int, ...], channels_last: bool, output_size: Any
) -> tuple[int, ...]:
    """An explicit ``output_size``: ``nd`` spatial sizes >= 1, or a whole shape
    of ``len(shape)`` entries (PyTorch's form) whose batch and channel entries
    must be ``shape``'s (PyTorch ignores them; a mismatch there is a bug, such
    as a shape of the other layout)."""
    if not isinstance(output_size, Sequence) or isinstance(output_size, str):
        raise TypeError(
            f"{name}: `output_size` must be a sequence of {nd} ints (or the whole "
            f"shape), got {output_size!r}"
        )
    given = tuple(output_size)
    if len(given) == len(shape):
        first, stop = split(len(shape), nd, int(channels_last))
        if given[:first] + given[stop:] != shape[:first] + shape[stop:]:
            hint = ""
            other_first, other_stop = split(len(shape), nd, int(not channels_last))
            other = given[:other_first] + given[other_stop:]
            if other == shape[:first] + shape[stop:]:
                layout = "channels-last" if not channels_last else "channels-first"
                hint = f" (that is the {layout} layout: check `channels_last`)"
            raise ValueError(
                f"{name}: `output_size` as a whole shape must have the batch and "
                f"channel sizes of `x` (shape {shape}, "
                f"{layout_forms(nd, channels_last)}), got {output_size!r}{hint}"
            )
        given = given[first:stop]
    elif len(given) != nd:
        raise ValueError(
            f"{name}: `output_size` must have {nd} entries (the spatial sizes) or "
            f"x.ndim={len(shape)} (the whole shape), got {output_size!r}"
        )
    sizes = tuple(static_int(name, "output_size", output_size, v) for v in given)
    if min(sizes) < 1:
        raise ValueError(
            f"{name}: `output_size` must have spatial sizes >= 1, got {output_size!r}"
        )
    return sizes


def unpool_output(
    name: str,
    nd: int,
    x: jax.Array,
    indices: jax.Array,
    args: UnpoolArgs,
    output_size: Any,
) -> jax.ShapeDtypeStruct:
    """Validate an unpool of pooled values ``x`` at ``indices``: the shape and
    dtype of its result.

    PyTorch's rules (``torch.nn.functional._unpool_output_size``): with
    ``kernel_size``, the default size is ``(in - 1) * stride + kernel_size - 2
    * padding`` per axis, and an explicit ``output_size`` must lie strictly
    between ``default - stride`` and ``default + stride`` on every axis;
    without it, ``output_size`` is required. A whole shape's batch and channel
    entries must be ``x``'s (PyTorch ignores them).
    """
    channels_last = static_bool(name, "channels_last", args.channels_last)
    spatial = spatial_sizes(name, x.shape, nd, channels_last)
    check_shapes(name, x.shape, nd, channels_last, indices=indices)
    if args.kernel_size is None:
        if output_size is None:
            raise TypeError(
                f"{name}: `output_size` is required without `kernel_size` (give "
                "the pool's kernel_size, and its stride and padding, as PyTorch "
                "does, or the output size), got kernel_size=None, output_size=None"
            )
        for arg, value in (("stride", args.stride), ("padding", args.padding)):
            if value not in (None, 0, ()):
                raise ValueError(
                    f"{name}: `{arg}` needs `kernel_size` (the pool's window), got "
                    f"{arg}={value!r} with kernel_size=None"
                )
        sizes = _given_output_size(name, nd, x.shape, channels_last, output_size)
    else:
        k, s, p = _window_ints(name, nd, args)
        default = tuple(
            (n - 1) * si + ki - 2 * pi
            for n, ki, si, pi in zip(spatial, k, s, p, strict=True)
        )
        window = f"kernel_size={k}, stride={s}, padding={p}"
        if output_size is None:
            if min(default) < 1:
                raise ValueError(
                    f"{name}: the default output size (in - 1) * stride + "
                    f"kernel_size - 2 * padding is {default}, below 1, for `x` of "
                    f"shape {x.shape} with {window}"
                )
            sizes = default
        else:
            sizes = _given_output_size(name, nd, x.shape, channels_last, output_size)
            for d, (size, dflt, si) in enumerate(zip(sizes, default, s, strict=True)):
                if not dflt - si < size < dflt + si:
                    raise ValueError(
                        f"{name}: `output_size` {output_size!r} is invalid (dim {d} "
                        f"must be between {dflt - si} and {dflt + si}, exclusive): "
                        "each spatial size must lie strictly within `stride` of the "
                        "default (in - 1) * stride + kernel_size - 2 * padding = "
                        f"{default}, for {window}"
                    )
    if math.prod(sizes) > INT32_MAX:
        raise ValueError(
            f"{name}: the output must have fewer than 2**31 elements per plane "
            f"(indices are int32), got spatial sizes {sizes}"
        )
    shape = with_spatial(x.shape, nd, int(channels_last), sizes)
    return jax.ShapeDtypeStruct(shape, x.dtype)


# -------------------------------------------------------- fractional pools

Ratio = float | Sequence[float]


@dataclasses.dataclass(eq=False)
class FractionalArgs:
    """The static arguments of ``fractional_max_pool{2,3}d`` and of the
    ``FractionalMaxPool{2,3}d`` layers (the samples or key are arrays, given at
    call). See :func:`jaxpool.fractional_max_pool2d`."""

    kernel_size: IntOrSeq = static_field()
    output_size: IntOrSeq | None = static_field(None)
    output_ratio: Ratio | None = static_field(None)
    channels_last: bool = static_field(False, kw_only=True)
    algorithm: Algorithm = static_field("auto", kw_only=True)
    implementation: Implementation | None = static_field(None, kw_only=True)


class FractionalSpec(NamedTuple):
    """A validated fractional pool: the sizes per spatial axis (order D, H, W),
    the layout and the backward algorithm. Its windows depend on the samples,
    which are arrays, so they are not part of it."""

    in_size: tuple[int, ...]
    out_size: tuple[int, ...]
    kernel_size: tuple[int, ...]
    channels_last: bool
    algorithm: Algorithm

    @property
    def nd(self) -> int:
        return len(self.in_size)


def _fractional_common(
    name: str, channels_last: Any, algorithm: Any, implementation: Any
) -> tuple[bool, Algorithm]:
    if check_implementation(name, implementation) == "pallas":
        raise ValueError(
            f"{name}: `implementation` must be None or 'xla' (fractional pools "
            f"have no Pallas kernel), got {implementation!r}"
        )
    cl = static_bool(name, "channels_last", channels_last)
    return cl, check_algorithm(name, algorithm)


def _ratios(name: str, nd: int, ratio: Any) -> tuple[float, ...]:
    items = _items(ratio)
    if isinstance(ratio, str) or len(items) not in (1, nd):
        raise ValueError(
            f"{name}: `output_ratio` must be a number or a sequence of 1 or {nd} "
            f"numbers, got {ratio!r}"
        )
    for item in items:
        if isinstance(item, (Tracer, bool, np.bool_)):
            raise TypeError(
                f"{name}: `output_ratio` must contain static Python numbers, "
                f"got {ratio!r}"
            )
        if not isinstance(item, (int, float, np.integer, np.floating)):
            raise TypeError(
                f"{name}: `output_ratio` must contain numbers, got {ratio!r}"
            )
    values = tuple(float(v) for v in items) * (nd if len(items) == 1 else 1)
    if not all(0.0 < v < 1.0 for v in values):
        raise ValueError(
            f"{name}: `output_ratio` must lie in (0, 1) per axis, "
            f"got output_ratio={ratio!r}"
        )
    return values


def fractional_spec(
    name: str, nd: int, shape: tuple[int, ...], args: FractionalArgs
) -> FractionalSpec:
    """Validate a fractional pool's arguments for an input of ``shape``:
    exactly one of ``output_size`` and ``output_ratio`` (PyTorch's
    ``int(input_size * ratio)`` per axis), and PyTorch's ``output_size +
    kernel_size - 1 <= input_size`` per axis (``<`` in 3-D, as PyTorch)."""
    cl, algorithm = _fractional_common(
        name, args.channels_last, args.algorithm, args.implementation
    )
    spatial = spatial_sizes(name, shape, nd, cl)
    k = int_tuple(name, "kernel_size", args.kernel_size, nd)
    if min(k) < 1:
        raise ValueError(
            f"{name}: `kernel_size` must be positive, "
            f"got kernel_size={args.kernel_size!r}"
        )
    size, ratio = args.output_size, args.output_ratio
    if (size is None) == (ratio is None):
        raise ValueError(
            f"{name}: exactly one of `output_size` and `output_ratio` must be given, "
            f"got output_size={size!r}, output_ratio={ratio!r}"
        )
    if size is not None:
        out = int_tuple(name, "output_size", size, nd)
        given = f"output_size={size!r}"
    else:
        out = tuple(
            int(n * r) for n, r in zip(spatial, _ratios(name, nd, ratio), strict=True)
        )
        given = f"output_ratio={ratio!r} (output size {out})"
    if min(out) < 1:
        raise ValueError(
            f"{name}: the output size must be >= 1 per axis, got {given} for input "
            f"spatial size {spatial}"
        )
    # PyTorch's rule: at most the input size in 2-D, less than it in 3-D.
    limit = tuple(n - (nd == 3) for n in spatial)
    if any(o + ki - 1 > n for o, ki, n in zip(out, k, limit, strict=True)):
        bound = "less than" if nd == 3 else "at most"
        raise ValueError(
            f"{name}: `output_size` + `kernel_size` - 1 must be {bound} the input "
            f"size per axis, got {given} for kernel_size={k} and input spatial size "
            f"{spatial}"
        )
    return FractionalSpec(spatial, out, k, cl, algorithm)


def fractional_samples(
    name: str, nd: int, x: jax.Array, spec: FractionalSpec, samples: Any, key: Any
) -> jax.Array:
    """The samples as ``(N, C, nd)`` (``N = 1`` for an unbatched ``x``): the
    given ones (PyTorch's ``_random_samples``: ``(N', C, nd)`` with ``N' >=
    N``, the first ``N`` used; ``(C, nd)`` too for an unbatched ``x``), in
    ``x``'s dtype, or drawn from ``key`` uniformly in ``[0, 1)``."""
    if (samples is None) == (key is None):
        raise ValueError(
            f"{name}: exactly one of `samples` and `key` must be given, got "
            f"{'both' if key is not None else 'neither'}"
        )
    batched = x.ndim == nd + 2
    first, _ = split(x.ndim, nd, int(spec.channels_last))
    channels = x.shape[-1] if spec.channels_last else x.shape[first - 1]
    batch = x.shape[0] if batched else 1
    if key is not None:
        if not isinstance(key, jax.Array | Tracer):
            raise TypeError(f"{name}: `key` must be a JAX PRNG key, got {key!r}")
        shape = (batch, channels, nd) if batched else (channels, nd)
        drawn = jax.random.uniform(key, shape, x.dtype)
        return drawn if batched else drawn[None]
    samples = jnp.asarray(samples)
    if samples.dtype != x.dtype:
        raise TypeError(
            f"{name}: `samples` must have the dtype of `x` ({x.dtype}), got "
            f"{samples.dtype}"
        )
    given = tuple(samples.shape)
    if not batched and samples.ndim == 2:
        samples = samples[None]
    forms = f"(N, C, {nd}) with N >= {batch}" + ("" if batched else f" or (C, {nd})")
    if (
        samples.ndim != 3
        or samples.shape[1:] != (channels, nd)
        or not samples.shape[0] >= batch
    ):
        raise ValueError(
            f"{name}: `samples` must have shape {forms}, C={channels}, for x of "
            f"shape {x.shape}, got shape {given}"
        )
    return samples[:batch]


def fractional_backward_spec(
    name: str,
    nd: int,
    arrays: tuple[jax.Array, jax.ShapeDtypeStruct, jax.Array],
    channels_last: Any,
    algorithm: Any,
    implementation: Any,
) -> FractionalSpec:
    """Validate a fractional backward: with ``arrays`` its ``(grad_output, x,
    indices)``, the pool from ``x``'s shape to the spatial sizes of
    ``grad_output``, and ``indices`` of ``grad_output``'s shape."""
    grad_output, x, indices = arrays
    cl, algorithm = _fractional_common(name, channels_last, algorithm, implementation)
    spatial = spatial_sizes(name, x.shape, nd, cl)
    out = pooled_spatial(name, x.shape, nd, cl, "grad_output", grad_output)
    of = "`grad_output`'s"
    check_shapes(name, grad_output.shape, nd, cl, of=of, indices=indices)
    return FractionalSpec(spatial, tuple(out), (1,) * nd, cl, algorithm)
