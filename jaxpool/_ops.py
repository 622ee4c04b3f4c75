"""The public functions: max pooling with argmax, adaptive max pooling, max
unpooling, and the backward ops, in 1, 2 and 3 spatial dimensions.

Each gathers its arguments into their shared definition (``_args.PoolArgs``,
``AdaptiveArgs``), validates them once into a spec and calls ``_core``: the
bodies are a few lines, the docstrings the user's documentation. The 1-D, 2-D
and 3-D variants keep explicit signatures (for IDEs, type checkers, ``help()``
and the API reference) over one N-d implementation.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
from jax.typing import ArrayLike

from . import _checks, _core, _fractional_spec, _spec
from ._args import (
    AdaptiveArgs,
    FractionalArgs,
    IntOrSeq,
    OutputSize,
    Padding,
    PoolArgs,
    UnpoolArgs,
)
from ._windows import Algorithm, Implementation


def _forward(nd: int, x: ArrayLike, args: PoolArgs) -> tuple[jax.Array, jax.Array]:
    name = f"max_pool{nd}d_with_argmax"
    x = _checks.float_array(name, "x", x)
    return _core.pool(name, x, _spec.pool_spec(name, nd, x.shape, args))


def _backward(
    nd: int, grad_output: Any, x: Any, indices: Any, args: PoolArgs, check: Any
) -> jax.Array:
    name = f"max_pool{nd}d_with_argmax_backward"
    grad_output, x, indices = _checks.backward_arrays(name, grad_output, x, indices)
    spec = _spec.pool_backward_spec(name, nd, args, grad_output, x, indices)
    return _core.backward(name, grad_output, indices, x, spec, check)


def _max_unpool(
    nd: int,
    x: ArrayLike,
    indices: ArrayLike,
    args: UnpoolArgs,
    output_size: Any,
    check_indices: Any,
) -> jax.Array:
    name = f"max_unpool{nd}d"
    x = _checks.float_array(name, "x", x)
    indices = _checks.int_array(name, "indices", indices)
    out, windows = _spec.unpool_output(name, nd, x, indices, args, output_size)
    trail = int(args.channels_last)
    return _core.unpool(name, x, indices, out, nd, trail, windows, check_indices)


def max_pool3d_with_argmax(
    x: ArrayLike,
    kernel_size: IntOrSeq,
    stride: IntOrSeq | None = None,
    padding: Padding = 0,
    dilation: IntOrSeq = 1,
    ceil_mode: bool = False,
    *,
    channels_last: bool = False,
    algorithm: Algorithm = "auto",
    implementation: Implementation | None = None,
) -> tuple[jax.Array, jax.Array]:
    """3-D max pooling that also returns the argmax of every window.

    Equal to PyTorch's ``max_pool3d(..., return_indices=True)``, values and
    indices, bit for bit. Differentiable: the gradient is
    [`jaxpool.max_pool3d_with_argmax_backward`][] (a scatter-add to the argmax).

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
      algorithm: how ``jax.grad`` computes the gradient. ``"auto"``
        (default): where no two windows share an input element (``stride >=
        dilation * (kernel_size - 1) + 1`` on every axis, as in 2x2 stride 2)
        each element receives at most one gradient, so the scatter-add is an
        elementwise select (the ``"gather"`` algorithm: same bits, no scatter);
        where windows overlap, ``"scatter"`` on CPU and on a GPU whose jaxlib
        adds floats with native atomics (unless XLA's determinism flags are
        set), the deterministic ``"gather"`` on other GPUs and on TPU (which
        serialises scatters), as the GPU and TPU page explains.
        ``"scatter"`` or ``"gather"`` (deterministic) force one; see
        [`jaxpool.max_pool3d_with_argmax_backward`][].
      implementation: the kernels. ``None`` (default): the platform's
        choice, XLA's everywhere (on an H200 the Pallas train step was
        slower where windows overlap: the docs' performance page).
        ``"xla"``: XLA's programs. ``"pallas"``: jaxpool's Triton kernels,
        on an NVIDIA GPU (Ampere or newer), or interpreted on a CPU (slow;
        for tests); with ``"auto"`` their deterministic backward runs in
        ``jax.grad``. JAX 0.11.2 deprecates Pallas's Triton backend, and
        warns when they are lowered for a GPU.

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
    args = PoolArgs(
        kernel_size,
        stride,
        padding,
        dilation,
        ceil_mode,
        channels_last=channels_last,
        algorithm=algorithm,
        implementation=implementation,
    )
    return _forward(3, x, args)


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
    algorithm: Algorithm = "auto",
    implementation: Implementation | None = None,
    check_indices: bool = False,
) -> jax.Array:
    """Gradient of [`jaxpool.max_pool3d_with_argmax`][] with respect to ``x``.

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
      algorithm: ``"scatter"``: a scatter-add, which honours any index inside
        the plane; on GPU its atomics sum overlapping windows in a varying
        order, so results may differ in the last bits between runs.
        ``"gather"``: for each input element, the gradients of the windows that
        cover it and chose it, added in a fixed order: bitwise reproducible on
        every backend, no scatter; it counts an index only inside its own
        window (true of the forward's indices). ``"auto"`` (default) is the
        scatter here, since these indices may come from anywhere; in
        ``jax.grad`` of the forward, whose indices are its own, it is the
        elementwise select for disjoint windows.
      implementation: ``None``, ``"xla"`` or ``"pallas"``, as in the
        forward; Pallas implements the ``"gather"`` algorithm (the
        scatter is XLA's either way).
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
    args = PoolArgs(
        kernel_size,
        stride,
        padding,
        dilation,
        ceil_mode,
        channels_last=channels_last,
        algorithm=algorithm,
        implementation=implementation,
    )
    return _backward(3, grad_output, x, indices, args, check_indices)


def max_pool2d_with_argmax(
    x: ArrayLike,
    kernel_size: IntOrSeq,
    stride: IntOrSeq | None = None,
    padding: Padding = 0,
    dilation: IntOrSeq = 1,
    ceil_mode: bool = False,
    *,
    channels_last: bool = False,
    algorithm: Algorithm = "auto",
    implementation: Implementation | None = None,
) -> tuple[jax.Array, jax.Array]:
    """2-D max pooling with argmax: [`jaxpool.max_pool3d_with_argmax`][] over
    ``(H, W)``.

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
      algorithm: ``"auto"``, ``"scatter"`` or ``"gather"`` gradient.
      implementation: ``None``, ``"xla"`` or ``"pallas"``; see
        [`jaxpool.max_pool3d_with_argmax`][].

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
    args = PoolArgs(
        kernel_size,
        stride,
        padding,
        dilation,
        ceil_mode,
        channels_last=channels_last,
        algorithm=algorithm,
        implementation=implementation,
    )
    return _forward(2, x, args)


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
    algorithm: Algorithm = "auto",
    implementation: Implementation | None = None,
    check_indices: bool = False,
) -> jax.Array:
    """Gradient of [`jaxpool.max_pool2d_with_argmax`][]; see
    [`jaxpool.max_pool3d_with_argmax_backward`][] for the rules.

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
      algorithm: ``"auto"`` (the scatter), ``"scatter"`` or ``"gather"``
        (deterministic).
      implementation: ``None``, ``"xla"`` or ``"pallas"``; see
        [`jaxpool.max_pool3d_with_argmax`][].
      check_indices: a ``checkify`` check of the indices; see
        [`jaxpool.max_pool3d_with_argmax_backward`][].

    Returns:
      ``grad_input`` with the shape and dtype of ``x``.
    """
    args = PoolArgs(
        kernel_size,
        stride,
        padding,
        dilation,
        ceil_mode,
        channels_last=channels_last,
        algorithm=algorithm,
        implementation=implementation,
    )
    return _backward(2, grad_output, x, indices, args, check_indices)


