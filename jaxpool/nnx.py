"""Flax NNX layers: ``MaxPool{1,2,3}d``, ``AdaptiveMaxPool{1,2,3}d``,
``MaxUnpool{1,2,3}d``.

Channels-last by default (Flax's convention): inputs ``(N, *S, C)`` or
``(*S, C)``. Each layer holds its arguments as static attributes (no
parameters, no state) and calls the functional op, so it works inside
``nnx.jit``, ``nnx.grad`` and ``nnx.vmap``. Needs ``pip install 'jaxpool[flax]'``.

>>> import jax.numpy as jnp
>>> from jaxpool import nnx as jpnnx
>>> pool = jpnnx.MaxPool2d(2, return_indices=True)
>>> values, indices = pool(jnp.ones((1, 4, 4, 3)))
>>> unpool = jpnnx.MaxUnpool2d(2)
>>> unpool(values, indices).shape
(1, 4, 4, 3)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

try:
    from flax import nnx
except ImportError as e:  # pragma: no cover - exercised without flax
    raise ImportError("jaxpool.nnx needs Flax: pip install 'jaxpool[flax]'") from e

import jax

from . import _layers
from ._layers import frozen

__all__ = [
    "AdaptiveMaxPool1d",
    "AdaptiveMaxPool2d",
    "AdaptiveMaxPool3d",
    "MaxPool1d",
    "MaxPool2d",
    "MaxPool3d",
    "MaxUnpool1d",
    "MaxUnpool2d",
    "MaxUnpool3d",
]


class _MaxPool(nnx.Module):
    nd: ClassVar[int]

    def __init__(
        self,
        kernel_size: int | Sequence[int],
        stride: int | Sequence[int] | None = None,
        padding: Any = 0,
        dilation: int | Sequence[int] = 1,
        ceil_mode: bool = False,
        *,
        return_indices: bool = False,
        channels_last: bool = True,
        algorithm: str = "scatter",
    ) -> None:
        self.kernel_size = frozen(kernel_size)
        self.stride = frozen(stride)
        self.padding = frozen(padding)
        self.dilation = frozen(dilation)
        self.ceil_mode = ceil_mode
        self.return_indices = return_indices
        self.channels_last = channels_last
        self.algorithm = algorithm

    def __call__(self, x: jax.Array) -> Any:
        """Pooled values, or ``(values, indices)`` with ``return_indices``."""
        return _layers.pool(self.nd, x, vars(self), self.return_indices)


class MaxPool1d(_MaxPool):
    """:func:`jaxpool.max_pool1d_with_argmax` as a layer."""

    nd = 1


class MaxPool2d(_MaxPool):
    """:func:`jaxpool.max_pool2d_with_argmax` as a layer."""

    nd = 2


class MaxPool3d(_MaxPool):
    """:func:`jaxpool.max_pool3d_with_argmax` as a layer.

    Args are the functional op's, plus ``return_indices`` (return ``(values,
    indices)`` instead of the values) and ``channels_last`` (default True).
    """

    nd = 3


class _AdaptiveMaxPool(nnx.Module):
    nd: ClassVar[int]

    def __init__(
        self,
        output_size: int | Sequence[int | None],
        *,
        return_indices: bool = False,
        channels_last: bool = True,
        algorithm: str = "scatter",
    ) -> None:
        self.output_size = frozen(output_size)
        self.return_indices = return_indices
        self.channels_last = channels_last
        self.algorithm = algorithm

    def __call__(self, x: jax.Array) -> Any:
        """Pooled values, or ``(values, indices)`` with ``return_indices``."""
        return _layers.adaptive(self.nd, x, vars(self), self.return_indices)


class AdaptiveMaxPool1d(_AdaptiveMaxPool):
    """:func:`jaxpool.adaptive_max_pool1d` as a layer."""

    nd = 1


class AdaptiveMaxPool2d(_AdaptiveMaxPool):
    """:func:`jaxpool.adaptive_max_pool2d` as a layer (``output_size``, then
    ``return_indices``, ``channels_last=True``, ``algorithm``)."""

    nd = 2


class AdaptiveMaxPool3d(_AdaptiveMaxPool):
    """:func:`jaxpool.adaptive_max_pool3d` as a layer."""

    nd = 3


class _MaxUnpool(nnx.Module):
    nd: ClassVar[int]

    def __init__(
        self,
        kernel_size: int | Sequence[int],
        stride: int | Sequence[int] | None = None,
        padding: int | Sequence[int] = 0,
        *,
        channels_last: bool = True,
    ) -> None:
        self.kernel_size = frozen(kernel_size)
        self.stride = frozen(stride)
        self.padding = frozen(padding)
        self.channels_last = channels_last

    def __call__(
        self,
        x: jax.Array,
        indices: jax.Array,
        output_size: Sequence[int] | None = None,
    ) -> jax.Array:
        """Unpool ``x`` at ``indices`` into ``output_size`` (default:
        ``(in - 1) * stride - 2 * padding + kernel_size`` per axis, PyTorch's)."""
        return _layers.unpool(self.nd, x, indices, output_size, vars(self))


class MaxUnpool1d(_MaxUnpool):
    """:func:`jaxpool.max_unpool1d` as a layer."""

    nd = 1


class MaxUnpool2d(_MaxUnpool):
    """:func:`jaxpool.max_unpool2d` as a layer, PyTorch's ``nn.MaxUnpool2d``
    arguments (``kernel_size``, ``stride``, ``padding``) plus
    ``channels_last=True``."""

    nd = 2


class MaxUnpool3d(_MaxUnpool):
    """:func:`jaxpool.max_unpool3d` as a layer."""

    nd = 3
