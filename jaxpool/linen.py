"""Flax Linen layers: ``MaxPool{1,2,3}d``, ``AdaptiveMaxPool{1,2,3}d``,
``MaxUnpool{1,2,3}d``.

The same layers as :mod:`jaxpool.nnx` for Linen users: ``nn.Module``
dataclasses with no parameters, channels-last by default. Needs
``pip install 'jaxpool[flax]'``.

>>> import jax, jax.numpy as jnp
>>> from jaxpool import linen as jplinen
>>> pool = jplinen.MaxPool3d(kernel_size=2)
>>> pool.apply({}, jnp.ones((1, 4, 4, 4, 3))).shape
(1, 2, 2, 2, 3)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

try:
    from flax import linen as nn
except ImportError as e:  # pragma: no cover - exercised without flax
    raise ImportError("jaxpool.linen needs Flax: pip install 'jaxpool[flax]'") from e

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


class _MaxPool(nn.Module):
    nd: ClassVar[int]
    kernel_size: int | Sequence[int]
    stride: int | Sequence[int] | None = None
    padding: Any = 0
    dilation: int | Sequence[int] = 1
    ceil_mode: bool = False
    return_indices: bool = False
    channels_last: bool = True
    algorithm: str = "scatter"

    def __call__(self, x: jax.Array) -> Any:
        """Pooled values, or ``(values, indices)`` with ``return_indices``."""
        cfg = {k: frozen(v) for k, v in vars(self).items()}
        return _layers.pool(self.nd, x, cfg, self.return_indices)


class MaxPool1d(_MaxPool):
    """:func:`jaxpool.max_pool1d_with_argmax` as a Linen layer."""

    nd = 1


class MaxPool2d(_MaxPool):
    """:func:`jaxpool.max_pool2d_with_argmax` as a Linen layer."""

    nd = 2


class MaxPool3d(_MaxPool):
    """:func:`jaxpool.max_pool3d_with_argmax` as a Linen layer: the functional
    op's arguments plus ``return_indices`` and ``channels_last=True``."""

    nd = 3


class _AdaptiveMaxPool(nn.Module):
    nd: ClassVar[int]
    output_size: int | Sequence[int | None]
    return_indices: bool = False
    channels_last: bool = True
    algorithm: str = "scatter"

    def __call__(self, x: jax.Array) -> Any:
        """Pooled values, or ``(values, indices)`` with ``return_indices``."""
        cfg = {k: frozen(v) for k, v in vars(self).items()}
        return _layers.adaptive(self.nd, x, cfg, self.return_indices)


class AdaptiveMaxPool1d(_AdaptiveMaxPool):
    """:func:`jaxpool.adaptive_max_pool1d` as a Linen layer."""

    nd = 1


class AdaptiveMaxPool2d(_AdaptiveMaxPool):
    """:func:`jaxpool.adaptive_max_pool2d` as a Linen layer."""

    nd = 2


class AdaptiveMaxPool3d(_AdaptiveMaxPool):
    """:func:`jaxpool.adaptive_max_pool3d` as a Linen layer."""

    nd = 3


class _MaxUnpool(nn.Module):
    nd: ClassVar[int]
    kernel_size: int | Sequence[int]
    stride: int | Sequence[int] | None = None
    padding: int | Sequence[int] = 0
    channels_last: bool = True

    def __call__(
        self,
        x: jax.Array,
        indices: jax.Array,
        output_size: Sequence[int] | None = None,
    ) -> jax.Array:
        """Unpool ``x`` at ``indices`` into ``output_size`` (default:
        ``(in - 1) * stride - 2 * padding + kernel_size`` per axis, PyTorch's)."""
        cfg = {k: frozen(v) for k, v in vars(self).items()}
        return _layers.unpool(self.nd, x, indices, output_size, cfg)


class MaxUnpool1d(_MaxUnpool):
    """:func:`jaxpool.max_unpool1d` as a Linen layer."""

    nd = 1


class MaxUnpool2d(_MaxUnpool):
    """:func:`jaxpool.max_unpool2d` as a Linen layer."""

    nd = 2


class MaxUnpool3d(_MaxUnpool):
    """:func:`jaxpool.max_unpool3d` as a Linen layer."""

    nd = 3