def max_pool1d_with_argmax(
    x: ArrayLike,
    kernel_size: IntOrSeq,
    stride: IntOrSeq | None = None,
    padding: Padding = 0,
    dilation: IntOrSeq = 1,
    ceil_mode: bool = False,
    *,
    channels_last: bool = False,
    algorithm: Algorithm = "auto",
    implementation: Implementation | None = None,
) -> tuple[jax.Array, jax.Array]:
    """1-D max pooling with argmax: [`jaxpool.max_pool3d_with_argmax`][] over ``L``.

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
      algorithm: ``"auto"``, ``"scatter"`` or ``"gather"`` gradient.
      implementation: ``None``, ``"xla"`` or ``"pallas"``; see
        [`jaxpool.max_pool3d_with_argmax`][].

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
    args = PoolArgs(
        kernel_size,
        stride,
        padding,
        dilation,
        ceil_mode,
        channels_last=channels_last,
        algorithm=algorithm,
        implementation=implementation,
    )
    return _forward(1, x, args)


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
    algorithm: Algorithm = "auto",
    implementation: Implementation | None = None,
    check_indices: bool = False,
) -> jax.Array:
    """Gradient of [`jaxpool.max_pool1d_with_argmax`][]; see
    [`jaxpool.max_pool3d_with_argmax_backward`][] for the rules.

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
      algorithm: ``"auto"`` (the scatter), ``"scatter"`` or ``"gather"``
        (deterministic).
      implementation: ``None``, ``"xla"`` or ``"pallas"``; see
        [`jaxpool.max_pool3d_with_argmax`][].
      check_indices: a ``checkify`` check of the indices; see
        [`jaxpool.max_pool3d_with_argmax_backward`][].

    Returns:
      ``grad_input`` with the shape and dtype of ``x``.
    """
    args = PoolArgs(
        kernel_size,
        stride,
        padding,
        dilation,
        ceil_mode,
        channels_last=channels_last,
        algorithm=algorithm,
        implementation=implementation,
    )
    return _backward(1, grad_output, x, indices, args, check_indices)


def max_unpool3d(
    x: ArrayLike,
    indices: ArrayLike,
    kernel_size: IntOrSeq | None = None,
    stride: IntOrSeq | None = None,
    padding: IntOrSeq = 0,
    output_size: Sequence[int] | None = None,
    *,
    channels_last: bool = False,
    check_indices: bool = False,
) -> jax.Array:
    """Partial inverse of [`jaxpool.max_pool3d_with_argmax`][]: each value back at its
    index, zeros elsewhere.

    PyTorch's ``max_unpool3d(x, indices, kernel_size, stride, padding,
    output_size)``, same arguments, same checks, same result. Indices are flat
    offsets ``d * H * W + h * W + w`` into each output plane (what the pool
    returns, in either layout). An index outside the plane is dropped: it
    never wraps and never writes into another plane (PyTorch raises instead).
    Equal indices within a plane (overlapping windows that chose the same
    element) carry the same value, so it does not matter which lands; for
    unequal values it is unspecified. Differentiable: the gradient with respect
    to ``x`` is the output cotangent gathered at ``indices`` (zero where an
    index was dropped), PyTorch's rule: every copy of an equal index gets the
    gradient of the element it lands on.

    Shapes: ``N`` batch, ``C`` channels, ``oD, oH, oW`` the pooled input,
    ``D, H, W`` the result. The pool's window arguments give the default size,
    PyTorch's, per axis::

        out = (in - 1) * stride + kernel_size - 2 * padding

    and an explicit ``output_size`` must lie strictly between ``out - stride``
    and ``out + stride`` on every axis (PyTorch's check: the sizes a pool with
    those arguments maps to ``in``, with or without ``ceil_mode``).

    Args:
      x: pooled values ``(N, C, oD, oH, oW)`` or ``(C, oD, oH, oW)``
        (``(N, oD, oH, oW, C)`` / ``(oD, oH, oW, C)`` with ``channels_last``);
        a floating dtype.
      indices: integer, same shape as ``x``.
      kernel_size: the pool's window: an int or a sequence of 1 or 3 ints
        (order D, H, W), every value > 0. ``None``: no window, and then
        ``output_size`` is required.
      stride: the pool's stride, as ``kernel_size``; ``None`` or ``()`` means
        ``kernel_size``.
      padding: the pool's padding, an int or 1 or 3 ints, ``0 <= p <=
        kernel_size // 2`` (the pool's rule).
      output_size: the spatial size ``(D, H, W)`` of the result, static ints
        >= 1; or a whole shape with ``x.ndim`` entries (PyTorch's form, such as
        the pool input's ``shape``), whose batch and channel entries must be
        ``x``'s, in ``x``'s layout. ``None`` (default): the size above.
      channels_last: channels in the last axis of ``x``, ``indices`` and the
        result.
      check_indices: also check that every index lies inside its plane, with
        ``jax.experimental.checkify``: wrap the caller in ``checkify.checkify``
        (``jit`` inside or out) and throw the error it returns; it names the
        first bad index and its position.

    Returns:
      ``(N, C, D, H, W)`` (or ``(C, D, H, W)``) in ``x``'s dtype and layout.

    Raises:
      TypeError: ``x`` not floating, ``indices`` not integer, a window argument
        or ``output_size`` not made of static ints, or neither ``kernel_size``
        nor ``output_size`` given.
      ValueError: wrong rank, ``indices`` not shaped like ``x``, bad window
        arguments, or a bad ``output_size``: of the wrong length, below 1,
        outside PyTorch's range, or a whole shape whose batch or channel size
        is not ``x``'s.

    Example:
      >>> import jax.numpy as jnp, jaxpool
      >>> x = jnp.arange(8.0).reshape(1, 1, 2, 2, 2)
      >>> values, indices = jaxpool.max_pool3d_with_argmax(x, 2)
      >>> jaxpool.max_unpool3d(values, indices, 2).ravel().tolist()
      [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 7.0]
      >>> jaxpool.max_unpool3d(values, indices, 2, output_size=(3, 3, 3)).shape
      (1, 1, 3, 3, 3)
    """
    args = UnpoolArgs(kernel_size, stride, padding, channels_last=channels_last)
    return _max_unpool(3, x, indices, args, output_size, check_indices)


def max_unpool2d(
    x: ArrayLike,
    indices: ArrayLike,
    kernel_size: IntOrSeq | None = None,
    stride: IntOrSeq | None = None,
    padding: IntOrSeq = 0,
    output_size: Sequence[int] | None = None,
    *,
    channels_last: bool = False,
    check_indices: bool = False,
) -> jax.Array:
    """Partial inverse of [`jaxpool.max_pool2d_with_argmax`][]; see
    [`jaxpool.max_unpool3d`][].

    PyTorch's ``max_unpool2d(x, indices, kernel_size, stride, padding,
    output_size)``: the default size ``(in - 1) * stride + kernel_size - 2 *
    padding`` per axis, and PyTorch's check of an explicit ``output_size``.

    Args:
      x: pooled values ``(N, C, oH, oW)`` or ``(C, oH, oW)`` (channels last
        with ``channels_last``); a floating dtype.
      indices: integer ``h * W + w`` offsets, same shape as ``x``.
      kernel_size: the pool's window, an int or 1 or 2 ints (order H, W);
        ``None``: ``output_size`` is required.
      stride: the pool's stride (``None``: ``kernel_size``).
      padding: the pool's padding, an int or 1 or 2 ints.
      output_size: ``(H, W)``, or a whole shape with ``x.ndim`` entries;
        ``None``: the default size.
      channels_last: channels in the last axis.
      check_indices: a ``checkify`` check of the indices; see
        [`jaxpool.max_unpool3d`][].

    Returns:
      ``(N, C, H, W)`` (or ``(C, H, W)``) in ``x``'s dtype and layout.

    Example:
      >>> import jax.numpy as jnp, jaxpool
      >>> x = jnp.array([[[1.0, 5.0], [7.0, 2.0]]])
      >>> values, indices = jaxpool.max_pool2d_with_argmax(x, 2)
      >>> jaxpool.max_unpool2d(values, indices, 2).tolist()
      [[[0.0, 0.0], [7.0, 0.0]]]
      >>> jaxpool.max_unpool2d(values, indices, output_size=(2, 3)).tolist()
      [[[0.0, 0.0, 7.0], [0.0, 0.0, 0.0]]]
    """
    args = UnpoolArgs(kernel_size, stride, padding, channels_last=channels_last)
    return _max_unpool(2, x, indices, args, output_size, check_indices)


def max_unpool1d(
    x: ArrayLike,
    indices: ArrayLike,
    kernel_size: IntOrSeq | None = None,
    stride: IntOrSeq | None = None,
    padding: IntOrSeq = 0,
    output_size: Sequence[int] | None = None,
    *,
    channels_last: bool = False,
    check_indices: bool = False,
) -> jax.Array:
    """Partial inverse of [`jaxpool.max_pool1d_with_argmax`][]; see
    [`jaxpool.max_unpool3d`][].

    PyTorch's ``max_unpool1d(x, indices, kernel_size, stride, padding,
    output_size)``.

    Args:
      x: pooled values ``(N, C, oL)`` or ``(C, oL)`` (channels last with
        ``channels_last``); a floating dtype.
      indices: integer positions, same shape as ``x``.
      kernel_size: the pool's window, an int or a 1-sequence; ``None``:
        ``output_size`` is required.
      stride: the pool's stride (``None``: ``kernel_size``).
      padding: the pool's padding.
      output_size: ``(L,)``, or a whole shape with ``x.ndim`` entries;
        ``None``: ``(oL - 1) * stride + kernel_size - 2 * padding``.
      channels_last: channels in the last axis.
      check_indices: a ``checkify`` check of the indices; see
        [`jaxpool.max_unpool3d`][].

    Returns:
      ``(N, C, L)`` (or ``(C, L)``) in ``x``'s dtype and layout.

    Example:
      >>> import jax.numpy as jnp, jaxpool
      >>> x = jnp.array([[3.0, 1.0, 4.0, 1.0, 5.0]])
      >>> values, indices = jaxpool.max_pool1d_with_argmax(x, 2)
      >>> jaxpool.max_unpool1d(values, indices, 2).tolist()
      [[3.0, 0.0, 4.0, 0.0]]
      >>> jaxpool.max_unpool1d(values, indices, 2, output_size=(5,)).tolist()
      [[3.0, 0.0, 4.0, 0.0, 0.0]]
    """
    args = UnpoolArgs(kernel_size, stride, padding, channels_last=channels_last)
    return _max_unpool(1, x, indices, args, output_size, check_indices)


# ---------------------------------------------------------- adaptive pools


"""``adaptive_max_pool{1,2,3}d`` and their backward ops: thin calls into one N-d
core."""


def _adaptive_forward(
    nd: int, x: ArrayLike, args: AdaptiveArgs
) -> tuple[jax.Array, jax.Array]:
    name = f"adaptive_max_pool{nd}d"
    x = _checks.float_array(name, "x", x)
    return _core.pool(name, x, _spec.adaptive_spec(name, nd, x.shape, args))


def adaptive_max_pool2d(
    x: ArrayLike,
    output_size: OutputSize,
    *,
    channels_last: bool = False,
    algorithm: Algorithm = "auto",
    implementation: Implementation | None = None,
) -> tuple[jax.Array, jax.Array]:
    """2-D adaptive max pooling that also returns the argmax of every window.

    Equal to PyTorch's ``adaptive_max_pool2d(..., return_indices=True)``, values
    and indices, bit for bit. Differentiable: the gradient is
    [`jaxpool.adaptive_max_pool2d_backward`][] (a scatter-add to the argmax).

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
      algorithm: how ``jax.grad`` computes the gradient: ``"auto"`` (default:
        the scatter on CPU and, as for the strided pools, on a GPU with native
        float atomics, the deterministic gather elsewhere; adaptive
        windows that do not overlap are a strided pool, and get its
        elementwise select), ``"scatter"`` or ``"gather"`` (deterministic);
        see [`jaxpool.adaptive_max_pool2d_backward`][].
      implementation: ``None``, ``"xla"`` or ``"pallas"``; see
        [`jaxpool.max_pool3d_with_argmax`][].

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
    args = AdaptiveArgs(
        output_size,
        channels_last=channels_last,
        algorithm=algorithm,
        implementation=implementation,
    )
    return _adaptive_forward(2, x, args)


