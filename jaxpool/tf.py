"""TensorFlow's max pooling with argmax, on jaxpool's kernels: ``jaxpool.tf``.

``tf.nn.max_pool_with_argmax`` is not PyTorch's op in another layout: its
indices are flat over the whole ``NHWC`` feature map, channels included, and
its CPU kernel skips NaN unless a window's first element is NaN. This module
gives TensorFlow's values and indices, bit for bit (TensorFlow 2.21's CPU
kernel), and its gradient, on the same spec, kernels and backward algorithms
as jaxpool's own ops (a spec and an index map, no kernel of its own), so they
run on every platform and under ``jit``, ``vmap`` and ``grad``:

- [`jaxpool.tf.max_pool_with_argmax`][]: ``tf.nn.max_pool_with_argmax``;
- [`jaxpool.tf.max_pool_grad_with_argmax`][]:
  ``tf.raw_ops.MaxPoolGradWithArgmax``, its gradient;
- [`jaxpool.tf.max_unpool`][]: the unpooling that SegNet code writes with
  ``tf.scatter_nd``, each value back at its index.

Importing it imports no TensorFlow; TensorFlow's eager tensors are accepted
as inputs (through NumPy). The docs' page "TensorFlow and Keras models on
JAX" maps the rest, and ``jaxpool.keras`` gives Keras 3 layers on them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Literal

import jax
import numpy as np
from jax import lax
from jax.typing import ArrayLike

from . import _checks, _core, _spec
from ._args import IntOrSeq, PoolArgs
from ._windows import Algorithm, Implementation, PoolSpec, split

__all__ = ["max_pool_grad_with_argmax", "max_pool_with_argmax", "max_unpool"]

TFPadding = Literal["SAME", "VALID"]


# --------------------------------------------------------------- arguments


def _window(name: str, arg: str, value: Any) -> tuple[int, int]:
    """``(h, w)`` from TensorFlow's forms of ``ksize`` and ``strides``: an
    int, or a sequence of 1, 2 or 4 ints, the 4 ones ``[1, h, w, 1]``."""
    if isinstance(value, str) or value is None:
        raise TypeError(f"{name}: `{arg}` must contain ints, got {value!r}")
    items = _checks.entries(value)
    if len(items) not in (1, 2, 4):
        raise ValueError(
            f"{name}: `{arg}` must be an int or a sequence of 1, 2 or 4 ints, "
            f"got {value!r}"
        )
    ints = tuple(_checks.static_int(name, arg, value, v) for v in items)
    if len(ints) == 4:
        if ints[0] != 1 or ints[3] != 1:
            raise ValueError(
                f"{name}: `{arg}` of 4 entries must be [1, h, w, 1] (no pooling "
                f"over the batch or the channels), got {value!r}"
            )
        ints = ints[1:3]
    hw = (ints[0], ints[0]) if len(ints) == 1 else (ints[0], ints[1])
    if min(hw) < 1:
        raise ValueError(f"{name}: `{arg}` must be positive, got {arg}={value!r}")
    return hw


def _padding(name: str, padding: Any) -> TFPadding:
    """``"SAME"`` or ``"VALID"``, TensorFlow's spelling."""
    if isinstance(padding, str) and padding in ("SAME", "VALID"):
        return padding  # type: ignore[return-value]
    raise ValueError(f"{name}: `padding` must be 'SAME' or 'VALID', got {padding!r}")


def _index_dtype(name: str, output_dtype: Any) -> np.dtype:
    """int32 or int64 (given as a string, a NumPy or JAX type, or a
    ``tf.DType``), as JAX holds it: int64 only with ``jax_enable_x64``."""
    given = getattr(output_dtype, "as_numpy_dtype", output_dtype)  # a tf.DType
    try:
        dtype = np.dtype(given)
    except (TypeError, ValueError):
        dtype = None
    if dtype not in (np.dtype(np.int32), np.dtype(np.int64)):
        raise TypeError(
            f"{name}: `output_dtype` must be int32 or int64, got {output_dtype!r}"
        )
    return np.dtype(jax.dtypes.canonicalize_dtype(dtype))


def _nhwc(name: str, arg: str, shape: tuple[int, ...]) -> None:
    if len(shape) != 4 or min(shape[1:3]) < 1:
        raise ValueError(
            f"{name}: `{arg}` must have 4 dimensions (N, H, W, C) with H, W >= 1, "
            f"got shape {shape}"
        )


