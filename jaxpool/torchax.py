"""jaxpool as torchax's pooling ops: PyTorch models on JAX with PyTorch's numbers.

[torchax](https://github.com/google/torchax) runs PyTorch models on JAX by
giving every ATen op a JAX definition in an ``Environment``. Its max pools
with indices choose other indices than PyTorch's in windows holding NaN or
only ``-inf``, its backward of them sends gradients to the wrong elements,
and its 3-D backward and adaptive and fractional pools are missing.
``register`` makes jaxpool's ops the environment's definitions of every ATen
pooling op with indices and of their backward ops, through torchax's public
``Environment.override_op_definition``:

- ``max_pool{2,3}d_with_indices`` and ``_backward``:
  ``max_pool{2,3}d_with_argmax`` and ``_backward``;
- ``adaptive_max_pool{2,3}d`` and ``_backward``: the same names in jaxpool;
- ``fractional_max_pool{2,3}d`` and ``_backward``: the same, with PyTorch's
  ``_random_samples`` as ``samples``;
- ``max_unpool{2,3}d``: the same, with ``output_size``.

PyTorch's 1-D ops reach ATen as these 2-D ones. So values and indices are
PyTorch's, bit for bit, and so are gradients: an eager ``loss.backward()``
calls the ATen backward ops above, and ``jax.grad`` of
``torchax.extract_jax``'s function differentiates jaxpool's ``custom_vjp``.
Indices are int64, as PyTorch's, where JAX holds int64 (``jax_enable_x64``,
torchax's accuracy mode), int32 otherwise, like torchax's other int64
tensors. Bad arguments raise ATen's own errors: each call first runs the ATen
op on ``meta`` tensors of the same shapes, outside torchax, then checks the
dtype as ATen's CPU kernels do (``NotImplementedError``); what the meta
kernels leave unchecked, jaxpool checks, raising ATen's ``RuntimeError``.
An unpool index
outside its plane raises ATen's ``RuntimeError`` when the indices are
concrete (eager); under a JAX trace it is dropped, jaxpool's rule. Integer
max pools, which PyTorch's CPU kernels take and jaxpool's ops do not, pool
each element's dense rank within its plane (the same order and ties, so the
same choices) and read the values back at the indices.

Call ``jaxpool.torchax.register()`` once, before the model runs, or
``register(env)`` for an environment of your own. Needs ``pip install
'jaxpool[torchax]'``: torchax 0.0.14.dev20261026, tested with torch 2.13.0
(CPU) and jax 0.10.2 (torchax 0.0.13, its last release, does not import with
torch 2.13). Importing this module imports neither torch nor torchax;
``register`` does. The docs' page "PyTorch models on JAX" says more.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
from jax import core

import jaxpool

__all__ = ["register"]

_EXTRA = "pip install 'jaxpool[torchax]'"

# ATen's dtype names, for its "not implemented for" errors.
_TORCH_NAMES = {
    "bool": "Bool",
    "uint8": "Byte",
    "int8": "Char",
    "int16": "Short",
    "int32": "Int",
    "int64": "Long",
    "uint16": "UInt16",
    "uint32": "UInt32",
    "uint64": "UInt64",
    "complex64": "ComplexFloat",
    "complex128": "ComplexDouble",
}
_FLOATS = ("float16", "bfloat16", "float32", "float64")
_POOL_DTYPES = (*_FLOATS, "uint8", "int8", "int16", "int32", "int64")


def register(env: Any = None) -> Any:
    """Make jaxpool's ops a torchax environment's pooling ops with indices.

    Overrides, in ``env``, the definitions of ATen's
    ``max_pool{2,3}d_with_indices``, ``adaptive_max_pool{2,3}d``,
    ``fractional_max_pool{2,3}d``, their ``_backward`` ops, and
    ``max_unpool{2,3}d`` (PyTorch's 1-D ops reach ATen as these 2-D ones), so
    that eager autograd and ``jax.grad`` through ``torchax.extract_jax`` both
    give PyTorch's values, indices and gradients. Calling it again is
    harmless; an ``Environment`` of your own is left alone unless passed.

    Args:
      env: a ``torchax.tensor.Environment``; ``None`` (default): torchax's
        default environment, ``torchax.default_env()``.

    Returns:
      The environment, changed in place.

    Raises:
      ImportError: torch or torchax is not installed (``pip install
        'jaxpool[torchax]'``).
    """
    try:
        import torch
        import torchax
    except ImportError as e:
        raise ImportError(
            f"jaxpool.torchax.register needs torchax and torch: {_EXTRA} "
            f"(torchax==0.0.14.dev20261026, torch==2.13.0); {e}"
        ) from e
    if env is None:
        env = torchax.default_env()
    aten = torch.ops.aten
    for name, (definition, dtypes, role) in _definitions().items():
        packet = getattr(aten, name)
        impl = _torch_op(torch, env, packet.default, definition, dtypes, role)
        # torchax looks an op up by its overload first, then by its packet.
        env.override_op_definition(packet, impl)
        env.override_op_definition(packet.default, impl)
    # torchax defines F.max_pool2d itself, as a JAX function out of autograd's
    # sight (no eager backward); PyTorch's own reaches the ATen ops above.
    functional = torch.nn.functional.max_pool2d

    def max_pool2d(*args: Any, **kwargs: Any) -> Any:
        with torch._C.DisableTorchFunction():
            return functional(*args, **kwargs)

    env.override_op_definition(functional, max_pool2d)
    return env


def _torch_op(
    torch: Any,
    env: Any,
    overload: Any,
    definition: Callable[..., Any],
    dtypes: tuple[str, ...],
    role: int,
) -> Callable[..., Any]:
    """``definition`` (JAX arrays in and out, ATen's arguments) as a torchax
    op: ATen's checks, torchax tensors unwrapped, the results wrapped."""

    def op(*args: Any, **kwargs: Any) -> Any:
        _aten_checks(torch, overload, args, kwargs, dtypes, role)
        jax_args, jax_kwargs = env.t2j_iso((args, kwargs))
        try:
            return env.j2t_iso(definition(*jax_args, **jax_kwargs))
        except (TypeError, ValueError) as e:
            # What ATen's meta kernels leave unchecked, its CPU kernels check
            # with TORCH_CHECK: a RuntimeError (jaxpool's message).
            raise RuntimeError(str(e)) from e

    op.__name__ = op.__qualname__ = f"jaxpool_{overload.__name__.split('.')[0]}"
    return op


def _aten_checks(
    torch: Any,
    overload: Any,
    args: tuple,
    kwargs: dict,
    dtypes: tuple[str, ...],
    role: int,
) -> None:
    """Raise what ATen raises for these arguments: its shape and argument
    checks, run on ``meta`` tensors outside torchax's modes (as torchax itself
    leaves them to build CPU tensors), then its CPU kernels' dtype check on
    argument ``role``."""

    # Without x64, torchax holds PyTorch's int64 (indices) as int32.
    int64 = _index_dtype() == jnp.int64

    def meta(a: Any) -> Any:
        if not isinstance(a, torch.Tensor):
            return a
        dtype = a.dtype if int64 or a.dtype != torch.int32 else torch.int64
        return torch.empty(tuple(a.shape), dtype=dtype, device="meta")

    # torch 2.13 has a meta kernel for each of these ops but
    # fractional_max_pool3d_backward, which autograd alone calls: jaxpool checks.
    if overload.has_kernel_for_dispatch_key(torch._C.DispatchKey.Meta):
        with torch._C._DisableTorchDispatch(), torch._C.DisableTorchFunction():
            overload(*map(meta, args), **{k: meta(v) for k, v in kwargs.items()})
    dtype = str(args[role].dtype).removeprefix("torch.")
    if dtype not in dtypes:
        kernel = overload.__name__.split(".")[0].removesuffix("_with_indices")
        torch_name = _TORCH_NAMES.get(dtype, dtype)
        raise NotImplementedError(f'"{kernel}" not implemented for {torch_name!r}')


def _index_dtype() -> Any:
    """int64, PyTorch's index dtype, where JAX holds it (x64); else int32."""
    return jax.dtypes.canonicalize_dtype(jnp.int64)


def _ints(value: Any) -> tuple[int, ...]:
    """ATen's ``int[N]``: a sequence, or one int for every axis."""
    return (int(value),) if isinstance(value, int) else tuple(int(v) for v in value)


# ------------------------------------------------------------------- pools


def _max_pool(
    nd: int,
    x: jax.Array,
    kernel_size: Sequence[int],
    stride: Sequence[int] = (),
    padding: Sequence[int] | int = 0,
    dilation: Sequence[int] | int = 1,
    ceil_mode: bool = False,
) -> tuple[jax.Array, jax.Array]:
    window = (
        _ints(kernel_size),
        _ints(stride) or None,
        _ints(padding),
        _ints(dilation),
        bool(ceil_mode),
    )
    pool = getattr(jaxpool, f"max_pool{nd}d_with_argmax")
    if jnp.issubdtype(x.dtype, jnp.integer):
        values, indices = _integer_pool(pool, nd, window, x)
    else:
        values, indices = pool(x, *window)
    return values, indices.astype(_index_dtype())


@partial(jax.jit, static_argnums=(0, 1, 2))
def _integer_pool(
    pool: Callable[..., tuple[jax.Array, jax.Array]],
    nd: int,
    window: tuple,
    x: jax.Array,
) -> tuple[jax.Array, jax.Array]:
    """An integer max pool: jaxpool's pool of each element's dense rank in its
    plane (equal elements, equal ranks: the same choices, ties and all),
    then the values read back at the chosen indices. A window with no
    in-bounds tap gets the dtype's lowest value, PyTorch's start."""
    lead, plane = x.shape[: x.ndim - nd], math.prod(x.shape[x.ndim - nd :])
    flat = x.reshape(math.prod(lead), plane)
    ranks = jax.vmap(jnp.searchsorted)(jnp.sort(flat, axis=-1), flat)
    exact = jax.dtypes.canonicalize_dtype(jnp.float32 if plane <= 2**24 else "float64")
    if plane > 2**24 and exact != jnp.float64:
        raise NotImplementedError(
            f"jaxpool.torchax: an integer max pool needs jax_enable_x64 for planes "
            f"of more than 2**24 elements, got {plane}"
        )
    values, indices = pool(ranks.astype(exact).reshape(x.shape), *window)
    at = jnp.clip(indices, 0, plane - 1).reshape(flat.shape[0], -1)
    read = jnp.take_along_axis(flat, at, axis=-1).reshape(indices.shape)
    lowest = jnp.array(jnp.iinfo(x.dtype).min, x.dtype)
    return jnp.where(jnp.isneginf(values), lowest, read), indices


def _max_pool_backward(
    nd: int,
    grad_output: jax.Array,
    x: jax.Array,
    kernel_size: Sequence[int],
    stride: Sequence[int],
    padding: Sequence[int],
    dilation: Sequence[int],
    ceil_mode: bool,
    indices: jax.Array,
) -> jax.Array:
    backward = getattr(jaxpool, f"max_pool{nd}d_with_argmax_backward")
    return backward(
        grad_output,
        x,
        indices,
        _ints(kernel_size),
        _ints(stride) or None,
        _ints(padding),
        _ints(dilation),
        bool(ceil_mode),
    )


def _adaptive(
    nd: int, x: jax.Array, output_size: Sequence[int]
) -> tuple[jax.Array, jax.Array]:
    pool = getattr(jaxpool, f"adaptive_max_pool{nd}d")
    values, indices = pool(x, _ints(output_size))
    return values, indices.astype(_index_dtype())


def _adaptive_backward(
    nd: int, grad_output: jax.Array, x: jax.Array, indices: jax.Array
) -> jax.Array:
    if grad_output.shape != indices.shape:  # ATen's CPU check, not its meta's
        name = "gradOutput" if nd == 3 else "grad_output"
        raise RuntimeError(
            f"expected sizes {list(indices.shape)} for `{name}` but got sizes "
            f"{list(grad_output.shape)}"
        )
    backward = getattr(jaxpool, f"adaptive_max_pool{nd}d_backward")
    return backward(grad_output, x, indices)


def _fractional(
    nd: int,
    x: jax.Array,
    kernel_size: Sequence[int],
    output_size: Sequence[int],
    random_samples: jax.Array,
) -> tuple[jax.Array, jax.Array]:
    pool = getattr(jaxpool, f"fractional_max_pool{nd}d")
    kernel, out = _ints(kernel_size), _ints(output_size)
    values, indices = pool(x, kernel, out, samples=random_samples)
    return values, indices.astype(_index_dtype())


def _fractional_backward(
    nd: int,
    grad_output: jax.Array,
    x: jax.Array,
    kernel_size: Sequence[int],
    output_size: Sequence[int],
    indices: jax.Array,
) -> jax.Array:
    del kernel_size, output_size  # ATen checked them; the indices say it all
    backward = getattr(jaxpool, f"fractional_max_pool{nd}d_backward")
    return backward(grad_output, x, indices)


def _max_unpool(
    nd: int,
    x: jax.Array,
    indices: jax.Array,
    output_size: Sequence[int],
    stride: Sequence[int] = (),
    padding: Sequence[int] = (),
) -> jax.Array:
    del stride, padding  # ATen's 3-D op only checks them (it has no window)
    out = _ints(output_size)
    if not isinstance(indices, core.Tracer) and _outside(indices, math.prod(out)):
        # Concrete indices: ATen's error for one outside its plane, which a
        # trace (jit, grad) cannot raise; there jaxpool drops it.
        first = int(indices[(indices < 0) | (indices >= math.prod(out))][0])
        raise RuntimeError(
            f"Found an invalid max index: {first} (output volumes are of size "
            f"{'x'.join(map(str, out))})"
        )
    unpool = getattr(jaxpool, f"max_unpool{nd}d")
    return unpool(x, indices, output_size=out)


@partial(jax.jit, static_argnums=1)
def _outside(indices: jax.Array, size: int) -> jax.Array:
    """Whether an index lies outside ``[0, size)``: one program per shape."""
    return jnp.any((indices < 0) | (indices >= size))


def _definitions() -> dict[str, tuple[Callable[..., Any], tuple[str, ...], int]]:
    """ATen op name -> (its JAX definition, the dtypes ATen's CPU kernel
    takes, the argument whose dtype that is)."""
    table: dict[str, tuple[Callable[..., Any], tuple[str, ...], int]] = {}
    for nd in (2, 3):
        pool, adaptive = f"max_pool{nd}d_with_indices", f"adaptive_max_pool{nd}d"
        fractional = f"fractional_max_pool{nd}d"
        table[pool] = (partial(_max_pool, nd), _POOL_DTYPES, 0)
        table[f"{pool}_backward"] = (partial(_max_pool_backward, nd), _FLOATS, 1)
        table[adaptive] = (partial(_adaptive, nd), _FLOATS, 0)
        table[f"{adaptive}_backward"] = (partial(_adaptive_backward, nd), _FLOATS, 1)
        table[fractional] = (partial(_fractional, nd), _FLOATS, 0)
        table[f"{fractional}_backward"] = (
            partial(_fractional_backward, nd),
            _FLOATS,
            1,
        )
        table[f"max_unpool{nd}d"] = (partial(_max_unpool, nd), _FLOATS, 0)
    return table
