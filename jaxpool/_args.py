"""The arguments of every op family, each defined once as a typed dataclass.

:class:`PoolArgs`, :class:`AdaptiveArgs`, :class:`UnpoolArgs` and
:class:`FractionalArgs` are what the public functions gather their arguments
into, what the Flax and Equinox layers subclass (:func:`static_field` tells
Equinox to keep a field out of the pytree) and what ``verify`` draws its cases
from. They hold the values as given: ``_spec`` and ``_fractional_spec``
validate them into a spec.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from ._windows import Algorithm, Implementation

IntOrSeq = int | Sequence[int]
Padding = str | int | Sequence[int | tuple[int, int]]
OutputSize = int | Sequence[int | None]
Ratio = float | Sequence[float]


def frozen(value: Any) -> Any:
    """Lists (nested too) as tuples: hashable, and static to every framework."""
    if isinstance(value, (list, tuple)):
        return tuple(frozen(v) for v in value)
    return value


def static_field(default: Any = dataclasses.MISSING, *, kw_only: bool = False) -> Any:
    """A field holding a static Python value (window arguments fix shapes).

    Its metadata tells Equinox to keep the field out of the pytree and to turn
    lists into tuples; the other users of these definitions ignore it.
    """
    return dataclasses.field(
        default=default,
        kw_only=kw_only,
        metadata={"static": True, "converter": frozen},
    )


@dataclasses.dataclass(eq=False)
class PoolArgs:
    """The arguments of ``max_pool{1,2,3}d_with_argmax``, of their backward ops
    (which add ``check_indices``) and of the ``MaxPool{1,2,3}d`` layers (which
    add ``return_indices``). See :func:`jaxpool.max_pool3d_with_argmax`."""

    kernel_size: IntOrSeq = static_field()
    stride: IntOrSeq | None = static_field(None)
    padding: Padding = static_field(0)
    dilation: IntOrSeq = static_field(1)
    ceil_mode: bool = static_field(False)
    channels_last: bool = static_field(False, kw_only=True)
    algorithm: Algorithm = static_field("auto", kw_only=True)
    implementation: Implementation | None = static_field(None, kw_only=True)


@dataclasses.dataclass(eq=False)
class AdaptiveArgs:
    """The arguments of ``adaptive_max_pool{1,2,3}d`` (the backward ops take
    ``channels_last`` and ``algorithm``) and of the ``AdaptiveMaxPool{1,2,3}d``
    layers. See :func:`jaxpool.adaptive_max_pool2d`."""

    output_size: OutputSize = static_field()
    channels_last: bool = static_field(False, kw_only=True)
    algorithm: Algorithm = static_field("auto", kw_only=True)
    implementation: Implementation | None = static_field(None, kw_only=True)


@dataclasses.dataclass(eq=False)
class UnpoolArgs:
    """The arguments of ``max_unpool{1,2,3}d`` (which add ``output_size`` and
    ``check_indices``) and of the ``MaxUnpool{1,2,3}d`` layers (whose call takes
    ``output_size``), PyTorch's ``max_unpool*d`` / ``nn.MaxUnpool*d``: the pool
    that the unpool inverts, which sets the default output size and the sizes
    allowed (see ``_spec.unpool_output``). The functions accept
    ``kernel_size=None`` with an explicit output size."""

    kernel_size: IntOrSeq | None = static_field()
    stride: IntOrSeq | None = static_field(None)
    padding: IntOrSeq = static_field(0)
    channels_last: bool = static_field(False, kw_only=True)


@dataclasses.dataclass(eq=False)
class FractionalArgs:
    """The static arguments of ``fractional_max_pool{2,3}d`` and of the
    ``FractionalMaxPool{2,3}d`` layers (the samples or key are arrays, given at
    call). See :func:`jaxpool.fractional_max_pool2d`."""

    kernel_size: IntOrSeq = static_field()
    output_size: IntOrSeq | None = static_field(None)
    output_ratio: Ratio | None = static_field(None)
    channels_last: bool = static_field(False, kw_only=True)
    algorithm: Algorithm = static_field("auto", kw_only=True)
    implementation: Implementation | None = static_field(None, kw_only=True)