def _pool_spec(
    name: str,
    shape: tuple[int, ...],
    ksize: Any,
    strides: Any,
    padding: Any,
    algorithm: Any = "auto",
    implementation: Any = None,
) -> PoolSpec:
    """The spec of TensorFlow's pool over an ``NHWC`` input of ``shape``."""
    _nhwc(name, "input", shape)
    k = _window(name, "ksize", ksize)
    s = _window(name, "strides", strides)
    mode = _padding(name, padding)
    if mode == "VALID" and (k[0] > shape[1] or k[1] > shape[2]):
        raise ValueError(
            f"{name}: with padding='VALID' `ksize` must fit the input, got "
            f"ksize={ksize!r} for input shape {shape} (N, H, W, C)"
        )
    args = PoolArgs(
        k,
        s,
        mode,
        channels_last=True,
        algorithm=algorithm,
        implementation=implementation,
    )
    return _spec.pool_spec(name, 2, shape, args)


# ------------------------------------------------------------ index maps


def _check_range(
    name: str,
    shape: tuple[int, ...],
    include_batch: bool,
    dtype: np.dtype,
) -> None:
    """Every flat index of an input of ``shape`` must fit ``dtype``."""
    per = math.prod(shape[1:])
    largest = per * shape[0] if include_batch else per
    if largest - 1 > np.iinfo(dtype).max:
        where = "in the batch" if include_batch else "per image"
        raise ValueError(
            f"{name}: `input` of shape {shape} has {largest} elements {where}, "
            f"past {dtype} indices: enable jax_enable_x64 and ask for int64 ones"
        )


def flat_indices(
    plane: jax.Array,
    shape: tuple[int, ...],
    nd: int,
    channels_last: bool,
    include_batch: bool,
    dtype: np.dtype,
) -> jax.Array:
    """TensorFlow's flat indices from jaxpool's in-plane ones: the offset of
    the chosen element in its image ``(*S, C)`` (``(C, *S)`` channels-first)
    flattened, plus the image's own offset with ``include_batch``. ``shape``
    is the input's, batched."""
    first, stop = split(len(shape), nd, int(channels_last))
    spatial = math.prod(shape[first:stop])
    channels = shape[-1] if channels_last else shape[first - 1]
    flat = plane.astype(dtype)
    channel = lax.broadcasted_iota(dtype, plane.shape, stop if channels_last else 1)
    flat = flat * channels + channel if channels_last else channel * spatial + flat
    if include_batch:
        flat = flat + lax.broadcasted_iota(dtype, plane.shape, 0) * (spatial * channels)
    return flat


def pool(
    name: str,
    x: jax.Array,
    spec: PoolSpec,
    include_batch: bool,
    dtype: np.dtype,
) -> tuple[jax.Array, jax.Array]:
    """``(values, flat indices)`` of the pool ``spec`` over the batched ``x``
    under TensorFlow's rule, differentiable in ``x``."""
    _check_range(name, x.shape, include_batch, dtype)
    values, plane = _core.tf_pool(name, x, spec)
    nd, channels_last = spec.nd, spec.channels_last
    flat = flat_indices(plane, x.shape, nd, channels_last, include_batch, dtype)
    return values, flat


def scatter(
    name: str,
    updates: jax.Array,
    indices: jax.Array,
    out: jax.ShapeDtypeStruct,
    include_batch: bool,
    check_indices: Any,
) -> jax.Array:
    """Zeros of ``out`` (batched), then each update added at its flat index in
    its image (or in the batch with ``include_batch``); an index past them, or
    negative, is dropped. Differentiable in ``updates``."""
    n = out.shape[0]
    rows, images = (1, n) if include_batch else (n, 1)
    per = math.prod(out.shape[1:]) * images
    each = math.prod(updates.shape[1:]) * images
    like = jax.ShapeDtypeStruct((rows, per), out.dtype)
    flat = _core.scatter_rows(
        name,
        updates.reshape(rows, each),
        indices.reshape(rows, each),
        like,
        check_indices,
    )
    return flat.reshape(out.shape)


# ------------------------------------------------------------------ ops