def adaptive_max_pool2d_backward(
    grad_output: ArrayLike,
    x: ArrayLike | jax.ShapeDtypeStruct,
    indices: ArrayLike,
    *,
    channels_last: bool = False,
    algorithm: Algorithm = "auto",
    implementation: Implementation | None = None,
    check_indices: bool = False,
) -> jax.Array:
    """Gradient of [`jaxpool.adaptive_max_pool2d`][] with respect to ``x``.

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
      algorithm: ``"auto"`` (default: the scatter) or ``"scatter"``, or
        ``"gather"``: bitwise reproducible on every backend, no scatter; it
        counts an index only inside its own window (true of the forward's
        indices). See [`jaxpool.max_pool3d_with_argmax_backward`][].
      implementation: ``None``, ``"xla"`` or ``"pallas"``; see
        [`jaxpool.max_pool3d_with_argmax`][].
      check_indices: a ``checkify`` check that every index lies in ``[0, H *
        W)``; see [`jaxpool.max_pool3d_with_argmax_backward`][].

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
    name = "adaptive_max_pool2d_backward"
    grad_output, x, indices = _checks.backward_arrays(name, grad_output, x, indices)
    spec = _spec.adaptive_backward_spec(
        name, 2, (grad_output, x, indices), channels_last, algorithm, implementation
    )
    return _core.backward(name, grad_output, indices, x, spec, check_indices)


def adaptive_max_pool3d(
    x: ArrayLike,
    output_size: OutputSize,
    *,
    channels_last: bool = False,
    algorithm: Algorithm = "auto",
    implementation: Implementation | None = None,
) -> tuple[jax.Array, jax.Array]:
    """3-D adaptive max pooling with argmax: [`jaxpool.adaptive_max_pool2d`][] over
    ``(D, H, W)``.

    Equal to PyTorch's ``adaptive_max_pool3d(..., return_indices=True)``, bit
    for bit; the same windows, rules and errors as the 2-D op.

    Args:
      x: ``(N, C, D, H, W)`` or ``(C, D, H, W)`` (``(N, D, H, W, C)`` or
        ``(D, H, W, C)`` with ``channels_last``); a floating dtype.
      output_size: an int, or 3 entries each an int >= 1 or ``None``.
      channels_last: channels in the last axis.
      algorithm: ``"auto"``, ``"scatter"`` or ``"gather"`` gradient.
      implementation: ``None``, ``"xla"`` or ``"pallas"``; see
        [`jaxpool.max_pool3d_with_argmax`][].

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
    args = AdaptiveArgs(
        output_size,
        channels_last=channels_last,
        algorithm=algorithm,
        implementation=implementation,
    )
    return _adaptive_forward(3, x, args)


