"""Flax NNX layers: ``MaxPool{1,2,3}d``, ``AdaptiveMaxPool{1,2,3}d``,
``MaxUnpool{1,2,3}d``.

Channels-last by default (Flax's convention): inputs ``(N, *S, C)`` or
``(*S, C)``. Each layer holds its arguments as static attributes (no
parameters, no state) and calls the functional op, so it works inside
``nnx.jit``, ``nnx.grad`` and ``nnx.vmap``. The arguments are the functional
op's (keyword-only from ``channels_last`` on), plus ``return_indices``.
Needs ``pip install 'jaxpool[flax]'``.

>>> import jax.numpy as jnp
>>> from jaxpool import nnx as jpnnx
>>> pool = jpnnx.MaxPool2d(2, return_indices=True)
>>> values, indices = pool(jnp.ones((1, 4, 4, 3)))
>>> unpool = jpnnx.MaxUnpool2d(2)
>>> unpool(values, indices).shape
(1, 4, 4, 3)
"""

from __future__ import annotations

import dataclasses
from typing import Any, dataclass_transform

try:
    from flax import nnx
except ImportError as e:  # pragma: no cover - exercised without flax
    raise ImportError("jaxpool.nnx needs Flax: pip install 'jaxpool[flax]'") from e

from ._layers import AdaptiveMaxPool, MaxPool, MaxUnpool
from ._spec import frozen


@dataclass_transform(field_specifiers=(dataclasses.field,))
class _Module(nnx.Module):
    """An NNX module whose arguments are dataclass fields, lists as tuples."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        dataclasses.dataclass(cls, eq=False, repr=False)

    def __post_init__(self) -> None:
        for field in dataclasses.fields(self):  # pyright: ignore[reportArgumentType]
            setattr(self, field.name, frozen(getattr(self, field.name)))


class MaxPool1d(MaxPool, _Module, nd=1):
    """[`jaxpool.max_pool1d_with_argmax`][] as an NNX layer."""


class MaxPool2d(MaxPool, _Module, nd=2):
    """[`jaxpool.max_pool2d_with_argmax`][] as an NNX layer."""


class MaxPool3d(MaxPool, _Module, nd=3):
    """[`jaxpool.max_pool3d_with_argmax`][] as an NNX layer."""


class AdaptiveMaxPool1d(AdaptiveMaxPool, _Module, nd=1):
    """[`jaxpool.adaptive_max_pool1d`][] as an NNX layer."""


class AdaptiveMaxPool2d(AdaptiveMaxPool, _Module, nd=2):
    """[`jaxpool.adaptive_max_pool2d`][] as an NNX layer."""


class AdaptiveMaxPool3d(AdaptiveMaxPool, _Module, nd=3):
    """[`jaxpool.adaptive_max_pool3d`][] as an NNX layer."""


class MaxUnpool1d(MaxUnpool, _Module, nd=1):
    """[`jaxpool.max_unpool1d`][] as an NNX layer."""


class MaxUnpool2d(MaxUnpool, _Module, nd=2):
    """[`jaxpool.max_unpool2d`][] as an NNX layer."""


class MaxUnpool3d(MaxUnpool, _Module, nd=3):
    """[`jaxpool.max_unpool3d`][] as an NNX layer."""


__all__ = ["MaxPool1d", "MaxPool2d", "MaxPool3d"]
__all__ += ["AdaptiveMaxPool1d", "AdaptiveMaxPool2d", "AdaptiveMaxPool3d"]
__all__ += ["MaxUnpool1d", "MaxUnpool2d", "MaxUnpool3d"]
