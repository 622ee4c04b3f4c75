"""Flax Linen layers: ``MaxPool{1,2,3}d``, ``AdaptiveMaxPool{1,2,3}d``,
``MaxUnpool{1,2,3}d``, ``FractionalMaxPool{2,3}d``.

The same layers as [`jaxpool.nnx`][] for Linen users: ``nn.Module``
dataclasses with no parameters, channels-last by default, whose fields are the
functional op's arguments plus ``return_indices``. Needs
``pip install 'jaxpool[flax]'``.

>>> import jax, jax.numpy as jnp
>>> from jaxpool import linen as jplinen
>>> pool = jplinen.MaxPool3d(kernel_size=2)
>>> pool.apply({}, jnp.ones((1, 4, 4, 4, 3))).shape
(1, 2, 2, 2, 3)
"""

from __future__ import annotations

try:
    from flax import linen as nn
except ImportError as e:  # pragma: no cover - exercised without flax
    raise ImportError("jaxpool.linen needs Flax: pip install 'jaxpool[flax]'") from e

from typing import Any

from ._args import static_field
from ._layers import AdaptiveMaxPool, FractionalMaxPool, MaxPool, MaxUnpool


class MaxPool1d(MaxPool, nn.Module, nd=1):
    """[`jaxpool.max_pool1d_with_argmax`][] as a Linen layer."""


class MaxPool2d(MaxPool, nn.Module, nd=2):
    """[`jaxpool.max_pool2d_with_argmax`][] as a Linen layer."""


class MaxPool3d(MaxPool, nn.Module, nd=3):
    """[`jaxpool.max_pool3d_with_argmax`][] as a Linen layer."""


class AdaptiveMaxPool1d(AdaptiveMaxPool, nn.Module, nd=1):
    """[`jaxpool.adaptive_max_pool1d`][] as a Linen layer."""


class AdaptiveMaxPool2d(AdaptiveMaxPool, nn.Module, nd=2):
    """[`jaxpool.adaptive_max_pool2d`][] as a Linen layer."""


class AdaptiveMaxPool3d(AdaptiveMaxPool, nn.Module, nd=3):
    """[`jaxpool.adaptive_max_pool3d`][] as a Linen layer."""


class MaxUnpool1d(MaxUnpool, nn.Module, nd=1):
    """[`jaxpool.max_unpool1d`][] as a Linen layer."""


class MaxUnpool2d(MaxUnpool, nn.Module, nd=2):
    """[`jaxpool.max_unpool2d`][] as a Linen layer."""


class MaxUnpool3d(MaxUnpool, nn.Module, nd=3):
    """[`jaxpool.max_unpool3d`][] as a Linen layer."""


class _Fractional(FractionalMaxPool, nn.Module):
    """A fractional pool whose key comes from ``self.make_rng`` of its
    ``rng_collection`` (``"fractional"``: ``apply(..., rngs={"fractional":
    key})``) at every call."""

    rng_collection: str = static_field("fractional", kw_only=True)

    def __call__(self, x: Any, samples: Any = None) -> Any:
        """Pool ``x`` with new samples (or with ``samples``, PyTorch's
        ``_random_samples``)."""
        if samples is not None:
            return self._pool(x, samples, None)
        return self._pool(x, None, self.make_rng(self.rng_collection))


class FractionalMaxPool2d(_Fractional, nd=2):
    """[`jaxpool.fractional_max_pool2d`][] as a Linen layer."""


class FractionalMaxPool3d(_Fractional, nd=3):
    """[`jaxpool.fractional_max_pool3d`][] as a Linen layer."""


__all__ = ["MaxPool1d", "MaxPool2d", "MaxPool3d"]
__all__ += ["AdaptiveMaxPool1d", "AdaptiveMaxPool2d", "AdaptiveMaxPool3d"]
__all__ += ["MaxUnpool1d", "MaxUnpool2d", "MaxUnpool3d"]
__all__ += ["FractionalMaxPool2d", "FractionalMaxPool3d"]