def adaptive_max_pool3d_backward(
    grad_output: ArrayLike,
    x: ArrayLike | jax.ShapeDtypeStruct,
    indices: ArrayLike,
    *,
    channels_last: bool = False,
    algorithm: Algorithm = "auto",
    implementation: Implementation | None = None,
    check_indices: bool = False,
) -> jax.Array:
    """Gradient of [`jaxpool.adaptive_max_pool3d`][]; see
    [`jaxpool.adaptive_max_pool2d_backward`][] for the rules.

    Args:
      grad_output: ``(N, C, oD, oH, oW)`` (or ``(C, oD, oH, oW)``), in ``x``'s
        layout.
      x: the forward input or a ``jax.ShapeDtypeStruct`` of it.
      indices: the forward's indices, shaped like ``grad_output``.
      channels_last: as in the forward.
      algorithm: ``"auto"`` (the scatter), ``"scatter"`` or ``"gather"``
        (deterministic).
      implementation: ``None``, ``"xla"`` or ``"pallas"``; see
        [`jaxpool.max_pool3d_with_argmax`][].
      check_indices: a ``checkify`` check of the indices; see
        [`jaxpool.max_pool3d_with_argmax_backward`][].

    Returns:
      ``grad_input`` with the shape and dtype of ``x``.
    """
    name = "adaptive_max_pool3d_backward"
    grad_output, x, indices = _checks.backward_arrays(name, grad_output, x, indices)
    spec = _spec.adaptive_backward_spec(
        name, 3, (grad_output, x, indices), channels_last, algorithm, implementation
    )
    return _core.backward(name, grad_output, indices, x, spec, check_indices)


