"""Fractional max pooling (Graham, 2015): PyTorch's windows, the forward
kernel, its ``custom_vjp`` and the backward kernels.

The windows depend on the samples, which are arrays: they are computed here,
under ``jit``, in PyTorch's arithmetic (:func:`window_starts`), and the
``custom_vjp`` keeps only the indices. The kernels work on channels-first
batched arrays ``(N, C, *S)``; :func:`pool` and :func:`backward` move a
channels-last or unbatched array there and back.

The backward is a scatter-add to the indices (``_platform``'s scatter) or, with
``algorithm="gather"``, a deterministic sum without a scatter. That sum cannot
be the strided pools' covering-window gather: in float16 and bfloat16
PyTorch's window starts may repeat (``int((i + u) * alpha)`` rounds to the same
value for consecutive ``i`` once the sizes pass 2048 or 256), so no static
bound limits how many windows cover a position. Instead, per plane, the
gradients are sorted (stably) by their index and summed per index with a
segmented scan, a fixed order that depends only on the shapes.
"""

from __future__ import annotations

import functools
import math
from typing import Any, cast

import jax
import jax.numpy as jnp
from jax import lax

from . import _platform
from ._planes import accumulation_dtype, in_plane
from ._spec import FractionalSpec
from ._spec import check_indices as _check_indices
from ._windows import AxisWindows, PoolSpec, row_major_strides

# (exponent bits, mantissa bits) of the 16-bit floats: PyTorch's c10::Half and
# c10::BFloat16 compute each operation in float32 and round the result.
_REDUCED = {jnp.dtype(jnp.float16): (5, 10), jnp.dtype(jnp.bfloat16): (8, 7)}

# Which entry of the samples' last axis drives each spatial axis (D, H, W
# order): PyTorch's 2-D kernel reads (W, H), its 3-D kernel (D, H, W).
SAMPLE_AXIS = {2: (1, 0), 3: (0, 1, 2)}


def window_starts(u: jax.Array, size: int, out: int, kernel: int) -> jax.Array:
    """PyTorch's window starts along one axis, int32 ``(*u.shape, out)``.

    Window ``i < out - 1`` starts at ``int((i + u) * alpha) - int(u * alpha)``
    with ``alpha = (size - kernel) / (out - 1)``, the last at ``size - kernel``,
    computed as ``at::native::generate_intervals<scalar_t>`` does: every
    operation (the int-to-float conversions too) rounded to ``u``'s dtype, and
    ``int`` truncating. Starts past ``size - kernel``, where PyTorch's kernel
    would fail its bounds assertion (16-bit rounding, samples outside [0, 1)),
    are clipped to it.
    """
    last = jnp.full((*u.shape, 1), size - kernel, jnp.int32)
    if out == 1:
        return last
    bits = _REDUCED.get(jnp.dtype(u.dtype))
    calc = u.dtype if bits is None else jnp.float32

    def rounded(v: jax.Array) -> jax.Array:
        return v if bits is None else lax.reduce_precision(v, *bits)

    def scalar(n: int) -> jax.Array:
        return rounded(jnp.asarray(n, calc))

    u = u.astype(calc)[..., None]
    alpha = rounded(scalar(size - kernel) / scalar(out - 1))
    i = rounded(jnp.arange(out - 1, dtype=calc)).reshape((1,) * (u.ndim - 1) + (-1,))
    high = rounded(rounded(i + u) * alpha).astype(jnp.int32)
    low = rounded(u * alpha).astype(jnp.int32)
    starts = jnp.clip(high - low, 0, size - kernel)
    return jnp.concatenate([starts, jnp.broadcast_to(last, u.shape)], axis=-1)


