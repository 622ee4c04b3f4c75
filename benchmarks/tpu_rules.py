"""Three rules of the TPU's forms (``jaxpool._tpu.layout``), each measured
both ways on a compile-only v5e (no TPU needed; the ``aot`` extra's libtpu):

    JAX_PLATFORMS=cpu python benchmarks/tpu_rules.py [--rule NAME] [--quick]

NAME: ``codes``, ``planes`` or ``rows`` (every rule by default).

- ``codes`` (``_tpu.layout.coded``): with stride phases the dense backward's
  sum compares each window's int8 tap number; at stride 1 it does only for
  channels-last 2-D pools, and reads the int32 indices elsewhere. Each
  stride-1 step compiled by index and by tap number.
- ``planes`` (``_tpu.layout.planes_minor``): the ``(n, c)`` planes stay in place
  where XLA lays the batch in the lanes (they are minor already). Each such
  step compiled with them moved behind the spatial axes and in place.
- ``rows`` (``_tpu.layout.row_windows``): a 1-D pool of disjoint windows over
  planes and an axis that fill whole rows of the TPU's tiles is reduced in
  those rows. Each such forward and step compiled along the whole axis and
  in rows, with its seconds to compile: the rule is for compile time.

Each is a train step (``jax.grad`` of ``"auto"``; for ``rows`` the forward
too) beside ``jax.grad`` through ``lax.reduce_window``: XLA's TPU cost
model's MB accessed, estimates, not timings (the seconds are this machine's,
to compile). The performance record's tables ("Tap numbers at stride 1",
"The planes in place where the batch takes the lanes", "The 1-D TPU forward
in rows of its tiles") are this script's output.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from jaxpool._args import PoolArgs
from jaxpool._spec import pool_spec
from jaxpool._tpu import layout
from jaxpool._windows import with_spatial

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
# Batches that XLA lays in the lanes (``tests/test_compiled.py`` checks).
BATCH_IN_LANES = [
    ("1-D 256x1000x64 k3 s1 p1 channels-last", (256, 1000, 64), (3, 1, 1), LAST),
    ("1-D 256x64x1000 k3 s1 p1", (256, 64, 1000), (3, 1, 1), {}),
    ("1-D 256x64x1000 k3 s2 p1", (256, 64, 1000), (3, 2, 1), {}),
    ("2-D 128x14²x64 k3 s1 p1 channels-last", (128, 14, 14, 64), (3, 1, 1), LAST),
    ("2-D 128x14²x64 k3 s2 p1 channels-last", (128, 14, 14, 64), (3, 2, 1), LAST),
    ("3-D 128x8³x32 k3 s2 p1 channels-last", (128, 8, 8, 8, 32), (3, 2, 1), LAST),
]
QUICK_BATCH = [("3-D 128x2x5x6x7 k3 s2 p1", (128, 2, 5, 6, 7), (3, 2, 1), {})]


def _in_rows() -> list:
    """1-D pools of disjoint windows over axes of whole rows of ``128 *
    stride`` positions: (kernel, stride) 2 2 (float32 and bfloat16), 2 3, 3 3
    and 4 4, over 2x8, 1x24 and 4x128 planes, 768, 1280 and 3584 long."""
    cases = []
    for n, c in ((2, 8), (1, 24), (4, 128)):
        for size in (768, 1280, 3584):
            for k, s, half in ((2, 2, 0), (2, 2, 1), (2, 3, 0), (3, 3, 0), (4, 4, 0)):
                if size % (128 * s):
                    continue
                label = f"1-D {n}x{c}x{size} k{k} s{s}" + " bfloat16" * half
                opts = {"dtype": jnp.bfloat16} if half else {}
                cases.append((label, (n, c, size), (k, s, 0), opts))
    return cases


IN_ROWS = _in_rows()
QUICK_ROWS = [("1-D 2x8x768 k2 s2", (2, 8, 768), (2, 2, 0), {})]


class Rule(NamedTuple):
    """A rule of ``_tpu.layout``: the function patched, its two forms (a name and
    the function that forces it), which form it takes for a pool's spec and
    output grid, and the shapes it is measured on."""

    function: str
    forms: tuple[tuple[str, Callable[..., Any]], ...]
    taken: Callable[[Any, tuple[int, ...], tuple[int, ...]], str]  # spec, in, out
    shapes: list
    quick: list
    programs: tuple[str, ...] = ("step auto",)  # the last one's MB decides


def _strided(spec: Any) -> bool:
    return any(w.stride > 1 for w in spec.axes)


RULES = {
    "codes": Rule(
        "coded",
        (
            # Stride phases read tap numbers either way.
            ("by index", _strided),
            ("by tap number", lambda spec: True),
        ),
        lambda spec, shape, out: "by tap number" if layout.coded(spec) else "by index",
        SHAPES,
        QUICK,
    ),
    "planes": Rule(
        "planes_minor",
        (("moved", lambda spec, shape: True), ("in place", lambda spec, shape: False)),
        lambda spec, shape, out: (
            "moved" if layout.planes_minor(spec, out) else "in place"
        ),
        BATCH_IN_LANES,
        QUICK_BATCH,
    ),
    "rows": Rule(
        "row_windows",
        (("whole axis", lambda shape, spec: None), ("in rows", layout.row_windows)),
        lambda spec, shape, out: (
            "in rows" if layout.row_windows(shape, spec) else "whole axis"
        ),
        IN_ROWS,
        QUICK_ROWS,
        ("forward", "step auto"),
    ),
}


def measure(
    rule: Rule,
    label: str,
    shape: tuple[int, ...],
    window: tuple[int, int, int],
    options: dict,
) -> dict[str, Any]:
    """MB of the step in each of ``rule``'s forms, and of the builtin's; and
    which form the rule takes. For each of the rule's programs and forms also
    ``f"{form} {program}"``, its MB, and ``f"{form} {program} s"``, its seconds
    to compile from cold caches."""
    programs = compiled.pool_programs(label, shape, *window, pallas=False, **options)
    by_name = {p.name: p for p in programs}

    def mb(name: str) -> tuple[float, float]:
        program = by_name[f"{label} {name}"]
        jax.clear_caches()  # the kernels are traced once per spec
        start = time.perf_counter()
        facts = compiled.compile_for(*program.build("v5e"), "v5e")
        seconds = time.perf_counter() - start
        assert facts["compiled"], facts["error"]
        return facts["bytes_accessed"] / 1e6, seconds

    channels_last = options.get("channels_last", False)
    args = PoolArgs(*window, channels_last=channels_last)
    spec = pool_spec("tpu_rules", len(shape) - 2, shape, args)
    out = with_spatial(shape, spec.nd, spec.trail, spec.out_size)
    row: dict[str, Any] = {
        "program": label,
        "reduce_window": mb("reduce_window step")[0],
    }
    row["taken"] = rule.taken(spec, shape, out)
    own = getattr(layout, rule.function)
    try:
        for how, forced in rule.forms:
            setattr(layout, rule.function, forced)
            for name in rule.programs:
                row[f"{how} {name}"], row[f"{how} {name} s"] = mb(name)
            row[how] = row[f"{how} {rule.programs[-1]}"]
    finally:
        setattr(layout, rule.function, own)
        jax.clear_caches()
    return row


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rule", choices=list(RULES), action="append")
    parser.add_argument("--quick", action="store_true", help="a tiny shape")
    args = parser.parse_args(argv)
    for name in args.rule or list(RULES):
        rule = RULES[name]
        forms = [how for how, _ in rule.forms]
        where = f"_tpu.layout.{rule.function}"
        print(
            f"\n{name} ({where}): MB (seconds to compile); in bold the form it takes\n"
        )
        columns = [f"{how}, {program}" for program in rule.programs for how in forms]
        print(f"| pool | {' | '.join(columns)} | `reduce_window` step |")
        print("|---" * (len(columns) + 2) + "|")
        for case in rule.quick if args.quick else rule.shapes:
            row = measure(rule, *case)
            figures = []
            for program in rule.programs:
                for how in forms:
                    key = f"{how} {program}"
                    cell = f"{row[key]:,.2f} ({row[f'{key} s']:.2f} s)"
                    figures.append(f"**{cell}**" if how == row["taken"] else cell)
            cells = [row["program"], *figures, f"{row['reduce_window']:,.2f}"]
            print("| " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
