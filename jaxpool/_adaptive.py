"""``adaptive_max_pool{1,2,3}d`` and their backward ops: thin calls into one N-d
core."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import jax
from jax.typing import ArrayLike

from . import _spec
from ._argmax import argmax_pool
from ._scatter import backward
from ._windows import AdaptiveSpec, Algorithm

_FWD = {nd: f"adaptive_max_pool{nd}d" for nd in (1, 2, 3)}
_BWD = {nd: f"adaptive_max_pool{nd}d_backward" for nd in (1, 2, 3)}
OutputSize = int | Sequence[int | None]


def _forward(
    nd: int, x: ArrayLike, output_size: Any, channels_last: Any, algorithm: Any
) -> Any:
    fn = _FWD[nd]
    x = _spec.float_array(fn, "x", x)
    spec = _spec.adaptive_spec(fn, x.shape, nd, output_size, channels_last)
    algorithm = _spec.algorithm(fn, algorithm)
    with jax.named_scope(f"jaxpool.{fn}"):
        return _pool(x, spec, algorithm)


def _backward(
    nd: int,
    grad_output: ArrayLike,
    x: ArrayLike | jax.ShapeDtypeStruct,
    indices: ArrayLike,
    channels_last: Any,
    algorithm: Any,
    check_indices: Any = False,
) -> jax.Array:
    fn = _BWD[nd]
    x_struct = _spec.shape_dtype(fn, "x", x)
    cl = _spec.static_bool(fn, "channels_last", channels_last)
    spatial = _spec.split_shape(fn, x_struct.shape, nd, cl)
    grad_output = _spec.float_array(fn, "grad_output", grad_output)
    indices = _spec.int_array(fn, "indices", indices)
    out = _spec.pooled_spatial(fn, x_struct.shape, nd, cl, "grad_output", grad_output)
    _spec.check_shapes(fn, grad_output.shape, nd, cl, indices=indices)
    algorithm = _spec.algorithm(fn, algorithm)
    spec = AdaptiveSpec(spatial, out, cl)
    trail = int(cl)
    plane = math.prod(spatial)
    _spec.check_indices(fn, indices, plane, check_indices)
    with jax.named_scope(f"jaxpool.{fn}"):
        return backward(grad_output, indices, x_struct, spec.axes, trail, algorithm)


def _backward_rule(
    grad_output: jax.Array,
    x: jax.ShapeDtypeStruct,
    indices: jax.Array,
    spec: AdaptiveSpec,
    algorithm: Algorithm,
) -> jax.Array:
    nd = len(spec.in_size)
    return _backward(nd, grad_output, x, indices, spec.channels_last, algorithm)


_pool = argmax_pool(_backward_rule)


def adaptive_max_pool2d(
    x: ArrayLike,
    output_size: OutputSize,
    *,
    channels_last: bool = False,
    algorithm: Algorithm = "scatter",
) -> tuple[jax.Array, jax.Array]:
    """2-D adaptive max pooling that also returns the argmax of every window.

    Equal to PyTorch's ``adaptive_max_pool2d(..., return_indices=True)``, values
    and indices, bit for bit. Differentiable: the gradient is
    :func:`adaptive_max_pool2d_backward` (a scatter-add to the argmax).

    Shapes: ``N`` batch, ``C`` channels, ``H, W`` input, ``oH, oW`` output.
    Window ``i`` along an axis of length ``L`` with ``O`` outputs is the
    half-open range, in exact integer arithmetic::

        start = floor(i * L / O)
        end = ceil((i + 1) * L / O)

    so windows differ in size by at most one, overlap when ``L / O`` is not an
    integer, and repeat elements when ``O > L``.

    Args:
      x: ``(N, C, H, W)`` or ``(C, H, W)`` (``(N, H, W, C)`` or ``(H, W, C)``
        with ``channels_last``); float16, bfloat16, float32 or float64.
      output_size: ``oH`` = ``oW`` as an int, or a pair ``(oH, oW)``, each an int
        >= 1 (it may exceed the input size) or ``None`` to keep that input size.
        Static: under ``jax.jit`` close over it or mark it static.
      channels_last: ``x`` (and the outputs) keep channels in the last axis.
      algorithm: how ``jax.grad`` computes the gradient: ``"scatter"`` or
        ``"gather"`` (deterministic); see
        :func:`adaptive_max_pool2d_backward`.

    Returns:
      ``(values, indices)``, each ``(N, C, oH, oW)`` (``(C, oH, oW)`` for 3-D
      ``x``; channels last with ``channels_last``). ``values`` has ``x.dtype``;
      ``indices`` is int32, the flat offset ``h * W + w`` inside each ``(n, c)``
      plane. Ties keep the first maximum in
      ``(h, w)`` order; a window holding NaN gives NaN at its last NaN.

    Raises:
      TypeError: ``x`` is not floating, or ``output_size`` is not made of ints
        (a traced value included).
      ValueError: wrong rank, or ``output_size`` of the wrong length or < 1.

    Example:
      >>> import jax.numpy as jnp, jaxpool
      >>> x = jnp.array([[[1.0, 5.0, 2.0], [4.0, 3.0, 6.0]]])
      >>> values, indices = jaxpool.adaptive_max_pool2d(x, (1, 2))
      >>> values.tolist(), indices.tolist()
      ([[[5.0, 6.0]]], [[[1, 5]]])
    """
    return _forward(2, x, output_size, channels_last, algorithm)


def adaptive_max_pool2d_backward(
    grad_output: ArrayLike,
    x: ArrayLike | jax.ShapeDtypeStruct,
    indices: ArrayLike,
    *,
    channels_last: bool = False,
    algorithm: Algorithm = "scatter",
    check_indices: bool = False,
) -> jax.Array:
    """Gradient of :func:`adaptive_max_pool2d` with respect to ``x``.

    Zeros shaped like ``x``, then ``grad_input[n, c].flat[indices[n, c, ...]] +=
    grad_output[n, c, ...]``: overlapping windows that chose the same element
    add up. Only ``indices`` decides where gradients go; an index outside
    ``[0, H * W)``, negative ones included, is dropped (never wrapped, never
    into another plane). float16/bfloat16 accumulate in float32 and round once.
    Itself differentiable (its VJP is a gather at ``indices``).

    Args:
      grad_output: ``(N, C, oH, oW)`` (or ``(C, oH, oW)``) cotangent of the
        pooled values.
      x: the forward input, or a ``jax.ShapeDtypeStruct``: only its shape
        ``(N, C, H, W)`` / ``(C, H, W)`` and floating dtype are used.
      indices: the forward's indices, same shape as ``grad_output``, any integer
        dtype (int64 from PyTorch too).
      algorithm: ``"scatter"`` (default) or ``"gather"``: bitwise reproducible
        on every backend, no scatter; it assumes each index lies inside its own
        window (true of the forward's indices), any other index contributes
        nothing. See :func:`max_pool3d_with_argmax_backward`.
      check_indices: a ``checkify`` check that every index lies in ``[0, H *
        W)``; see :func:`max_pool3d_with_argmax_backward`.

    Returns:
      ``grad_input`` with the shape and dtype of ``x``.

    Raises:
      TypeError: ``x``/``grad_output`` not floating or ``indices`` not integer.
      ValueError: ``x`` of the wrong rank, or ``grad_output`` / ``indices`` whose
        shapes do not match ``x`` and each other.

    Example:
      >>> import jax.numpy as jnp, jaxpool
      >>> x = jnp.array([[[1.0, 5.0, 2.0], [4.0, 3.0, 6.0]]])
      >>> values, indices = jaxpool.adaptive_max_pool2d(x, (1, 2))
      >>> jaxpool.adaptive_max_pool2d_backward(jnp.ones_like(values), x, indices)
      Array([[[0., 1., 0.],
              [0., 0., 1.]]], dtype=float32)
    """
    return _backward(
        2, grad_output, x, indices, channels_last, algorithm, check_indices
    )


def adaptive_max_pool3d(
    x: ArrayLike,
    output_size: OutputSize,
    *,
    channels_last: bool = False,
    algorithm: Algorithm = "scatter",
) -> tuple[jax.Array, jax.Array]:
    """3-D adaptive max pooling with argmax: :func:`adaptive_max_pool2d` over
    ``(D, H, W)``.

    Equal to PyTorch's ``adaptive_max_pool3d(..., return_indices=True)``, bit
    for bit; the same windows, rules and errors as the 2-D op.

    Args:
      x: ``(N, C, D, H, W)`` or ``(C, D, H, W)`` (``(N, D, H, W, C)`` or
        ``(D, H, W, C)`` with ``channels_last``); a floating dtype.
      output_size: an int, or 3 entries each an int >= 1 or ``None``.
      channels_last: channels in the last axis.
      algorithm: ``"scatter"`` or ``"gather"`` gradient.

    Returns:
      ``(values, indices)``, each ``(N, C, oD, oH, oW)`` in ``x``'s layout;
      indices int32 ``d * H * W + h * W + w`` inside each plane.

    Example:
      >>> import jax.numpy as jnp, jaxpool
      >>> x = jnp.arange(24.0).reshape(1, 2, 3, 4)
      >>> values, indices = jaxpool.adaptive_max_pool3d(x, (1, 1, 2))
      >>> values.tolist(), indices.tolist()
      ([[[[21.0, 23.0]]]], [[[[21, 23]]]])
    """
    return _forward(3, x, output_size, channels_last, algorithm)


def adaptive_max_pool3d_backward(
    grad_output: ArrayLike,
    x: ArrayLike | jax.ShapeDtypeStruct,
    indices: ArrayLike,
    *,
    channels_last: bool = False,
    algorithm: Algorithm = "scatter",
    check_indices: bool = False,
) -> jax.Array:
    """Gradient of :func:`adaptive_max_pool3d`; see
    :func:`adaptive_max_pool2d_backward` for the rules.

    Args:
      grad_output: ``(N, C, oD, oH, oW)`` (or ``(C, oD, oH, oW)``), in ``x``'s
        layout.
      x: the forward input or a ``jax.ShapeDtypeStruct`` of it.
      indices: the forward's indices, shaped like ``grad_output``.
      channels_last: as in the forward.
      algorithm: ``"scatter"`` or ``"gather"`` (deterministic).
      check_indices: a ``checkify`` check of the indices; see
        :func:`max_pool3d_with_argmax_backward`.

    Returns:
      ``grad_input`` with the shape and dtype of ``x``.
    """
    return _backward(
        3, grad_output, x, indices, channels_last, algorithm, check_indices
    )


def adaptive_max_pool1d(
    x: ArrayLike,
    output_size: OutputSize,
    *,
    channels_last: bool = False,
    algorithm: Algorithm = "scatter",
) -> tuple[jax.Array, jax.Array]:
    """1-D adaptive max pooling with argmax: :func:`adaptive_max_pool2d` over
    ``L``.

    Equal to PyTorch's ``adaptive_max_pool1d(..., return_indices=True)``.

    Args:
      x: ``(N, C, L)`` or ``(C, L)`` (``(N, L, C)`` or ``(L, C)`` with
        ``channels_last``); a floating dtype.
      output_size: an int >= 1, or a 1-sequence of one (or ``None``).
      channels_last: channels in the last axis.
      algorithm: ``"scatter"`` or ``"gather"`` gradient.

    Returns:
      ``(values, indices)``, each ``(N, C, oL)`` in ``x``'s layout.

    Example:
      >>> import jax.numpy as jnp, jaxpool
      >>> values, indices = jaxpool.adaptive_max_pool1d(
      ...     jnp.array([[3.0, 1.0, 4.0, 1.0, 5.0]]), 2)
      >>> values.tolist(), indices.tolist()
      ([[4.0, 5.0]], [[2, 4]])
    """
    return _forward(1, x, output_size, channels_last, algorithm)


def adaptive_max_pool1d_backward(
    grad_output: ArrayLike,
    x: ArrayLike | jax.ShapeDtypeStruct,
    indices: ArrayLike,
    *,
    channels_last: bool = False,
    algorithm: Algorithm = "scatter",
    check_indices: bool = False,
) -> jax.Array:
    """Gradient of :func:`adaptive_max_pool1d`; see
    :func:`adaptive_max_pool2d_backward` for the rules.

    Args:
      grad_output: ``(N, C, oL)`` (or ``(C, oL)``), in ``x``'s layout.
      x: the forward input or a ``jax.ShapeDtypeStruct`` of it.
      indices: the forward's indices, shaped like ``grad_output``.
      channels_last: as in the forward.
      algorithm: ``"scatter"`` or ``"gather"`` (deterministic).
      check_indices: a ``checkify`` check of the indices; see
        :func:`max_pool3d_with_argmax_backward`.

    Returns:
      ``grad_input`` with the shape and dtype of ``x``.
    """
    return _backward(
        1, grad_output, x, indices, channels_last, algorithm, check_indices
    )
