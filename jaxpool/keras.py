"""Keras 3 layers that pool with argmax and unpool, on Keras's JAX backend.

- ``MaxPoolingWithArgmax{1,2,3}D``: Keras's ``MaxPooling{1,2,3}D`` (its
  arguments ``pool_size``, ``strides``, ``padding="valid"|"same"`` and
  ``data_format``, its output sizes) returning ``[values, indices]``;
- ``AdaptiveMaxPoolingWithArgmax{1,2,3}D``: Keras's
  ``AdaptiveMaxPooling{1,2,3}D`` (``output_size``, ``data_format``) on
  PyTorch's windows, returning ``[values, indices]``;
- ``MaxUnpooling{1,2,3}D``: called as ``layer([values, indices])``, each
  value back at its index in zeros of ``size`` times the pooled size
  (``size=2`` by default, as Keras's ``UpSampling`` takes it), of an
  explicit ``output_size``, or of a third input's size,
  ``layer([values, indices, like])``.

The indices are TensorFlow's (``tf.nn.max_pool_with_argmax``): the flat
offset of the chosen element in its image as laid out: channels-last
``(y * W + x) * C + c`` (3-D ``((z * H + y) * W + x) * C + c``, 1-D ``x * C +
c``), channels-first ``(c * H + y) * W + x``; int32 (int64 with
``jax_enable_x64``). So are the choices: ties keep the first maximum, and NaN
is skipped unless it is a window's first element (see [`jaxpool.tf`][]). A
Keras SegNet written on ``tf.nn.max_pool_with_argmax`` keeps its numbers:
``MaxPoolingWithArgmax2D`` channels-last gives that op's values and indices,
bit for bit, and ``MaxUnpooling2D`` is its ``tf.scatter_nd`` unpooling
(values at coinciding indices summed). The gradients are jaxpool's
(``jaxpool.tf``'s), with its backward algorithms.

The layers hold no weights, work in ``keras.Model`` (``fit``, ``predict``,
``jit_compile``) and are registered for serialization (package
``"jaxpool"``), so a model saved as ``.keras`` loads with them once this
module is imported. They run on Keras's JAX backend only: set
``KERAS_BACKEND=jax`` before Keras (or TensorFlow, which imports Keras) is
imported; on another backend constructing one raises an error naming it.
Needs ``pip install 'jaxpool[keras]'``.

>>> import numpy as np
>>> from jaxpool import keras as jpkeras
>>> x = np.arange(16.0, dtype=np.float32).reshape(1, 4, 4, 1)
>>> values, indices = jpkeras.MaxPoolingWithArgmax2D()(x)
>>> indices[0, :, :, 0].tolist()
[[5, 7], [13, 15]]
>>> restored = jpkeras.MaxUnpooling2D()([values, indices])  # 2x2: (1, 4, 4, 1)
>>> restored[0, 1, :, 0].tolist()
[0.0, 5.0, 0.0, 7.0]
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import Any, ClassVar

try:
    import keras
except ImportError as e:  # pragma: no cover - exercised without keras
    raise ImportError(
        "jaxpool.keras needs Keras 3: pip install 'jaxpool[keras]'"
    ) from e
import jax
import numpy as np

from . import _checks, _spec
from . import tf as _tf
from ._args import AdaptiveArgs, PoolArgs
from ._windows import split, with_spatial

__all__ = ["MaxPoolingWithArgmax1D", "MaxPoolingWithArgmax2D", "MaxPoolingWithArgmax3D"]
__all__ += [
    "AdaptiveMaxPoolingWithArgmax1D",
    "AdaptiveMaxPoolingWithArgmax2D",
    "AdaptiveMaxPoolingWithArgmax3D",
]
__all__ += ["MaxUnpooling1D", "MaxUnpooling2D", "MaxUnpooling3D"]

_serializable = keras.saving.register_keras_serializable(package="jaxpool")


def _index_dtype() -> np.dtype:
    """int64 where JAX holds it (``jax_enable_x64``), int32 otherwise."""
    return np.dtype(jax.dtypes.canonicalize_dtype(np.int64))


def _sizes(name: str, arg: str, value: Any, nd: int) -> tuple[int, ...]:
    """Keras's size arguments: an int, or ``nd`` ints, each > 0."""
    given = (
        value if isinstance(value, Sequence) and not isinstance(value, str) else None
    )
    items = (value,) * nd if given is None else tuple(given)
    try:
        ints = tuple(_int(item) for item in items)
    except TypeError:
        ints = ()
    if len(ints) != nd or min(ints) < 1:
        raise ValueError(
            f"{name}: `{arg}` must be an int or a tuple of {nd} ints, each > 0, "
            f"got {arg}={value!r}"
        )
    return ints