def max_pool_with_argmax(
    input: ArrayLike,
    ksize: IntOrSeq,
    strides: IntOrSeq,
    padding: TFPadding,
    data_format: str = "NHWC",
    output_dtype: Any = "int64",
    include_batch_in_index: bool = False,
    name: str | None = None,
    *,
    algorithm: Algorithm = "auto",
    implementation: Implementation | None = None,
) -> tuple[jax.Array, jax.Array]:
    """``tf.nn.max_pool_with_argmax``: 2-D max pooling with TensorFlow's
    values and flat indices, bit for bit.

    Equal to TensorFlow 2.21's CPU kernel, values and indices, in float16,
    bfloat16, float32 and float64. Within each window the in-bounds elements
    are scanned in row-major order: ties keep the first maximum (-0.0 and +0.0
    tie), a window of only ``-inf`` gives ``-inf`` at its first element, and
    **NaN is skipped** unless it is the window's first in-bounds element,
    which then gives NaN there (PyTorch's rule, jaxpool's own, gives NaN at
    the last NaN). Differentiable: the gradient is TensorFlow's
    ``MaxPoolGradWithArgmax`` (each output's gradient added at its index,
    [`jaxpool.tf.max_pool_grad_with_argmax`][]), computed by jaxpool's
    backward with ``algorithm``.

    Shapes: ``N`` batch, ``H, W`` input, ``C`` channels, ``oH, oW`` output,
    per axis with window ``k`` and stride ``s``::

        oH = ceil(H / s)             # "SAME": padding k - 1 + (oH - 1) * s - H
                                     # (at least 0), the odd one after
        oH = (H - k) // s + 1        # "VALID"

    Padding is never chosen. The window arguments fix the output shape: they
    are static Python ints under ``jax.jit``.

    Args:
      input: ``(N, H, W, C)``, float16, bfloat16, float32 or float64 (an
        eager ``tf.Tensor`` too). TensorFlow's integer inputs are not taken.
      ksize: the window: an int, or 1, 2 (``(kH, kW)``) or 4 (``[1, kH, kW,
        1]``) ints, each > 0.
      strides: the step, in the same forms (``[1, sH, sW, 1]``).
      padding: ``"SAME"`` or ``"VALID"`` (upper case, as TensorFlow).
      data_format: ``"NHWC"``, TensorFlow's only one for this op.
      output_dtype: ``"int64"`` (default) or ``"int32"`` (or their NumPy,
        JAX or ``tf`` dtypes). JAX holds int64 only with
        ``jax_enable_x64``: without it the indices are **int32** whatever is
        asked (as every int64 in JAX), and an input too large for them is an
        error.
      include_batch_in_index: add each image's offset, ``b * H * W * C``
        (``b`` counts this call's images: under ``jax.vmap``, each mapped
        slice's).
      name: accepted for TensorFlow's signature; unused.
      algorithm: how ``jax.grad`` computes the gradient: ``"auto"``,
        ``"scatter"`` or ``"gather"`` (deterministic), as in
        [`jaxpool.max_pool2d_with_argmax`][].
      implementation: ``None``, ``"xla"`` or ``"pallas"``, as in
        [`jaxpool.max_pool2d_with_argmax`][].

    Returns:
      ``(values, indices)``, each ``(N, oH, oW, C)``: ``values`` in
      ``input``'s dtype; ``indices`` the flat offset ``(y * W + x) * C + c`` of
      the chosen element in its image (``((b * H + y) * W + x) * C + c`` with
      ``include_batch_in_index``), ``(y, x)`` always inside the unpadded
      input.

    Raises:
      TypeError: ``input`` not floating, a window argument not of ints, or
        ``output_dtype`` not int32 or int64.
      ValueError: ``input`` not 4-D, a window argument of another length or
        not positive, pooling over the batch or channels, a window larger
        than a ``"VALID"`` input, bad ``padding`` or ``data_format``.

    Example:
      >>> import jax.numpy as jnp
      >>> from jaxpool import tf as jptf
      >>> x = jnp.array([[1.0, jnp.nan], [jnp.nan, 3.0]]).reshape(1, 2, 2, 1)
      >>> values, indices = jptf.max_pool_with_argmax(x, 2, 2, "VALID")
      >>> values.ravel().tolist(), indices.ravel().tolist()  # NaN skipped
      ([3.0], [3])
    """
    fn = "max_pool_with_argmax"
    x = _checks.float_array(fn, "input", input)
    if data_format != "NHWC":
        raise ValueError(f"{fn}: `data_format` must be 'NHWC', got {data_format!r}")
    dtype = _index_dtype(fn, output_dtype)
    include = _checks.static_bool(fn, "include_batch_in_index", include_batch_in_index)
    spec = _pool_spec(fn, x.shape, ksize, strides, padding, algorithm, implementation)
    return pool(fn, x, spec, include, dtype)


