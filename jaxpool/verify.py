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


def _name(shape: tuple[int, ...], **kw: Any) -> str:
    args = " ".join(f"{k}{v}" for k, v in kw.items() if v not in (None, False))
    return f"{'x'.join(map(str, shape))} {args}".strip()


# (shape, kernel, stride, padding, dilation, ceil_mode), per number of axes;
# the first two of each are the --quick set.
POOLS = {
    1: [
        ((2, 3, 17), 3, 2, 1, 1, False),
        ((2, 3, 16), 2, 2, 0, 1, False),
        ((1, 2, 11), 2, 2, 1, 3, True),
    ],
    2: [
        ((2, 3, 9, 10), 3, 2, 1, 1, False),
        ((2, 3, 8, 8), 2, 2, 0, 1, False),
        ((1, 2, 7, 9), 2, 1, 1, 2, True),
    ],
    3: [
        ((2, 3, 8, 9, 10), 3, 2, 1, 1, False),
        ((1, 2, 7, 7, 7), 3, 1, 1, 1, False),
        ((1, 2, 5, 6, 7), 2, 2, 1, 1, True),
        ((2, 2, 2, 2), 2, 1, 1, 3, False),
    ],
}
# (shape, output_size) per number of axes.
ADAPTIVE = {
    1: [((2, 3, 10), 4), ((2, 3, 16), 4), ((1, 2, 5), 8)],
    2: [
        ((2, 3, 10, 9), (3, 4)),
        ((2, 3, 16, 16), (4, 4)),
        ((2, 3, 37, 45), (13, 17)),
        ((1, 2, 5, 7), (8, 11)),
    ],
    3: [((1, 2, 5, 7, 6), (3, 4, 4)), ((1, 2, 8, 8, 8), 2)],
}


def _pool_cases(nd: int, quick: bool) -> Iterator[Case]:
    pool = getattr(jaxpool, f"max_pool{nd}d_with_argmax")
    backward = getattr(jaxpool, f"max_pool{nd}d_with_argmax_backward")
    for shape, k, s, p, d, ceil in POOLS[nd][: 2 if quick else None]:
        args = (k, s, p, d, ceil)
        full = tuple((v,) * nd for v in args[:4])

        def torch_fn(torch, x, nd=nd, args=args):
            f = getattr(torch.nn.functional, f"max_pool{nd}d")
            return f(x, *args, return_indices=True)

        yield Case(
            f"max_pool{nd}d_with_argmax",
            _name(shape, k=k, s=s, p=p, d=d, ceil=ceil),
            shape,
            nd,
            lambda x, pool=pool, args=args: pool(x, *args),
            lambda g, x, i, b=backward, a=args, **kw: b(g, x, i, *a, **kw),
            lambda x, f=full, ceil=ceil: reference.max_pool(
                x, f[0], f[1], f[2], f[3], ceil
            ),
            torch_fn,
        )


def _adaptive_cases(nd: int, quick: bool) -> Iterator[Case]:
    pool = getattr(jaxpool, f"adaptive_max_pool{nd}d")
    backward = getattr(jaxpool, f"adaptive_max_pool{nd}d_backward")
    for shape, out in ADAPTIVE[nd][: 2 if quick else None]:
        full = (out,) * nd if isinstance(out, int) else out

        def torch_fn(torch, x, nd=nd, out=out):
            f = getattr(torch.nn.functional, f"adaptive_max_pool{nd}d")
            return f(x, out, return_indices=True)

        yield Case(
            f"adaptive_max_pool{nd}d",
            f"{'x'.join(map(str, shape))} -> {'x'.join(map(str, full))}",
            shape,
            nd,
            lambda x, pool=pool, out=out: pool(x, out),
            backward,
            lambda x, full=full: reference.adaptive_max_pool(x, full),
            torch_fn,
        )


