"""Shared benchmark helpers: interleaved timing, medians, memory bandwidth.

Every function timed takes its arrays as arguments (a closed-over array is a
constant XLA may fold) and is jitted (baselines too); each is called once to
compile before timing. Runs are interleaved (A, B, C, A, B, C, ...) so that
machine noise hits every contender alike, and medians are reported with the
min-max range.
"""

from __future__ import annotations

import os

# torch's OpenMP threads spin-wait after each call by default, stealing the
# core that XLA's next (interleaved) call runs on: make them sleep instead.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

# Where torch's tensors live ("cpu" or "cuda"), set by --torch-device; CUDA
# calls are asynchronous, so timing waits for them.
TORCH = {"device": "cpu", "sync": None}
# jaxpool's implementations to time, set by --implementations: "xla" (the
# default's on every platform) and "pallas" (the Triton kernels; on CPU their
# interpreter, which only checks that the script runs).
IMPLEMENTATIONS = ["xla"]


class Timing(NamedTuple):
    median: float  # seconds
    low: float
    high: float

    def ms(self) -> str:
        return (
            f"{self.median * 1e3:8.3f} ms [{self.low * 1e3:.3f}-{self.high * 1e3:.3f}]"
        )


def _ready(out: Any) -> Any:
    """Wait for JAX results; torch CPU calls are synchronous already."""
    leaves = jax.tree_util.tree_leaves(out)
    for leaf in leaves:
        if isinstance(leaf, jax.Array):
            leaf.block_until_ready()
    if TORCH["sync"] is not None:
        TORCH["sync"]()
    return out


def queue_depth() -> int:
    """Calls queued per sample: on an accelerator 10, back to back with one
    wait at the end, so that a sample times the device and not one call's
    dispatch (0.1-0.27 ms through the PJRT C API on the lent H200, jax 0.11.2,
    2026-12-04: as long as a 256 MiB pool's kernels there); on a CPU 1."""
    return 1 if jax.devices()[0].platform == "cpu" else 10


def interleaved(
    fns: Sequence[Callable[[], Any]], reps: int, warmup: int = 2
) -> list[Timing]:
    """Time each zero-argument callable ``reps`` times, round-robin; each
    sample is the time per call of :func:`queue_depth` calls."""
    for fn in fns:
        for _ in range(warmup):
            _ready(fn())
    queue = queue_depth()
    samples: list[list[float]] = [[] for _ in fns]
    for _ in range(reps):
        for i, fn in enumerate(fns):
            start = time.perf_counter()
            for _ in range(queue - 1):
                fn()  # its outputs are freed once written
            _ready(fn())
            samples[i].append((time.perf_counter() - start) / queue)
    return [Timing(statistics.median(s), min(s), max(s)) for s in samples]