def forward(
    x: jax.Array, starts: tuple[jax.Array, ...], spec: FractionalSpec
) -> tuple[jax.Array, jax.Array]:
    """``(values, indices)`` of the windows ``starts`` (one ``(N, C, out)``
    int32 array per axis) over ``x`` ``(N, C, *S)``.

    A running max/argmax over the taps in row-major order, from (``-inf``, the
    first tap), replacing the best when ``value > best`` or ``value`` is NaN:
    PyTorch's rule. Each tap is one gather per axis, shared by the later
    axes' taps.
    """
    nd = spec.nd
    strides = row_major_strides(spec.in_size)

    def along(a: int, column: jax.Array) -> jax.Array:
        """``(N, C, out_a)`` reshaped to broadcast along spatial axis ``a``."""
        return column.reshape(*column.shape[:2], *(1,) * a, -1, *(1,) * (nd - a - 1))

    first = sum(along(a, s) * strides[a] for a, s in enumerate(starts))
    out_shape = (*x.shape[:2], *spec.out_size)
    state = [
        jnp.full(out_shape, -jnp.inf, x.dtype),
        jnp.broadcast_to(first, out_shape).astype(jnp.int32),
    ]

    def scan(value: jax.Array, flat: Any, a: int) -> None:
        if a == nd:  # one tap: the value at it, for every window
            best, arg = state
            take = (value > best) | jnp.isnan(value)
            state[:] = jnp.where(take, value, best), jnp.where(take, flat, arg)
            return
        for j in range(spec.kernel_size[a]):
            position = along(a, starts[a]) + j
            gathered = jnp.take_along_axis(value, position, axis=2 + a)
            scan(gathered, flat + position * strides[a], a + 1)

    scan(x, 0, 0)
    return state[0], state[1]


@functools.partial(jax.custom_vjp, nondiff_argnums=(2,))
def _pool(
    x: jax.Array, starts: tuple[jax.Array, ...], spec: FractionalSpec
) -> tuple[jax.Array, jax.Array]:
    return forward(x, starts, spec)


def _pool_fwd(
    x: jax.Array, starts: tuple[jax.Array, ...], spec: FractionalSpec
) -> tuple[Any, jax.Array]:
    values, indices = forward(x, starts, spec)
    return (values, indices), indices


def _pool_bwd(spec: FractionalSpec, indices: jax.Array, cts: Any) -> tuple[Any, None]:
    grad_output = cts[0]  # the integer indices' cotangent is unused
    shape = (*indices.shape[:2], *spec.in_size)
    x = jax.ShapeDtypeStruct(shape, grad_output.dtype)
    return backward_kernel(grad_output, indices, x, spec), None


_pool.defvjp(_pool_fwd, _pool_bwd)


def backward_kernel(
    grad_output: jax.Array,
    indices: jax.Array,
    x: jax.ShapeDtypeStruct,
    spec: FractionalSpec,
) -> jax.Array:
    """The gradient with respect to ``x`` ``(N, C, *S)``: ``"scatter"``,
    ``"gather"``, or for ``"auto"`` the scatter on CPU, on GPU the scatter
    where ``_platform.gpu_scatter`` says its adds are native atomics and no
    determinism flag is set, and elsewhere the deterministic gather."""

    def emit(algorithm: str) -> Any:
        if algorithm == "gather":
            return functools.partial(gather_sum, x=x)
        axes = tuple(map(AxisWindows, spec.in_size, spec.out_size, spec.kernel_size))
        scatter = PoolSpec(axes, False, "scatter")  # only its layout is used
        return functools.partial(_platform.backward, x=x, spec=scatter)

    if spec.algorithm != "auto":
        return emit(spec.algorithm)(grad_output, indices)
    gpu = "scatter" if _platform.gpu_scatter() else "gather"
    return _platform.by_platform(
        emit, grad_output, indices, cpu="scatter", default=gpu, tpu="gather"
    )