def _int(value: Any) -> int:
    if isinstance(value, (bool, np.bool_)):
        raise TypeError(value)
    return operator.index(value)


def _choice(name: str, arg: str, value: Any, allowed: tuple[str, ...]) -> str:
    """``value`` lower-cased, one of ``allowed``."""
    if isinstance(value, str) and value.lower() in allowed:
        return value.lower()
    raise ValueError(f"{name}: `{arg}` must be one of {allowed}, got {arg}={value!r}")


class _Layer(keras.layers.Layer):
    """A jaxpool layer: Keras's JAX backend, ``data_format``, ``nd`` axes."""

    nd: ClassVar[int]

    def __init__(self, data_format: str | None = None, **kwargs: Any) -> None:
        name = type(self).__name__
        backend = keras.backend.backend()
        if backend != "jax":
            raise RuntimeError(
                f"{name}: jaxpool.keras runs on Keras's JAX backend only, got "
                f"backend {backend!r}: set KERAS_BACKEND=jax before keras (or "
                "tensorflow, which imports it) is imported"
            )
        super().__init__(**kwargs)
        if data_format is None:
            data_format = keras.config.image_data_format()
        formats = ("channels_first", "channels_last")
        self.data_format = _choice(name, "data_format", data_format, formats)

    @property
    def _trail(self) -> int:
        return int(self.data_format == "channels_last")

    def _spatial(self, shape: Sequence[Any]) -> tuple[Any, ...]:
        first, stop = split(len(shape), self.nd, self._trail)
        return tuple(shape[first:stop])

    def _reshaped(self, shape: Sequence[Any], sizes: Sequence[Any]) -> tuple:
        return with_spatial(tuple(shape), self.nd, self._trail, sizes)

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "data_format": self.data_format}


class _Pooling(_Layer):
    """Values and TensorFlow's indices of a pool; :meth:`_pool_spec` is
    the pool's."""

    def _pool_spec(self, shape: tuple[int, ...]) -> Any:
        raise NotImplementedError

    def _out_sizes(self, spatial: tuple[Any, ...]) -> tuple[Any, ...]:
        raise NotImplementedError

    def call(self, inputs: Any) -> list[jax.Array]:
        x = _checks.float_array(type(self).__name__, "inputs", inputs)
        spec = self._pool_spec(tuple(x.shape))
        name = type(self).__name__
        return list(_tf.pool(name, x, spec, False, _index_dtype()))

    def compute_output_shape(self, input_shape: Sequence[Any]) -> list[tuple]:
        sizes = self._out_sizes(self._spatial(input_shape))
        shape = self._reshaped(input_shape, sizes)
        return [shape, shape]

    def compute_output_spec(self, inputs: Any) -> list[Any]:
        shape, _ = self.compute_output_shape(inputs.shape)
        return [
            keras.KerasTensor(shape, dtype=inputs.dtype),
            keras.KerasTensor(shape, dtype=_index_dtype().name),
        ]


