"""The specs of the strided and adaptive pools and the unpool's output shape.

A public function's arguments (``_args``) are validated here once, at trace
time, with the checks of ``_checks``, into a
:class:`~jaxpool._windows.PoolSpec` (:func:`pool_spec`, :func:`adaptive_spec`
and their backward ops') or an unpool's result shape (:func:`unpool_output`).
The fractional pools' spec is ``_fractional_spec``'s.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import jax
from jax.core import Tracer

from ._args import AdaptiveArgs, PoolArgs, UnpoolArgs
from ._checks import (
    backward_sizes,
    check_algorithm,
    check_implementation,
    check_shapes,
    entries,
    int_tuple,
    layout_forms,
    spatial_sizes,
    static_bool,
    static_int,
)
from ._windows import (
    INT32_MAX,
    AxisWindows,
    PoolSpec,
    adaptive_axis,
    pool_output_size,
    same_padding,
    split,
    with_spatial,
)


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
    items = entries(padding)
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
    channels_last = static_bool(name, "channels_last", channels_last)
    spatial, out = backward_sizes(name, nd, arrays, channels_last)
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
) -> tuple[jax.ShapeDtypeStruct, PoolSpec | None]:
    """Validate an unpool of pooled values ``x`` at ``indices``: the shape and
    dtype of its result, and with ``kernel_size`` the pool's windows that
    produced ``x`` from an input of the result's size (window ``o`` along an
    axis: ``o * stride - padding + j``, ``j < kernel_size``), where a mesh
    places each value (``_platform.unpool``); ``None`` without it.

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
        windows = None
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
        axes = tuple(map(AxisWindows, sizes, spatial, k, s, (-pi for pi in p)))
        windows = PoolSpec(axes, channels_last, "auto")
    if math.prod(sizes) > INT32_MAX:
        raise ValueError(
            f"{name}: the output must have fewer than 2**31 elements per plane "
            f"(indices are int32), got spatial sizes {sizes}"
        )
    shape = with_spatial(x.shape, nd, int(channels_last), sizes)
    return jax.ShapeDtypeStruct(shape, x.dtype), windows
