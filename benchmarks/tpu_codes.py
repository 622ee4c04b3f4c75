"""Tap numbers or indices in the TPU's dense backward at stride 1, on a
compile-only v5e (no TPU needed; the ``aot`` extra's libtpu):

    JAX_PLATFORMS=cpu python benchmarks/tpu_codes.py [--quick]

With stride phases the dense backward (``jaxpool._tpu.covering_sum``)
compares each window's int8 tap number; at stride 1 it reads tap numbers only
where ``_tpu.coded`` says so, channels-last 2-D pools, and the int32 indices
elsewhere. Each stride-1 train step here (``jax.grad`` of ``"auto"``) is
compiled both ways, beside ``jax.grad`` through ``lax.reduce_window``: XLA's
TPU cost model's bytes accessed, estimates, not timings. The performance
page's table ("Tap numbers at stride 1") is this script's output.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp

from jaxpool import _tpu
from jaxpool._args import PoolArgs
from jaxpool._spec import pool_spec

sys.path.insert(0, str(Path(__file__).resolve().parent))
import compiled

LAST = {"channels_last": True}
# (label, shape, (kernel, stride, padding), pool_programs' options)
SHAPES = [
    ("GoogLeNet 32x28²x256 k3 s1 p1 channels-last", (32, 28, 28, 256), (3, 1, 1), LAST),
    ("32x56²x64 k3 s1 p1 channels-last", (32, 56, 56, 64), (3, 1, 1), LAST),
    (
        "32x56²x64 k3 s1 p1 channels-last bfloat16",
        (32, 56, 56, 64),
        (3, 1, 1),
        {**LAST, "dtype": jnp.bfloat16},
    ),
    ("16x14²x512 k3 s1 p1 channels-last", (16, 14, 14, 512), (3, 1, 1), LAST),
    ("32x28²x256 k2 s1 channels-last", (32, 28, 28, 256), (2, 1, 0), LAST),
    (
        "32x28²x256 k3 s1 p1 channels-last bfloat16",
        (32, 28, 28, 256),
        (3, 1, 1),
        {**LAST, "dtype": jnp.bfloat16},
    ),
    ("32x112²x64 k3 s1 p1 channels-last", (32, 112, 112, 64), (3, 1, 1), LAST),
    ("8x224²x32 k5 s1 p2 channels-last", (8, 224, 224, 32), (5, 1, 2), LAST),
    ("2x32x96³ k3 s1 p1", (2, 32, 96, 96, 96), (3, 1, 1), {}),
    ("4x256x40³ k3 s1 p1", (4, 256, 40, 40, 40), (3, 1, 1), {}),
    ("2x32³x128 k3 s1 p1 channels-last", (2, 32, 32, 32, 128), (3, 1, 1), LAST),
    (
        "8x32x64³ k3 s1 p1 bfloat16",
        (8, 32, 64, 64, 64),
        (3, 1, 1),
        {"dtype": jnp.bfloat16},
    ),
    ("32x64x112² k3 s1 p1", (32, 64, 112, 112), (3, 1, 1), {}),
    ("1-D 32x128x4096 k3 s1 p1", (32, 128, 4096), (3, 1, 1), {}),
    ("1-D 256x64x1000 k3 s1 p1", (256, 64, 1000), (3, 1, 1), {}),
    ("1-D 8x512x256 k5 s1 p2", (8, 512, 256), (5, 1, 2), {}),
]
QUICK = [("2x9x112x64 k3 s1 p1 channels-last", (2, 9, 112, 64), (3, 1, 1), LAST)]


def measure(
    label: str, shape: tuple[int, ...], window: tuple[int, int, int], options: dict
) -> dict[str, Any]:
    """MB of the step by index and by tap number, and of the builtin's; and
    which of the two ``_tpu.coded`` takes."""
    programs = compiled.pool_programs(label, shape, *window, pallas=False, **options)
    by_name = {p.name: p for p in programs}

    def mb(name: str) -> float:
        program = by_name[f"{label} {name}"]
        facts = compiled.compile_for(*program.build("v5e"), "v5e")
        assert facts["compiled"], facts["error"]
        return facts["bytes_accessed"] / 1e6

    channels_last = options.get("channels_last", False)
    args = PoolArgs(*window, channels_last=channels_last)
    spec = pool_spec("tpu_codes", len(shape) - 2, shape, args)
    row: dict[str, Any] = {"program": label, "reduce_window": mb("reduce_window step")}
    row["taken"] = "by tap number" if _tpu.coded(spec) else "by index"
    rule = _tpu.coded
    try:
        for how, numbers in (("by index", False), ("by tap number", True)):
            # Stride phases read tap numbers either way.
            _tpu.coded = lambda spec, numbers=numbers: (
                numbers or any(w.stride > 1 for w in spec.axes)
            )
            jax.clear_caches()  # the kernels are traced once per spec
            row[how] = mb("step auto")
    finally:
        _tpu.coded = rule
        jax.clear_caches()
    return row


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a tiny shape")
    args = parser.parse_args(argv)
    print("| stride-1 train step `auto` | by index | by tap number | `reduce_window` |")
    print("|---|---|---|---|")
    for case in QUICK if args.quick else SHAPES:
        row = measure(*case)
        figures = [
            f"**{row[how]:,.0f}**" if how == row["taken"] else f"{row[how]:,.0f}"
            for how in ("by index", "by tap number")
        ]
        cells = [row["program"], *figures, f"{row['reduce_window']:,.0f}"]
        print("| " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