class _MaxPooling(_Pooling):
    def __init__(
        self,
        pool_size: int | Sequence[int] = 2,
        strides: int | Sequence[int] | None = None,
        padding: str = "valid",
        data_format: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(data_format, **kwargs)
        name, nd = type(self).__name__, self.nd
        self.pool_size = _sizes(name, "pool_size", pool_size, nd)
        self.strides = (
            self.pool_size if strides is None else _sizes(name, "strides", strides, nd)
        )
        self.padding = _choice(name, "padding", padding, ("valid", "same"))
        self.input_spec = keras.layers.InputSpec(ndim=nd + 2)

    def _pool_spec(self, shape: tuple[int, ...]) -> Any:
        args = PoolArgs(
            self.pool_size,
            self.strides,
            self.padding.upper(),
            channels_last=bool(self._trail),
        )
        return _spec.pool_spec(type(self).__name__, self.nd, shape, args)

    def _out_sizes(self, spatial: tuple[Any, ...]) -> tuple[Any, ...]:
        def out(size: Any, k: int, s: int) -> Any:
            if size is None:
                return None
            return -(-size // s) if self.padding == "same" else (size - k) // s + 1

        return tuple(map(out, spatial, self.pool_size, self.strides))

    def get_config(self) -> dict[str, Any]:
        return {
            **super().get_config(),
            "pool_size": self.pool_size,
            "strides": self.strides,
            "padding": self.padding,
        }


class _AdaptiveMaxPooling(_Pooling):
    def __init__(
        self,
        output_size: int | Sequence[int],
        data_format: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(data_format, **kwargs)
        name = type(self).__name__
        self.output_size = _sizes(name, "output_size", output_size, self.nd)
        self.input_spec = keras.layers.InputSpec(ndim=self.nd + 2)

    def _pool_spec(self, shape: tuple[int, ...]) -> Any:
        args = AdaptiveArgs(self.output_size, channels_last=bool(self._trail))
        return _spec.adaptive_spec(type(self).__name__, self.nd, shape, args)

    def _out_sizes(self, spatial: tuple[Any, ...]) -> tuple[Any, ...]:
        return self.output_size

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "output_size": self.output_size}


class _MaxUnpooling(_Layer):
    def __init__(
        self,
        size: int | Sequence[int] = 2,
        output_size: int | Sequence[int] | None = None,
        data_format: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(data_format, **kwargs)
        name, nd = type(self).__name__, self.nd
        self.size = _sizes(name, "size", size, nd)
        self.output_size = (
            None
            if output_size is None
            else _sizes(name, "output_size", output_size, nd)
        )

    def _inputs(self, inputs: Any) -> tuple[Any, Any, Any]:
        if not isinstance(inputs, Sequence) or len(inputs) not in (2, 3):
            raise ValueError(
                f"{type(self).__name__}: the layer is called on [values, indices] "
                f"or [values, indices, like], got {inputs!r}"
            )
        values, indices, *like = inputs
        return values, indices, like[0] if like else None

    def _out_shape(self, values: Sequence[Any], like: Sequence[Any] | None) -> tuple:
        if self.output_size is not None:
            sizes: tuple[Any, ...] = self.output_size
        elif like is not None:
            sizes = self._spatial(like)
        else:
            sizes = tuple(
                None if n is None else n * f
                for n, f in zip(self._spatial(values), self.size, strict=True)
            )
        return self._reshaped(values, sizes)

    def call(self, inputs: Any) -> jax.Array:
        name = type(self).__name__
        values, indices, like = self._inputs(inputs)
        values = _checks.float_array(name, "values", values)
        indices = _checks.int_array(name, "indices", indices)
        channels_last = bool(self._trail)
        _checks.spatial_sizes(name, values.shape, self.nd, channels_last)
        _checks.check_shapes(
            name, values.shape, self.nd, channels_last, "`values`'", indices=indices
        )
        shape = self._out_shape(values.shape, None if like is None else like.shape)
        shape = _tf.unpool_shape(
            name, values.shape, self.nd, channels_last, shape, "output_size"
        )
        out = jax.ShapeDtypeStruct(shape, values.dtype)
        return _tf.scatter(name, values, indices, out, False, False)

    def compute_output_shape(self, input_shape: Sequence[Any]) -> tuple:
        values, _, like = self._inputs(input_shape)
        return self._out_shape(values, like)

    def compute_output_spec(self, inputs: Any) -> Any:
        values, _, like = self._inputs(inputs)
        like_shape = None if like is None else like.shape
        shape = self._out_shape(values.shape, like_shape)
        return keras.KerasTensor(shape, dtype=values.dtype)

    def get_config(self) -> dict[str, Any]:
        return {
            **super().get_config(),
            "size": self.size,
            "output_size": self.output_size,
        }


@_serializable
class MaxPoolingWithArgmax1D(_MaxPooling):
    """1-D max pooling returning ``[values, indices]``: Keras's
    ``MaxPooling1D`` arguments, inputs ``(N, L, C)`` (``(N, C, L)``
    channels-first), indices ``x * C + c`` (``c * L + x``)."""

    nd = 1


@_serializable
class MaxPoolingWithArgmax2D(_MaxPooling):
    """2-D max pooling returning ``[values, indices]``: Keras's
    ``MaxPooling2D`` arguments (``pool_size=2``, ``strides=None`` for
    ``pool_size``, ``padding="valid"`` or ``"same"``, ``data_format``).
    Channels-last it is ``tf.nn.max_pool_with_argmax``, bit for bit
    (indices ``(y * W + x) * C + c``); channels-first the indices are ``(c
    * H + y) * W + x``."""

    nd = 2


@_serializable
class MaxPoolingWithArgmax3D(_MaxPooling):
    """3-D max pooling returning ``[values, indices]``: Keras's
    ``MaxPooling3D`` arguments, inputs ``(N, D, H, W, C)``, indices ``((z *
    H + y) * W + x) * C + c`` (``((c * D + z) * H + y) * W + x``
    channels-first)."""

    nd = 3


@_serializable
class AdaptiveMaxPoolingWithArgmax1D(_AdaptiveMaxPooling):
    """1-D adaptive max pooling returning ``[values, indices]``: PyTorch's
    windows ``[floor(i * L / oL), ceil((i + 1) * L / oL))``, indices as
    ``MaxPoolingWithArgmax1D``'s."""

    nd = 1


@_serializable
class AdaptiveMaxPoolingWithArgmax2D(_AdaptiveMaxPooling):
    """2-D adaptive max pooling returning ``[values, indices]``: Keras's
    ``AdaptiveMaxPooling2D`` arguments (``output_size``, an int or two;
    ``data_format``) on PyTorch's windows, computed in exact integers (Keras
    3.15.1's own on JAX gives NaN in its last row and column for some sizes,
    such as 50 -> 7), indices as ``MaxPoolingWithArgmax2D``'s."""

    nd = 2


@_serializable
class AdaptiveMaxPoolingWithArgmax3D(_AdaptiveMaxPooling):
    """3-D adaptive max pooling returning ``[values, indices]``, PyTorch's
    windows, indices as ``MaxPoolingWithArgmax3D``'s."""

    nd = 3


@_serializable
class MaxUnpooling1D(_MaxUnpooling):
    """1-D unpooling: ``layer([values, indices])`` (or ``[values, indices,
    like]``), the indices of ``MaxPoolingWithArgmax1D`` or
    ``AdaptiveMaxPoolingWithArgmax1D``; output ``size`` times the input
    length (``size=2``), ``output_size``, or ``like``'s length."""

    nd = 1


@_serializable
class MaxUnpooling2D(_MaxUnpooling):
    """2-D unpooling, SegNet's decoder: ``layer([values, indices])`` places
    each value at its index (TensorFlow's ``tf.scatter_nd`` unpooling: values
    at coinciding indices are summed), zeros elsewhere. The output is
    ``size`` times the input (``size=2``: 2x2), or ``output_size`` ``(H,
    W)``, or the size of a third input, ``layer([values, indices, like])``
    (the pool's input: odd sizes, such as a ``"same"`` pool of 45 rows to
    23, are restored exactly)."""

    nd = 2


@_serializable
class MaxUnpooling3D(_MaxUnpooling):
    """3-D unpooling: ``layer([values, indices])`` (or ``[values, indices,
    like]``), output ``size`` times the input, ``output_size`` or ``like``'s
    size."""

    nd = 3