def max_pool_grad_with_argmax(
    input: ArrayLike | jax.ShapeDtypeStruct,
    grad: ArrayLike,
    argmax: ArrayLike,
    ksize: IntOrSeq,
    strides: IntOrSeq,
    padding: TFPadding,
    include_batch_in_index: bool = False,
    *,
    check_indices: bool = False,
) -> jax.Array:
    """``tf.raw_ops.MaxPoolGradWithArgmax``: each gradient added at its index.

    Zeros shaped like ``input``, then ``out.flat[argmax[i] + b * H * W * C]
    += grad[i]`` for every output ``i`` of image ``b`` (``out.flat[argmax[i]]``
    with ``include_batch_in_index``): the gradient of
    [`jaxpool.tf.max_pool_with_argmax`][], and what its ``jax.grad`` computes.
    Only ``argmax`` decides where gradients go: any index in the image (in
    the batch) is honoured, channel included, as TensorFlow's. Two
    differences, both where TensorFlow's kernel is unsafe or lossy:

    - an index outside the image (the batch), negative ones included, is
      **dropped**; TensorFlow's CPU kernel adds it to the next image while
      it stays inside the kernel's shard of the batch, and otherwise aborts
      the process (a failed ``CHECK``, no Python error);
    - float16 and bfloat16 gradients add in float32 and round once;
      TensorFlow adds them in their own dtype, rounding at each step, in flat
      order (``2048 + 1 + 1`` in float16 is 2048 there, 2050 here).

    Plain JAX (a scatter-add), so itself differentiable.

    Args:
      input: the forward's input ``(N, H, W, C)``, or a
        ``jax.ShapeDtypeStruct``: only its shape and floating dtype are used.
      grad: ``(N, oH, oW, C)``, the gradient of the pooled values, in
        ``input``'s dtype.
      argmax: the forward's indices, shaped like ``grad``, any integer dtype.
      ksize: the forward's, in its forms (an int, or 1, 2 or 4 ints).
      strides: the forward's.
      padding: the forward's, ``"SAME"`` or ``"VALID"``.
      include_batch_in_index: whether ``argmax`` counts the batch, as the
        forward's.
      check_indices: also check that every index lies in the image (the
        batch), with ``jax.experimental.checkify``; see
        [`jaxpool.max_pool3d_with_argmax_backward`][].

    Returns:
      The gradient, with the shape and dtype of ``input``.

    Raises:
      TypeError: ``input`` or ``grad`` not floating, of different dtypes,
        ``argmax`` not integer, or a window argument not of ints.
      ValueError: bad window arguments (as the forward), or ``grad`` /
        ``argmax`` not of the forward output's shape.

    Example:
      >>> import jax.numpy as jnp
      >>> from jaxpool import tf as jptf
      >>> x = jnp.zeros((1, 3, 3, 1))
      >>> grad = jnp.array([10.0, 20.0, 30.0, 40.0]).reshape(1, 2, 2, 1)
      >>> argmax = jnp.array([8, 0, 8, 4]).reshape(1, 2, 2, 1)
      >>> jptf.max_pool_grad_with_argmax(x, grad, argmax, 2, 1, "VALID")[
      ...     0, :, :, 0].tolist()
      [[20.0, 0.0, 0.0], [0.0, 40.0, 0.0], [0.0, 0.0, 40.0]]
    """
    fn = "max_pool_grad_with_argmax"
    x = _checks.shape_dtype(fn, "input", input)
    grad = _checks.float_array(fn, "grad", grad)
    argmax = _checks.int_array(fn, "argmax", argmax)
    if grad.dtype != x.dtype:
        raise TypeError(
            f"{fn}: `grad` must have `input`'s dtype {x.dtype}, got {grad.dtype}"
        )
    spec = _pool_spec(fn, x.shape, ksize, strides, padding)
    want = (x.shape[0], *spec.out_size, x.shape[3])
    _checks.check_shapes(fn, want, 2, True, grad=grad, argmax=argmax)
    include = _checks.static_bool(fn, "include_batch_in_index", include_batch_in_index)
    return scatter(fn, grad, argmax, x, include, check_indices)


