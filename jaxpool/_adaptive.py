"""``adaptive_max_pool2d`` and its backward."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
from jax.typing import ArrayLike

from . import _spec
from ._argmax import argmax_pool
from ._scatter import backward
from ._spec import Algorithm

_FWD = "adaptive_max_pool2d"
_BWD = "adaptive_max_pool2d_backward"


def adaptive_max_pool2d(
    x: ArrayLike,
    output_size: int | Sequence[int | None],
    *,
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
      x: ``(N, C, H, W)`` or ``(C, H, W)``; float16, bfloat16, float32 or
        float64.
      output_size: ``oH`` = ``oW`` as an int, or a pair ``(oH, oW)``, each an int
        >= 1 (it may exceed the input size) or ``None`` to keep that input size.
        Static: under ``jax.jit`` close over it or mark it static.
      algorithm: how ``jax.grad`` computes the gradient: ``"scatter"`` or
        ``"gather"`` (deterministic); see
        :func:`adaptive_max_pool2d_backward`.

    Returns:
      ``(values, indices)``, each ``(N, C, oH, oW)`` (``(C, oH, oW)`` for 3-D
      ``x``). ``values`` has ``x.dtype``; ``indices`` is int32, the flat offset
      ``h * W + w`` inside each ``(n, c)`` plane. Ties keep the first maximum in
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
    x = _spec.float_array(_FWD, "x", x)
    spec = _spec.adaptive_spec(_FWD, x.shape, 2, output_size)
    algorithm = _spec.algorithm(_FWD, algorithm)
    with jax.named_scope(f"jaxpool.{_FWD}"):
        return _pool(x, spec, algorithm)


def adaptive_max_pool2d_backward(
    grad_output: ArrayLike,
    x: ArrayLike | jax.ShapeDtypeStruct,
    indices: ArrayLike,
    *,
    algorithm: Algorithm = "scatter",
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
    x_struct = _spec.shape_dtype(_BWD, "x", x)
    _spec.split_shape(_BWD, x_struct.shape, 2)
    grad_output = _spec.float_array(_BWD, "grad_output", grad_output)
    indices = _spec.int_array(_BWD, "indices", indices)
    out_shape = _spec.adaptive_out_shape(_BWD, x_struct.shape, 2, grad_output)
    _spec.check_backward(_BWD, out_shape, grad_output, indices)
    algorithm = _spec.algorithm(_BWD, algorithm)
    spec = _spec.AdaptiveSpec(x_struct.shape[-2:], out_shape[-2:])
    with jax.named_scope(f"jaxpool.{_BWD}"):
        return backward(grad_output, indices, x_struct, spec.axes, algorithm)


def _backward_rule(
    grad_output: jax.Array,
    x: jax.ShapeDtypeStruct,
    indices: jax.Array,
    spec: Any,
    algorithm: Algorithm,
) -> jax.Array:
    del spec  # the shapes carry everything the adaptive backward needs
    return adaptive_max_pool2d_backward(grad_output, x, indices, algorithm=algorithm)


_pool = argmax_pool(_backward_rule)
