"""What the Flax NNX, Flax Linen and Equinox layers share: their arguments and
their call.

Each layer kind is a dataclass whose fields are its op family's arguments, the
same typed definition the public functions use (``_args.PoolArgs``,
``AdaptiveArgs``, ``UnpoolArgs``), plus ``return_indices`` where it applies,
with Flax's channels-last default. Calling a layer calls the public function,
which validates the arguments once. A framework module (``nnx``, ``linen``,
``eqx``) subclasses each kind with the framework's base class, fixing the
number of spatial axes with a class keyword: ``class MaxPool3d(MaxPool,
nnx.Module, nd=3)``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any, ClassVar

import jax

from . import _ops
from ._args import (
    AdaptiveArgs,
    FractionalArgs,
    PoolArgs,
    UnpoolArgs,
    frozen,
    static_field,
)


class _Layer:
    """Fixes ``nd`` from the class keyword of a subclass."""

    nd: ClassVar[int]

    def __init_subclass__(cls, *, nd: int | None = None, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if nd is not None:
            cls.nd = nd


def _arguments(layer: Any, definition: type) -> dict[str, Any]:
    """The layer's values of the fields of ``definition``, lists as tuples."""
    return {
        f.name: frozen(getattr(layer, f.name)) for f in dataclasses.fields(definition)
    }


@dataclasses.dataclass(init=False, eq=False, repr=False)
class _Pooling(_Layer):
    """A pool as a layer: its function's arguments and ``return_indices``."""

    _function: ClassVar[str]  # the public function, "{nd}" for the axes
    _arguments_of: ClassVar[type]
    return_indices: bool = static_field(False, kw_only=True)

    def __call__(self, x: jax.Array) -> Any:
        """Pooled values, or ``(values, indices)`` with ``return_indices``."""
        pool = getattr(_ops, self._function.format(nd=self.nd))
        values, indices = pool(x, **_arguments(self, self._arguments_of))
        return (values, indices) if self.return_indices else values


@dataclasses.dataclass(init=False, eq=False, repr=False)
class MaxPool(_Pooling, PoolArgs):
    """``max_pool{nd}d_with_argmax`` as a layer: its arguments, channels-last
    by default, and ``return_indices``."""

    _function = "max_pool{nd}d_with_argmax"
    _arguments_of = PoolArgs
    channels_last: bool = static_field(True, kw_only=True)


@dataclasses.dataclass(init=False, eq=False, repr=False)
class AdaptiveMaxPool(_Pooling, AdaptiveArgs):
    """``adaptive_max_pool{nd}d`` as a layer: its arguments, channels-last by
    default, and ``return_indices``."""

    _function = "adaptive_max_pool{nd}d"
    _arguments_of = AdaptiveArgs
    channels_last: bool = static_field(True, kw_only=True)


@dataclasses.dataclass(init=False, eq=False, repr=False)
class MaxUnpool(_Layer, UnpoolArgs):
    """``max_unpool{nd}d`` as a layer with PyTorch's ``nn.MaxUnpool*d``
    arguments, channels-last by default."""

    channels_last: bool = static_field(True, kw_only=True)

    def __call__(
        self,
        x: jax.Array,
        indices: jax.Array,
        output_size: Sequence[int] | None = None,
    ) -> jax.Array:
        """Unpool ``x`` at ``indices``: ``max_unpool{nd}d(x, indices,
        kernel_size, stride, padding, output_size)``, as PyTorch's layer calls
        its function. ``output_size`` defaults to ``(in - 1) * stride +
        kernel_size - 2 * padding`` per axis; an explicit one must lie strictly
        within ``stride`` of that."""
        unpool = getattr(_ops, f"max_unpool{self.nd}d")
        arguments = _arguments(self, UnpoolArgs)
        return unpool(x, indices, **arguments, output_size=output_size)


@dataclasses.dataclass(init=False, eq=False, repr=False)
class FractionalMaxPool(_Layer, FractionalArgs):
    """``fractional_max_pool{nd}d`` as a layer: its arguments, channels-last by
    default, and ``return_indices``. New samples at every call, from a key
    that each framework supplies its own way (NNX: the ``rngs`` given at
    construction; Linen: ``make_rng``; Equinox: the call's ``key``), unless
    the call gives ``samples`` (PyTorch's ``_random_samples``)."""

    channels_last: bool = static_field(True, kw_only=True)
    return_indices: bool = static_field(False, kw_only=True)

    def _pool(self, x: jax.Array, samples: Any, key: Any) -> Any:
        """Pooled values, or ``(values, indices)`` with ``return_indices``."""
        pool = getattr(_ops, f"fractional_max_pool{self.nd}d")
        arguments = _arguments(self, FractionalArgs)
        values, indices = pool(x, **arguments, samples=samples, key=key)
        return (values, indices) if self.return_indices else values
