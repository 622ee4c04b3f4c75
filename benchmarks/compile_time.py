"""How long a program with jaxpool takes to compile, against the same program
through ``lax.reduce_window``, on every target:

    JAX_PLATFORMS=cpu python benchmarks/compile_time.py \\
        --json benchmarks/results/compile_time.json \\
        --markdown benchmarks/results/compile_time.md

Seconds to trace, lower and compile ``jax.jit(fn)`` (JAX's caches cleared
before each, so every run pays what a new process pays), jaxpool's program and
the builtin's interleaved, the minimum of ``--repeats`` runs; and the size of
each optimized program (its HLO instructions, fused computations included).
Targets: ``cpu`` (XLA:CPU, one device), ``h200`` and ``v5e`` (the
compile-only H200 and TPU v5e of ``compiled.py``, the ``aot`` extra), and
``mesh`` (XLA:CPU, 8 host devices, the first spatial axis sharded over them,
``jax.set_mesh`` with Auto axes; run in a subprocess of its own, since the
device count is set before JAX starts). Compile-only targets compile real
programs, but nothing runs: these are compile times, not run times.

Programs (``PROGRAMS``): the forward and the train step
(``jax.value_and_grad(sum(w * pool(x)))``) of 1-, 2- and 3-D pools at k2 s2,
k3 s2 p1, k3 s1 p1, k7 s1 p3 and k3 s1 p1 dilation 2; of adaptive pools
whose windows have one size and two, 2-D and 3-D; of fractional pools, 2-D
and 3-D; the standalone backward, a Hessian-vector product, pool then unpool
(SegNet) and per-example gradients (``vmap`` of ``grad``) at batch 64 and
512. The builtin of an adaptive or fractional pool is the strided pool of
its largest window, of the stride nearest its windows' steps: no builtin
adaptive pool exists; of a dilated pool, the same pool undilated (JAX
differentiates no dilated max pool). ``benchmarks/targets/program_size.json`` holds the
instruction counts that ``tests/test_compiled.py`` holds the programs to
(``--budgets`` writes it from a run).
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import platform
import re
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

if "--child-mesh" in sys.argv:  # the mesh target: 8 host devices, set first
    os.environ["XLA_FLAGS"] = (
        os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"
    )
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")

import jax
import jax.numpy as jnp
from jax import lax
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import jaxpool

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import compiled  # noqa: E402  (compile-only devices: compiled.device)

TARGETS = ("cpu", "h200", "v5e", "mesh")
BUDGETS = HERE / "targets" / "program_size.json"
# A program within this many seconds of compile time passes whatever the ratio.
FLOOR = 0.5

Fn = Callable[..., Any]
# (shape, dtype) of each argument; the target places them.
Args = list[tuple[tuple[int, ...], Any]]


class Program(NamedTuple):
    """A program and the builtin it is compared with: ``(fn, args)`` each."""

    name: str
    jaxpool: tuple[Fn, Args]
    builtin: tuple[Fn, Args]


# ------------------------------------------------------------------ programs


def _pool_op(nd: int) -> Fn:
    return getattr(jaxpool, f"max_pool{nd}d_with_argmax")


def _reduce_window(
    nd: int, kernel: int | tuple, stride: int | tuple, padding: int, dilation: int = 1
) -> Fn:
    """``lax.reduce_window``'s max pool of ``nd`` spatial axes (N, C first)."""
    window = kernel if isinstance(kernel, tuple) else (kernel,) * nd
    strides = stride if isinstance(stride, tuple) else (stride,) * nd

    def pool(x: jax.Array) -> jax.Array:
        return lax.reduce_window(
            x,
            -jnp.inf,
            lax.max,
            (1, 1, *window),
            (1, 1, *strides),
            ((0, 0), (0, 0), *((padding, padding),) * nd),
            window_dilation=(1, 1, *(dilation,) * nd),
        )

    return pool


def _step(values_of: Fn) -> Fn:
    """A train step: ``jax.value_and_grad(sum(w * values_of(x)))`` in ``x``."""

    def loss(x: jax.Array, w: jax.Array) -> jax.Array:
        return jnp.sum(w * values_of(x))

    return jax.value_and_grad(loss)


