"""Where a compiled TPU program's bytes go: per instruction of its entry
computation, the bytes it reads and writes as XLA's TPU cost model counts
them (the two minor axes of every array padded to whole tiles of 8 rows x
128 lanes), beside the cost model's total. Compile-only (XLA's estimates,
not timings); needs the ``aot`` extra::

    JAX_PLATFORMS=cpu python benchmarks/tpu_ops.py \\
        --programs "^32x112²x64 k3 s2 p1 channels-last step auto$"
    JAX_PLATFORMS=cpu python benchmarks/tpu_ops.py --context \\
        --programs "8x16x64³ → 8x32x64³ k3 s2 p1 in a network"

The programs are ``benchmarks/compiled.py``'s (``--networks``, ``--context``
as there). Each row counts every operand read whole and the result written.
The rows add up to the cost model's bytes, to within a few kilobytes, on
every ``lax.reduce_window`` program of the benchmark shapes (forwards and
train steps, between two convolutions too) and on jaxpool's forwards of
regular windows (float32 and bfloat16, channels-last, int4 and int8
codes). They add up to more where a fusion reads part of an operand (the
adaptive pools' copies, the fractional picks), updates a buffer in place
(the phases' stack of the dense backward) or copies one between memories
(``copy-start``, ``slice-start``), which the cost model charges less. So
compare rows, not totals.
"""

from __future__ import annotations

import argparse
import math
import re
import sys
from pathlib import Path
from typing import NamedTuple

sys.path.insert(0, str(Path(__file__).resolve().parent))
import compiled

_BITS = {"pred": 8, "s4": 4, "u4": 4, "s8": 8, "u8": 8, "s16": 16, "u16": 16}
_BITS |= {"bf16": 16, "f16": 16, "s32": 32, "u32": 32, "f32": 32}
_BITS |= {"s64": 64, "u64": 64, "f64": 64}
_ARRAY = re.compile(r"\b(" + "|".join(_BITS) + r")\[([\d,]*)\](\{[^}]*\})?")
_INSTRUCTION = re.compile(r"^\s*(?:ROOT )?%?([\w.-]+) = (.*?) ([a-z][\w-]*)\((.*?)\)")


class Op(NamedTuple):
    """One instruction of the entry computation and the bytes it moves."""

    name: str
    opcode: str
    read: float
    written: float
    shape: str


def array_bytes(dtype: str, dims: str, layout: str | None) -> float:
    """Bytes of one array as XLA's TPU cost model counts it: its layout's
    tile, ``T(rows,lanes)``, pads the most minor axis to whole lanes and the
    next to whole rows (of 32-bit words: 8 rows for every element width, the
    cost model's count though 16- and 8-bit elements pack 2 and 4 to a word,
    ``(2,1)``, ``(4,1)``); a one-axis tile, ``T(128)``, pads the one axis (a
    scalar's too: 512 bytes)."""
    sizes = [int(d) for d in dims.split(",") if d]
    bits = _BITS[dtype]
    if layout is None or "T(" not in layout:
        return math.prod(sizes) * bits / 8
    order = [int(a) for a in re.match(r"\{([\d,]*)", layout).group(1).split(",") if a]
    if not sizes:  # a scalar fills one tile's row of lanes too
        sizes, order = [1], [0]
    tile = re.search(r"T\((\d+)(?:,(\d+))?\)", layout)
    assert tile is not None, layout
    rows, lanes = (
        (1, int(tile.group(1))) if tile.group(2) is None else map(int, tile.groups())
    )
    sizes[order[0]] = -(-sizes[order[0]] // lanes) * lanes
    if len(order) > 1:
        sizes[order[1]] = -(-sizes[order[1]] // rows) * rows
    return math.prod(sizes) * bits / 8


def shape_bytes(text: str) -> float:
    """Bytes of every array in an HLO shape (an array or a tuple)."""
    return sum(array_bytes(*match) for match in _ARRAY.findall(text))


def entry_ops(hlo: str) -> list[Op]:
    """The entry computation's instructions that move data, in program
    order: each reads its operands whole and writes its result."""
    shapes: dict[str, str] = {}
    ops = []
    for line in compiled.entry_computation(hlo).splitlines()[1:]:
        found = _INSTRUCTION.match(line)
        if found is None:
            continue
        name, shape, opcode, operands = found.groups()
        shapes[name] = shape
        if opcode in compiled.MOVES_NO_DATA:
            continue
        names = [a.strip().lstrip("%") for a in operands.split(",")]
        read = sum(shape_bytes(shapes.get(a, "")) for a in names)
        ops.append(Op(name, opcode, read, shape_bytes(shape), shape))
    return ops


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--programs", required=True, help="regex on program names")
    parser.add_argument("--target", default="v5e")
    parser.add_argument("--networks", action="store_true")
    parser.add_argument("--context", action="store_true")
    parser.add_argument(
        "--at-least", type=float, default=1.0, help="MB: leave out smaller rows"
    )
    args = parser.parse_args(argv)
    if args.context:
        every = compiled.context_programs()
    elif args.networks:
        every = compiled.network_programs()
    else:
        every = compiled.benchmark_programs()
    programs = [p for p in every if re.search(args.programs, p.name)]
    if not programs:
        print(f"no program matches {args.programs!r}", file=sys.stderr)
        return 1
    for program in programs:
        fn, fn_args = program.build(args.target)
        facts = compiled.compile_for(fn, fn_args, args.target)
        if not facts["compiled"]:
            print(f"{program.name}: {facts['error']}")
            continue
        ops = entry_ops(facts["hlo"])
        print(f"\n{program.name} ({args.target}), MB read + written, tiles padded:")
        for op in ops:
            if op.read + op.written >= args.at_least * 1e6:
                print(
                    f"  {op.read / 1e6:9,.1f} + {op.written / 1e6:9,.1f}  "
                    f"{op.opcode:18} {op.name:36} {op.shape[:70]}"
                )
        total = sum(op.read + op.written for op in ops)
        print(
            f"  the rows: {total / 1e6:,.1f} MB; "
            f"the cost model: {facts['bytes_accessed'] / 1e6:,.1f} MB"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