def adaptive_max_pool1d(
    x: ArrayLike,
    output_size: OutputSize,
    *,
    channels_last: bool = False,
    algorithm: Algorithm = "auto",
    implementation: Implementation | None = None,
) -> tuple[jax.Array, jax.Array]:
    """1-D adaptive max pooling with argmax: [`jaxpool.adaptive_max_pool2d`][] over
    ``L``.

    Equal to PyTorch's ``adaptive_max_pool1d(..., return_indices=True)``.

    Args:
      x: ``(N, C, L)`` or ``(C, L)`` (``(N, L, C)`` or ``(L, C)`` with
        ``channels_last``); a floating dtype.
      output_size: an int >= 1, or a 1-sequence of one (or ``None``).
      channels_last: channels in the last axis.
      algorithm: ``"auto"``, ``"scatter"`` or ``"gather"`` gradient.
      implementation: ``None``, ``"xla"`` or ``"pallas"``; see
        [`jaxpool.max_pool3d_with_argmax`][].

    Returns:
      ``(values, indices)``, each ``(N, C, oL)`` in ``x``'s layout.

    Example:
      >>> import jax.numpy as jnp, jaxpool
      >>> values, indices = jaxpool.adaptive_max_pool1d(
      ...     jnp.array([[3.0, 1.0, 4.0, 1.0, 5.0]]), 2)
      >>> values.tolist(), indices.tolist()
      ([[4.0, 5.0]], [[2, 4]])
    """
    args = AdaptiveArgs(
        output_size,
        channels_last=channels_last,
        algorithm=algorithm,
        implementation=implementation,
    )
    return _adaptive_forward(1, x, args)