def max_unpool(
    values: ArrayLike,
    argmax: ArrayLike,
    output_shape: Sequence[int],
    include_batch_in_index: bool = False,
    *,
    check_indices: bool = False,
) -> jax.Array:
    """SegNet's unpooling with TensorFlow's indices: each value back at its
    index, zeros elsewhere.

    What TensorFlow code writes with ``tf.scatter_nd`` (``tfa.layers.
    MaxUnpooling2D``, the community's ``MaxUnpooling2D``): zeros of
    ``output_shape``, then ``out.flat[argmax[i] + b * H * W * C] +=
    values[i]`` (``out.flat[argmax[i]]`` with ``include_batch_in_index``).
    Values whose indices coincide (overlapping windows that chose one
    element) are **summed**, as ``scatter_nd`` sums them, so a model ported
    from TensorFlow keeps its numbers; disjoint windows (SegNet's 2x2,
    stride 2) never coincide. The output shape is given, not inferred: the
    indices count the original width ``W``, which ``tfa``'s inferred
    ``h * stride`` gets wrong for odd sizes. An index outside the image (the
    batch) is dropped (``scatter_nd`` raises an error on CPU). Differentiable
    in ``values``: the gradient is the cotangent read at each index.

    Args:
      values: ``(N, oH, oW, C)`` pooled values, floating.
      argmax: their indices from [`jaxpool.tf.max_pool_with_argmax`][] (or
        TensorFlow's), shaped like ``values``, any integer dtype.
      output_shape: ``(H, W)``, or the whole ``(N, H, W, C)`` with
        ``values``' ``N`` and ``C``: the pool's input size.
      include_batch_in_index: whether ``argmax`` counts the batch.
      check_indices: also check that every index lies in the image (the
        batch), with ``jax.experimental.checkify``.

    Returns:
      ``(N, H, W, C)`` in ``values``' dtype.

    Raises:
      TypeError: ``values`` not floating, ``argmax`` not integer, or
        ``output_shape`` not a sequence of ints.
      ValueError: ``values`` not 4-D, ``argmax`` of another shape, or
        ``output_shape`` of another length, below 1, or of another batch or
        channel count.

    Example:
      >>> import jax.numpy as jnp
      >>> from jaxpool import tf as jptf
      >>> x = jnp.arange(16.0).reshape(1, 4, 4, 1)
      >>> values, argmax = jptf.max_pool_with_argmax(x, 2, 2, "VALID")
      >>> restored = jptf.max_unpool(values, argmax, (4, 4))
      >>> restored[0, :, :, 0].astype(int).tolist()
      [[0, 0, 0, 0], [0, 5, 0, 7], [0, 0, 0, 0], [0, 13, 0, 15]]
    """
    fn = "max_unpool"
    values = _checks.float_array(fn, "values", values)
    argmax = _checks.int_array(fn, "argmax", argmax)
    _nhwc(fn, "values", values.shape)
    _checks.check_shapes(fn, values.shape, 2, True, "`values`'", argmax=argmax)
    shape = unpool_shape(fn, values.shape, 2, True, output_shape, "output_shape")
    include = _checks.static_bool(fn, "include_batch_in_index", include_batch_in_index)
    out = jax.ShapeDtypeStruct(shape, values.dtype)
    return scatter(fn, values, argmax, out, include, check_indices)


def unpool_shape(
    name: str,
    shape: tuple[int, ...],
    nd: int,
    channels_last: bool,
    output_shape: Any,
    arg: str,
) -> tuple[int, ...]:
    """The whole output shape of an unpool of pooled ``shape`` from
    ``output_shape``: its ``nd`` spatial sizes, or the whole shape with
    ``shape``'s batch and channel sizes."""
    if not isinstance(output_shape, Sequence) or isinstance(output_shape, str):
        raise TypeError(
            f"{name}: `{arg}` must be a sequence of {nd} ints (or the whole "
            f"shape), got {output_shape!r}"
        )
    first, stop = split(len(shape), nd, int(channels_last))
    given = tuple(_checks.static_int(name, arg, output_shape, v) for v in output_shape)
    if len(given) == len(shape):
        if given[:first] + given[stop:] != shape[:first] + shape[stop:]:
            raise ValueError(
                f"{name}: `{arg}` as a whole shape must have the batch and channel "
                f"sizes of the values (shape {shape}), got {output_shape!r}"
            )
        given = given[first:stop]
    elif len(given) != nd:
        raise ValueError(
            f"{name}: `{arg}` must have {nd} entries (the spatial sizes) or "
            f"{len(shape)} (the whole shape), got {output_shape!r}"
        )
    if min(given) < 1:
        raise ValueError(f"{name}: `{arg}` must have sizes >= 1, got {output_shape!r}")
    return (*shape[:first], *given, *shape[stop:])
