"""Equinox layers: ``MaxPool{1,2,3}d``, ``AdaptiveMaxPool{1,2,3}d``,
``MaxUnpool{1,2,3}d``.

In Equinox's conventions: unbatched channels-first input ``(C, *S)`` (use
``jax.vmap`` for a batch), arguments as static fields, ``__call__(x, *,
key=None)``. Needs ``pip install 'jaxpool[equinox]'``.

>>> import jax, jax.numpy as jnp
>>> from jaxpool import eqx as jpeqx
>>> pool = jpeqx.MaxPool3d(2)
>>> jax.vmap(pool)(jnp.ones((5, 3, 4, 4, 4))).shape
(5, 3, 2, 2, 2)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

try:
    import equinox
except ImportError as e:  # pragma: no cover - exercised without equinox
    raise ImportError(
        "jaxpool.eqx needs Equinox: pip install 'jaxpool[equinox]'"
    ) from e

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


def _static(default: Any = None, required: bool = False) -> Any:
    if required:
        return equinox.field(static=True, converter=frozen)
    return equinox.field(static=True, converter=frozen, default=default)


class _MaxPool(equinox.Module):
    nd: ClassVar[int]
    kernel_size: int | Sequence[int] = _static(required=True)
    stride: int | Sequence[int] | None = _static(None)
    padding: Any = _static(0)
    dilation: int | Sequence[int] = _static(1)
    ceil_mode: bool = _static(False)
    return_indices: bool = _static(False)
    channels_last: bool = _static(False)
    algorithm: str = _static("scatter")

    def __call__(self, x: jax.Array, *, key: Any = None) -> Any:
        """Pooled values, or ``(values, indices)`` with ``return_indices``;
        ``key`` is unused."""
        del key
        return _layers.pool(self.nd, x, vars(self), self.return_indices)


class MaxPool1d(_MaxPool):
    """:func:`jaxpool.max_pool1d_with_argmax` as an Equinox layer."""

    nd = 1


class MaxPool2d(_MaxPool):
    """:func:`jaxpool.max_pool2d_with_argmax` as an Equinox layer."""

    nd = 2


class MaxPool3d(_MaxPool):
    """:func:`jaxpool.max_pool3d_with_argmax` as an Equinox layer: the
    functional op's arguments plus ``return_indices``; ``(C, D, H, W)`` input
    (channels-first unless ``channels_last=True``)."""

    nd = 3


class _AdaptiveMaxPool(equinox.Module):
    nd: ClassVar[int]
    output_size: int | Sequence[int | None] = _static(required=True)
    return_indices: bool = _static(False)
    channels_last: bool = _static(False)
    algorithm: str = _static("scatter")

    def __call__(self, x: jax.Array, *, key: Any = None) -> Any:
        """Pooled values, or ``(values, indices)`` with ``return_indices``;
        ``key`` is unused."""
        del key
        return _layers.adaptive(self.nd, x, vars(self), self.return_indices)


class AdaptiveMaxPool1d(_AdaptiveMaxPool):
    """:func:`jaxpool.adaptive_max_pool1d` as an Equinox layer."""

    nd = 1


class AdaptiveMaxPool2d(_AdaptiveMaxPool):
    """:func:`jaxpool.adaptive_max_pool2d` as an Equinox layer."""

    nd = 2


class AdaptiveMaxPool3d(_AdaptiveMaxPool):
    """:func:`jaxpool.adaptive_max_pool3d` as an Equinox layer."""

    nd = 3


class _MaxUnpool(equinox.Module):
    nd: ClassVar[int]
    kernel_size: int | Sequence[int] = _static(required=True)
    stride: int | Sequence[int] | None = _static(None)
    padding: int | Sequence[int] = _static(0)
    channels_last: bool = _static(False)

    def __call__(
        self,
        x: jax.Array,
        indices: jax.Array,
        output_size: Sequence[int] | None = None,
        *,
        key: Any = None,
    ) -> jax.Array:
        """Unpool ``x`` at ``indices`` into ``output_size`` (default:
        ``(in - 1) * stride - 2 * padding + kernel_size`` per axis, PyTorch's);
        ``key`` is unused."""
        del key
        return _layers.unpool(self.nd, x, indices, output_size, vars(self))


class MaxUnpool1d(_MaxUnpool):
    """:func:`jaxpool.max_unpool1d` as an Equinox layer."""

    nd = 1


class MaxUnpool2d(_MaxUnpool):
    """:func:`jaxpool.max_unpool2d` as an Equinox layer."""

    nd = 2


class MaxUnpool3d(_MaxUnpool):
    """:func:`jaxpool.max_unpool3d` as an Equinox layer."""

    nd = 3
