"""Check every jaxpool op against the NumPy oracle (and PyTorch, when installed).

Run ``python -m jaxpool.verify`` (``--help`` for options). For each op, config
and dtype it compares forward values and indices bit for bit, and the gradient
from ``jax.vjp`` with a random cotangent against a float64 scatter of the
oracle's indices; with PyTorch installed, also values and indices against
``torch.nn.functional``. It prints a table and a summary line, and exits
non-zero on any failure.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

import jaxpool
from jaxpool import reference
from jaxpool._args import AdaptiveArgs, FractionalArgs, PoolArgs

DTYPES = ("float32", "float64", "float16", "bfloat16")
# Unit roundoff of each dtype, and of the dtype its gradients accumulate in.
ROUNDING = {"float16": 2**-11, "bfloat16": 2**-8, "float32": 2**-24, "float64": 2**-53}
ACCUMULATE = {
    "float16": 2**-24,
    "bfloat16": 2**-24,
    "float32": 2**-24,
    "float64": 2**-53,
}


class Case(NamedTuple):
    """One op applied to one input shape.

    ``fn(x) -> (values, indices)`` is jaxpool's pool, ``backward(g, x,
    indices)`` its standalone backward, ``oracle`` NumPy's pool and ``torch``
    PyTorch's, ``(torch, xt) -> (values, indices)``. For an unpool case the
    input is pooled by the oracle first, ``fn`` unpools it and ``oracle`` is
    the oracle's unpool.
    """

    op: str
    config: str
    shape: tuple[int, ...]
    nd: int
    fn: Callable[..., Any]
    backward: Callable[..., Any] | None
    oracle: Callable[..., Any]
    torch: Callable[..., Any] | None


class Row(NamedTuple):
    op: str
    config: str
    dtype: str
    check: str
    error: float
    passed: bool


_WINDOW = ("kernel_size", "stride", "padding", "dilation", "ceil_mode")


def _name(shape: tuple[int, ...], **kw: Any) -> str:
    args = " ".join(f"{k}{v}" for k, v in kw.items() if v not in (None, False))
    return f"{'x'.join(map(str, shape))} {args}".strip()


# (shape, arguments) per number of axes; the first two of each are the --quick
# set. The arguments are ints, one value for every axis.
POOLS = {
    1: [
        ((2, 3, 17), PoolArgs(3, 2, 1)),
        ((2, 3, 16), PoolArgs(2, 2)),
        ((1, 2, 11), PoolArgs(2, 2, 1, 3, True)),
    ],
    2: [
        ((2, 3, 9, 10), PoolArgs(3, 2, 1)),
        ((2, 3, 8, 8), PoolArgs(2, 2)),
        ((1, 2, 7, 9), PoolArgs(2, 1, 1, 2, True)),
    ],
    3: [
        ((2, 3, 8, 9, 10), PoolArgs(3, 2, 1)),
        ((1, 2, 7, 7, 7), PoolArgs(3, 1, 1)),
        ((1, 2, 5, 6, 7), PoolArgs(2, 2, 1, 1, True)),
        ((2, 2, 2, 2), PoolArgs(2, 1, 1, 3)),
    ],
}
ADAPTIVE = {
    1: [
        ((2, 3, 10), AdaptiveArgs(4)),
        ((2, 3, 16), AdaptiveArgs(4)),
        ((1, 2, 5), AdaptiveArgs(8)),
    ],
    2: [
        ((2, 3, 10, 9), AdaptiveArgs((3, 4))),
        ((2, 3, 16, 16), AdaptiveArgs((4, 4))),
        ((2, 3, 37, 45), AdaptiveArgs((13, 17))),
        ((1, 2, 5, 7), AdaptiveArgs((8, 11))),
    ],
    3: [
        ((1, 2, 5, 7, 6), AdaptiveArgs((3, 4, 4))),
        ((1, 2, 8, 8, 8), AdaptiveArgs(2)),
    ],
}


def _pool_cases(nd: int, quick: bool, implementation: str | None) -> Iterator[Case]:
    pool = getattr(jaxpool, f"max_pool{nd}d_with_argmax")
    backward = getattr(jaxpool, f"max_pool{nd}d_with_argmax_backward")
    for shape, args in POOLS[nd][: 2 if quick else None]:
        k, s, p, d, ceil = (getattr(args, a) for a in _WINDOW)
        kw = {**vars(args), "implementation": implementation}

        def torch_fn(torch, x, nd=nd, args=(k, s, p, d, ceil)):
            f = getattr(torch.nn.functional, f"max_pool{nd}d")
            return f(x, *args, return_indices=True)

        yield Case(
            f"max_pool{nd}d_with_argmax",
            _name(shape, k=k, s=s, p=p, d=d, ceil=ceil),
            shape,
            nd,
            lambda x, pool=pool, kw=kw: pool(x, **kw),
            lambda g, x, i, b=backward, kw=kw, **more: b(g, x, i, **{**kw, **more}),
            lambda x, nd=nd, k=k, s=s, p=p, d=d, ceil=ceil: reference.max_pool(
                x, (k,) * nd, (s,) * nd, (p,) * nd, (d,) * nd, ceil
            ),
            torch_fn,
        )


def _adaptive_cases(nd: int, quick: bool, implementation: str | None) -> Iterator[Case]:
    pool = getattr(jaxpool, f"adaptive_max_pool{nd}d")
    backward = partial(
        getattr(jaxpool, f"adaptive_max_pool{nd}d_backward"),
        implementation=implementation,
    )
    for shape, args in ADAPTIVE[nd][: 2 if quick else None]:
        out = args.output_size
        full = (out,) * nd if isinstance(out, int) else tuple(out)

        def torch_fn(torch, x, nd=nd, out=out):
            f = getattr(torch.nn.functional, f"adaptive_max_pool{nd}d")
            return f(x, out, return_indices=True)

        yield Case(
            f"adaptive_max_pool{nd}d",
            f"{'x'.join(map(str, shape))} -> {'x'.join(map(str, full))}",
            shape,
            nd,
            lambda x, pool=pool, args=args: pool(
                x, **{**vars(args), "implementation": implementation}
            ),
            backward,
            lambda x, full=full: reference.adaptive_max_pool(x, full),
            torch_fn,
        )


def _unpool_cases(nd: int, quick: bool, implementation: str | None) -> Iterator[Case]:
    del implementation  # an unpool is one scatter
    unpool = getattr(jaxpool, f"max_unpool{nd}d")
    for shape, args in POOLS[nd][: 2 if quick else None]:
        if len(shape) != nd + 2:
            continue
        spatial = shape[-nd:]
        k, s, p = args.kernel_size, args.stride, args.padding

        def torch_fn(torch, v, i, nd=nd, k=k, s=s, p=p, spatial=spatial):
            f = getattr(torch.nn.functional, f"max_unpool{nd}d")
            return f(v, i, k, s, p, output_size=spatial)

        yield Case(
            f"max_unpool{nd}d",
            _name(shape, k=k, s=s, p=p),
            shape,
            nd,
            lambda v, i, f=unpool, w=(k, s, p), size=spatial: f(
                v, i, *w, output_size=size
            ),
            None,
            lambda x, k=k, s=s, p=p, nd=nd: reference.max_pool(
                x, (k,) * nd, (s,) * nd, (p,) * nd, (1,) * nd, False
            ),
            torch_fn,
        )


FRACTIONAL = {
    2: [
        ((2, 3, 9, 10), FractionalArgs(2, (5, 4))),
        ((2, 3, 9, 10), FractionalArgs(2, (8, 9))),
        ((3, 11, 13), FractionalArgs((3, 2), output_ratio=(0.6, 0.7))),
    ],
    3: [
        ((1, 2, 7, 8, 9), FractionalArgs(2, (3, 4, 5))),
        ((2, 7, 6, 9), FractionalArgs((2, 1, 2), output_ratio=0.5)),
    ],
}
# The entry of PyTorch's samples that drives each spatial axis (D, H, W).
_SAMPLE_AXIS = {2: (1, 0), 3: (0, 1, 2)}


def _fractional_cases(
    nd: int, quick: bool, implementation: str | None
) -> Iterator[Case]:
    del implementation  # no Pallas kernel
    pool = getattr(jaxpool, f"fractional_max_pool{nd}d")
    backward = getattr(jaxpool, f"fractional_max_pool{nd}d_backward")
    for shape, args in FRACTIONAL[nd][: 2 if quick else None]:
        spatial = shape[len(shape) - nd :]
        planes = (1, shape[0]) if len(shape) == nd + 1 else shape[:2]
        # float32 samples, rounded to each dtype the same way by every library.
        samples = np.random.default_rng(list(shape)).random((*planes, nd))
        samples = samples.astype(np.float32)
        k, size, ratio = args.kernel_size, args.output_size, args.output_ratio
        kernel = (k,) * nd if isinstance(k, int) else tuple(k)
        if size is None:
            ratios = (ratio,) * nd if isinstance(ratio, float) else tuple(ratio)
            out = tuple(int(n * r) for n, r in zip(spatial, ratios, strict=True))
        else:
            out = (size,) * nd if isinstance(size, int) else tuple(size)

        def oracle(x, nd=nd, samples=samples, kernel=kernel, out=out):
            u = samples.astype(x.dtype)
            u = u[0] if x.ndim == nd + 1 else u
            starts = [
                reference.fractional_starts(u[..., _SAMPLE_AXIS[nd][a]], *sizes)
                for a, sizes in enumerate(
                    zip(x.shape[x.ndim - nd :], out, kernel, strict=True)
                )
            ]
            return reference.fractional_max_pool(x, kernel, starts)

        def fn(x, pool=pool, args=args, samples=samples):
            u = jnp.asarray(samples).astype(jnp.asarray(x).dtype)
            return pool(x, **vars(args), samples=u)

        def torch_fn(torch, x, nd=nd, kernel=kernel, out=out, samples=samples):
            f = getattr(torch.nn.functional, f"fractional_max_pool{nd}d")
            u = torch.from_numpy(samples).to(x.dtype)
            return f(x, kernel, out, return_indices=True, _random_samples=u)

        yield Case(
            f"fractional_max_pool{nd}d",
            f"{'x'.join(map(str, shape))} k{kernel} -> {'x'.join(map(str, out))}",
            shape,
            nd,
            fn,
            lambda g, x, i, b=backward, cl=args.channels_last, **kw: b(
                g, x, i, channels_last=cl, **kw
            ),
            oracle,
            torch_fn,
        )


OPS: dict[str, Callable[[bool, str | None], Iterator[Case]]] = {
    **{f"max_pool{n}d_with_argmax": partial(_pool_cases, n) for n in (1, 2, 3)},
    **{f"adaptive_max_pool{n}d": partial(_adaptive_cases, n) for n in (1, 2, 3)},
    **{f"max_unpool{n}d": partial(_unpool_cases, n) for n in (1, 2, 3)},
    **{f"fractional_max_pool{n}d": partial(_fractional_cases, n) for n in (2, 3)},
}


def _np_dtype(name: str) -> np.dtype:
    return np.dtype(jnp.bfloat16) if name == "bfloat16" else np.dtype(name)


def _input(rng: np.random.Generator, shape: tuple[int, ...], dtype: str) -> np.ndarray:
    """Small integers (many ties) with a few NaNs and -inf: discriminating input."""
    x = rng.integers(-4, 5, shape).astype(np.float64)
    x[rng.random(shape) < 0.05] = np.nan
    x[rng.random(shape) < 0.1] = -np.inf
    return x.astype(_np_dtype(dtype))


class Check(NamedTuple):
    """One comparison: its name, how far off (mismatches, or the largest
    absolute error), whether it passed, and where it first failed."""

    name: str
    error: float
    passed: bool
    where: str = ""


class Outcome(NamedTuple):
    """The checks of [`jaxpool.verify.compare`][], and the op's outputs it compared."""

    checks: list[Check]
    values: Any
    indices: Any
    grad: Any


