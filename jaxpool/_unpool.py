"""``max_unpool{1,2,3}d``: place pooled values back at their argmax.

The inverse layout of a pool with argmax (SegNet's decoder): zeros of the
requested spatial size with each value written at its index inside its own
plane. A ``jax.custom_vjp`` whose backward is a gather at the indices
(PyTorch's), itself plain JAX and differentiable.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from typing import Any

import jax
from jax.typing import ArrayLike

from . import _spec
from ._scatter import gather_at, scatter_to
from ._windows import split, with_spatial

_FN = {nd: f"max_unpool{nd}d" for nd in (1, 2, 3)}


@functools.partial(jax.custom_vjp, nondiff_argnums=(2, 3, 4))
def _unpool(
    x: jax.Array,
    indices: jax.Array,
    out: jax.ShapeDtypeStruct,
    nd: int,
    trail: int,
) -> jax.Array:
    return scatter_to(x, indices, out, nd, trail, accumulate=False)


def _unpool_fwd(
    x: jax.Array,
    indices: jax.Array,
    out: jax.ShapeDtypeStruct,
    nd: int,
    trail: int,
) -> tuple[jax.Array, jax.Array]:
    return _unpool(x, indices, out, nd, trail), indices


def _unpool_bwd(
    out: jax.ShapeDtypeStruct, nd: int, trail: int, indices: jax.Array, ct: jax.Array
) -> tuple[jax.Array, None]:
    del out
    return gather_at(ct, indices, nd, trail, 0.0), None


_unpool.defvjp(_unpool_fwd, _unpool_bwd)
# One program per configuration for eager calls (see _argmax.argmax_pool).
_unpool_jit = jax.jit(_unpool, static_argnums=(2, 3, 4))


def _output_spatial(
    fn: str, x_shape: tuple[int, ...], nd: int, trail: int, output_size: Any
) -> tuple[int, ...]:
    """``output_size``: ``nd`` spatial sizes, or a whole shape like
    ``x.shape`` (PyTorch accepts both) whose spatial sizes are used."""
    if not isinstance(output_size, Sequence) or isinstance(output_size, str):
        raise TypeError(
            f"{fn}: `output_size` must be a sequence of {nd} ints, got {output_size!r}"
        )
    sizes = tuple(
        _spec.static_int(fn, "output_size", output_size, v) for v in output_size
    )
    if len(sizes) == len(x_shape):
        first, stop = split(len(sizes), nd, trail)
        sizes = sizes[first:stop]
    if len(sizes) != nd or min(sizes) < 1:
        raise ValueError(
            f"{fn}: `output_size` must be {nd} spatial sizes >= 1 (or a shape of "
            f"x.ndim={len(x_shape)} entries), got {output_size!r}"
        )
    if math.prod(sizes) > _spec.INT32_MAX:
        raise ValueError(
            f"{fn}: `output_size` must have fewer than 2**31 elements per plane "
            f"(indices are int32), got {output_size!r}"
        )
    return sizes


def _max_unpool(
    nd: int,
    x: ArrayLike,
    indices: ArrayLike,
    output_size: Any,
    channels_last: Any,
    check_indices: Any = False,
) -> jax.Array:
    fn = _FN[nd]
    x = _spec.float_array(fn, "x", x)
    indices = _spec.int_array(fn, "indices", indices)
    cl = _spec.static_bool(fn, "channels_last", channels_last)
    _spec.split_shape(fn, x.shape, nd, cl)
    _spec.check_shapes(fn, x.shape, nd, cl, indices=indices)
    trail = int(cl)
    sizes = _output_spatial(fn, x.shape, nd, trail, output_size)
    out = jax.ShapeDtypeStruct(with_spatial(x.shape, nd, trail, sizes), x.dtype)
    _spec.check_indices(fn, indices, math.prod(sizes), check_indices)
    with jax.named_scope(f"jaxpool.{fn}"):
        return _unpool_jit(x, indices, out, nd, trail)


def max_unpool3d(
    x: ArrayLike,
    indices: ArrayLike,
    output_size: Sequence[int],
    *,
    channels_last: bool = False,
    check_indices: bool = False,
) -> jax.Array:
    """Partial inverse of :func:`max_pool3d_with_argmax`: each value back at its
    index, zeros elsewhere.

    Equal to PyTorch's ``max_unpool3d(x, indices, ..., output_size)``. Indices
    are flat offsets ``d * H * W + h * W + w`` into each output plane (what the
    pool returns, in either layout). An index outside the plane is dropped: it
    never wraps and never writes into another plane (PyTorch raises instead).
    Equal indices within a plane (overlapping windows that chose the same
    element) carry the same value, so it does not matter which lands; for
    unequal values it is unspecified. Differentiable: the gradient with respect
    to ``x`` is the output cotangent gathered at ``indices`` (zero where an
    index was dropped), PyTorch's rule: every copy of an equal index gets the
    gradient of the element it lands on.

    Args:
      x: pooled values ``(N, C, oD, oH, oW)`` or ``(C, oD, oH, oW)``
        (``(N, oD, oH, oW, C)`` / ``(oD, oH, oW, C)`` with ``channels_last``);
        a floating dtype.
      indices: integer, same shape as ``x``.
      output_size: the spatial size ``(D, H, W)`` of the result, static ints
        >= 1; or a whole shape with ``x.ndim`` entries (PyTorch's form), whose
        spatial entries are used.
      channels_last: channels in the last axis of ``x``, ``indices`` and the
        result.
      check_indices: also check that every index lies inside its plane, with
        ``jax.experimental.checkify``: wrap the caller in ``checkify.checkify``
        (``jit`` inside or out) and throw the error it returns; it names the
        first bad index and its position.

    Returns:
      ``(N, C, D, H, W)`` (or ``(C, D, H, W)``) in ``x``'s dtype and layout.

    Raises:
      TypeError: ``x`` not floating, ``indices`` not integer, ``output_size``
        not made of static ints.
      ValueError: wrong rank, ``indices`` not shaped like ``x``, or a bad
        ``output_size``.

    Example:
      >>> import jax.numpy as jnp, jaxpool
      >>> x = jnp.arange(8.0).reshape(1, 1, 2, 2, 2)
      >>> values, indices = jaxpool.max_pool3d_with_argmax(x, 2)
      >>> jaxpool.max_unpool3d(values, indices, (2, 2, 2)).ravel().tolist()
      [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 7.0]
    """
    return _max_unpool(3, x, indices, output_size, channels_last, check_indices)


def max_unpool2d(
    x: ArrayLike,
    indices: ArrayLike,
    output_size: Sequence[int],
    *,
    channels_last: bool = False,
    check_indices: bool = False,
) -> jax.Array:
    """Partial inverse of :func:`max_pool2d_with_argmax`; see
    :func:`max_unpool3d`.

    Equal to PyTorch's ``max_unpool2d(x, indices, ..., output_size)``.

    Args:
      x: pooled values ``(N, C, oH, oW)`` or ``(C, oH, oW)`` (channels last
        with ``channels_last``); a floating dtype.
      indices: integer ``h * W + w`` offsets, same shape as ``x``.
      output_size: ``(H, W)``, or a whole shape with ``x.ndim`` entries.
      channels_last: channels in the last axis.
      check_indices: a ``checkify`` check of the indices; see
        :func:`max_unpool3d`.

    Returns:
      ``(N, C, H, W)`` (or ``(C, H, W)``) in ``x``'s dtype and layout.

    Example:
      >>> import jax.numpy as jnp, jaxpool
      >>> x = jnp.array([[[1.0, 5.0], [7.0, 2.0]]])
      >>> values, indices = jaxpool.max_pool2d_with_argmax(x, 2)
      >>> jaxpool.max_unpool2d(values, indices, (2, 2)).tolist()
      [[[0.0, 0.0], [7.0, 0.0]]]
    """
    return _max_unpool(2, x, indices, output_size, channels_last, check_indices)


def max_unpool1d(
    x: ArrayLike,
    indices: ArrayLike,
    output_size: Sequence[int],
    *,
    channels_last: bool = False,
    check_indices: bool = False,
) -> jax.Array:
    """Partial inverse of :func:`max_pool1d_with_argmax`; see
    :func:`max_unpool3d`.

    Args:
      x: pooled values ``(N, C, oL)`` or ``(C, oL)`` (channels last with
        ``channels_last``); a floating dtype.
      indices: integer positions, same shape as ``x``.
      output_size: ``(L,)``, or a whole shape with ``x.ndim`` entries.
      channels_last: channels in the last axis.
      check_indices: a ``checkify`` check of the indices; see
        :func:`max_unpool3d`.

    Returns:
      ``(N, C, L)`` (or ``(C, L)``) in ``x``'s dtype and layout.

    Example:
      >>> import jax.numpy as jnp, jaxpool
      >>> x = jnp.array([[3.0, 1.0, 4.0, 1.0]])
      >>> values, indices = jaxpool.max_pool1d_with_argmax(x, 2)
      >>> jaxpool.max_unpool1d(values, indices, (4,)).tolist()
      [[3.0, 0.0, 4.0, 0.0]]
    """
    return _max_unpool(1, x, indices, output_size, channels_last, check_indices)