def copy_bandwidth(nbytes: int = 256 * 2**20, reps: int = 5) -> float:
    """Measured memory-copy bandwidth in bytes/s (bytes read + written): the
    roofline of a kernel that reads and writes each byte once. On CPU a NumPy
    copy on one thread into a preallocated warm buffer; on an accelerator a
    jitted ``x + 1`` on the device, on 4x ``nbytes`` and its calls queued
    (:func:`queue_depth`): one 256 MiB call timed the dispatch, 936 and 278
    GB/s on the lent H200 on 2026-12-04, not its 4 TB/s."""
    if jax.devices()[0].platform != "cpu":
        nbytes *= 4
        x = jnp.ones(nbytes // 4, jnp.float32)
        add = jax.jit(lambda x: x + 1)
        (t,) = interleaved([lambda: add(x)], reps)
        return 2 * nbytes / t.median
    src = np.ones(nbytes // 4, np.float32)
    dst = np.empty_like(src)
    (t,) = interleaved([lambda: np.copyto(dst, src)], reps)
    return 2 * nbytes / t.median


def nbytes(*arrays: Any) -> int:
    return sum(int(np.prod(a.shape)) * np.dtype(a.dtype).itemsize for a in arrays)


def torch_threads(torch: Any, n: int, fn: Callable[[], Any]) -> Callable[[], Any]:
    """``fn`` run with torch limited to ``n`` threads."""

    def run() -> Any:
        old = torch.get_num_threads()
        torch.set_num_threads(n)
        try:
            return fn()
        finally:
            torch.set_num_threads(old)

    return run


def bench_op(
    name: str,
    x_np: np.ndarray,
    pool: Callable[..., Any],
    backward: Callable[..., Any],
    torch_pool: Callable[[Any], Any] | None,
    torch_backward: Callable[[Any, Any, Any], Any] | None,
    baseline_pool: Callable[[Any], Any] | None,
    reps: int,
    torch: Any,
    bandwidth: float,
) -> list[dict[str, Any]]:
    """All figures of one op on one input.

    ``pool(x, **kw) -> (values, indices)`` and ``backward(g, x_struct,
    indices, **kw)`` are jaxpool's (``kw``: ``algorithm``, ``implementation``);
    ``torch_pool(xt)`` and ``torch_backward(gt, xt, it)`` torch's;
    ``baseline_pool(x) -> values`` is a JAX-autodiff baseline for the train
    step (None: no such figure).
    """
    rng = np.random.default_rng(0)
    x = jnp.asarray(x_np)
    fwd = jax.jit(lambda x: pool(x))
    values, indices = fwd(x)
    g = jnp.asarray(rng.standard_normal(values.shape).astype(x_np.dtype))
    x_struct = jax.ShapeDtypeStruct(x.shape, x.dtype)
    bwd = {
        a: jax.jit(lambda g, i, a=a: backward(g, x_struct, i, algorithm=a))
        for a in ("scatter", "gather")
    }
    rows: list[dict[str, Any]] = []

    def add(figure: str, contender: str, timing: Timing, base: Timing, moved: int):
        rows.append(
            dict(
                shape=name,
                figure=figure,
                contender=contender,
                median_ms=timing.median * 1e3,
                low_ms=timing.low * 1e3,
                high_ms=timing.high * 1e3,
                ratio=timing.median / base.median,
                gbps=moved / timing.median / 1e9,
                roofline=moved / timing.median / bandwidth,
            )
        )

    def figure(title: str, fns: dict[str, Callable[[], Any]], base: str, moved: int):
        timings = dict(zip(fns, interleaved(list(fns.values()), reps), strict=True))
        for contender, t in timings.items():
            add(title, contender, t, timings[base], moved)

    fwd_fns: dict[str, Callable[[], Any]] = {"jaxpool": lambda: fwd(x)}
    bwd_fns: dict[str, Callable[[], Any]] = {
        f"jaxpool {a}": (lambda a=a: bwd[a](g, indices)) for a in bwd
    }
    step_fns: dict[str, Callable[[], Any]] = {}
    if "pallas" in IMPLEMENTATIONS:
        pallas = dict(implementation="pallas")
        fwd_pallas = jax.jit(lambda x: pool(x, **pallas))
        bwd_pallas = jax.jit(
            lambda g, i: backward(g, x_struct, i, algorithm="gather", **pallas)
        )
        fwd_fns["jaxpool pallas"] = lambda: fwd_pallas(x)
        bwd_fns["jaxpool pallas"] = lambda: bwd_pallas(g, indices)
    if torch is not None and torch_pool is not None and torch_backward is not None:
        xt = torch.from_numpy(x_np).to(TORCH["device"])
        _, it = torch_pool(xt)
        gt = torch.from_numpy(np.array(g)).to(TORCH["device"])
        fwd_fns["torch"] = lambda: torch_pool(xt)
        bwd_fns["torch"] = lambda: torch_backward(gt, xt, it)
        if TORCH["device"] == "cpu":
            fwd_fns["torch 1 thread"] = torch_threads(torch, 1, fwd_fns["torch"])
            bwd_fns["torch 1 thread"] = torch_threads(torch, 1, bwd_fns["torch"])
    with_torch = "torch" in fwd_fns
    figure(
        "forward",
        fwd_fns,
        "torch" if with_torch else "jaxpool",
        nbytes(x, values, indices),
    )
    figure(
        "backward",
        bwd_fns,
        "torch" if with_torch else "jaxpool scatter",
        nbytes(g, indices, x),
    )
    if baseline_pool is not None:

        def step_of(f: Callable[[Any], Any]) -> Callable[..., Any]:
            return jax.jit(jax.grad(lambda x, w: jnp.sum(w * f(x))))

        step = step_of(lambda x: pool(x)[0])
        step_rw = step_of(baseline_pool)
        step_fns["jaxpool"] = lambda: step(x, g)
        # Every backward "auto" may choose, so that one run settles the choice.
        for a in ("scatter", "gather"):
            step_a = step_of(lambda x, a=a: pool(x, algorithm=a)[0])
            step_fns[f"jaxpool {a}"] = lambda step_a=step_a: step_a(x, g)
        if "pallas" in IMPLEMENTATIONS:
            step_pallas = step_of(lambda x: pool(x, implementation="pallas")[0])
            step_fns["jaxpool pallas"] = lambda: step_pallas(x, g)
        step_fns["lax.reduce_window"] = lambda: step_rw(x, g)
        figure(
            "train step",
            step_fns,
            "lax.reduce_window",
            nbytes(x, values, indices, g, indices, x),
        )
    memory = fwd.lower(x).compile().memory_analysis()
    temp = float(getattr(memory, "temp_size_in_bytes", float("nan")))
    rows.append(
        dict(
            shape=name,
            figure="forward temp memory",
            contender="jaxpool",
            temp_bytes=temp,
            input_bytes=nbytes(x),
            ratio=temp / nbytes(x),
        )
    )
    return rows


def print_rows(rows: list[dict[str, Any]]) -> None:
    print(
        f"{'shape':<28} {'figure':<20} {'contender':<18} {'median':>10} "
        f"{'min-max':>19} {'ratio':>7} {'GB/s':>7} {'roofline':>8}"
    )
    for r in rows:
        if "median_ms" in r:
            print(
                f"{r['shape']:<28} {r['figure']:<20} {r['contender']:<18} "
                f"{r['median_ms']:8.3f}ms {r['low_ms']:8.3f}-{r['high_ms']:<8.3f}ms "
                f"{r['ratio']:6.2f}x {r['gbps']:7.2f} {r['roofline']:7.0%}"
            )
        elif "temp_bytes" in r:
            print(
                f"{r['shape']:<28} {r['figure']:<20} {r['contender']:<18} "
                f"temp {r['temp_bytes'] / 2**20:.2f} MiB = {r['ratio']:.2f}x input"
            )


def header(torch: Any, bandwidth: float) -> dict[str, Any]:
    """Print and return the run's date, machine and versions."""
    import platform
    import time

    meta = dict(
        date=time.strftime("%Y-%m-%d"),
        jax=jax.__version__,
        backend=jax.devices()[0].platform,
        torch=getattr(torch, "__version__", None),
        torch_threads=torch.get_num_threads() if torch is not None else None,
        cpus=os.cpu_count(),
        machine=platform.machine(),
        bandwidth_gbps=bandwidth / 1e9,
    )
    print(", ".join(f"{k}={v}" for k, v in meta.items()))
    return meta


def main(
    description: str,
    cases: Callable[..., list[dict[str, Any]]],
    shapes: list[Any],
    quick_shapes: list[Any],
    argv: list[str] | None = None,
    extra: Callable[[], list[dict[str, Any]]] | None = None,
    large_shapes: list[Any] | None = None,
) -> None:
    """The command line shared by the benchmark scripts.

    ``cases(shapes, dtype, reps, torch, bandwidth)`` returns the rows;
    ``extra()`` (full runs only) adds rows measured otherwise, printed as is.
    """
    import argparse
    import ast
    import json
    from pathlib import Path

    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--quick", action="store_true", help="tiny shapes, 3 reps")
    parser.add_argument("--reps", type=int, default=30)
    parser.add_argument("--dtype", default="float32", choices=["float32", "float64"])
    parser.add_argument("--no-torch", action="store_true")
    parser.add_argument("--json", metavar="PATH", help="also write the rows here")
    parser.add_argument(
        "--case",
        action="append",
        type=ast.literal_eval,
        help="a case in the script's SHAPES format, as a Python literal "
        "(repeatable; replaces the tracked shapes)",
    )
    parser.add_argument(
        "--large",
        action="store_true",
        help="the accelerator shapes (hundreds of MB: small ones only time launches)",
    )
    parser.add_argument("--torch-device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument(
        "--implementations",
        default="xla",
        help="jaxpool's implementations to time, comma-separated: xla, pallas",
    )
    args = parser.parse_args(argv)
    IMPLEMENTATIONS[:] = args.implementations.split(",")
    torch = None
    if not args.no_torch:
        try:
            import torch
        except ImportError:
            print("torch not installed: no torch rows")
    if torch is not None and args.torch_device == "cuda":
        TORCH.update(device="cuda", sync=torch.cuda.synchronize)
    if args.dtype == "float64":
        jax.config.update("jax_enable_x64", True)
    reps = 3 if args.quick else args.reps
    bandwidth = copy_bandwidth(2**20 if args.quick else 256 * 2**20)
    meta = header(torch, bandwidth)
    chosen = quick_shapes if args.quick else large_shapes if args.large else shapes
    rows = cases(args.case or chosen, args.dtype, reps, torch, bandwidth)
    print_rows(rows)
    if extra is not None and not args.quick and not args.case:
        for row in extra():
            rows.append(row)
            print(row["text"])
    if args.json:
        Path(args.json).write_text(json.dumps(dict(meta=meta, rows=rows), indent=1))
