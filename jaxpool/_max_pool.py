"""``max_pool{1,2,3}d_with_argmax`` and their backward ops: thin calls into one
N-d core."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import jax
from jax.typing import ArrayLike

from . import _spec
from ._argmax import argmax_pool
from ._scatter import backward
from ._windows import Algorithm, PoolSpec, with_spatial

IntOrSeq = int | Sequence[int]
Padding = str | int | Sequence[int | tuple[int, int]]

_FWD = {nd: f"max_pool{nd}d_with_argmax" for nd in (1, 2, 3)}
_BWD = {nd: f"max_pool{nd}d_with_argmax_backward" for nd in (1, 2, 3)}


def _forward(nd: int, x: ArrayLike, *args: Any, algorithm: Any) -> Any:
    fn = _FWD[nd]
    x = _spec.float_array(fn, "x", x)
    spec = _spec.pool_spec(fn, x.shape, nd, *args)
    algorithm = _spec.algorithm(fn, algorithm)
    with jax.named_scope(f"jaxpool.{fn}"):
        return _pool(x, spec, algorithm)


def _backward(
    nd: int,
    grad_output: ArrayLike,
    x: ArrayLike | jax.ShapeDtypeStruct,
    indices: ArrayLike,
    *args: Any,
    algorithm: Any,
    check_indices: Any = False,
) -> jax.Array:
    fn = _BWD[nd]
    x_struct = _spec.shape_dtype(fn, "x", x)
    grad_output = _spec.float_array(fn, "grad_output", grad_output)
    indices = _spec.int_array(fn, "indices", indices)
    spec = _spec.pool_spec(fn, x_struct.shape, nd, *args)
    trail = int(spec.channels_last)
    out_shape = with_spatial(x_struct.shape, nd, trail, spec.out_size)
    _spec.check_shapes(
        fn, out_shape, nd, spec.channels_last, grad_output=grad_output, indices=indices
    )
    algorithm = _spec.algorithm(fn, algorithm)
    plane = math.prod(spec.in_size)
    _spec.check_indices(fn, indices, plane, check_indices)
    with jax.named_scope(f"jaxpool.{fn}"):
        return backward(grad_output, indices, x_struct, spec.axes, trail, algorithm)


def _backward_rule(
    grad_output: jax.Array,
    x: jax.ShapeDtypeStruct,
    indices: jax.Array,
    spec: PoolSpec,
    algorithm: Algorithm,
) -> jax.Array:
    nd = len(spec.in_size)
    return _backward(nd, grad_output, x, indices, *spec.args, algorithm=algorithm)


_pool = argmax_pool(_backward_rule)


def max_pool3d_with_argmax(
    x: ArrayLike,
    kernel_size: IntOrSeq,
    stride: IntOrSeq | None = None,
    padding: Padding = 0,
    dilation: IntOrSeq = 1,
    ceil_mode: bool = False,
    *,
    channels_last: bool = False,
    algorithm: Algorithm = "scatter",
) -> tuple[jax.Array, jax.Array]:
    """3-D max pooling that also returns the argmax of every window.

    Equal to PyTorch's ``max_pool3d(..., return_indices=True)``, values and
    indices, bit for bit. Differentiable: the gradient is
    :func:`max_pool3d_with_argmax_backward` (a scatter-add to the argmax).

    Shapes: ``N`` batch, ``C`` channels, ``D, H, W`` input, ``oD, oH, oW``
    output, where per axis, with ``eff = dilation * (kernel_size - 1) + 1`` and
    padding ``(lo, hi)``::

        out = floor((L + lo + hi - eff) / stride) + 1   # ceil with ceil_mode
        # with ceil_mode, a last window starting in the right padding is dropped

    Window argument forms: an int, or a sequence of 1 or 3 ints (order D, H, W).
    They fix the output shape, so they must be static Python ints under
    ``jax.jit`` (close over them or mark them static).

    Args:
      x: ``(N, C, D, H, W)`` or ``(C, D, H, W)``; ``(N, D, H, W, C)`` or
        ``(D, H, W, C)`` with ``channels_last``. float16, bfloat16, float32 or
        float64.
      kernel_size: window size, every value > 0.
      stride: step between windows, every value > 0; ``None`` or ``()`` means
        ``kernel_size``.
      padding: implicit ``-inf`` padding, never chosen. An int ``p`` (or one
        per axis) pads ``p`` on both sides, ``0 <= p <= kernel_size // 2``
        (PyTorch's rule). Flax's forms: ``"VALID"`` (none), ``"SAME"``
        (``ceil(L / stride)`` outputs, as ``lax.reduce_window``), or a
        ``(lo, hi)`` pair per axis, each side ``<= dilation * (kernel_size -
        1)``.
      dilation: spacing between a window's taps, every value > 0.
      ceil_mode: round the output size up instead of down.
      channels_last: ``x`` (and the outputs) keep channels in the last axis.
      algorithm: how ``jax.grad`` computes the gradient: ``"scatter"`` or
        ``"gather"`` (deterministic); see
        :func:`max_pool3d_with_argmax_backward`.

    Returns:
      ``(values, indices)``, each ``(N, C, oD, oH, oW)`` (``(C, oD, oH, oW)`` for
      4-D ``x``; channels last with ``channels_last``). ``values`` has
      ``x.dtype``; ``indices`` is int32, the flat offset ``d * H * W + h * W +
      w`` of the chosen element inside its own unpadded ``(n, c)`` plane, in
      either layout. Ties keep the first maximum in ``(d, h, w)`` order; a
      window holding NaN gives NaN at its last NaN; a window of only ``-inf``
      gives ``-inf`` at its first in-bounds tap; a window with no in-bounds tap
      (dilation) gives ``-inf`` at its first non-negative tap's flat offset,
      PyTorch's index, which may lie outside the plane.

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
    return _forward(
        3,
        x,
        kernel_size,
        stride,
        padding,
        dilation,
        ceil_mode,
        channels_last,
        algorithm=algorithm,
    )


def max_pool3d_with_argmax_backward(
    grad_output: ArrayLike,
    x: ArrayLike | jax.ShapeDtypeStruct,
    indices: ArrayLike,
    kernel_size: IntOrSeq,
    stride: IntOrSeq | None = None,
    padding: Padding = 0,
    dilation: IntOrSeq = 1,
    ceil_mode: bool = False,
    *,
    channels_last: bool = False,
    algorithm: Algorithm = "scatter",
    check_indices: bool = False,
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
      grad_output: ``(N, C, oD, oH, oW)`` (or ``(C, oD, oH, oW)``; channels last
        with ``channels_last``) cotangent of the pooled values.
      x: the forward input, or a ``jax.ShapeDtypeStruct``: only its shape
        ``(N, C, D, H, W)`` / ``(C, D, H, W)`` and floating dtype are used.
      indices: the forward's indices, same shape as ``grad_output``, any integer
        dtype (int64 from PyTorch too).
      kernel_size: as in the forward.
      stride: as in the forward.
      padding: as in the forward.
      dilation: as in the forward.
      ceil_mode: as in the forward.
      channels_last: as in the forward; the result has ``x``'s layout.
      algorithm: ``"scatter"`` (default): a scatter-add, fastest; on GPU its
        atomics sum overlapping windows in a varying order, so results may
        differ in the last bits between runs. ``"gather"``: for each input
        element, the gradients of the windows that cover it and chose it, added
        in a fixed order: bitwise reproducible on every backend, no scatter.
        It assumes each index lies inside its own window (true of the forward's
        indices); any other index contributes nothing.
      check_indices: also check that every index lies in ``[0, D * H * W)``,
        with ``jax.experimental.checkify``: wrap the caller in
        ``checkify.checkify`` (``jit`` inside or out) and throw the error it
        returns; it names the first bad index and its position. (The forward
        itself returns such an index for a window with no in-bounds tap.)

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
    return _backward(
        3,
        grad_output,
        x,
        indices,
        kernel_size,
        stride,
        padding,
        dilation,
        ceil_mode,
        channels_last,
        algorithm=algorithm,
        check_indices=check_indices,
    )


def max_pool2d_with_argmax(
    x: ArrayLike,
    kernel_size: IntOrSeq,
    stride: IntOrSeq | None = None,
    padding: Padding = 0,
    dilation: IntOrSeq = 1,
    ceil_mode: bool = False,
    *,
    channels_last: bool = False,
    algorithm: Algorithm = "scatter",
) -> tuple[jax.Array, jax.Array]:
    """2-D max pooling with argmax: :func:`max_pool3d_with_argmax` over ``(H, W)``.

    Equal to PyTorch's ``max_pool2d(..., return_indices=True)``, bit for bit;
    the same rules, argument forms (window arguments: an int or 1 or 2 ints,
    order H, W) and errors as the 3-D op.

    Args:
      x: ``(N, C, H, W)`` or ``(C, H, W)`` (``(N, H, W, C)`` or ``(H, W, C)``
        with ``channels_last``); a floating dtype.
      kernel_size: window size.
      stride: step between windows (``None``: ``kernel_size``).
      padding: an int per axis (``<= kernel_size // 2``), ``"SAME"``,
        ``"VALID"`` or ``(lo, hi)`` pairs.
      dilation: spacing between taps.
      ceil_mode: round the output size up.
      channels_last: channels in the last axis.
      algorithm: ``"scatter"`` or ``"gather"`` gradient.

    Returns:
      ``(values, indices)``, each ``(N, C, oH, oW)`` in ``x``'s layout; indices
      int32 ``h * W + w`` inside each plane.

    Example:
      >>> import jax.numpy as jnp, jaxpool
      >>> x = jnp.array([[[1.0, 5.0], [7.0, 2.0]]])
      >>> values, indices = jaxpool.max_pool2d_with_argmax(x, 2)
      >>> values.tolist(), indices.tolist()
      ([[[7.0]]], [[[2]]])
    """
    return _forward(
        2,
        x,
        kernel_size,
        stride,
        padding,
        dilation,
        ceil_mode,
        channels_last,
        algorithm=algorithm,
    )


def max_pool2d_with_argmax_backward(
    grad_output: ArrayLike,
    x: ArrayLike | jax.ShapeDtypeStruct,
    indices: ArrayLike,
    kernel_size: IntOrSeq,
    stride: IntOrSeq | None = None,
    padding: Padding = 0,
    dilation: IntOrSeq = 1,
    ceil_mode: bool = False,
    *,
    channels_last: bool = False,
    algorithm: Algorithm = "scatter",
    check_indices: bool = False,
) -> jax.Array:
    """Gradient of :func:`max_pool2d_with_argmax`; see
    :func:`max_pool3d_with_argmax_backward` for the rules.

    Args:
      grad_output: ``(N, C, oH, oW)`` (or ``(C, oH, oW)``), in ``x``'s layout.
      x: the forward input or a ``jax.ShapeDtypeStruct`` of it.
      indices: the forward's indices, shaped like ``grad_output``.
      kernel_size: as in the forward.
      stride: as in the forward.
      padding: as in the forward.
      dilation: as in the forward.
      ceil_mode: as in the forward.
      channels_last: as in the forward.
      algorithm: ``"scatter"`` or ``"gather"`` (deterministic).
      check_indices: a ``checkify`` check of the indices; see
        :func:`max_pool3d_with_argmax_backward`.

    Returns:
      ``grad_input`` with the shape and dtype of ``x``.
    """
    return _backward(
        2,
        grad_output,
        x,
        indices,
        kernel_size,
        stride,
        padding,
        dilation,
        ceil_mode,
        channels_last,
        algorithm=algorithm,
        check_indices=check_indices,
    )


def max_pool1d_with_argmax(
    x: ArrayLike,
    kernel_size: IntOrSeq,
    stride: IntOrSeq | None = None,
    padding: Padding = 0,
    dilation: IntOrSeq = 1,
    ceil_mode: bool = False,
    *,
    channels_last: bool = False,
    algorithm: Algorithm = "scatter",
) -> tuple[jax.Array, jax.Array]:
    """1-D max pooling with argmax: :func:`max_pool3d_with_argmax` over ``L``.

    Equal to PyTorch's ``max_pool1d(..., return_indices=True)``, bit for bit.

    Args:
      x: ``(N, C, L)`` or ``(C, L)`` (``(N, L, C)`` or ``(L, C)`` with
        ``channels_last``); a floating dtype.
      kernel_size: window size.
      stride: step between windows (``None``: ``kernel_size``).
      padding: an int (``<= kernel_size // 2``), ``"SAME"``, ``"VALID"`` or
        ``[(lo, hi)]``.
      dilation: spacing between taps.
      ceil_mode: round the output size up.
      channels_last: channels in the last axis.
      algorithm: ``"scatter"`` or ``"gather"`` gradient.

    Returns:
      ``(values, indices)``, each ``(N, C, oL)`` in ``x``'s layout; indices
      int32 positions along ``L``.

    Example:
      >>> import jax.numpy as jnp, jaxpool
      >>> values, indices = jaxpool.max_pool1d_with_argmax(
      ...     jnp.array([[3.0, 1.0, 4.0, 1.0, 5.0]]), 2)
      >>> values.tolist(), indices.tolist()
      ([[3.0, 4.0]], [[0, 2]])
    """
    return _forward(
        1,
        x,
        kernel_size,
        stride,
        padding,
        dilation,
        ceil_mode,
        channels_last,
        algorithm=algorithm,
    )


def max_pool1d_with_argmax_backward(
    grad_output: ArrayLike,
    x: ArrayLike | jax.ShapeDtypeStruct,
    indices: ArrayLike,
    kernel_size: IntOrSeq,
    stride: IntOrSeq | None = None,
    padding: Padding = 0,
    dilation: IntOrSeq = 1,
    ceil_mode: bool = False,
    *,
    channels_last: bool = False,
    algorithm: Algorithm = "scatter",
    check_indices: bool = False,
) -> jax.Array:
    """Gradient of :func:`max_pool1d_with_argmax`; see
    :func:`max_pool3d_with_argmax_backward` for the rules.

    Args:
      grad_output: ``(N, C, oL)`` (or ``(C, oL)``), in ``x``'s layout.
      x: the forward input or a ``jax.ShapeDtypeStruct`` of it.
      indices: the forward's indices, shaped like ``grad_output``.
      kernel_size: as in the forward.
      stride: as in the forward.
      padding: as in the forward.
      dilation: as in the forward.
      ceil_mode: as in the forward.
      channels_last: as in the forward.
      algorithm: ``"scatter"`` or ``"gather"`` (deterministic).
      check_indices: a ``checkify`` check of the indices; see
        :func:`max_pool3d_with_argmax_backward`.

    Returns:
      ``grad_input`` with the shape and dtype of ``x``.
    """
    return _backward(
        1,
        grad_output,
        x,
        indices,
        kernel_size,
        stride,
        padding,
        dilation,
        ceil_mode,
        channels_last,
        algorithm=algorithm,
        check_indices=check_indices,
    )
