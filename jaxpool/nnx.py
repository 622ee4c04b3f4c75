"""Flax NNX layers: ``MaxPool{1,2,3}d``, ``AdaptiveMaxPool{1,2,3}d``,
``MaxUnpool{1,2,3}d``, ``FractionalMaxPool{2,3}d``.

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

from ._args import frozen, static_field
from ._layers import AdaptiveMaxPool, FractionalMaxPool, MaxPool, MaxUnpool


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


class _Fractional(FractionalMaxPool, _Module):
    """A fractional pool whose samples come from an NNX stream: ``rngs`` (an
    ``nnx.Rngs`` or ``nnx.RngStream``) at construction, forked as
    ``nnx.Dropout`` does; its ``rng_collection`` stream (``"fractional"``,
    falling back to ``"default"``) draws a key at every call."""

    rng_collection: str = static_field("fractional", kw_only=True)
    rngs: Any = dataclasses.field(default=None, kw_only=True)

    def __post_init__(self) -> None:
        super().__post_init__()
        if isinstance(self.rngs, nnx.Rngs):
            self.rngs = self.rngs[self.rng_collection].fork()
        elif isinstance(self.rngs, nnx.RngStream):
            self.rngs = self.rngs.fork()
        elif self.rngs is None:
            self.rngs = nnx.data(None)
        else:
            raise TypeError(
                f"{type(self).__name__}: `rngs` must be an nnx.Rngs or "
                f"nnx.RngStream, got {self.rngs!r}"
            )

    def __call__(self, x: Any, samples: Any = None) -> Any:
        """Pool ``x`` with new samples from the stream (or with ``samples``,
        PyTorch's ``_random_samples``)."""
        key = None
        if samples is None:
            if self.rngs is None:
                raise ValueError(
                    f"{type(self).__name__}: give `rngs` at construction or "
                    "`samples` at call"
                )
            key = self.rngs()
        return self._pool(x, samples, key)


class FractionalMaxPool2d(_Fractional, nd=2):
    """[`jaxpool.fractional_max_pool2d`][] as an NNX layer: ``rngs`` at
    construction, new samples at every call.

    >>> import jax.numpy as jnp
    >>> from flax import nnx
    >>> from jaxpool import nnx as jpnnx
    >>> pool = jpnnx.FractionalMaxPool2d(2, output_ratio=0.5, rngs=nnx.Rngs(0))
    >>> pool(jnp.ones((1, 8, 8, 3))).shape
    (1, 4, 4, 3)
    """


class FractionalMaxPool3d(_Fractional, nd=3):
    """[`jaxpool.fractional_max_pool3d`][] as an NNX layer: ``rngs`` at
    construction, new samples at every call."""


__all__ = ["MaxPool1d", "MaxPool2d", "MaxPool3d"]
__all__ += ["AdaptiveMaxPool1d", "AdaptiveMaxPool2d", "AdaptiveMaxPool3d"]
__all__ += ["MaxUnpool1d", "MaxUnpool2d", "MaxUnpool3d"]
__all__ += ["FractionalMaxPool2d", "FractionalMaxPool3d"]
