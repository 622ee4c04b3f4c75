"""The backward as XLA's own select-and-scatter, for 16-bit inputs on a TPU.

``lax.reduce_window``'s gradient is XLA's ``SelectAndScatter``: each window's
selection re-run on the input, and the window's gradient added where it
selects. XLA applies the select function in an order of its own choosing
(XLA:CPU's is not row-major once padded axes vary), so it picks PyTorch's
element only if the select is a total order on what it compares. Values alone
are not (of two equal values PyTorch keeps the earlier), so the op compares a
**key**: each element's value as a 16-bit order (NaN above ``+inf``; what the
forward's comparisons call zero, as ``+0``) above its position code, each
spatial coordinate modulo a power of two at least ``2 * kernel - 1`` (which
orders any two elements of one window: :func:`_earlier`), held as the bits of
a normal positive float32, the type the float32 accumulation gives the op
anyway. The select reads both back with shifts and masks (an integer division
makes XLA's TPU compiler take minutes) and is the scan's rule: the greater
value; of two NaNs the later; of equal numbers the earlier. It sends every
window's gradient to the forward's own index, whatever the order XLA applies
it in.

A float32 value leaves no bits for a position, and the op's operand, source
and result share one type, so float32 (and float64) inputs keep the dense
gather. Padding is given to the op, which never selects it: a window of only
``-inf`` keeps its first in-bounds element, as the forward does. 16-bit
gradients add in float32, rounded once.

JAX binds the primitive (``jax.lax.select_and_scatter_p``) without a JVP,
transpose or batching rule, so :func:`select_and_scatter` is a ``custom_jvp``
whose tangent is the same sum at the forward's indices (the batched scatter:
linear, so grad of grad transposes it), over a ``custom_vmap`` that moves a
vmapped axis in front as one more window axis of size 1.
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

from ._planes import scatter
from ._windows import AxisWindows, PoolSpec, split

# The order of every NaN: above +inf's (0xFF80 for bfloat16, 0xFC00 for float16).
NAN_ORDER = 0xFFFF
# Position bits a key may hold beside the 16-bit order, so that the key, with
# BASE added, is a normal positive float32's bits (below +inf's, 0x7F800000).
CODE_BITS = 14
BASE = 1 << 23  # the least normal float32's bits


def digits(axes: tuple[AxisWindows, ...]) -> list[int]:
    """Each axis's bits of position code: a modulus of ``2**bits >= 2 *
    kernel - 1`` tells which of two elements of one window comes first."""
    return [(2 * w.taps - 2).bit_length() for w in axes]


class Window(NamedTuple):
    """The op's window over every axis of the array (1 on non-spatial ones)."""

    dims: tuple[int, ...]
    strides: tuple[int, ...]
    padding: tuple[tuple[int, int], ...]

    def outer(self) -> Window:
        """The same windows with one more leading axis (a vmapped one)."""
        return Window((1, *self.dims), (1, *self.strides), ((0, 0), *self.padding))


def applies(spec: PoolSpec, dtype: Any) -> bool:
    """Whether the op runs the pool's backward exactly: 16-bit float inputs;
    regular windows, dilation 1 (or one tap), padding on both sides at least 0,
    exactly the pool's outputs in the padded input (a cut-off high padding
    could leave extra windows); at most :data:`CODE_BITS` of position code
    (3x3x3 windows take 9, 8x8x8 windows 12)."""
    dtype = jnp.dtype(dtype)
    if not (jnp.issubdtype(dtype, jnp.floating) and dtype.itemsize == 2):
        return False
    for w in spec.axes:
        if w.starts or (w.dilation != 1 and w.taps != 1) or w.offset > 0:
            return False
        lo, hi = w.pad
        if (w.size + lo + hi - w.taps) // w.stride + 1 != w.out:
            return False
    return sum(digits(spec.axes)) <= CODE_BITS


def window(spec: PoolSpec, ndim: int) -> Window:
    """The op's window for ``spec`` over an ``ndim``-array ``(*B, *S, *T)``."""
    lead = split(ndim, spec.nd, spec.trail)[0]
    dims, strides, padding = [1] * ndim, [1] * ndim, [(0, 0)] * ndim
    for a, w in enumerate(spec.axes):
        dims[lead + a], strides[lead + a], padding[lead + a] = w.taps, w.stride, w.pad
    return Window(tuple(dims), tuple(strides), tuple(padding))


def key(x: jax.Array, spec: PoolSpec) -> jax.Array:
    """Each element's key, float32: the bits ``BASE + (order << B) + code``
    (``B``: the code's bits), ``order`` the value's rank among 16-bit values
    (every NaN :data:`NAN_ORDER`; whatever compares equal to zero, ``-0`` and,
    where the platform flushes them as XLA:CPU does, subnormals, as ``+0``:
    the forward's comparisons), ``code`` its coordinates' low bits, the first
    axis's highest."""
    zero = jnp.zeros((), x.dtype)
    bits = lax.bitcast_convert_type(jnp.where(x == 0, zero, x), jnp.uint16)
    bits = bits.astype(jnp.int32)
    order = jnp.where(bits >= 0x8000, 0xFFFF - bits, bits + 0x8000)
    order = jnp.where(jnp.isnan(x), NAN_ORDER, order)
    lead = split(x.ndim, spec.nd, spec.trail)[0]
    code = jnp.zeros((), jnp.int32)
    for a, b in enumerate(digits(spec.axes)):
        at = lax.broadcasted_iota(jnp.int32, x.shape, lead + a)
        code = (code << b) | (at & ((1 << b) - 1))
    word = BASE + (order << sum(digits(spec.axes))) + code
    return lax.bitcast_convert_type(word, jnp.float32)