def _pair(
    name: str, shape: tuple[int, ...], out: tuple[int, ...], ours: Fn, builtin: Fn
) -> list[Program]:
    """The forward and the train step of one pool, ``ours`` returning
    ``(values, indices)``, ``builtin`` the values; ``out``: the shapes of
    ``ours``' and the builtin's values (the steps' ``w``)."""
    x = (shape, jnp.float32)
    ours_out, builtin_out = out
    return [
        Program(f"{name} forward", (ours, [x]), (builtin, [x])),
        Program(
            f"{name} step",
            (_step(lambda x: ours(x)[0]), [x, (ours_out, jnp.float32)]),
            (_step(builtin), [x, (builtin_out, jnp.float32)]),
        ),
    ]


def _pooled(fn: Fn, shape: tuple[int, ...]) -> tuple[int, ...]:
    """The shape of ``fn``'s values (its first result, or itself)."""
    result = jax.eval_shape(fn, jax.ShapeDtypeStruct(shape, jnp.float32))
    return (result[0] if isinstance(result, tuple) else result).shape


SHAPES = {1: (8, 16, 512), 2: (8, 16, 64, 64), 3: (2, 16, 32, 32, 32)}
# (label, kernel, stride, padding, dilation)
WINDOWS = (
    ("k2 s2", 2, 2, 0, 1),
    ("k3 s2 p1", 3, 2, 1, 1),
    ("k3 s1 p1", 3, 1, 1, 1),
    ("k7 s1 p3", 7, 1, 3, 1),
    ("k3 s1 p1 d2", 3, 1, 1, 2),
)


def _pools() -> list[Program]:
    programs = []
    for nd, shape in SHAPES.items():
        for label, k, s, p, d in WINDOWS:
            op = _pool_op(nd)

            def ours(x: jax.Array, op=op, k=k, s=s, p=p, d=d) -> Any:
                return op(x, k, s, p, dilation=d)

            # JAX differentiates no dilated max pool: the undilated one.
            builtin = _reduce_window(nd, k, s, p)
            out = (_pooled(ours, shape), _pooled(builtin, shape))
            programs += _pair(f"{nd}-D {label}", shape, out, ours, builtin)
    return programs


