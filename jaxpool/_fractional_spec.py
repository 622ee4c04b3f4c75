"""The fractional pools' spec: their sizes, checked, and their samples.

A fractional pool's windows depend on its samples, which are arrays: they are
computed under ``jit`` (``_fractional.window_starts``), and what is static is
checked here, once, at trace time, into a
:class:`~jaxpool._windows.FractionalSpec` (:func:`fractional_spec`,
:func:`fractional_backward_spec`), beside the samples themselves
(:func:`fractional_samples`: given, or drawn from a key).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.core import Tracer

from ._args import FractionalArgs
from ._checks import (
    check_algorithm,
    check_implementation,
    entries,
    int_tuple,
    spatial_sizes,
    static_bool,
)
from ._windows import Algorithm, FractionalSpec, PoolSpec, split


def _fractional_common(
    name: str, channels_last: Any, algorithm: Any, implementation: Any
) -> tuple[bool, Algorithm]:
    if check_implementation(name, implementation) == "pallas":
        raise ValueError(
            f"{name}: `implementation` must be None or 'xla' (fractional pools "
            f"have no Pallas kernel), got {implementation!r}"
        )
    cl = static_bool(name, "channels_last", channels_last)
    return cl, check_algorithm(name, algorithm)


def _ratio_sizes(name: str, spatial: tuple[int, ...], ratio: Any) -> tuple[int, ...]:
    """The output sizes of ``output_ratio``: PyTorch's ``int(input_size *
    ratio)`` per axis, each ratio in ``(0, 1)``."""
    nd, items = len(spatial), entries(ratio)
    if isinstance(ratio, str) or len(items) not in (1, nd):
        raise ValueError(
            f"{name}: `output_ratio` must be a number or a sequence of 1 or {nd} "
            f"numbers, got {ratio!r}"
        )
    for item in items:
        if isinstance(item, (Tracer, bool, np.bool_)):
            raise TypeError(
                f"{name}: `output_ratio` must contain static Python numbers, "
                f"got {ratio!r}"
            )
        if not isinstance(item, (int, float, np.integer, np.floating)):
            raise TypeError(
                f"{name}: `output_ratio` must contain numbers, got {ratio!r}"
            )
    values = tuple(float(v) for v in items) * (nd if len(items) == 1 else 1)
    if not all(0.0 < v < 1.0 for v in values):
        raise ValueError(
            f"{name}: `output_ratio` must lie in (0, 1) per axis, "
            f"got output_ratio={ratio!r}"
        )
    return tuple(int(n * r) for n, r in zip(spatial, values, strict=True))


def fractional_spec(
    name: str, nd: int, shape: tuple[int, ...], args: FractionalArgs
) -> FractionalSpec:
    """Validate a fractional pool's arguments for an input of ``shape``:
    exactly one of ``output_size`` and ``output_ratio`` (PyTorch's
    ``int(input_size * ratio)`` per axis), and PyTorch's ``output_size +
    kernel_size - 1 <= input_size`` per axis (``<`` in 3-D, as PyTorch)."""
    cl, algorithm = _fractional_common(
        name, args.channels_last, args.algorithm, args.implementation
    )
    spatial = spatial_sizes(name, shape, nd, cl)
    k = int_tuple(name, "kernel_size", args.kernel_size, nd)
    if min(k) < 1:
        raise ValueError(
            f"{name}: `kernel_size` must be positive, "
            f"got kernel_size={args.kernel_size!r}"
        )
    size, ratio = args.output_size, args.output_ratio
    if (size is None) == (ratio is None):
        raise ValueError(
            f"{name}: exactly one of `output_size` and `output_ratio` must be given, "
            f"got output_size={size!r}, output_ratio={ratio!r}"
        )
    if size is not None:
        out = int_tuple(name, "output_size", size, nd)
        given = f"output_size={size!r}"
    else:
        out = _ratio_sizes(name, spatial, ratio)
        given = f"output_ratio={ratio!r} (output size {out})"
    if min(out) < 1:
        raise ValueError(
            f"{name}: the output size must be >= 1 per axis, got {given} for input "
            f"spatial size {spatial}"
        )
    # PyTorch's rule: at most the input size in 2-D, less than it in 3-D.
    limit = tuple(n - (nd == 3) for n in spatial)
    if any(o + ki - 1 > n for o, ki, n in zip(out, k, limit, strict=True)):
        bound = "less than" if nd == 3 else "at most"
        raise ValueError(
            f"{name}: `output_size` + `kernel_size` - 1 must be {bound} the input "
            f"size per axis, got {given} for kernel_size={k} and input spatial size "
            f"{spatial}"
        )
    return FractionalSpec(spatial, out, k, cl, algorithm)


def fractional_samples(
    name: str, nd: int, x: jax.Array, spec: FractionalSpec, samples: Any, key: Any
) -> jax.Array:
    """The samples as ``(N, C, nd)`` (``N = 1`` for an unbatched ``x``): the
    given ones (PyTorch's ``_random_samples``: ``(N', C, nd)`` with ``N' >=
    N``, the first ``N`` used; ``(C, nd)`` too for an unbatched ``x``), in
    ``x``'s dtype, or drawn from ``key`` uniformly in ``[0, 1)``."""
    if (samples is None) == (key is None):
        raise ValueError(
            f"{name}: exactly one of `samples` and `key` must be given, got "
            f"{'both' if key is not None else 'neither'}"
        )
    batched = x.ndim == nd + 2
    first, _ = split(x.ndim, nd, int(spec.channels_last))
    channels = x.shape[-1] if spec.channels_last else x.shape[first - 1]
    batch = x.shape[0] if batched else 1
    if key is not None:
        if not isinstance(key, jax.Array | Tracer):
            raise TypeError(f"{name}: `key` must be a JAX PRNG key, got {key!r}")
        shape = (batch, channels, nd) if batched else (channels, nd)
        drawn = jax.random.uniform(key, shape, x.dtype)
        return drawn if batched else drawn[None]
    samples = jnp.asarray(samples)
    if samples.dtype != x.dtype:
        raise TypeError(
            f"{name}: `samples` must have the dtype of `x` ({x.dtype}), got "
            f"{samples.dtype}"
        )
    given = tuple(samples.shape)
    if not batched and samples.ndim == 2:
        samples = samples[None]
    forms = f"(N, C, {nd}) with N >= {batch}" + ("" if batched else f" or (C, {nd})")
    if (
        samples.ndim != 3
        or samples.shape[1:] != (channels, nd)
        or not samples.shape[0] >= batch
    ):
        raise ValueError(
            f"{name}: `samples` must have shape {forms}, C={channels}, for x of "
            f"shape {x.shape}, got shape {given}"
        )
    return samples[:batch]


def fractional_backward_spec(name: str, adaptive: PoolSpec) -> FractionalSpec:
    """A fractional backward's spec, from the adaptive backward's checks of its
    arrays (``_spec.adaptive_backward_spec``: the pool from ``x``'s shape to
    the spatial sizes of ``grad_output``, ``indices`` of ``grad_output``'s
    shape), which are the same. Its kernel size is unused: the backward
    needs only the indices."""
    cl, algorithm = _fractional_common(
        name, adaptive.channels_last, adaptive.algorithm, adaptive.implementation
    )
    ones = (1,) * adaptive.nd
    return FractionalSpec(adaptive.in_size, adaptive.out_size, ones, cl, algorithm)
