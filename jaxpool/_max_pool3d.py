"""``max_pool3d_with_argmax`` and its backward."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
from jax.typing import ArrayLike

from . import _spec
from ._argmax import argmax_pool
from ._scatter import backward
from ._spec import Algorithm

IntOrSeq = int | Sequence[int]

_FWD = "max_pool3d_with_argmax"
_BWD = "max_pool3d_with_argmax_backward"


def max_pool3d_with_argmax(
    x: ArrayLike,
    kernel_size: IntOrSeq,
    stride: IntOrSeq | None = None,
    padding: IntOrSeq = 0,
    dilation: IntOrSeq = 1,
    ceil_mode: bool = False,
    *,
    algorithm: Algorithm = "scatter",
) -> tuple[jax.Array, jax.Array]:
    """3-D max pooling that also returns the argmax of every window.

    Equal to PyTorch's ``max_pool3d(..., return_indices=True)``, values and
    indices, bit for bit. Differentiable: the gradient is
    :func:`max_pool3d_with_argmax_backward` (a scatter-add to the argmax).

    Shapes: ``N`` batch, ``C`` channels, ``D, H, W`` input, ``oD, oH, oW``
    output, where per axis, with ``eff = dilation * (kernel_size - 1) + 1``::

        out = floor((L + 2 * padding - eff) / stride) + 1   # ceil with ceil_mode
        # with ceil_mode, a last window starting in the right padding is dropped

    Window argument forms: an int, or a sequence of 1 or 3 ints (order D, H, W).
    They fix the output shape, so they must be static Python ints under
    ``jax.jit`` (close over them or mark them static).

    Args:
      x: ``(N, C, D, H, W)`` or ``(C, D, H, W)``; float16, bfloat16, float32 or
        float64.
      kernel_size: window size, every value > 0.
      stride: step between windows, every value > 0; ``None`` or ``()`` means
        ``kernel_size``.
      padding: implicit ``-inf`` padding on both sides, ``0 <= p <=
        kernel_size // 2`` per axis. A padded tap is never chosen.
      dilation: spacing between a window's taps, every value > 0.
      ceil_mode: round the output size up instead of down.
      algorithm: how ``jax.grad`` computes the gradient: ``"scatter"`` or
        ``"gather"`` (deterministic); see
        :func:`max_pool3d_with_argmax_backward`.

    Returns:
      ``(values, indices)``, each ``(N, C, oD, oH, oW)`` (``(C, oD, oH, oW)`` for
      4-D ``x``). ``values`` has ``x.dtype``; ``indices`` is int32, the flat
      offset ``d * H * W + h * W + w`` of the chosen element inside its own
      unpadded ``(n, c)`` plane. Ties keep the first maximum in ``(d, h, w)``
      order; a window holding NaN gives NaN at its last NaN; a window of only
      ``-inf`` gives ``-inf`` at its first in-bounds tap.

    Raises:
      TypeError: ``x`` is not floating, or a window argument is not an int
        (a traced value included).
      ValueError: wrong rank, bad argument lengths or values, or an output size
        below 1.

    Example:
      >>> import jax.numpy as jnp, jaxpool
      >>> x = jnp.arange(8.0).reshape(1, 1, 2, 2, 2)
      >>> values, indices = jaxpool.max_pool3d_with_argmax(x, 2)
      >>> values.ravel().tolist(), indices.ravel().tolist()
      ([7.0], [7])
    """
    x = _spec.float_array(_FWD, "x", x)
    spec = _spec.pool_spec(
        _FWD, x.shape, 3, kernel_size, stride, padding, dilation, ceil_mode
    )
    algorithm = _spec.algorithm(_FWD, algorithm)
    with jax.named_scope(f"jaxpool.{_FWD}"):
        return _pool(x, spec, algorithm)


def max_pool3d_with_argmax_backward(
    grad_output: ArrayLike,
    x: ArrayLike | jax.ShapeDtypeStruct,
    indices: ArrayLike,
    kernel_size: IntOrSeq,
    stride: IntOrSeq | None = None,
    padding: IntOrSeq = 0,
    dilation: IntOrSeq = 1,
    ceil_mode: bool = False,
    *,
    algorithm: Algorithm = "scatter",
) -> jax.Array:
    """Gradient of :func:`max_pool3d_with_argmax` with respect to ``x``.

    Zeros shaped like ``x``, then ``grad_input[n, c].flat[indices[n, c, ...]] +=
    grad_output[n, c, ...]``: gradients of every window that chose an element are
    summed. Only ``indices`` decides where gradients go (any index inside the
    plane is honoured); the window arguments check the shapes. An index outside
    ``[0, D * H * W)``, negative ones included, is dropped: it never wraps and
    never reaches another plane. float16/bfloat16 accumulate in float32 and round
    once. Plain JAX (a scatter-add), so itself differentiable: its VJP is a
    gather at ``indices``.

    Args:
      grad_output: ``(N, C, oD, oH, oW)`` (or ``(C, oD, oH, oW)``) cotangent of
        the pooled values.
      x: the forward input, or a ``jax.ShapeDtypeStruct``: only its shape
        ``(N, C, D, H, W)`` / ``(C, D, H, W)`` and floating dtype are used.
      indices: the forward's indices, same shape as ``grad_output``, any integer
        dtype (int64 from PyTorch too).
      kernel_size: as in the forward.
      stride: as in the forward.
      padding: as in the forward.
      dilation: as in the forward.
      ceil_mode: as in the forward.
      algorithm: ``"scatter"`` (default): a scatter-add, fastest; on GPU its
        atomics sum overlapping windows in a varying order, so results may
        differ in the last bits between runs. ``"gather"``: for each input
        element, the gradients of the windows that cover it and chose it, added
        in a fixed order: bitwise reproducible on every backend, no scatter.
        It assumes each index lies inside its own window (true of the forward's
        indices); any other index contributes nothing.

    Returns:
      ``grad_input`` with the shape and dtype of ``x``.

    Raises:
      TypeError: ``x``/``grad_output`` not floating, ``indices`` not integer, or
        a window argument not an int.
      ValueError: bad arguments (as in the forward), or ``grad_output`` /
        ``indices`` not of the forward output's shape.

    Example:
      >>> import jax.numpy as jnp, jaxpool
      >>> x = jnp.arange(8.0).reshape(1, 1, 2, 2, 2)
      >>> values, indices = jaxpool.max_pool3d_with_argmax(x, 2)
      >>> g = jaxpool.max_pool3d_with_argmax_backward(
      ...     jnp.ones_like(values), x, indices, 2)
      >>> g.ravel().tolist()
      [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0]
    """
    x_struct = _spec.shape_dtype(_BWD, "x", x)
    grad_output = _spec.float_array(_BWD, "grad_output", grad_output)
    indices = _spec.int_array(_BWD, "indices", indices)
    spec = _spec.pool_spec(
        _BWD, x_struct.shape, 3, kernel_size, stride, padding, dilation, ceil_mode
    )
    out_shape = x_struct.shape[:-3] + spec.out_size
    _spec.check_backward(_BWD, out_shape, grad_output, indices)
    algorithm = _spec.algorithm(_BWD, algorithm)
    with jax.named_scope(f"jaxpool.{_BWD}"):
        return backward(grad_output, indices, x_struct, spec.axes, algorithm)


def _backward_rule(
    grad_output: jax.Array,
    x: jax.ShapeDtypeStruct,
    indices: jax.Array,
    spec: Any,
    algorithm: Algorithm,
) -> jax.Array:
    return max_pool3d_with_argmax_backward(
        grad_output, x, indices, *spec.args, algorithm=algorithm
    )


_pool = argmax_pool(_backward_rule)