def adaptive_max_pool1d_backward(
    grad_output: ArrayLike,
    x: ArrayLike | jax.ShapeDtypeStruct,
    indices: ArrayLike,
    *,
    channels_last: bool = False,
    algorithm: Algorithm = "auto",
    implementation: Implementation | None = None,
    check_indices: bool = False,
) -> jax.Array:
    """Gradient of [`jaxpool.adaptive_max_pool1d`][]; see
    [`jaxpool.adaptive_max_pool2d_backward`][] for the rules.

    Args:
      grad_output: ``(N, C, oL)`` (or ``(C, oL)``), in ``x``'s layout.
      x: the forward input or a ``jax.ShapeDtypeStruct`` of it.
      indices: the forward's indices, shaped like ``grad_output``.
      channels_last: as in the forward.
      algorithm: ``"auto"`` (the scatter), ``"scatter"`` or ``"gather"``
        (deterministic).
      implementation: ``None``, ``"xla"`` or ``"pallas"``; see
        [`jaxpool.max_pool3d_with_argmax`][].
      check_indices: a ``checkify`` check of the indices; see
        [`jaxpool.max_pool3d_with_argmax_backward`][].

    Returns:
      ``grad_input`` with the shape and dtype of ``x``.
    """
    name = "adaptive_max_pool1d_backward"
    grad_output, x, indices = _checks.backward_arrays(name, grad_output, x, indices)
    spec = _spec.adaptive_backward_spec(
        name, 1, (grad_output, x, indices), channels_last, algorithm, implementation
    )
    return _core.backward(name, grad_output, indices, x, spec, check_indices)


# -------------------------------------------------------- fractional pools


def _fractional_forward(
    nd: int, x: ArrayLike, args: FractionalArgs, samples: Any, key: Any
) -> tuple[jax.Array, jax.Array]:
    name = f"fractional_max_pool{nd}d"
    x = _checks.float_array(name, "x", x)
    spec = _fractional_spec.fractional_spec(name, nd, x.shape, args)
    samples = _fractional_spec.fractional_samples(name, nd, x, spec, samples, key)
    return _core.fractional_pool(name, x, samples, spec)


def _fractional_backward(
    nd: int,
    arrays: tuple[Any, Any, Any],
    channels_last: Any,
    algorithm: Any,
    implementation: Any,
    check_indices: Any,
) -> jax.Array:
    name = f"fractional_max_pool{nd}d_backward"
    grad_output, x, indices = _checks.backward_arrays(name, *arrays)
    adaptive = _spec.adaptive_backward_spec(
        name, nd, (grad_output, x, indices), channels_last, algorithm, implementation
    )
    spec = _fractional_spec.fractional_backward_spec(name, adaptive)
    return _core.backward(name, grad_output, indices, x, spec, check_indices)


