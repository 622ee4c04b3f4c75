"""The differentiable core that every public op calls with its spec.

``pool`` is a ``jax.custom_vjp`` whose residuals are the indices, and whose
backward rule calls the backward kernel with the same spec
(already valid: nothing is re-validated or rebuilt inside the VJP).
``backward`` is that kernel for the public backward ops. ``fractional_pool``
is the same ``custom_vjp`` for the fractional pools: their window starts
(arrays, computed from the samples under ``jit``) are a non-differentiable
input, the residuals are the indices and the starts (the deterministic
backward spreads the gradients back onto them). ``unpool`` is a ``custom_vjp``
whose backward is a gather at the indices (PyTorch's). The forward rules call
the kernels, never a ``custom_vjp`` (one nested in its own forward rule would
meet an outer ``jvp``), and the backward rules are plain JAX
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

from . import _fractional, _platform, _policy, _tf_rule
from ._checks import check_indices as _check_indices
from ._mesh import check_divisible, traced_once, under_mesh
from ._windows import FractionalSpec, PoolSpec, split, with_spatial

# JAX traces a custom_vjp's forward twice (its primal, then its forward rule):
# the second trace is the first's jaxpr, from the jit cache.
_forward = traced_once(_platform.forward, 1)
_fractional_forward = traced_once(_platform.fractional_forward, 2)


@functools.partial(jax.custom_vjp, nondiff_argnums=(1,))
def _pool(x: jax.Array, spec: PoolSpec) -> tuple[jax.Array, jax.Array]:
    return _forward(x, spec)


def _pool_fwd(x: jax.Array, spec: PoolSpec) -> tuple[Any, tuple[Any, Any]]:
    values, indices = _forward(x, spec)
    # The values too where some platform's backward reads them (the covering
    # reduction: ``_policy.reads_values``); never the input.
    env = _policy.environment(under_mesh(x))
    keep = values if _policy.reads_values(spec, env) else None
    return (values, indices), (keep, indices)


def _pool_bwd(spec: PoolSpec, residuals: Any, cts: Any) -> tuple[jax.Array]:
    values, indices = residuals
    grad_output, like = _cotangent(cts, indices, spec)
    return (_platform.backward(grad_output, indices, like, spec, True, values),)


def _cotangent(
    cts: Any, indices: jax.Array, spec: PoolSpec | FractionalSpec
) -> tuple[jax.Array, jax.ShapeDtypeStruct]:
    """The values' cotangent (the integer indices' one, float0 or int, is
    unused) and the shape and dtype of the input's."""
    grad_output = cts[0]
    shape = with_spatial(indices.shape, spec.nd, spec.trail, spec.in_size)
    return grad_output, jax.ShapeDtypeStruct(shape, grad_output.dtype)


_pool.defvjp(_pool_fwd, _pool_bwd)
_pool_jit = jax.jit(_pool, static_argnums=1)
_backward_jit = jax.jit(_platform.backward, static_argnums=(2, 3))


@functools.partial(jax.custom_vjp, nondiff_argnums=(2,))
def _fractional_pool(
    x: jax.Array, rows: tuple[jax.Array, ...], spec: FractionalSpec
) -> tuple[jax.Array, jax.Array]:
    return _fractional_forward(x, rows, spec)


def _fractional_pool_fwd(
    x: jax.Array, rows: tuple[jax.Array, ...], spec: FractionalSpec
) -> tuple[Any, Any]:
    values, indices = _fractional_forward(x, rows, spec)
    env = _policy.environment(under_mesh(x))
    keep = values if _policy.fractional_reads_values(spec, env) else None
    return (values, indices), (keep, indices, rows)


def _fractional_pool_bwd(
    spec: FractionalSpec, residuals: Any, cts: Any
) -> tuple[jax.Array, None]:
    values, indices, rows = residuals
    grad_output, like = _cotangent(cts, indices, spec)
    grad = _platform.fractional_backward(grad_output, indices, like, spec, rows, values)
    # The window starts are piecewise constant in the samples: no gradient.
    return grad, None


_fractional_pool.defvjp(_fractional_pool_fwd, _fractional_pool_bwd)
_fractional_backward_jit = jax.jit(_platform.fractional_backward, static_argnums=(2, 3))


@functools.partial(jax.jit, static_argnums=2)
def _fractional_pool_jit(
    x: jax.Array, samples: jax.Array, spec: FractionalSpec
) -> tuple[jax.Array, jax.Array]:
    rows = _fractional.axis_starts(samples, spec, x.ndim)
    return _fractional_pool(x, rows, spec)


def pool(name: str, x: jax.Array, spec: PoolSpec) -> tuple[jax.Array, jax.Array]:
    """``(values, indices)`` of the pool ``spec`` over ``x``, differentiable."""
    check_divisible(name, x, spec.nd, spec.trail, spec.out_size, "the output")
    with jax.named_scope(f"jaxpool.{name}"):
        return _pool_jit(x, spec)


def fractional_pool(
    name: str, x: jax.Array, samples: jax.Array, spec: FractionalSpec
) -> tuple[jax.Array, jax.Array]:
    """``(values, indices)`` of the fractional pool ``spec`` with ``samples``
    ``(N, C, nd)`` over ``x``, differentiable in ``x``."""
    check_divisible(name, x, spec.nd, spec.trail, spec.out_size, "the output")
    with jax.named_scope(f"jaxpool.{name}"):
        return _fractional_pool_jit(x, samples, spec)