def _earlier(c: jax.Array, d: jax.Array, bits: list[int]) -> jax.Array:
    """Whether code ``c`` names an earlier position than ``d`` of one window:
    the first axis whose coordinates differ decides, ``c``'s earlier when
    ``(d - c) mod 2**b`` lies in ``[1, 2**(b - 1)]`` (two elements of one
    window lie less than ``2**(b - 1)`` apart)."""
    earlier, shift = jnp.zeros(c.shape, bool), 0
    for b in reversed(bits):  # the last axis first: its bits are the lowest
        if b == 0:  # one tap along this axis: no code
            continue
        step = ((d >> shift) - (c >> shift)) & ((1 << b) - 1)
        earlier = ((step >= 1) & (step <= 1 << (b - 1))) | ((step == 0) & earlier)
        shift += b
    return earlier


@functools.cache
def _computations(axes: tuple[AxisWindows, ...]) -> dict[str, Any]:
    """The op's select (the scan's rule on two keys) and scatter (add)
    computations, as ``jax.lax``'s own ``_select_and_scatter`` binds them."""
    bits = digits(axes)
    width = sum(bits)
    nan = (BASE >> width) + NAN_ORDER

    def keeps(a: jax.Array, b: jax.Array) -> jax.Array:
        """Whether the selected key ``a`` stays selected against ``b``."""
        ka = lax.bitcast_convert_type(a, jnp.int32)
        kb = lax.bitcast_convert_type(b, jnp.int32)
        va, vb = ka >> width, kb >> width
        later = _earlier(kb, ka, bits)  # of two NaNs, the later wins
        earlier = jnp.where(va == nan, later, _earlier(ka, kb, bits))
        return (va > vb) | ((va == vb) & earlier)

    scalar = jax.ShapeDtypeStruct((), jnp.float32)
    select = jax.make_jaxpr(keeps)(scalar, scalar)
    add = jax.make_jaxpr(lax.add)(scalar, scalar)
    return dict(
        select_jaxpr=select.jaxpr,
        select_consts=tuple(select.consts),
        scatter_jaxpr=add.jaxpr,
        scatter_consts=tuple(add.consts),
    )


def bind(
    source: jax.Array, keys: jax.Array, win: Window, axes: tuple[AxisWindows, ...]
) -> jax.Array:
    """``select_and_scatter_p`` itself: zeros like ``keys``, each window's
    ``source`` element added where the select picks."""
    return lax.select_and_scatter_p.bind(
        keys,
        source,
        jnp.zeros((), keys.dtype),
        **_computations(axes),
        window_dimensions=win.dims,
        window_strides=win.strides,
        padding=win.padding,
    )


@functools.cache
def _batched(win: Window, axes: tuple[AxisWindows, ...]) -> Any:
    """:func:`bind` for ``win``, vmappable: a vmapped axis (the unbatched
    argument broadcast along it) is one more window axis of size 1."""

    @jax.custom_batching.custom_vmap
    def op(source: jax.Array, keys: jax.Array) -> jax.Array:
        return bind(source, keys, win, axes)

    @op.def_vmap
    def _rule(size: int, batched: Any, source: jax.Array, keys: Any) -> Any:
        source, keys = (
            arr if b else jnp.broadcast_to(arr, (size, *arr.shape))
            for arr, b in zip((source, keys), batched, strict=True)
        )
        return _batched(win.outer(), axes)(source, keys), True

    return op


@functools.partial(jax.custom_jvp, nondiff_argnums=(3,))
def select_and_scatter(
    grad_output: jax.Array, indices: jax.Array, x: jax.Array, spec: PoolSpec
) -> jax.Array:
    """The pool's VJP as XLA's select-and-scatter (see the module docstring).

    Args:
      grad_output: ``(*B, *O, *T)`` gradients of the pooled values.
      indices: the forward's ``(*B, *O, *T)`` indices: read only by the
        tangent (grad of grad), so a first-order program drops them.
      x: the forward's ``(*B, *S, *T)`` input, 16-bit.
      spec: the pool; :func:`applies` must hold (and no mesh: see
        ``_platform.backward``).

    Returns:
      ``(*B, *S, *T)`` in ``x.dtype``.
    """
    del indices
    op = _batched(window(spec, x.ndim), spec.axes)
    keys = key(x, spec)
    return op(grad_output.astype(jnp.float32), keys).astype(x.dtype)


@select_and_scatter.defjvp
def _select_and_scatter_jvp(
    spec: PoolSpec, primals: tuple[Any, ...], tangents: tuple[Any, ...]
) -> tuple[jax.Array, jax.Array]:
    """Linear in ``grad_output``; the selection, a step function of ``x``,
    has no tangent. The tangent is the same sum at the indices (a scatter,
    which JAX transposes)."""
    grad_output, indices, x = primals
    out = select_and_scatter(grad_output, indices, x, spec)
    like = jax.ShapeDtypeStruct(x.shape, x.dtype)
    tangent = scatter(
        tangents[0],
        indices,
        like,
        nd=spec.nd,
        trail=spec.trail,
        accumulate=True,
        flat=False,
    )
    return out, tangent