def gather_sum(
    grad_output: jax.Array, indices: jax.Array, x: jax.ShapeDtypeStruct
) -> jax.Array:
    """Deterministic backward: per plane, the gradients sorted stably by index
    and summed per index by a segmented scan (a fixed order), read at each
    position; no scatter. Honours every index inside the plane, like the
    scatter; others are dropped. 16-bit gradients add in float32, rounded once.
    """
    lead, plane = x.shape[:2], math.prod(x.shape[2:])
    acc = accumulation_dtype(x.dtype)
    grads = grad_output.reshape(*lead, -1).astype(acc)
    where = indices.reshape(*lead, -1)
    where = jnp.where(in_plane(where, plane), where, plane).astype(jnp.int32)
    keys, grads = lax.sort((where, grads), dimension=2, is_stable=True, num_keys=1)
    opens = jnp.concatenate(
        [jnp.ones((*lead, 1), bool), keys[..., 1:] != keys[..., :-1]], axis=-1
    )

    def segmented(a: Any, b: Any) -> Any:
        (open_a, sum_a), (open_b, sum_b) = a, b
        return open_a | open_b, jnp.where(open_b, sum_b, sum_a + sum_b)

    _, sums = lax.associative_scan(segmented, (opens, grads), axis=2)
    here = jnp.arange(plane, dtype=jnp.int32)

    # Unrolled: the default method is a while loop, serial on an accelerator.
    def search_plane(k: jax.Array) -> jax.Array:
        return jnp.searchsorted(k, here, side="right", method="scan_unrolled")

    search = jax.vmap(jax.vmap(search_plane))
    end = jnp.maximum(search(keys) - 1, 0)  # each position's segment's last entry
    hit = jnp.take_along_axis(keys, end, axis=2) == here.reshape(1, 1, -1)
    total = jnp.where(hit, jnp.take_along_axis(sums, end, axis=2), 0)
    return total.reshape(x.shape).astype(x.dtype)


def _to_planes(arr: jax.Array, nd: int, channels_last: bool) -> jax.Array:
    """``(N, C, *S)`` from any accepted layout."""
    if arr.ndim == nd + 1:
        arr = arr[None]
    return jnp.moveaxis(arr, -1, 1) if channels_last else arr


def _from_planes(arr: jax.Array, ndim: int, nd: int, channels_last: bool) -> Any:
    """The inverse of :func:`_to_planes` for an array of ``ndim`` axes."""
    arr = jnp.moveaxis(arr, 1, -1) if channels_last else arr
    return arr[0] if ndim == nd + 1 else arr


@functools.partial(jax.jit, static_argnums=2)
def _pool_jit(
    x: jax.Array, samples: jax.Array, spec: FractionalSpec
) -> tuple[jax.Array, jax.Array]:
    nd, cl = spec.nd, spec.channels_last
    starts = tuple(
        window_starts(samples[..., SAMPLE_AXIS[nd][a]], n, o, k)
        for a, (n, o, k) in enumerate(
            zip(spec.in_size, spec.out_size, spec.kernel_size, strict=True)
        )
    )
    pooled = cast(
        tuple[jax.Array, jax.Array], _pool(_to_planes(x, nd, cl), starts, spec)
    )
    values, indices = (_from_planes(arr, x.ndim, nd, cl) for arr in pooled)
    return values, indices


@functools.partial(jax.jit, static_argnums=(2, 3))
def _backward_jit(
    grad_output: jax.Array,
    indices: jax.Array,
    x: jax.ShapeDtypeStruct,
    spec: FractionalSpec,
) -> jax.Array:
    nd, cl = spec.nd, spec.channels_last
    g, i = (_to_planes(arr, nd, cl) for arr in (grad_output, indices))
    planes = jax.ShapeDtypeStruct((*g.shape[:2], *spec.in_size), x.dtype)
    return _from_planes(backward_kernel(g, i, planes, spec), len(x.shape), nd, cl)


def pool(
    name: str, x: jax.Array, samples: jax.Array, spec: FractionalSpec
) -> tuple[jax.Array, jax.Array]:
    """``(values, indices)`` of the fractional pool ``spec`` with ``samples``
    ``(N, C, nd)`` over ``x``, differentiable in ``x``."""
    with jax.named_scope(f"jaxpool.{name}"):
        return _pool_jit(x, samples, spec)


def backward(
    name: str,
    grad_output: jax.Array,
    indices: jax.Array,
    x: jax.ShapeDtypeStruct,
    spec: FractionalSpec,
    check_indices: Any,
) -> jax.Array:
    """The gradient with respect to ``x`` (its shape and dtype) given the
    forward's indices; ``check_indices`` adds a ``checkify`` check."""
    _check_indices(name, indices, math.prod(spec.in_size), check_indices)
    with jax.named_scope(f"jaxpool.{name}"):
        return _backward_jit(grad_output, indices, x, spec)