def _unpool_cases(nd: int, quick: bool) -> Iterator[Case]:
    unpool = getattr(jaxpool, f"max_unpool{nd}d")
    for shape, k, s, p, _, _ in POOLS[nd][: 2 if quick else None]:
        if len(shape) != nd + 2:
            continue
        spatial = shape[-nd:]

        def torch_fn(torch, v, i, nd=nd, k=k, s=s, p=p, spatial=spatial):
            f = getattr(torch.nn.functional, f"max_unpool{nd}d")
            return f(v, i, k, s, p, output_size=spatial)

        yield Case(
            f"max_unpool{nd}d",
            _name(shape, k=k, s=s, p=p),
            shape,
            nd,
            lambda v, i, unpool=unpool, spatial=spatial: unpool(v, i, spatial),
            None,
            lambda x, k=k, s=s, p=p, nd=nd: reference.max_pool(
                x, (k,) * nd, (s,) * nd, (p,) * nd, (1,) * nd, False
            ),
            torch_fn,
        )


OPS: dict[str, Callable[[bool], Iterator[Case]]] = {
    **{f"max_pool{n}d_with_argmax": partial(_pool_cases, n) for n in (1, 2, 3)},
    **{f"adaptive_max_pool{n}d": partial(_adaptive_cases, n) for n in (1, 2, 3)},
    **{f"max_unpool{n}d": partial(_unpool_cases, n) for n in (1, 2, 3)},
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


def _grad_bound(g, indices, spatial, dtype: str, want: np.ndarray) -> np.ndarray:
    """Summing n terms in the accumulation dtype, then rounding once, is within
    n * u_acc * sum|g| + u * |sum g| of the exact sum."""
    terms = reference.scatter_add(np.ones(g.shape), indices, spatial)
    magnitude = reference.scatter_add(np.abs(g.astype(np.float64)), indices, spatial)
    return ACCUMULATE[dtype] * terms * magnitude + ROUNDING[dtype] * np.abs(want)


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

        x = jnp.asarray(x)
        v = jnp.asarray(rng.standard_normal(x.shape))
        out, vjp = jax.vjp(f, x)
        w = jnp.where(jnp.isfinite(out), rng.standard_normal(out.shape), 0.0)
        numeric = (f(x + step * v) - f(x - step * v)) / (2 * step)
        approx = float(jnp.vdot(jnp.where(w != 0, numeric, 0.0), w))
        (grad,) = vjp(w)
        exact = float(jnp.vdot(grad, v))
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
        (values, indices), vjp = jax.vjp(jax.jit(case.fn), jnp.asarray(x))
        g = rng.standard_normal(values.shape).astype(x.dtype)
        (grad,) = vjp((jnp.asarray(g), np.zeros(indices.shape, jax.dtypes.float0)))
        standalone = jax.jit(case.backward)(g, x, indices)
        gather = jax.jit(partial(case.backward, algorithm="gather"))(g, x, indices)
    want_values, want_indices = case.oracle(x)
    n = _mismatches(values, want_values)
    row("values == oracle (mismatches)", n, n == 0)
    n = _mismatches(indices, want_indices)
    row("indices == oracle (mismatches)", n, n == 0 and indices.dtype == np.int32)
    spatial = case.shape[-case.nd :]
    want_grad = reference.scatter_add(g, want_indices, spatial)
    bound = _grad_bound(g, want_indices, spatial, dtype, want_grad)
    err = np.abs(np.asarray(grad, np.float64) - want_grad)
    row(
        "grad vs float64 scatter (max abs err)",
        err.max(initial=0.0),
        bool((err <= bound).all()),
    )
    # Not bitwise against the vjp: on GPU, a scatter-add of overlapping
    # windows sums in a varying order (the "gather" algorithm does not).
    for name, result in (("backward op", standalone), ("gather backward", gather)):
        err = np.abs(np.asarray(result, np.float64) - want_grad)
        check = f"{name} vs float64 scatter (max abs err)"
        row(check, err.max(initial=0.0), bool((err <= bound).all()))
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
        out, vjp = jax.vjp(
            jax.jit(lambda v: case.fn(v, jnp.asarray(indices))), jnp.asarray(values)
        )
        ct = rng.standard_normal(out.shape).astype(values.dtype)
        (grad,) = vjp(jnp.asarray(ct))
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
    cases = [case for op in ops for case in OPS[op](quick)]
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