def fractional_max_pool2d(
    x: ArrayLike,
    kernel_size: IntOrSeq,
    output_size: IntOrSeq | None = None,
    output_ratio: float | Sequence[float] | None = None,
    *,
    samples: ArrayLike | None = None,
    key: jax.Array | None = None,
    channels_last: bool = False,
    algorithm: Algorithm = "auto",
    implementation: Implementation | None = None,
) -> tuple[jax.Array, jax.Array]:
    """2-D fractional max pooling (Graham, 2015) that also returns the argmax.

    Equal to PyTorch's ``fractional_max_pool2d(..., return_indices=True,
    _random_samples=samples)``, values and indices, bit for bit, in every
    dtype. Differentiable: the gradient is
    [`jaxpool.fractional_max_pool2d_backward`][] (a scatter-add to the argmax).

    Shapes: ``N`` batch, ``C`` channels, ``H, W`` input, ``oH, oW`` output,
    ``kH, kW`` kernel. Window ``i`` along an axis of ``L`` inputs, ``O``
    outputs and kernel ``k`` is ``[start, start + k)``, with the sample ``u``
    of its ``(n, c)`` plane and that axis::

        alpha = (L - k) / (O - 1)
        start = int((i + u) * alpha) - int(u * alpha)   # i < O - 1
        start = L - k                                   # i = O - 1

    computed as PyTorch's CPU kernel does, every operation rounded to ``x``'s
    dtype (float16 and bfloat16 included; see the docs' semantics page). Where
    16-bit rounding puts a start past ``L - k`` (PyTorch's kernel then fails an
    internal assertion), it is clipped to ``L - k``.

    Args:
      x: ``(N, C, H, W)`` or ``(C, H, W)`` (``(N, H, W, C)`` or ``(H, W, C)``
        with ``channels_last``); float16, bfloat16, float32 or float64.
      kernel_size: ``kH = kW`` as an int, or ``(kH, kW)``; every value > 0.
      output_size: ``oH = oW`` as an int, or ``(oH, oW)``, with ``o + k - 1 <=
        L`` per axis. Exactly one of ``output_size`` and ``output_ratio``.
      output_ratio: a number or a pair in ``(0, 1)``: ``o = int(L * ratio)``
        per axis, PyTorch's rule.
      samples: PyTorch's ``_random_samples``: ``(N, C, 2)`` in ``x``'s dtype,
        in ``[0, 1)``; **entry 0 drives W and entry 1 drives H**, PyTorch's
        order. More than ``N`` rows are accepted (the first ``N`` are used), as
        PyTorch does; for an unbatched ``x``, ``(1, C, 2)`` or ``(C, 2)``.
        Exactly one of ``samples`` and ``key``.
      key: a ``jax.random`` key: the samples are ``jax.random.uniform(key,
        (N, C, 2), x.dtype)`` (``(C, 2)`` for an unbatched ``x``, the same
        numbers). ``jax.vmap`` over keys gives independent pools.
      channels_last: ``x`` (and the outputs) keep channels in the last axis;
        the samples stay ``(N, C, 2)``.
      algorithm: how the gradient is computed: ``"scatter"`` (a scatter-add),
        ``"gather"`` (deterministic, no scatter: in ``jax.grad`` the stride-1
        pool's covering sum, in the backward op a stable sort of the
        gradients by index and a segmented sum) or ``"auto"`` (default: the
        scatter on CPU and, as for the strided pools, on a GPU with native
        float atomics; the gather elsewhere).
      implementation: ``None`` or ``"xla"`` (there is no Pallas kernel).

    Returns:
      ``(values, indices)``, each ``(N, C, oH, oW)`` (``(C, oH, oW)`` for 3-D
      ``x``; channels last with ``channels_last``). ``values`` has ``x.dtype``;
      ``indices`` is int32, the flat offset ``h * W + w`` inside each ``(n,
      c)`` plane. Ties keep the first maximum in ``(h, w)`` order; a window
      holding NaN gives NaN at its last NaN.

    Raises:
      TypeError: ``x`` not floating, ``samples`` not of ``x``'s dtype, or a
        size argument that is not static.
      ValueError: wrong rank, bad or missing sizes or ratios, ``output_size +
        kernel_size - 1`` above the input size, not exactly one of ``samples``
        and ``key``, or ``samples`` of the wrong shape.

    Example:
      >>> import jax.numpy as jnp, jaxpool
      >>> x = jnp.arange(25.0).reshape(1, 5, 5)
      >>> samples = jnp.array([[0.5, 0.25]])  # (C, 2): u for W, then for H
      >>> values, indices = jaxpool.fractional_max_pool2d(
      ...     x, 2, output_size=3, samples=samples)
      >>> indices.tolist()  # windows start at rows 0, 1, 3, columns 0, 2, 3
      [[[6, 8, 9], [11, 13, 14], [21, 23, 24]]]
    """
    args = FractionalArgs(
        kernel_size,
        output_size,
        output_ratio,
        channels_last=channels_last,
        algorithm=algorithm,
        implementation=implementation,
    )
    return _fractional_forward(2, x, args, samples, key)


def fractional_max_pool2d_backward(
    grad_output: ArrayLike,
    x: ArrayLike | jax.ShapeDtypeStruct,
    indices: ArrayLike,
    *,
    channels_last: bool = False,
    algorithm: Algorithm = "auto",
    implementation: Implementation | None = None,
    check_indices: bool = False,
) -> jax.Array:
    """Gradient of [`jaxpool.fractional_max_pool2d`][] with respect to ``x``.

    Zeros shaped like ``x``, then ``grad_input[n, c].flat[indices[n, c, ...]] +=
    grad_output[n, c, ...]``: gradients of overlapping windows that chose the
    same element add up. Only ``indices`` decides where gradients go (the
    samples are not needed); an index outside ``[0, H * W)``, negative ones
    included, is dropped. float16/bfloat16 accumulate in float32 and round
    once. Itself differentiable.

    Args:
      grad_output: ``(N, C, oH, oW)`` (or ``(C, oH, oW)``; channels last with
        ``channels_last``) cotangent of the pooled values.
      x: the forward input, or a ``jax.ShapeDtypeStruct``: only its shape and
        floating dtype are used.
      indices: the forward's indices, shaped like ``grad_output``, any integer
        dtype (int64 from PyTorch too).
      channels_last: as in the forward.
      algorithm: ``"scatter"``, ``"gather"`` (deterministic, bitwise
        reproducible on every backend; it honours every in-plane index, as the
        scatter does) or ``"auto"`` (default: the scatter on CPU and on a GPU
        with native float atomics, the gather elsewhere).
      implementation: ``None`` or ``"xla"``.
      check_indices: a ``checkify`` check that every index lies in ``[0, H *
        W)``; see [`jaxpool.max_pool3d_with_argmax_backward`][].

    Returns:
      ``grad_input`` with the shape and dtype of ``x``.

    Raises:
      TypeError: ``x``/``grad_output`` not floating or ``indices`` not integer.
      ValueError: ``x`` of the wrong rank, or ``grad_output`` / ``indices``
        whose shapes do not match ``x`` and each other.

    Example:
      >>> import jax.numpy as jnp, jaxpool
      >>> x = jnp.arange(25.0).reshape(1, 5, 5)
      >>> values, indices = jaxpool.fractional_max_pool2d(
      ...     x, 2, output_size=3, samples=jnp.array([[0.5, 0.25]]))
      >>> g = jaxpool.fractional_max_pool2d_backward(
      ...     jnp.ones_like(values), x, indices)
      >>> g[0, 1:3].astype(int).tolist()
      [[0, 1, 0, 1, 1], [0, 1, 0, 1, 1]]
    """
    arrays = (grad_output, x, indices)
    return _fractional_backward(
        2, arrays, channels_last, algorithm, implementation, check_indices
    )


