"""What the Flax NNX, Flax Linen and Equinox layers share: one call per layer
kind, so the three frameworks' modules only hold their arguments."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax

from . import _adaptive, _max_pool, _spec, _unpool
from ._windows import split


def pool(nd: int, x: Any, cfg: dict[str, Any], return_indices: bool) -> Any:
    """``max_pool{nd}d_with_argmax(x, **cfg)``, values alone unless
    ``return_indices``."""
    values, indices = _max_pool._forward(
        nd,
        x,
        cfg["kernel_size"],
        cfg["stride"],
        cfg["padding"],
        cfg["dilation"],
        cfg["ceil_mode"],
        cfg["channels_last"],
        algorithm=cfg["algorithm"],
    )
    return (values, indices) if return_indices else values


def adaptive(nd: int, x: Any, cfg: dict[str, Any], return_indices: bool) -> Any:
    """``adaptive_max_pool{nd}d(x, **cfg)``, values alone unless
    ``return_indices``."""
    values, indices = _adaptive._forward(
        nd, x, cfg["output_size"], cfg["channels_last"], cfg["algorithm"]
    )
    return (values, indices) if return_indices else values


def unpool(
    nd: int,
    x: Any,
    indices: Any,
    output_size: Sequence[int] | None,
    cfg: dict[str, Any],
) -> jax.Array:
    """``max_unpool{nd}d``; without ``output_size``, PyTorch's default
    ``(in - 1) * stride - 2 * padding + kernel_size`` per axis."""
    if output_size is None:
        fn = f"MaxUnpool{nd}d"
        shape = tuple(getattr(x, "shape", ()))
        cl = cfg["channels_last"]
        _spec.split_shape(fn, shape, nd, cl)
        k = _spec.int_tuple(fn, "kernel_size", cfg["kernel_size"], nd)
        stride = cfg["stride"]
        s = k if stride is None else _spec.int_tuple(fn, "stride", stride, nd)
        p = _spec.int_tuple(fn, "padding", cfg["padding"], nd)
        first, stop = split(len(shape), nd, int(cl))
        output_size = tuple(
            (n - 1) * si - 2 * pi + ki
            for n, ki, si, pi in zip(shape[first:stop], k, s, p, strict=True)
        )
    return _unpool._max_unpool(nd, x, indices, output_size, cfg["channels_last"])


def frozen(value: Any) -> Any:
    """Lists (nested too) as tuples: hashable, and static to every framework."""
    if isinstance(value, (list, tuple)):
        return tuple(frozen(v) for v in value)
    return value