def backward(
    name: str,
    grad_output: jax.Array,
    indices: jax.Array,
    x: jax.ShapeDtypeStruct,
    spec: PoolSpec | FractionalSpec,
    check_indices: Any,
) -> jax.Array:
    """The gradient with respect to ``x`` (its shape and dtype) of the pool
    ``spec`` (fractional too), given its indices; ``check_indices`` adds a
    ``checkify`` check."""
    _check_indices(name, indices, math.prod(spec.in_size), check_indices)
    check_divisible(name, indices, spec.nd, spec.trail, spec.in_size, "the gradient")
    fractional = isinstance(spec, FractionalSpec)
    kernel = _fractional_backward_jit if fractional else _backward_jit
    with jax.named_scope(f"jaxpool.{name}"):
        return kernel(grad_output, indices, x, spec)


# The unpool's static arguments: the result's shape and dtype, the spatial axes
# (``nd``, ``trail``) and the pool's windows (or ``None``).
_Layout = tuple[jax.ShapeDtypeStruct, int, int, PoolSpec | None]


@functools.partial(jax.custom_vjp, nondiff_argnums=(2,))
def _unpool(x: jax.Array, indices: jax.Array, layout: _Layout) -> jax.Array:
    return _platform.unpool(x, indices, *layout)


def _unpool_fwd(
    x: jax.Array, indices: jax.Array, layout: _Layout
) -> tuple[jax.Array, jax.Array]:
    # The kernel, not ``_unpool``: see the module docstring.
    return _platform.unpool(x, indices, *layout), indices


def _unpool_bwd(
    layout: _Layout, indices: jax.Array, ct: jax.Array
) -> tuple[jax.Array, None]:
    _, nd, trail, windows = layout
    return _platform.unpool_cotangent(ct, indices, nd, trail, windows), None


_unpool.defvjp(_unpool_fwd, _unpool_bwd)
_unpool_jit = jax.jit(_unpool, static_argnums=2)


def unpool(
    name: str,
    x: jax.Array,
    indices: jax.Array,
    out: jax.ShapeDtypeStruct,
    nd: int,
    trail: int,
    windows: PoolSpec | None,
    check_indices: Any,
) -> jax.Array:
    """``x`` placed at ``indices`` in zeros of ``out``, differentiable in ``x``;
    ``windows``: the pool's that produced ``x`` (``_spec.unpool_output``), or
    ``None``; ``check_indices`` adds a ``checkify`` check."""
    first, stop = split(len(out.shape), nd, trail)
    # The windows matter under a mesh alone: elsewhere one program serves
    # every spelling of the same output.
    windows = windows if under_mesh(indices) else None
    plane = math.prod(out.shape[first:stop])
    _check_indices(name, indices, plane, check_indices, windows)
    check_divisible(name, x, nd, trail, out.shape[first:stop], "the output")
    with jax.named_scope(f"jaxpool.{name}"):
        return _unpool_jit(x, indices, (out, nd, trail, windows))


# ---------------------------------------------------- TensorFlow's dialect


def _tf_kernel(x: jax.Array, spec: PoolSpec) -> tuple[jax.Array, jax.Array]:
    """TensorFlow's ``(values, in-plane indices)`` (``_tf_rule``): the forward
    kernel's pool of ``x`` with NaN made -inf, then the windows whose first
    in-bounds element is NaN."""
    values, indices = _forward(_tf_rule.nan_to_lowest(x), spec)
    return _tf_rule.first_nan(x, spec, values, indices)


_tf_forward = traced_once(_tf_kernel, 1)


@functools.partial(jax.custom_vjp, nondiff_argnums=(1,))
def _tf_pool(x: jax.Array, spec: PoolSpec) -> tuple[jax.Array, jax.Array]:
    return _tf_forward(x, spec)


def _tf_pool_fwd(x: jax.Array, spec: PoolSpec) -> tuple[Any, tuple[None, Any]]:
    values, indices = _tf_forward(x, spec)
    return (values, indices), (None, indices)


# The backward is the PyTorch pools' own given the indices alone, each inside
# its own window, as these are: not the covering reduction of the values,
# whose order TensorFlow's NaN rule (a NaN window's first element) breaks.
_tf_pool.defvjp(_tf_pool_fwd, _pool_bwd)
_tf_pool_jit = jax.jit(_tf_pool, static_argnums=1)


def tf_pool(name: str, x: jax.Array, spec: PoolSpec) -> tuple[jax.Array, jax.Array]:
    """``(values, indices)`` of the pool ``spec`` over ``x`` under
    TensorFlow's rule (``_tf_rule``), the indices in-plane as :func:`pool`'s;
    differentiable, with :func:`pool`'s backward."""
    check_divisible(name, x, spec.nd, spec.trail, spec.out_size, "the output")
    with jax.named_scope(f"jaxpool.{name}"):
        return _tf_pool_jit(x, spec)


def _scatter_rows(
    updates: jax.Array, indices: jax.Array, like: jax.ShapeDtypeStruct
) -> jax.Array:
    return _platform.scatter(updates, indices, x=like, nd=1, trail=0, accumulate=True)


_scatter_rows_jit = jax.jit(_scatter_rows, static_argnums=2)


def scatter_rows(
    name: str,
    updates: jax.Array,
    indices: jax.Array,
    like: jax.ShapeDtypeStruct,
    check_indices: Any,
) -> jax.Array:
    """Zeros like ``like``, ``(R, P)``, then ``out[r, indices[r, q]] +=
    updates[r, q]`` (16-bit in float32, rounded once); an index outside ``[0,
    P)`` is dropped. TensorFlow's flat indices, a row per image or one for
    the batch. Plain JAX, so differentiable: the gradient of ``updates`` is a
    gather at ``indices``."""
    _check_indices(name, indices, like.shape[1], check_indices)
    with jax.named_scope(f"jaxpool.{name}"):
        return _scatter_rows_jit(updates, indices, like)
