"""The differentiable core that every public op calls with its spec.

``pool`` is a ``jax.custom_vjp`` whose residuals are the indices (and the
input, where a platform's backward reads it: a TPU's select-and-scatter of
16-bit inputs; XLA drops whichever the compiled platform's backward does not
read), and whose backward rule calls the backward kernel with the same spec
(already valid: nothing is re-validated or rebuilt inside the VJP).
``backward`` is that kernel for the public backward ops; ``unpool`` is a
``custom_vjp`` whose backward is a gather at the indices (PyTorch's). The
forward rules call the kernels, never a ``custom_vjp`` (one nested in its own
forward rule would meet an outer ``jvp``), and the backward rules are plain JAX
(Pallas's kernel has a JVP rule), so forward mode differentiates them:
``jax.hessian`` and Hessian-vector products work through every op. Each is
jitted with its static arguments, so an eager call compiles one program per
configuration instead of dispatching every op of the scan; inside a user's
``jit`` they are inlined. Which kernel form runs on which platform is
``_platform``'s choice.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import jax

from . import _platform
from ._planes import gather_at
from ._spec import check_indices as _check_indices
from ._windows import PoolSpec, split, with_spatial


@functools.partial(jax.custom_vjp, nondiff_argnums=(1,))
def _pool(x: jax.Array, spec: PoolSpec) -> tuple[jax.Array, jax.Array]:
    return _platform.forward(x, spec)


def _pool_fwd(x: jax.Array, spec: PoolSpec) -> tuple[Any, tuple[Any, Any]]:
    values, indices = _platform.forward(x, spec)
    # The input too where a platform's backward reads it (see the docstring).
    kept = x if _platform.reads_input(spec, x) else None
    return (values, indices), (indices, kept)


def _pool_bwd(spec: PoolSpec, res: Any, cts: Any) -> tuple[jax.Array]:
    indices, x = res
    grad_output = cts[0]  # the integer indices' cotangent (float0 or int) is unused
    shape = with_spatial(indices.shape, spec.nd, spec.trail, spec.in_size)
    like = jax.ShapeDtypeStruct(shape, grad_output.dtype)
    return (_platform.backward(grad_output, indices, like, spec, True, x),)


_pool.defvjp(_pool_fwd, _pool_bwd)
_pool_jit = jax.jit(_pool, static_argnums=1)
_backward_jit = jax.jit(_platform.backward, static_argnums=(2, 3))


def pool(name: str, x: jax.Array, spec: PoolSpec) -> tuple[jax.Array, jax.Array]:
    """``(values, indices)`` of the pool ``spec`` over ``x``, differentiable."""
    with jax.named_scope(f"jaxpool.{name}"):
        return _pool_jit(x, spec)


def backward(
    name: str,
    grad_output: jax.Array,
    indices: jax.Array,
    x: jax.ShapeDtypeStruct,
    spec: PoolSpec,
    check_indices: Any,
) -> jax.Array:
    """The gradient with respect to ``x`` (its shape and dtype) of the pool
    ``spec``, given its indices; ``check_indices`` adds a ``checkify`` check."""
    _check_indices(name, indices, math.prod(spec.in_size), check_indices)
    with jax.named_scope(f"jaxpool.{name}"):
        return _backward_jit(grad_output, indices, x, spec)


@functools.partial(jax.custom_vjp, nondiff_argnums=(2, 3, 4))
def _unpool(
    x: jax.Array, indices: jax.Array, out: jax.ShapeDtypeStruct, nd: int, trail: int
) -> jax.Array:
    return _platform.unpool(x, indices, out, nd, trail)


def _unpool_fwd(
    x: jax.Array, indices: jax.Array, out: jax.ShapeDtypeStruct, nd: int, trail: int
) -> tuple[jax.Array, jax.Array]:
    # The kernel, not ``_unpool``: see the module docstring.
    return _platform.unpool(x, indices, out, nd, trail), indices


def _unpool_bwd(
    out: jax.ShapeDtypeStruct, nd: int, trail: int, indices: jax.Array, ct: jax.Array
) -> tuple[jax.Array, None]:
    del out
    return gather_at(ct, indices, nd, trail, 0.0), None


_unpool.defvjp(_unpool_fwd, _unpool_bwd)
_unpool_jit = jax.jit(_unpool, static_argnums=(2, 3, 4))


def unpool(
    name: str,
    x: jax.Array,
    indices: jax.Array,
    out: jax.ShapeDtypeStruct,
    nd: int,
    trail: int,
    check_indices: Any,
) -> jax.Array:
    """``x`` placed at ``indices`` in zeros of ``out``, differentiable in ``x``;
    ``check_indices`` adds a ``checkify`` check."""
    first, stop = split(len(out.shape), nd, trail)
    _check_indices(name, indices, math.prod(out.shape[first:stop]), check_indices)
    with jax.named_scope(f"jaxpool.{name}"):
        return _unpool_jit(x, indices, out, nd, trail)