def _covering_builtin(nd: int, size: tuple[int, ...], out: tuple[int, ...]) -> Fn:
    """The strided pool of an adaptive pool's largest window, at the floor of
    its step: the builtin it is compared with."""
    kernel = tuple(-(-n // o) + (n % o != 0) for n, o in zip(size, out, strict=True))
    stride = tuple(max(1, n // o) for n, o in zip(size, out, strict=True))
    return _reduce_window(nd, kernel, stride, 0)


# (label, shape, output): windows of one size (50 -> 7: size 8, step 7; 32 ->
# 4: stride 8) and of two.
ADAPTIVE = (
    ("2-D adaptive one size 50² → 7²", (8, 64, 56, 50), (8, 7)),
    ("2-D adaptive two sizes 96x131 → 13x17", (2, 16, 96, 131), (13, 17)),
    ("3-D adaptive one size 32³ → 4³", (2, 16, 32, 32, 32), (4, 4, 4)),
    ("3-D adaptive two sizes 8³ → 3x5x3", (2, 3, 8, 8, 8), (3, 5, 3)),
)


def _adaptive() -> list[Program]:
    programs = []
    for label, shape, out in ADAPTIVE:
        nd = len(out)
        op = getattr(jaxpool, f"adaptive_max_pool{nd}d")

        def ours(x: jax.Array, op=op, out=out) -> Any:
            return op(x, out)

        builtin = _covering_builtin(nd, shape[2:], out)
        pooled = (_pooled(ours, shape), _pooled(builtin, shape))
        programs += _pair(label, shape, pooled, ours, builtin)
    return programs


FRACTIONAL = (
    ("2-D fractional k3 32² ratio 0.5", (8, 16, 32, 32)),
    ("3-D fractional k3 16³ ratio 0.5", (2, 16, 16, 16, 16)),
)


def _fractional() -> list[Program]:
    """The pool given its samples, an argument: drawing them from a key adds
    jax.random's own program (0.4 s to compile here), which any fractional
    pool pays, the same in both."""
    programs = []
    for label, shape in FRACTIONAL:
        nd = len(shape) - 2
        op = getattr(jaxpool, f"fractional_max_pool{nd}d")
        samples = ((*shape[:2], nd), jnp.float32)

        def ours(x: jax.Array, u: jax.Array, op=op) -> Any:
            return op(x, 3, output_ratio=0.5, samples=u)

        builtin = _reduce_window(nd, 3, 2, 0)
        x = (shape, jnp.float32)
        out = jax.eval_shape(
            ours,
            jax.ShapeDtypeStruct(shape, jnp.float32),
            jax.ShapeDtypeStruct(samples[0], jnp.float32),
        )[0].shape
        pooled = _pooled(builtin, shape)
        programs += [
            Program(f"{label} forward", (ours, [x, samples]), (builtin, [x])),
            Program(
                f"{label} step",
                (
                    _step2(lambda x, u, op=op: ours(x, u, op)[0]),
                    [x, (out, jnp.float32), samples],
                ),
                (_step(builtin), [x, (pooled, jnp.float32)]),
            ),
        ]
    return programs


def _step2(values_of: Fn) -> Fn:
    """:func:`_step` of a pool that takes its samples too: ``(x, w, u)``."""

    def loss(x: jax.Array, w: jax.Array, u: jax.Array) -> jax.Array:
        return jnp.sum(w * values_of(x, u))

    return jax.value_and_grad(loss)


def _composites() -> list[Program]:
    """The standalone backward, a Hessian-vector product, pool then unpool,
    per-example gradients."""
    shape, window = SHAPES[3], (3, 2, 1)
    x = (shape, jnp.float32)
    pool = lambda x: jaxpool.max_pool3d_with_argmax(x, *window)  # noqa: E731
    builtin = _reduce_window(3, *window)
    out = _pooled(pool, shape)

    def backward(g: jax.Array, i: jax.Array) -> jax.Array:
        like = jax.ShapeDtypeStruct(shape, jnp.float32)
        return jaxpool.max_pool3d_with_argmax_backward(g, like, i, *window)

    def builtin_backward(x: jax.Array, g: jax.Array) -> jax.Array:
        return jax.vjp(builtin, x)[1](g)[0]

    def hvp(values_of: Fn) -> Fn:
        grad = jax.grad(lambda x: jnp.sum(values_of(x) ** 2))
        return lambda x, v: jax.jvp(grad, (x,), (v,))[1]

    def unpool_ours(x: jax.Array) -> jax.Array:
        y, i = jaxpool.max_pool3d_with_argmax(x, 2)
        return jaxpool.max_unpool3d(y, i, 2)

    def unpool_builtin(x: jax.Array) -> jax.Array:
        # JAX's idiom: the pooled values at their argmax, the pool's VJP.
        y, vjp = jax.vjp(_reduce_window(3, 2, 2, 0), x)
        return vjp(y)[0]

    def per_example(values_of: Fn) -> Fn:
        def loss(x: jax.Array) -> jax.Array:
            return jnp.sum(values_of(x[None]) ** 2)

        return jax.vmap(jax.grad(loss))

    image = (16, 32, 32)  # (C, H, W) of one example
    programs = [
        Program(
            "3-D k3 s2 p1 backward",
            (backward, [(out, jnp.float32), (out, jnp.int32)]),
            (builtin_backward, [x, (out, jnp.float32)]),
        ),
        Program(
            "3-D k3 s2 p1 Hessian-vector product",
            (hvp(lambda x: pool(x)[0]), [x, x]),
            (hvp(builtin), [x, x]),
        ),
        Program(
            "3-D k2 s2 pool then unpool step",
            (_step(unpool_ours), [x, x]),
            (_step(unpool_builtin), [x, x]),
        ),
    ]
    for batch in (64, 512):
        args = [((batch, *image), jnp.float32)]
        ours = per_example(lambda x: jaxpool.max_pool2d_with_argmax(x, 3, 2, 1)[0])
        programs.append(
            Program(
                f"2-D k3 s2 p1 per-example gradients, batch {batch}",
                (ours, args),
                (per_example(_reduce_window(2, 3, 2, 1)), args),
            )
        )
    return programs


def programs() -> list[Program]:
    """Every program of the table, in its order."""
    return [*_pools(), *_adaptive(), *_fractional(), *_composites()]


# ------------------------------------------------------------------ measuring


def _place(target: str, args: Args) -> list[jax.ShapeDtypeStruct]:
    """Abstract arguments on ``target``: one device, or under the mesh each
    argument's axis 2 (the first spatial axis: a volume's D) sharded over its
    8 devices."""
    if target == "cpu":
        return [jax.ShapeDtypeStruct(s, d) for s, d in args]
    if target == "mesh":  # an axis 2 that does not divide stays whole
        mesh = _MESH[0]
        split = lambda s: len(s) > 2 and s[2] % mesh.size == 0  # noqa: E731
        return [
            jax.ShapeDtypeStruct(
                s,
                d,
                sharding=NamedSharding(mesh, P(None, None, "d") if split(s) else P()),
            )
            for s, d in args
        ]
    return [compiled.on(target, s, d) for s, d in args]


_MESH: list[Any] = []


def instructions(hlo: str) -> int:
    """Instructions of an optimized HLO module, fused computations included."""
    return len(re.findall(r"^\s*(?:ROOT )?%?[\w.-]+ = ", hlo, re.M))


def measure(fn: Fn, args: Args, target: str) -> tuple[float, int]:
    """Seconds to trace, lower and compile ``jax.jit(fn)`` from cold caches,
    and the optimized program's instructions."""
    placed = _place(target, args)
    jax.clear_caches()
    start = time.perf_counter()
    executable = jax.jit(fn).trace(*placed).lower().compile()
    seconds = time.perf_counter() - start
    return seconds, instructions(executable.as_text())


def run(target: str, chosen: list[Program], repeats: int) -> list[dict[str, Any]]:
    """Each program's minimum seconds and size, jaxpool's and the builtin's,
    measured in turn ``repeats`` times."""
    times: dict[tuple[str, str], list[float]] = {}
    sizes: dict[tuple[str, str], int] = {}
    for _ in range(repeats):
        for program in chosen:
            for side in ("jaxpool", "builtin"):
                fn, args = getattr(program, side)
                seconds, size = measure(fn, args, target)
                times.setdefault((program.name, side), []).append(seconds)
                sizes[program.name, side] = size
    rows = []
    for program in chosen:
        ours, builtin = (min(times[program.name, s]) for s in ("jaxpool", "builtin"))
        rows.append(
            {
                "target": target,
                "program": program.name,
                "jaxpool_s": round(ours, 4),
                "builtin_s": round(builtin, 4),
                "ratio": round(ours / builtin, 3),
                "jaxpool_instructions": sizes[program.name, "jaxpool"],
                "builtin_instructions": sizes[program.name, "builtin"],
            }
        )
    return rows


def sizes(target: str, chosen: list[Program]) -> dict[str, int]:
    """Each program's optimized HLO instructions, jaxpool's side alone (what
    ``tests/test_compiled.py`` holds to :data:`BUDGETS`); the mesh's in a
    child process of 8 host devices."""
    if target == "mesh" and not _MESH:
        return mesh_child(["--sizes"], "|".join(re.escape(p.name) for p in chosen))
    found = {}
    for program in chosen:
        fn, args = program.jaxpool
        executable = jax.jit(fn).trace(*_place(target, args)).lower().compile()
        found[program.name] = instructions(executable.as_text())
    return found


def mesh_child(options: list[str], pattern: str) -> Any:
    """What this script prints as the mesh target's child process (8 host
    devices) given ``options``, parsed from its JSON."""
    command = [sys.executable, __file__, "--child-mesh", *options]
    command += ["--programs", pattern]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode:
        raise RuntimeError(f"compile_time.py: the mesh child failed:\n{done.stderr}")
    return json.loads(done.stdout)


def within(row: dict[str, Any]) -> bool:
    """Whether a row meets the issue's bar: 2x the builtin, or at most
    :data:`FLOOR` seconds."""
    return row["ratio"] <= 2 or row["jaxpool_s"] <= FLOOR


def geomean(rows: list[dict[str, Any]]) -> float:
    return math.exp(sum(math.log(r["ratio"]) for r in rows) / len(rows))


def markdown(rows: list[dict[str, Any]], header: str) -> str:
    """The table, a column pair per target, and each target's summary."""
    targets = [t for t in TARGETS if any(r["target"] == t for r in rows)]
    names = list(dict.fromkeys(r["program"] for r in rows))
    by = {(r["target"], r["program"]): r for r in rows}
    lines = [header, ""]
    lines.append("| program | " + " | ".join(targets) + " |")
    lines.append("|---|" + "---|" * len(targets))
    for name in names:
        cells = []
        for t in targets:
            r = by.get((t, name))
            if r is None:
                cells.append("")
                continue
            mark = "" if within(r) else " **!**"
            cells.append(
                f"{r['jaxpool_s']:.2f} vs {r['builtin_s']:.2f} s ({r['ratio']:.2f}x)"
                f"{mark}; {r['jaxpool_instructions']} vs "
                f"{r['builtin_instructions']} instr."
            )
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines.append("")
    for t in targets:
        mine = [r for r in rows if r["target"] == t]
        over = [r["program"] for r in mine if not within(r)]
        lines.append(
            f"- {t}: geometric mean {geomean(mine):.2f}x over {len(mine)} programs; "
            f"{len(mine) - len(over)} within 2x or {FLOOR} s"
            + (f"; over: {', '.join(over)}" if over else "")
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--targets", default=",".join(TARGETS))
    parser.add_argument("--programs", default=".", help="a regex over the names")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--markdown", type=Path)
    parser.add_argument(
        "--budgets", action="store_true", help=f"update the measured rows in {BUDGETS}"
    )
    parser.add_argument(
        "--merge",
        action="store_true",
        help="the measured rows replace theirs in --json's file; the rest stay",
    )
    parser.add_argument(
        "--sizes", action="store_true", help="print jaxpool's programs' sizes alone"
    )
    parser.add_argument("--child-mesh", action="store_true", help=argparse.SUPPRESS)
    opts = parser.parse_args()
    chosen = [p for p in programs() if re.search(opts.programs, p.name)]
    if opts.child_mesh:
        _MESH.append(
            jax.make_mesh((8,), ("d",), axis_types=(jax.sharding.AxisType.Auto,))
        )
        with jax.set_mesh(_MESH[0]):
            if opts.sizes:
                print(json.dumps(sizes("mesh", chosen)))
            else:
                print(json.dumps(run("mesh", chosen, opts.repeats)))
        return
    if opts.sizes:
        found = {t: sizes(t, chosen) for t in opts.targets.split(",")}
        print(json.dumps(found, indent=1))
        return
    rows: list[dict[str, Any]] = []
    for target in opts.targets.split(","):
        if target == "mesh":
            found = mesh_child(["--repeats", str(opts.repeats)], opts.programs)
        else:
            if target != "cpu" and (why := compiled.available(target)):
                print(f"{target}: skipped ({why})", file=sys.stderr)
                continue
            found = run(target, chosen, opts.repeats)
        for r in found:
            print(
                f"{r['target']:5} {r['program']:52} {r['jaxpool_s']:6.2f} s vs "
                f"{r['builtin_s']:5.2f} s ({r['ratio']:5.2f}x)  "
                f"{r['jaxpool_instructions']:5} vs "
                f"{r['builtin_instructions']:4} instr.",
                flush=True,
            )
        rows += found
    measured = list(rows)
    today = datetime.date.today().isoformat()
    header = (
        f"Compile times (measured), {today}, jax {jax.__version__}, "
        f"{platform.machine()} {os.cpu_count()} cores; seconds to trace, lower "
        "and compile from cold caches, the minimum of "
        f"{opts.repeats} interleaved runs: jaxpool vs `lax.reduce_window`, and "
        "each optimized program's HLO instructions. `JAX_PLATFORMS=cpu python "
        "benchmarks/compile_time.py`. **!**: over 2x and over "
        f"{FLOOR} s. The h200 and v5e targets are compile-only: compile "
        "times, not run times."
    )
    if opts.merge and opts.json and opts.json.exists():
        before = json.loads(opts.json.read_text())
        fresh = {(r["target"], r["program"]): r for r in rows}
        header = (
            f"{before['header']} Rerun {today} (`--programs '{opts.programs}' "
            f"--targets {opts.targets}`): {len(fresh)} rows."
        )
        old = before["rows"]  # in their order, the measured ones replaced
        rows = [fresh.pop((r["target"], r["program"]), r) for r in old]
        rows += fresh.values()
    if opts.json:
        opts.json.write_text(json.dumps({"header": header, "rows": rows}, indent=1))
    if opts.markdown:
        opts.markdown.write_text(markdown(rows, header))
    if opts.budgets:
        # The rows measured replace theirs; the rest of the file stays (not
        # the merged table's counts, which may be older than the budgets).
        budgets: dict[str, dict[str, int]] = json.loads(BUDGETS.read_text())
        for r in measured:
            budgets.setdefault(r["target"], {})[r["program"]] = r[
                "jaxpool_instructions"
            ]
        BUDGETS.write_text(json.dumps(budgets, indent=1, sort_keys=True) + "\n")
    print(markdown(rows, header))


if __name__ == "__main__":
    main()