def fractional_max_pool3d(
    x: ArrayLike,
    kernel_size: IntOrSeq,
    output_size: IntOrSeq | None = None,
    output_ratio: float | Sequence[float] | None = None,
    *,
    samples: ArrayLike | None = None,
    key: jax.Array | None = None,
    channels_last: bool = False,
    algorithm: Algorithm = "auto",
    implementation: Implementation | None = None,
) -> tuple[jax.Array, jax.Array]:
    """3-D fractional max pooling with argmax: [`jaxpool.fractional_max_pool2d`][]
    over ``(D, H, W)``.

    Equal to PyTorch's ``fractional_max_pool3d(..., return_indices=True,
    _random_samples=samples)``, bit for bit; the same windows (per axis, the
    formula of the 2-D op), rules and errors.

    Args:
      x: ``(N, C, D, H, W)`` or ``(C, D, H, W)`` (``(N, D, H, W, C)`` or
        ``(D, H, W, C)`` with ``channels_last``); a floating dtype.
      kernel_size: an int, or ``(kD, kH, kW)``.
      output_size: an int, or ``(oD, oH, oW)``; or give ``output_ratio``.
      output_ratio: a number or 3 numbers in ``(0, 1)``.
      samples: ``(N, C, 3)`` in ``x``'s dtype, in ``[0, 1)``; entries 0, 1, 2
        drive D, H, W (PyTorch's 3-D order, unlike its 2-D one). ``(1, C,
        3)`` or ``(C, 3)`` for an unbatched ``x``.
      key: a ``jax.random`` key instead of ``samples``.
      channels_last: channels in the last axis.
      algorithm: ``"auto"``, ``"scatter"`` or ``"gather"`` gradient.
      implementation: ``None`` or ``"xla"``.

    Returns:
      ``(values, indices)``, each ``(N, C, oD, oH, oW)`` in ``x``'s layout;
      indices int32 ``d * H * W + h * W + w`` inside each plane.

    Example:
      >>> import jax, jaxpool
      >>> x = jax.random.normal(jax.random.key(0), (2, 3, 9, 9, 9))
      >>> values, indices = jaxpool.fractional_max_pool3d(
      ...     x, 2, output_ratio=0.5, key=jax.random.key(1))
      >>> values.shape, indices.dtype
      ((2, 3, 4, 4, 4), dtype('int32'))
    """
    args = FractionalArgs(
        kernel_size,
        output_size,
        output_ratio,
        channels_last=channels_last,
        algorithm=algorithm,
        implementation=implementation,
    )
    return _fractional_forward(3, x, args, samples, key)


def fractional_max_pool3d_backward(
    grad_output: ArrayLike,
    x: ArrayLike | jax.ShapeDtypeStruct,
    indices: ArrayLike,
    *,
    channels_last: bool = False,
    algorithm: Algorithm = "auto",
    implementation: Implementation | None = None,
    check_indices: bool = False,
) -> jax.Array:
    """Gradient of [`jaxpool.fractional_max_pool3d`][]; see
    [`jaxpool.fractional_max_pool2d_backward`][] for the rules.

    Args:
      grad_output: ``(N, C, oD, oH, oW)`` (or ``(C, oD, oH, oW)``), in ``x``'s
        layout.
      x: the forward input or a ``jax.ShapeDtypeStruct`` of it.
      indices: the forward's indices, shaped like ``grad_output``.
      channels_last: as in the forward.
      algorithm: ``"auto"``, ``"scatter"`` or ``"gather"`` (deterministic).
      implementation: ``None`` or ``"xla"``.
      check_indices: a ``checkify`` check of the indices.

    Returns:
      ``grad_input`` with the shape and dtype of ``x``.
    """
    arrays = (grad_output, x, indices)
    return _fractional_backward(
        3, arrays, channels_last, algorithm, implementation, check_indices
    )
