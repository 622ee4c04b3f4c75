"""A volume split across devices: what jaxpool's train step moves and holds
per device, against ``lax.reduce_window``'s, as the device count grows.

    python benchmarks/sharded.py                 # the table, 1-8 host devices
    python benchmarks/sharded.py --quick         # a small volume
    python benchmarks/sharded.py --json benchmarks/results/sharded.json \\
        --markdown benchmarks/results/sharded.md --plot docs/assets/sharded.png

The step is ``jax.value_and_grad(sum(w * pool(x)))``, ``x`` and ``w`` sharded
along D over the first ``n`` of 8 host devices (``jax.set_mesh``, Auto axes),
compiled by XLA:CPU: per device, its temporaries and outputs (XLA's memory
analysis) and the collectives it runs (op, shape, bytes). Then the same step
compiled for a compile-only TPU v5e 2x2, D over its 4 chips: the cost model's
bytes per chip (an estimate, not a timing). The device count flag takes
effect before JAX starts, so the script sets it itself.
"""

from __future__ import annotations

import os

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import argparse
import json
import math
import re
import sys
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

import jaxpool

# (N, C, D, H, W) float32: 128 MiB, the volume; --quick: 2 MiB.
SHAPE = (2, 16, 256, 64, 64)
QUICK = (2, 4, 64, 32, 32)
WINDOW = (3, 2, 1)  # kernel, stride, padding
DEVICES = (1, 2, 4, 8)

COLLECTIVE = re.compile(
    r"=\s*(?P<type>\(.*?\)|\S+)\s+(?P<op>all-gather|all-to-all|collective-permute"
    r"|reduce-scatter|all-reduce)(?P<start>-start)?\("
)
ITEM = {
    "f64": 8,
    "f32": 4,
    "s32": 4,
    "u32": 4,
    "bf16": 2,
    "f16": 2,
    "s16": 2,
    "s8": 1,
    "pred": 1,
}


def collectives(hlo: str) -> list[dict[str, Any]]:
    """Each collective of a compiled program: its op, the arrays it delivers
    (``shapes``: ``(dtype, dims)``; of an asynchronous ``-start``, whose type
    is the tuple (operand, result, context), the result alone) and their
    bytes (per device)."""
    found = []
    for line in hlo.splitlines():
        m = COLLECTIVE.search(line)
        if m is None:
            continue
        shapes = [
            (t, [int(d) for d in dims.split(",") if d])
            for t, dims in re.findall(r"(\w+)\[([\d,]*)\]", m["type"])
        ]
        if m["start"] and m["type"].startswith("("):
            shapes = shapes[1:2]
        size = sum(ITEM.get(t, 4) * math.prod(dims) for t, dims in shapes)
        found.append(
            {"op": m["op"], "type": m["type"][:80], "shapes": shapes, "bytes": size}
        )
    return found


def pools(window: tuple[int, int, int]) -> dict[str, Callable[..., Any]]:
    """jaxpool's values, and ``lax.reduce_window``'s, of a 3-D pool."""
    k, s, p = window

    def builtin(x: jax.Array) -> jax.Array:
        pads = [(0, 0), (0, 0), *[(p, p)] * 3]
        dims, steps = (1, 1, k, k, k), (1, 1, s, s, s)
        return jax.lax.reduce_window(x, -jnp.inf, jax.lax.max, dims, steps, pads)

    return {
        "jaxpool": lambda x: jaxpool.max_pool3d_with_argmax(x, k, s, p)[0],
        "reduce_window": builtin,
    }


def _step(pool: Callable[..., Any]) -> Callable[..., Any]:
    return jax.jit(jax.value_and_grad(lambda x, w: jnp.sum(w * pool(x))))


def _compiled(pool: Callable[..., Any], shape: tuple[int, ...], mesh: Any) -> Any:
    """The step compiled under the mesh, input and weights sharded along D."""
    sharding = NamedSharding(mesh, P(None, None, "d"))
    out = jax.eval_shape(pool, jax.ShapeDtypeStruct(shape, jnp.float32))
    args = [
        jax.ShapeDtypeStruct(s.shape, jnp.float32, sharding=sharding)
        for s in (jax.ShapeDtypeStruct(shape, jnp.float32), out)
    ]
    with jax.set_mesh(mesh):
        return _step(pool).lower(*args).compile()


def measure(shape: tuple[int, ...], window: tuple[int, int, int], devices: int):
    """The rows of one device count: per contender, per device, the step's
    temporaries and outputs (MiB) and its collectives."""
    mesh = jax.make_mesh(
        (devices,), ("d",), axis_types=(AxisType.Auto,), devices=jax.devices()[:devices]
    )
    rows = []
    for name, pool in pools(window).items():
        compiled = _compiled(pool, shape, mesh)
        memory = compiled.memory_analysis()
        moves = collectives(compiled.as_text())
        rows.append(
            {
                "contender": name,
                "devices": devices,
                "temp_mib": memory.temp_size_in_bytes / 2**20,
                "output_mib": memory.output_size_in_bytes / 2**20,
                "collectives": moves,
                "moved_mib": sum(m["bytes"] for m in moves) / 2**20,
            }
        )
    return rows


