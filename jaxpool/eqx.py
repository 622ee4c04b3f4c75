"""Equinox layers: ``MaxPool{1,2,3}d``, ``AdaptiveMaxPool{1,2,3}d``,
``MaxUnpool{1,2,3}d``, ``FractionalMaxPool{2,3}d``.

In Equinox's conventions: unbatched channels-first input ``(C, *S)`` (use
``jax.vmap`` for a batch), arguments as static fields, ``__call__(x, *,
key=None)``. The arguments are the functional op's plus ``return_indices``.
Needs ``pip install 'jaxpool[equinox]'``.

>>> import jax, jax.numpy as jnp
>>> from jaxpool import eqx as jpeqx
>>> pool = jpeqx.MaxPool3d(2)
>>> jax.vmap(pool)(jnp.ones((5, 3, 4, 4, 4))).shape
(5, 3, 2, 2, 2)
"""

from __future__ import annotations

from typing import Any

try:
    import equinox
except ImportError as e:  # pragma: no cover - exercised without equinox
    raise ImportError(
        "jaxpool.eqx needs Equinox: pip install 'jaxpool[equinox]'"
    ) from e

from ._args import static_field
from ._layers import AdaptiveMaxPool, FractionalMaxPool, MaxPool, MaxUnpool


class _Module(equinox.Module):
    """Equinox's conventions for a layer: channels-first by default, and a
    ``key`` keyword argument (unused). Listed first among a layer's bases, so
    that Equinox builds its ``__init__`` from the inherited fields (and applies
    their converters)."""

    channels_last: bool = static_field(False, kw_only=True)

    def __call__(self, *args: Any, key: Any = None, **kwargs: Any) -> Any:
        del key
        return super().__call__(*args, **kwargs)  # pyright: ignore


class MaxPool1d(_Module, MaxPool, nd=1):
    """[`jaxpool.max_pool1d_with_argmax`][] as an Equinox layer."""


class MaxPool2d(_Module, MaxPool, nd=2):
    """[`jaxpool.max_pool2d_with_argmax`][] as an Equinox layer."""


class MaxPool3d(_Module, MaxPool, nd=3):
    """[`jaxpool.max_pool3d_with_argmax`][] as an Equinox layer."""


class AdaptiveMaxPool1d(_Module, AdaptiveMaxPool, nd=1):
    """[`jaxpool.adaptive_max_pool1d`][] as an Equinox layer."""


class AdaptiveMaxPool2d(_Module, AdaptiveMaxPool, nd=2):
    """[`jaxpool.adaptive_max_pool2d`][] as an Equinox layer."""


class AdaptiveMaxPool3d(_Module, AdaptiveMaxPool, nd=3):
    """[`jaxpool.adaptive_max_pool3d`][] as an Equinox layer."""


class MaxUnpool1d(_Module, MaxUnpool, nd=1):
    """[`jaxpool.max_unpool1d`][] as an Equinox layer."""


class MaxUnpool2d(_Module, MaxUnpool, nd=2):
    """[`jaxpool.max_unpool2d`][] as an Equinox layer."""


class MaxUnpool3d(_Module, MaxUnpool, nd=3):
    """[`jaxpool.max_unpool3d`][] as an Equinox layer."""


class _Fractional(_Module, FractionalMaxPool):
    """A fractional pool that draws its samples from the call's ``key``."""

    def __call__(self, x: Any, samples: Any = None, *, key: Any = None) -> Any:
        """Pool ``x`` (``(C, *S)``) with samples drawn from ``key`` (or with
        ``samples``, PyTorch's ``_random_samples``)."""
        return self._pool(x, samples, None if samples is not None else key)


class FractionalMaxPool2d(_Fractional, nd=2):
    """[`jaxpool.fractional_max_pool2d`][] as an Equinox layer: ``key`` at
    call (``jax.vmap`` over a batch with split keys)."""


class FractionalMaxPool3d(_Fractional, nd=3):
    """[`jaxpool.fractional_max_pool3d`][] as an Equinox layer."""


__all__ = ["MaxPool1d", "MaxPool2d", "MaxPool3d"]
__all__ += ["AdaptiveMaxPool1d", "AdaptiveMaxPool2d", "AdaptiveMaxPool3d"]
__all__ += ["MaxUnpool1d", "MaxUnpool2d", "MaxUnpool3d"]
__all__ += ["FractionalMaxPool2d", "FractionalMaxPool3d"]