def _differ(a: Any, b: Any, signed_zeros: bool = True) -> np.ndarray:
    """Where two arrays of one shape hold different values, whatever their
    dtypes: NaN equals NaN, -0.0 is not +0.0 (unless not ``signed_zeros``)."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    same = a == b
    if signed_zeros:
        same &= np.signbit(a) == np.signbit(b)
    return ~(same | (np.isnan(a) & np.isnan(b)))


def _same(name: str, actual: Any, expected: Any) -> Check:
    """Bitwise equality of shape, dtype and values (NaN equal to NaN, -0.0 not
    +0.0)."""
    a, e = np.asarray(actual), np.asarray(expected)
    if a.shape != e.shape or a.dtype != e.dtype:
        where = f"{a.shape} {a.dtype} != {e.shape} {e.dtype}"
        return Check(name, max(a.size, e.size, 1), False, where)
    differ = _differ(a, e)
    if not differ.any():
        return Check(name, 0, True)
    first = tuple(int(i) for i in np.argwhere(differ)[0])
    where = f"first at {first}: {a[first]!r} != {e[first]!r}"
    return Check(name, int(differ.sum()), False, where)


def _mismatches(a: Any, b: Any) -> int:
    """How many values differ (:func:`_differ`), whatever the dtypes."""
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape:
        return max(a.size, b.size, 1)
    return int(_differ(a, b).sum())


def compare(
    forward: Callable[..., Any],
    backward: Callable[..., Any],
    x: np.ndarray,
    want: tuple[np.ndarray, np.ndarray],
    g: np.ndarray,
    nd: int,
    exact: bool,
) -> Outcome:
    """A pool against the oracle: the comparison ``verify`` and the tests share.

    Values and indices (int32) must equal the oracle's ``want`` bit for bit.
    The gradient through ``jax.vjp`` with cotangent ``g``, the standalone
    backward op and the deterministic (``"gather"``) backward are compared with
    a float64 scatter of ``g`` at the oracle's indices: with ``exact``
    (small-integer cotangents, whose sums are exact in any order) bit for bit
    once rounded to ``x``'s dtype; otherwise within the bound of accumulating
    in the accumulation dtype and rounding once.

    Args:
      forward: ``x -> (values, indices)``.
      backward: ``(g, x, indices, **kw) -> grad``, taking ``algorithm=``.
      x: the input, NumPy (float64 runs with x64 enabled).
      want: the oracle's ``(values, indices)``.
      g: the cotangent of the values.
      nd: the number of spatial axes (the trailing ones of ``x``).
      exact: compare the gradients bit for bit.
    """
    x64 = jax.enable_x64(True) if x.dtype == np.float64 else contextlib.nullcontext()
    with x64:
        # One program for the four results: one compile per comparison.
        @jax.jit
        def run(x: Any, g: Any) -> tuple[Any, ...]:
            (values, indices), vjp = jax.vjp(forward, x)
            (grad,) = vjp((g, np.zeros(indices.shape, jax.dtypes.float0)))
            standalone = backward(g, x, indices)
            gather = backward(g, x, indices, algorithm="gather")
            return values, indices, grad, standalone, gather

        values, indices, grad, standalone, gather = run(x, g)
    want_values, want_indices = want
    checks = [
        _same("values == oracle (mismatches)", values, want_values),
        _same("indices == oracle (mismatches)", indices, want_indices),
    ]
    spatial = x.shape[x.ndim - nd :]
    want_grad = reference.scatter_add(g, want_indices, spatial)
    bound = _grad_bound(g, want_indices, spatial, x.dtype, want_grad)
    # Not bitwise against the vjp: on GPU, a scatter-add of overlapping
    # windows sums in a varying order (the "gather" algorithm does not).
    for what, result in (
        ("grad", grad),
        ("backward op", standalone),
        ("gather backward", gather),
    ):
        if exact:
            rounded = want_grad.astype(x.dtype)
            checks.append(
                _same(f"{what} == float64 scatter (mismatches)", result, rounded)
            )
            continue
        err = np.abs(np.asarray(result, np.float64) - want_grad)
        check = f"{what} vs float64 scatter (max abs err)"
        checks.append(Check(check, err.max(initial=0.0), bool((err <= bound).all())))
    return Outcome(checks, values, indices, grad)


def _grad_bound(g, indices, spatial, dtype: Any, want: np.ndarray) -> np.ndarray:
    """Summing n terms in the accumulation dtype, then rounding once, is within
    n * u_acc * sum|g| + u * |sum g| of the exact sum."""
    name = "bfloat16" if dtype == _np_dtype("bfloat16") else np.dtype(dtype).name
    terms = reference.scatter_add(np.ones(g.shape), indices, spatial)
    magnitude = reference.scatter_add(np.abs(g.astype(np.float64)), indices, spatial)
    return ACCUMULATE[name] * terms * magnitude + ROUNDING[name] * np.abs(want)


def _finite_difference(case: Case, rng: np.random.Generator) -> float:
    """Relative error of the vjp against a central difference, in float64, on
    distinct values (no ties: the argmax is stable under the step). Outputs
    that are not finite (windows of padding alone) are left out."""
    with jax.enable_x64(True):
        size = int(np.prod(case.shape))
        x = rng.permutation(size).reshape(case.shape) / size
        step = 0.1 / size  # below half the spacing of the values
        indices = None
        if case.backward is None:  # unpool the oracle's pooled values
            x, indices = case.oracle(x)
            indices = jnp.asarray(indices)

        def f(v: Any) -> Any:
            return case.fn(v)[0] if indices is None else case.fn(v, indices)

        # One program for the whole comparison: one compile per case, where
        # each operation run eagerly compiled one of its own.
        @jax.jit
        def errors(x: Any, v: Any, r: Any) -> tuple[Any, Any]:
            out, vjp = jax.vjp(f, x)
            w = jnp.where(jnp.isfinite(out), r, 0.0)
            numeric = (f(x + step * v) - f(x - step * v)) / (2 * step)
            (grad,) = vjp(w)
            return jnp.vdot(jnp.where(w != 0, numeric, 0.0), w), jnp.vdot(grad, v)

        v = rng.standard_normal(x.shape)
        r = rng.standard_normal(jax.eval_shape(f, x).shape)
        approx, exact = (float(e) for e in errors(x, v, r))
        return abs(exact - approx) / max(1.0, abs(exact))


def _check(case: Case, dtype: str, rng: np.random.Generator, torch: Any) -> list[Row]:
    if case.backward is None:
        return _check_unpool(case, dtype, rng, torch)
    x = _input(rng, case.shape, dtype)
    rows = []

    def row(check: str, error: float, passed: bool) -> None:
        rows.append(Row(case.op, case.config, dtype, check, float(error), passed))

    x64 = jax.enable_x64(True) if dtype == "float64" else contextlib.nullcontext()
    with x64:
        out_shape = jax.eval_shape(case.fn, x)[0].shape
    g = rng.standard_normal(out_shape).astype(x.dtype)
    want = case.oracle(x)
    outcome = compare(case.fn, case.backward, x, want, g, case.nd, exact=False)
    for check in outcome.checks:
        row(check.name, check.error, check.passed)
    values, indices, grad = outcome.values, outcome.indices, outcome.grad
    spatial = case.shape[-case.nd :]
    bound = _grad_bound(
        g, want[1], spatial, x.dtype, reference.scatter_add(g, want[1], spatial)
    )
    if dtype == "float64":
        err = _finite_difference(case, rng)
        row("grad vs finite differences (rel err)", err, err < 1e-6)
    if torch is not None and case.torch is not None:
        xt = torch.from_numpy(x.astype(np.float32)).to(getattr(torch, dtype))
        xt.requires_grad_(True)
        tv, ti = case.torch(torch, xt)
        n = _mismatches(values, tv.detach().float().numpy())
        n += _mismatches(indices, ti.numpy())
        row("values, indices == torch (mismatches)", n, n == 0)
        # torch's CPU backward does not bounds-check an out-of-plane index (a
        # window with no in-bounds tap), and accumulates 16-bit in 16 bits.
        if dtype in ("float32", "float64") and (ti.numpy() < np.prod(spatial)).all():
            tv.backward(torch.from_numpy(g))
            err = np.abs(np.asarray(grad, np.float64) - xt.grad.numpy())
            row(
                "grad vs torch (max abs err)",
                err.max(initial=0.0),
                bool((err <= bound).all()),
            )
    return rows


def _check_unpool(
    case: Case, dtype: str, rng: np.random.Generator, torch: Any
) -> list[Row]:
    values, indices = case.oracle(_input(rng, case.shape, dtype))
    spatial = case.shape[-case.nd :]
    rows = []

    def row(check: str, error: float, passed: bool) -> None:
        rows.append(Row(case.op, case.config, dtype, check, float(error), passed))

    x64 = jax.enable_x64(True) if dtype == "float64" else contextlib.nullcontext()
    with x64:
        # One program for the unpool and its gradient.
        @jax.jit
        def run(v: Any, i: Any, ct: Any) -> tuple[Any, Any]:
            out, vjp = jax.vjp(lambda v: case.fn(v, i), v)
            return out, vjp(ct)[0]

        shape = jax.eval_shape(case.fn, values, indices).shape
        ct = rng.standard_normal(shape).astype(values.dtype)
        out, grad = run(values, indices, ct)
    n = _mismatches(out, reference.max_unpool(values, indices, spatial))
    row("unpool == oracle (mismatches)", n, n == 0)
    lead = ct.shape[: ct.ndim - case.nd]
    gathered = np.take_along_axis(
        ct.reshape(*lead, -1), indices.reshape(*lead, -1), -1
    ).reshape(values.shape)
    n = _mismatches(grad, gathered)
    row("grad == gather at indices (mismatches)", n, n == 0)
    flat = indices.reshape(-1, indices[(0,) * len(lead)].size)
    unique = all(len(set(p)) == p.size for p in flat)
    if dtype == "float64" and unique:
        # (With equal indices, from overlapping windows, the unpool's value
        # there is whichever copy lands, and its gradient PyTorch's gather:
        # every copy gets it. A finite difference does not measure that.)
        err = _finite_difference(case, rng)
        row("grad vs finite differences (rel err)", err, err < 1e-6)
    if torch is not None and case.torch is not None:
        vt = torch.from_numpy(values.astype(np.float32)).to(getattr(torch, dtype))
        it = torch.from_numpy(indices.astype(np.int64))
        n = _mismatches(out, case.torch(torch, vt, it).float().numpy())
        row("unpool == torch (mismatches)", n, n == 0)
    return rows


def run(
    ops: list[str],
    dtypes: list[str],
    quick: bool,
    use_torch: bool,
    out: Any = None,
    implementation: str | None = None,
) -> list[Row]:
    """Run the checks and print the table (to ``out``, default stdout)."""
    out = out or sys.stdout
    torch = None
    if use_torch:
        try:
            import torch
        except ImportError:
            print(
                "PyTorch not installed: checking against the NumPy oracle only.",
                file=out,
            )
    rng = np.random.default_rng(0)
    rows: list[Row] = []
    cases = [case for op in ops for case in OPS[op](quick, implementation)]
    header = (
        f"{'#':>7} {'op':<24} {'config':<34} {'dtype':<9} {'check':<48} "
        f"{'error':>9}  result"
    )
    print(
        f"jaxpool {jaxpool.__version__}, jax {jax.__version__}, "
        f"device {jnp.zeros(()).device}",
        file=out,
    )
    print(header, file=out)
    print("-" * len(header), file=out)
    for k, case in enumerate(cases, 1):
        for dtype in dtypes:
            for r in _check(case, dtype, rng, torch):
                rows.append(r)
                print(
                    f"{f'{k}/{len(cases)}':>7} {r.op:<24} {r.config:<34} "
                    f"{r.dtype:<9} {r.check:<48} {r.error:>9.3g}  "
                    f"{'PASS' if r.passed else 'FAIL'}",
                    file=out,
                    flush=True,
                )
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m jaxpool.verify",
        description="Check every jaxpool op against references.",
    )
    parser.add_argument("--quick", action="store_true", help="fewer configurations")
    parser.add_argument(
        "--op", choices=sorted(OPS), action="append", help="only this op (repeatable)"
    )
    parser.add_argument(
        "--dtype", choices=DTYPES, action="append", help="only this dtype (repeatable)"
    )
    parser.add_argument(
        "--no-torch", action="store_true", help="skip the PyTorch comparison"
    )
    parser.add_argument("--json", metavar="PATH", help="also write the rows as JSON")
    parser.add_argument(
        "--implementation",
        choices=["xla", "pallas"],
        help="jaxpool's kernels (default: the platform's choice); pallas runs its "
        "Triton kernels on a GPU and their (slow) interpreter on a CPU",
    )
    parser.add_argument(
        "--device",
        help="run on this JAX platform (cpu, gpu, tpu: whatever JAX has here)",
    )
    args = parser.parse_args(argv)
    device = contextlib.nullcontext()
    if args.device:
        try:
            device = jax.default_device(jax.devices(args.device)[0])
        except RuntimeError as e:
            parser.error(f"--device {args.device}: not available here ({e})")
    start = time.perf_counter()
    with device:
        rows = run(
            args.op or list(OPS),
            args.dtype or list(DTYPES),
            args.quick,
            not args.no_torch,
            implementation=args.implementation,
        )
    failed = [r for r in rows if not r.passed]
    if args.json:
        with open(args.json, "w") as f:
            json.dump([r._asdict() for r in rows], f, indent=1)
    print(
        f"\n{len(rows) - len(failed)} passed, {len(failed)} failed "
        f"({time.perf_counter() - start:.1f} s)"
    )
    return 1 if failed else 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BrokenPipeError:  # piped into `head`: the run was cut short, not verified
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115
        sys.exit(1)