def tpu_rows(shape: tuple[int, ...], window: tuple[int, int, int]) -> list[dict]:
    """The step compiled for a compile-only TPU v5e 2x2, D over its 4 chips:
    XLA's cost model's bytes per chip, temporaries and collectives."""
    from jax.experimental import topologies

    topology = topologies.get_topology_desc("v5e:2x2", "tpu")
    mesh = jax.sharding.Mesh(np.array(topology.devices), ("d",), (AxisType.Auto,))
    rows = []
    for name, pool in pools(window).items():
        compiled = _compiled(pool, shape, mesh)
        cost = compiled.cost_analysis()
        cost = cost[0] if isinstance(cost, list) else cost
        moves = collectives(compiled.as_text())
        rows.append(
            {
                "contender": name,
                "chips": len(topology.devices),
                "bytes_accessed_mb": cost["bytes accessed"] / 1e6,
                "temp_mib": compiled.memory_analysis().temp_size_in_bytes / 2**20,
                "collectives": moves,
                "moved_mib": sum(m["bytes"] for m in moves) / 2**20,
            }
        )
    return rows


def markdown(shape, window, rows, tpu) -> str:
    k, s, p = window
    volume = "x".join(map(str, shape))
    lines = [
        f"Step `value_and_grad(sum(w * pool(x)))`, float32 {volume}, k{k} s{s} p{p},"
        " D sharded (Auto axes); per device, XLA:CPU's memory analysis (MiB) and"
        " the bytes its collectives move.",
        "",
        "| devices | jaxpool: temporaries + outputs | moved | collectives |"
        " `reduce_window`: temporaries + outputs | moved | collectives |",
        "|---|---|---|---|---|---|---|",
    ]
    for n in sorted({r["devices"] for r in rows}):
        cells = []
        for name in ("jaxpool", "reduce_window"):
            (r,) = [r for r in rows if r["devices"] == n and r["contender"] == name]
            ops = sorted({m["op"] for m in r["collectives"]})
            cells.append(
                f"{r['temp_mib']:,.0f} + {r['output_mib']:,.0f} | "
                f"{r['moved_mib']:,.2f} | {', '.join(ops) or 'none'}"
            )
        lines.append(f"| {n} | {cells[0]} | {cells[1]} |")
    if tpu:
        lines += [
            "",
            "Compiled for a compile-only TPU v5e 2x2, D over its 4 chips: XLA's "
            "cost model, per chip (estimates, not timings).",
            "",
            "| contender | bytes accessed (MB) | temporaries (MiB) | moved (MiB) "
            "| collectives |",
            "|---|---|---|---|---|",
        ]
        for r in tpu:
            ops = sorted({m["op"] for m in r["collectives"]})
            lines.append(
                f"| {r['contender']} | {r['bytes_accessed_mb']:,.0f} | "
                f"{r['temp_mib']:,.0f} | {r['moved_mib']:,.2f} | {', '.join(ops)} |"
            )
    return "\n".join(lines) + "\n"


def plot(rows, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.6))
    for name, style in (("jaxpool", "o-"), ("reduce_window", "s--")):
        mine = sorted(
            (r for r in rows if r["contender"] == name), key=lambda r: r["devices"]
        )
        ax.plot(
            [r["devices"] for r in mine],
            [r["temp_mib"] + r["output_mib"] for r in mine],
            style,
            label=name if name == "jaxpool" else "jax.grad through lax.reduce_window",
        )
    ax.set_xscale("log", base=2)
    ax.set_yscale("log", base=2)
    ax.set_xticks(DEVICES, [str(n) for n in DEVICES])
    ax.set_xlabel("devices (D split among them)")
    ax.set_ylabel("MiB per device")
    ax.set_title("Train step's temporaries + outputs per device")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a small volume")
    parser.add_argument("--no-tpu", action="store_true", help="skip the v5e rows")
    parser.add_argument("--json")
    parser.add_argument("--markdown")
    parser.add_argument("--plot")
    args = parser.parse_args(argv)
    if jax.device_count() < max(DEVICES):
        sys.exit(f"needs {max(DEVICES)} devices, got {jax.device_count()}")
    shape = QUICK if args.quick else SHAPE
    rows = [r for n in DEVICES for r in measure(shape, WINDOW, n)]
    tpu = [] if args.no_tpu else tpu_rows(shape, WINDOW)
    table = markdown(shape, WINDOW, rows, tpu)
    print(table)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(table)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"shape": shape, "window": WINDOW, "rows": rows, "tpu": tpu}, f)
    if args.plot:
        plot(rows, args.plot)


if __name__ == "__main__":
    main()
