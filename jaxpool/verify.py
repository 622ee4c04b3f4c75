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
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

import jaxpool
from jaxpool import reference

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
    """One op applied to one input shape: ``fn`` is jaxpool's, ``oracle`` NumPy's."""

    op: str
    config: str
    shape: tuple[int, ...]
    nd: int
    fn: Callable[[Any], tuple[Any, Any]]
    oracle: Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]
    torch: Callable[[Any, Any], tuple[Any, Any]] | None


class Row(NamedTuple):
    op: str
    config: str
    dtype: str
    check: str
    error: float
    passed: bool


def _max_pool3d_cases(quick: bool) -> Iterator[Case]:
    configs = [
        ((2, 3, 8, 9, 10), (2, 2, 2), (2, 2, 2), (0, 0, 0), (1, 1, 1), False),
        ((2, 3, 8, 9, 10), (3, 3, 3), (2, 2, 2), (1, 1, 1), (1, 1, 1), False),
        ((1, 2, 7, 7, 7), (3, 3, 3), (1, 1, 1), (1, 1, 1), (1, 1, 1), False),
        ((1, 2, 5, 6, 7), (2, 2, 2), (2, 2, 2), (1, 1, 1), (1, 1, 1), True),
        ((1, 2, 9, 8, 7), (3, 2, 2), (2, 1, 3), (1, 1, 0), (2, 1, 2), True),
        ((2, 2, 2, 2), (2, 2, 2), (1, 1, 1), (1, 1, 1), (3, 3, 3), False),
    ]
    for shape, k, s, p, d, ceil in configs[:3] if quick else configs:
        name = f"{'x'.join(map(str, shape))} k{k} s{s} p{p} d{d}" + (
            " ceil" if ceil else ""
        )

        def torch_fn(torch, x, k=k, s=s, p=p, d=d, ceil=ceil):
            return torch.nn.functional.max_pool3d(
                x, k, s, p, d, ceil, return_indices=True
            )

        yield Case(
            "max_pool3d_with_argmax",
            name,
            shape,
            3,
            lambda x, k=k, s=s, p=p, d=d, ceil=ceil: jaxpool.max_pool3d_with_argmax(
                x, k, s, p, d, ceil
            ),
            lambda x, k=k, s=s, p=p, d=d, ceil=ceil: reference.max_pool(
                x, k, s, p, d, ceil
            ),
            torch_fn,
        )


def _adaptive_max_pool2d_cases(quick: bool) -> Iterator[Case]:
    configs = [
        ((2, 3, 16, 16), (4, 4)),  # integer ratio: a strided pool
        ((2, 3, 10, 9), (3, 4)),  # overlapping windows
        ((2, 3, 97, 131), (13, 17)),
        ((1, 2, 5, 7), (8, 11)),  # output larger than input
        ((3, 50, 50), (7, 7)),
    ]
    for shape, out in configs[:3] if quick else configs:

        def torch_fn(torch, x, out=out):
            return torch.nn.functional.adaptive_max_pool2d(x, out, return_indices=True)

        yield Case(
            "adaptive_max_pool2d",
            f"{'x'.join(map(str, shape))} -> {out[0]}x{out[1]}",
            shape,
            2,
            lambda x, out=out: jaxpool.adaptive_max_pool2d(x, out),
            lambda x, out=out: reference.adaptive_max_pool(x, out),
            torch_fn,
        )


OPS: dict[str, Callable[[bool], Iterator[Case]]] = {
    "max_pool3d_with_argmax": _max_pool3d_cases,
    "adaptive_max_pool2d": _adaptive_max_pool2d_cases,
}


def _np_dtype(name: str) -> np.dtype:
    return np.dtype(jnp.bfloat16) if name == "bfloat16" else np.dtype(name)


def _input(rng: np.random.Generator, shape: tuple[int, ...], dtype: str) -> np.ndarray:
    """Small integers (many ties) with a few NaNs and -inf: discriminating input."""
    x = rng.integers(-4, 5, shape).astype(np.float64)
    x[rng.random(shape) < 0.05] = np.nan
    x[rng.random(shape) < 0.1] = -np.inf
    return x.astype(_np_dtype(dtype))


def _mismatches(a: Any, b: Any) -> int:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    if a.shape != b.shape:
        return max(a.size, b.size, 1)
    return int((~((a == b) | (np.isnan(a) & np.isnan(b)))).sum())


def _check(case: Case, dtype: str, rng: np.random.Generator, torch: Any) -> list[Row]:
    x = _input(rng, case.shape, dtype)
    rows = []

    def row(check: str, error: float, passed: bool) -> None:
        rows.append(Row(case.op, case.config, dtype, check, float(error), passed))

    x64 = jax.enable_x64(True) if dtype == "float64" else contextlib.nullcontext()
    with x64:
        (values, indices), vjp = jax.vjp(jax.jit(case.fn), jnp.asarray(x))
        g = rng.standard_normal(values.shape).astype(x.dtype)
        (grad,) = vjp((jnp.asarray(g), np.zeros(indices.shape, jax.dtypes.float0)))
    want_values, want_indices = case.oracle(x)
    n = _mismatches(values, want_values)
    row("values == oracle (mismatches)", n, n == 0)
    n = _mismatches(indices, want_indices)
    row("indices == oracle (mismatches)", n, n == 0 and indices.dtype == np.int32)
    spatial = case.shape[-case.nd :]
    want_grad = reference.scatter_add(g, want_indices, spatial)
    # Summing n terms in the accumulation dtype, then rounding once, is within
    # n * u_acc * sum|g| + u * |sum g| of the exact sum.
    terms = reference.scatter_add(np.ones(g.shape), want_indices, spatial)
    magnitude = reference.scatter_add(
        np.abs(g.astype(np.float64)), want_indices, spatial
    )
    bound = ACCUMULATE[dtype] * terms * magnitude + ROUNDING[dtype] * np.abs(want_grad)
    err = np.abs(np.asarray(grad, np.float64) - want_grad)
    row(
        "grad vs float64 scatter (max abs err)",
        err.max(initial=0.0),
        bool((err <= bound).all()),
    )
    if torch is not None and case.torch is not None:
        xt = torch.from_numpy(x.astype(np.float32)).to(getattr(torch, dtype))
        tv, ti = case.torch(torch, xt)
        n = _mismatches(values, tv.float().numpy()) + _mismatches(indices, ti.numpy())
        row("values, indices == torch (mismatches)", n, n == 0)
    return rows


def run(
    ops: list[str],
    dtypes: list[str],
    quick: bool,
    use_torch: bool,
    out: Any = None,
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
    header = (
        f"{'op':<26} {'config':<44} {'dtype':<9} {'check':<38} {'error':>9}  result"
    )
    print(
        f"jaxpool {jaxpool.__version__}, jax {jax.__version__}, "
        f"device {jax.devices()[0].platform}",
        file=out,
    )
    print(header, file=out)
    print("-" * len(header), file=out)
    for op in ops:
        for case in OPS[op](quick):
            for dtype in dtypes:
                for r in _check(case, dtype, rng, torch):
                    rows.append(r)
                    print(
                        f"{r.op:<26} {r.config:<44} {r.dtype:<9} {r.check:<38} "
                        f"{r.error:>9.3g}  {'PASS' if r.passed else 'FAIL'}",
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
    args = parser.parse_args(argv)
    start = time.perf_counter()
    rows = run(
        args.op or list(OPS), args.dtype or list(DTYPES), args.quick, not args.no_torch
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
