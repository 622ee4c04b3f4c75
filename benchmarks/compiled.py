"""Compile jaxpool's programs for an H200 and a TPU v5e on a machine with
neither, and record what XLA made of each: XLA's estimates, not timings.

XLA compiles for a device that is not there (``jax.experimental.topologies``):
the CUDA plugin with XLA's own H200 target spec (``targets/h200.txtpb``) gives
a compile-only H200, libtpu a compile-only v5e. A program compiled that way is
the real one: its optimized HLO, its kernels and their PTX (Triton's too), its
temporaries, and on TPU XLA's cost model. Needs the ``aot`` extra; run with
``JAX_PLATFORMS=cpu`` (nothing opens a device)::

    pip install ".[aot]"
    JAX_PLATFORMS=cpu python benchmarks/compiled.py \\
        --json benchmarks/results/compiled.json \\
        --markdown benchmarks/results/compiled.md

``--networks`` compiles the pools of common networks (VGG-16, GoogLeNet,
SegNet) instead of the benchmark shapes; ``--context`` benchmark rows' pools
between two convolutions, as a network's train step holds them (TPU only);
``--programs REGEX`` picks programs by name, ``--targets v5e`` one target.

Per program and target: compiled, or the error (a program too big for the
chip fails with RESOURCE_EXHAUSTED); the kernels launched (GPU: the thunk
sequence, with grids; TPU: the entry computation's fusions and calls); the
Triton kernels; registers and spills (``ptxas -v`` on every PTX module);
scatter / gather / while / sort left in the optimized HLO; atomics and
compare-and-swap loops in the PTX; temporaries; on TPU bytes accessed, flops
and ``optimal_seconds`` (negative where an op's cost is unknown: compare
bytes), with ratios to the ``lax.reduce_window`` references on the same shape
and, for a forward, to its floor: the values-only ``reduce_window``'s bytes
plus the int32 indices' own.
``tests/test_compiled.py`` asserts the structural promises on the same facts.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import functools
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")

import jax
import jax.numpy as jnp
from jax import lax

import jaxpool

HERE = Path(__file__).resolve().parent
TARGETS = ("h200", "v5e")  # compile-only; "gpu" is a real GPU, where there is one
# What the optimized HLO is searched for (whole modules: fused computations too).
OPS = ("scatter", "gather", "while", "sort")


@functools.cache
def device(target: str) -> jax.Device:
    """The compile-only device of ``target`` (``"h200"`` or ``"v5e"``)."""
    from jax.experimental import topologies

    if target == "h200":
        config = (HERE / "targets" / "h200.txtpb").read_text()
        topology = topologies.get_topology_desc(
            platform="cuda", target_config=config, topology="1x1x1"
        )
    elif target == "v5e":
        topology = topologies.get_topology_desc("v5e:2x2", "tpu")
    elif target == "gpu":  # the real one, on a machine that has it
        return jax.devices("gpu")[0]
    else:
        raise ValueError(f"compiled.device: unknown target {target!r}")
    return topology.devices[0]


def available(target: str) -> str | None:
    """``None`` if ``target`` can be compiled for here, else why not."""
    try:
        device(target)
    except Exception as e:  # a missing plugin raises several kinds
        return f"{type(e).__name__}: {e}".splitlines()[0]
    return None


def on(target: str, shape: tuple[int, ...], dtype: Any = jnp.float32) -> Any:
    """An abstract argument placed on ``target``'s compile-only device."""
    sharding = jax.sharding.SingleDeviceSharding(device(target))
    return jax.ShapeDtypeStruct(shape, jnp.dtype(dtype), sharding=sharding)


def compile_for(fn: Callable[..., Any], args: list[Any], target: str) -> dict:
    """Compile ``jax.jit(fn)`` for ``args`` (from :func:`on`) and read the
    facts of the compiled program; ``{"compiled": False, "error": ...}`` if it
    does not compile."""
    dump = Path(tempfile.mkdtemp(prefix="jaxpool_compiled_"))
    options = {"xla_dump_to": str(dump), "xla_dump_hlo_as_text": True}
    try:
        lowered = jax.jit(fn).trace(*args).lower()
        compiled = lowered.compile(compiler_options=options)
    except Exception as e:
        message = [*str(e).strip().splitlines(), ""][0]  # a bare assert has none
        return {"compiled": False, "error": f"{type(e).__name__}: {message}"}
    try:
        hlo = compiled.as_text()
        facts: dict[str, Any] = {"compiled": True, "error": None}
        facts["ops"] = {op: count_ops(hlo, op) for op in OPS}
        memory = compiled.memory_analysis()
        facts["temp_bytes"] = int(memory.temp_size_in_bytes)
        facts["argument_bytes"] = int(memory.argument_size_in_bytes)
        facts["output_bytes"] = int(memory.output_size_in_bytes)
        if target in ("h200", "gpu"):
            facts.update(_gpu_facts(dump, hlo))
        else:
            facts.update(_tpu_facts(compiled, hlo))
        facts["hlo"] = hlo
        return facts
    finally:
        shutil.rmtree(dump, ignore_errors=True)


def count_ops(hlo: str, op: str) -> int:
    """Instructions of opcode ``op`` in an HLO module's text."""
    pattern = rf"^\s*(?:ROOT )?\S+ = [^=]*?\s{re.escape(op)}\("
    return len(re.findall(pattern, hlo, re.M))


def _gpu_facts(dump: Path, hlo: str) -> dict[str, Any]:
    """Kernels (thunk sequence), Triton kernels, PTX atomics, registers."""
    thunks = "\n".join(p.read_text() for p in dump.glob("*thunk_sequence.txt"))
    kernels = re.findall(r"\] (\S+) grid: \[([\d, ]+)\]", thunks)
    names = re.findall(r"^\s*(?:ROOT )?%?([\w.-]+) = ", hlo, re.M)
    instructions = {re.sub(r"[.-]", "_", name) for name in names}
    modules = sorted(dump.glob("*.ptx"))
    ptx = "\n".join(p.read_text() for p in modules)
    # jaxlib 0.11.2 on a real H200 dumps no PTX (seen 2026-12-04): unknown,
    # not "no atomics".
    unknown = dict.fromkeys(("atomics", "cas_loops", "float_atomic_adds"))
    return {
        "kernels": [f"{name} [{grid.replace(' ', '')}]" for name, grid in kernels],
        # XLA names its kernels after their fusions; a Pallas kernel keeps its
        # own name, and its HLO is a Triton custom call.
        "triton": [name for name, _ in kernels if name not in instructions],
        "triton_calls": hlo.count('custom_call_target="__gpu$xla.gpu.triton"'),
        **(ptx_atomics(ptx) if modules else unknown),
        "registers": _registers(dump),
    }


def ptx_atomics(ptx: str) -> dict[str, int]:
    """Atomic instructions in PTX text: all of them, the compare-and-swaps (a
    float add lowered to a CAS retry loop) and the native float adds."""
    float_add = r"^\s*(?:atom|red)\.[\w.]*\.add\.(?:f16|bf16|f32|f64)\b"
    return {
        "atomics": len(re.findall(r"^\s*(?:atom|red)\.", ptx, re.M)),
        "cas_loops": len(re.findall(r"^\s*atom\.[\w.]*\.cas\.", ptx, re.M)),
        "float_atomic_adds": len(re.findall(float_add, ptx, re.M)),
    }


def _registers(dump: Path) -> dict[str, dict[str, int]]:
    """``ptxas -v`` of every PTX module: registers and spill bytes per kernel
    (empty where no ptxas is installed)."""
    ptxas = _ptxas()
    if ptxas is None:
        return {}
    found: dict[str, dict[str, int]] = {}
    for path in sorted(dump.glob("*.ptx")):
        arch = re.search(r"^\.target (\S+)", path.read_text(), re.M)
        arch_flag = f"-arch={arch.group(1) if arch else 'sm_90a'}"
        run = subprocess.run(
            [ptxas, arch_flag, "-v", str(path), "-o", os.devnull],
            capture_output=True,
            text=True,
            check=False,
        )
        for entry, body in re.findall(
            r"Compiling entry function '(\w+)'.*?\n(.*?Used \d+ registers)",
            run.stderr,
            re.S,
        ):
            spills = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill", body)
            found[entry] = {
                "registers": int(re.search(r"Used (\d+) registers", body).group(1)),
                "spill_bytes": int(spills.group(1)) + int(spills.group(2))
                if spills
                else 0,
            }
    return found


@functools.cache
def _ptxas() -> str | None:
    """The ptxas of the ``nvidia-cuda-nvcc-cu12`` wheel, else one on PATH."""
    with contextlib.suppress(ImportError):
        import nvidia.cuda_nvcc

        for root in nvidia.cuda_nvcc.__path__:
            candidate = Path(root) / "bin" / "ptxas"
            if candidate.exists():
                return str(candidate)
    return shutil.which("ptxas")


# Instructions of an entry computation that move no data of their own.
MOVES_NO_DATA = {"parameter", "constant", "tuple", "get-tuple-element", "bitcast"}


def entry_computation(hlo: str) -> str:
    """The text of ``hlo``'s entry computation."""
    entry = hlo[hlo.index("\nENTRY") :]
    return entry[: entry.index("\n}")]


def _tpu_facts(compiled: Any, hlo: str) -> dict[str, Any]:
    """XLA's TPU cost model and the entry computation's kernels."""
    cost = compiled.cost_analysis()
    cost = cost[0] if isinstance(cost, list) else cost
    kernels = [
        f"{name} ({op})"
        for name, op in re.findall(
            r"^\s*(?:ROOT )?%?([\w.-]+) = .*?\s([a-z-]+)\(",
            entry_computation(hlo),
            re.M,
        )
        if op not in MOVES_NO_DATA
    ]
    return {
        "kernels": kernels,
        "bytes_accessed": float(cost.get("bytes accessed", float("nan"))),
        "flops": float(cost.get("flops", float("nan"))),
        "optimal_seconds": float(cost.get("optimal_seconds", float("nan"))),
    }


# ------------------------------------------------------------------ programs


class Program(NamedTuple):
    """A named program: ``build(target) -> (fn, args)``; ``reference``: the
    program of the same shape it is compared with; ``targets``: where it
    claims to run."""

    name: str
    build: Callable[[str], tuple[Callable[..., Any], list[Any]]]
    reference: str | None = None
    targets: tuple[str, ...] = TARGETS
    # A forward's floor: its reference's bytes plus these (the int32 indices).
    index_bytes: int = 0


def train_step(
    values_of: Callable[[jax.Array], jax.Array], value: bool = False
) -> Callable[..., Any]:
    """The gradient of ``sum(w * values_of(x))`` with respect to ``x``: the
    backward of a training step. ``w`` is an argument (as a constant, XLA
    would fold the program around it). With ``value``, the loss too
    (``jax.value_and_grad``): the step reads the pool's values, as a
    network's does, so ``lax.reduce_window``'s step runs its forward as
    well; without it, XLA drops that forward."""

    def loss(x: jax.Array, w: jax.Array) -> jax.Array:
        return jnp.sum(w * values_of(x)).astype(jnp.float32)

    return jax.value_and_grad(loss) if value else jax.grad(loss)


def _builtin_pool(
    nd: int, kernel: int, stride: int, padding: int, channels_last: bool
) -> Callable[[jax.Array], jax.Array]:
    """``lax.reduce_window``'s max pool of ``nd`` spatial axes: the
    reference."""
    window, strides = (kernel,) * nd, (stride,) * nd
    pads = ((padding, padding),) * nd
    if channels_last:
        dims, steps, padded = (1, *window, 1), (1, *strides, 1), ((0, 0), *pads, (0, 0))
    else:
        dims, steps, padded = (1, 1, *window), (1, 1, *strides), ((0, 0), (0, 0), *pads)

    def reduce_window(x: jax.Array) -> jax.Array:
        return lax.reduce_window(x, -jnp.inf, lax.max, dims, steps, padded)

    return reduce_window


def _jaxpool_values(
    nd: int, kernel: int, stride: int, padding: int, channels_last: bool, **kw: Any
) -> Callable[[jax.Array], jax.Array]:
    """jaxpool's max pool of ``nd`` spatial axes, its values alone."""
    pool = getattr(jaxpool, f"max_pool{nd}d_with_argmax")
    return lambda x: pool(
        x, kernel, stride, padding, channels_last=channels_last, **kw
    )[0]


def pool_programs(
    label: str,
    shape: tuple[int, ...],
    kernel: int,
    stride: int,
    padding: int,
    *,
    dtype: Any = jnp.float32,
    channels_last: bool = False,
    pallas: bool = True,
) -> list[Program]:
    """The forward, the train steps of each algorithm (and Pallas's on the
    H200) of one strided pool, and the ``lax.reduce_window`` references."""
    nd = len(shape) - 2
    pool = getattr(jaxpool, f"max_pool{nd}d_with_argmax")
    reduce_window = _builtin_pool(nd, kernel, stride, padding, channels_last)

    def forward(**kw: Any) -> Callable[[str], Any]:
        def build(target: str) -> Any:
            def fn(x: jax.Array) -> Any:
                return pool(
                    x, kernel, stride, padding, channels_last=channels_last, **kw
                )

            return fn, [on(target, shape, dtype)]

        return build

    def step(
        values_of: Callable[[jax.Array], jax.Array], value: bool = False
    ) -> Callable[[str], Any]:
        def build(target: str) -> Any:
            out = jax.eval_shape(values_of, jax.ShapeDtypeStruct(shape, dtype))
            return train_step(values_of, value), [
                on(target, shape, dtype),
                on(target, out.shape, out.dtype),
            ]

        return build

    def values(**kw: Any) -> Callable[[jax.Array], jax.Array]:
        return _jaxpool_values(nd, kernel, stride, padding, channels_last, **kw)

    def reference_forward(target: str) -> Any:
        return reduce_window, [on(target, shape, dtype)]

    ref_f, ref_s = f"{label} reduce_window forward", f"{label} reduce_window step"
    ref_v = f"{label} reduce_window value_and_grad"
    out = jax.eval_shape(reduce_window, jax.ShapeDtypeStruct(shape, dtype))
    index_bytes = math.prod(out.shape) * 4
    programs = [
        Program(ref_f, reference_forward),
        Program(ref_s, step(reduce_window)),
        Program(f"{label} forward", forward(), ref_f, index_bytes=index_bytes),
    ]
    for algorithm in ("auto", "scatter", "gather"):
        programs.append(
            Program(
                f"{label} step {algorithm}", step(values(algorithm=algorithm)), ref_s
            )
        )
    # The step whose loss reads the values (the TPU's cost model only).
    programs += [
        Program(ref_v, step(reduce_window, value=True), targets=("v5e",)),
        Program(
            f"{label} value_and_grad auto",
            step(values(algorithm="auto"), value=True),
            ref_v,
            ("v5e",),
        ),
    ]
    if pallas:
        impl = {"implementation": "pallas"}
        programs += [
            Program(f"{label} forward pallas", forward(**impl), ref_f, ("h200",)),
            Program(f"{label} step pallas", step(values(**impl)), ref_s, ("h200",)),
        ]
    return programs


def adaptive_programs(
    label: str, shape: tuple[int, ...], output_size: tuple[int, ...]
) -> list[Program]:
    """The forward and the train steps of one adaptive pool (no reference:
    ``reduce_window`` has no adaptive windows)."""
    nd = len(shape) - 2
    pool = getattr(jaxpool, f"adaptive_max_pool{nd}d")

    def forward(target: str) -> Any:
        return (lambda x: pool(x, output_size)), [on(target, shape)]

    def step(algorithm: str) -> Callable[[str], Any]:
        def build(target: str) -> Any:
            values = train_step(lambda x: pool(x, output_size, algorithm=algorithm)[0])
            return values, [on(target, shape), on(target, (*shape[:2], *output_size))]

        return build

    return [Program(f"{label} forward", forward)] + [
        Program(f"{label} step {a}", step(a)) for a in ("auto", "scatter", "gather")
    ]


def fractional_programs(
    label: str, shape: tuple[int, ...], kernel: int, output_size: tuple[int, ...]
) -> list[Program]:
    """The forward and the train steps of one fractional pool, its samples an
    argument (no reference: ``reduce_window`` has no fractional windows)."""
    nd = len(shape) - 2
    pool = getattr(jaxpool, f"fractional_max_pool{nd}d")
    samples = (*shape[:2], nd)

    def forward(target: str) -> Any:
        fn = lambda x, u: pool(x, kernel, output_size, samples=u)  # noqa: E731
        return fn, [on(target, shape), on(target, samples)]

    def step(algorithm: str) -> Callable[[str], Any]:
        def build(target: str) -> Any:
            def loss(x: jax.Array, w: jax.Array, u: jax.Array) -> jax.Array:
                pooled = pool(x, kernel, output_size, samples=u, algorithm=algorithm)
                return jnp.sum(w * pooled[0])

            out = (*shape[:2], *output_size)
            args = [on(target, shape), on(target, out), on(target, samples)]
            return jax.grad(loss), args

        return build

    return [Program(f"{label} forward", forward)] + [
        Program(f"{label} step {a}", step(a)) for a in ("auto", "scatter", "gather")
    ]


def benchmark_programs(quick: bool = False) -> list[Program]:
    """The benchmark shapes (float32, channels first unless named), plus
    bfloat16 and channels-last rows; ``quick``: the same programs on tiny
    shapes (for the script's own test)."""
    if quick:
        return pool_programs("2x4x8³ k3 s2 p1", (2, 4, 8, 8, 8), 3, 2, 1) + (
            adaptive_programs("2x4x9x13 → 2x3", (2, 4, 9, 13), (2, 3))
        )
    return [
        *pool_programs("8x32x64³ k2 s2", (8, 32, 64, 64, 64), 2, 2, 0),
        *pool_programs("8x32x64³ k3 s2 p1", (8, 32, 64, 64, 64), 3, 2, 1),
        *pool_programs("2x32x96³ k3 s1 p1", (2, 32, 96, 96, 96), 3, 1, 1),
        *pool_programs("32x64x112² k3 s2 p1", (32, 64, 112, 112), 3, 2, 1),
        *pool_programs(
            "8x32x64³ k3 s2 p1 bf16",
            (8, 32, 64, 64, 64),
            3,
            2,
            1,
            dtype=jnp.bfloat16,
            pallas=False,
        ),
        # 128 channels fill a TPU's lanes (32 would pad them 4x); the same
        # bytes as 8x32x64³.
        *pool_programs(
            "2x64³x128 k3 s2 p1 channels-last",
            (2, 64, 64, 64, 128),
            3,
            2,
            1,
            channels_last=True,
            pallas=False,
        ),
        # Flax's layout for a ResNet stem's pool: 64 channels fill half of a
        # TPU's lanes.
        *(
            program
            for dtype, name in ((jnp.float32, ""), (jnp.bfloat16, " bf16"))
            for program in pool_programs(
                f"32x112²x64 k3 s2 p1 channels-last{name}",
                (32, 112, 112, 64),
                3,
                2,
                1,
                dtype=dtype,
                channels_last=True,
                pallas=False,
            )
        ),
        *adaptive_programs("128x64x97x131 → 13x17", (128, 64, 97, 131), (13, 17)),
        *adaptive_programs("256x64x1000 → 30", (256, 64, 1000), (30,)),
        *adaptive_programs("8x32x40x44x48 → 7x9x10", (8, 32, 40, 44, 48), (7, 9, 10)),
        *adaptive_programs("4x16x33x65x129 → 5x7x9", (4, 16, 33, 65, 129), (5, 7, 9)),
        *adaptive_programs("32x64x112² → 10²", (32, 64, 112, 112), (10, 10)),
        *adaptive_programs("32x64x112² → 40²", (32, 64, 112, 112), (40, 40)),
        *fractional_programs(
            "fractional 32x64x112² k2 → 79²", (32, 64, 112, 112), 2, (79, 79)
        ),
        *fractional_programs(
            "fractional 8x32x64³ k2 → 45³", (8, 32, 64, 64, 64), 2, (45, 45, 45)
        ),
    ]


def network_programs() -> list[Program]:
    """Pools of common networks, off the benchmark shapes: VGG-16's and
    GoogLeNet's in Flax's channels-last layout, SegNet's (its encoder's
    first and fourth, ported from PyTorch) channels-first; float32, and
    bfloat16 for VGG-16's pool4. Many channels over a small grid, where
    ``lax.reduce_window``'s whole train step is one select-and-scatter."""
    f32, bf16, last = jnp.float32, jnp.bfloat16, " channels-last"
    cases = [
        (f"VGG-16 pool1 32x224²x64 k2 s2{last}", (32, 224, 224, 64), 2, 2, 0, f32),
        (f"VGG-16 pool3 32x56²x256 k2 s2{last}", (32, 56, 56, 256), 2, 2, 0, f32),
        (f"VGG-16 pool4 32x28²x512 k2 s2{last}", (32, 28, 28, 512), 2, 2, 0, f32),
        (f"GoogLeNet 32x28²x256 k3 s1 p1{last}", (32, 28, 28, 256), 3, 1, 1, f32),
        (f"GoogLeNet 32x28²x480 k3 s2 p1{last}", (32, 28, 28, 480), 3, 2, 1, f32),
        ("SegNet pool1 16x64x360x480 k2 s2", (16, 64, 360, 480), 2, 2, 0, f32),
        ("SegNet pool4 16x512x45x60 k2 s2", (16, 512, 45, 60), 2, 2, 0, f32),
        (f"VGG-16 pool4 32x28²x512 k2 s2{last} bf16", (32, 28, 28, 512), 2, 2, 0, bf16),
    ]
    return [
        program
        for label, shape, kernel, stride, padding, dtype in cases
        for program in pool_programs(
            label,
            shape,
            kernel,
            stride,
            padding,
            dtype=dtype,
            channels_last=last in label,
            pallas=False,
        )
    ]


def context_programs(quick: bool = False) -> list[Program]:
    """Benchmark rows' pools between two convolutions, as a network trains
    them: ``jax.grad`` of ``sum(conv(pool(relu(conv(x, w1))), w2) ** 2)``
    with respect to ``(w1, w2)`` and ``x``, the pool jaxpool's (``"auto"``)
    or ``lax.reduce_window``'s, on the TPU (its cost model) alone. XLA then
    lays the pool's arrays out for the convolutions, with the channels in the
    lanes, where a pool's own program gets XLA's default entry layouts (the
    ResNet stem's input with W in the lanes). The two programs differ only
    in the pool, so their bytes differ by its cost in place. ``quick``: one
    tiny case (for the tests)."""
    f32, bf16 = jnp.float32, jnp.bfloat16
    # label, conv input, first conv's kernel and stride, the pool's channels,
    # channels-last, dtype; every pool k3 s2 p1.
    cases = [
        ("ResNet stem 32x224²x3 → 32x112²x64", (32, 224, 224, 3), 7, 2, 64, True, f32),
        ("ResNet stem 32x224²x3 → 32x112²x64", (32, 224, 224, 3), 7, 2, 64, True, bf16),
        ("32x3x224² → 32x64x112²", (32, 3, 224, 224), 7, 2, 64, False, f32),
        ("8x16x64³ → 8x32x64³", (8, 16, 64, 64, 64), 3, 1, 32, False, f32),
        ("8x16x64³ → 8x32x64³", (8, 16, 64, 64, 64), 3, 1, 32, False, bf16),
        ("2x64³x32 → 2x64³x128", (2, 64, 64, 64, 32), 3, 1, 128, True, f32),
    ]
    if quick:
        cases = [("2x8²x3 → 2x8²x16", (2, 8, 8, 3), 3, 1, 16, True, f32)]
    programs = []
    for label, shape, kernel, stride, channels, last, dtype in cases:
        nd = len(shape) - 2
        label += (" channels-last" if last else "") + (" bf16" if dtype == bf16 else "")
        ref = f"{label} k3 s2 p1 in a network: reduce_window step"
        for pool, name, reference in (
            (_builtin_pool(nd, 3, 2, 1, last), ref, None),
            (
                _jaxpool_values(nd, 3, 2, 1, last),
                f"{label} k3 s2 p1 in a network: step auto",
                ref,
            ),
        ):
            build = functools.partial(
                _network_step, pool, shape, kernel, stride, channels, last, dtype
            )
            programs.append(Program(name, build, reference, ("v5e",)))
    return programs


def _network_step(
    pool: Callable[[jax.Array], jax.Array],
    shape: tuple[int, ...],
    kernel: int,
    stride: int,
    channels: int,
    last: bool,
    dtype: Any,
    target: str,
) -> Any:
    """``(fn, args)`` of :func:`context_programs`' train step."""
    nd = len(shape) - 2
    spatial = "DHW"[3 - nd :]
    if last:
        numbers = (f"N{spatial}C", f"{spatial}IO", f"N{spatial}C")
        first = (*(kernel,) * nd, shape[-1], channels)
        second = (*(3,) * nd, channels, channels)
    else:
        numbers = (f"NC{spatial}", f"OI{spatial}", f"NC{spatial}")
        first = (channels, shape[1], *(kernel,) * nd)
        second = (channels, channels, *(3,) * nd)

    def loss(weights: tuple[jax.Array, jax.Array], x: jax.Array) -> jax.Array:
        w1, w2 = weights
        same = ((kernel // 2, kernel // 2),) * nd
        h = lax.conv_general_dilated(
            x, w1, (stride,) * nd, same, dimension_numbers=numbers
        )
        h = pool(jax.nn.relu(h))
        h = lax.conv_general_dilated(
            h, w2, (1,) * nd, ((1, 1),) * nd, dimension_numbers=numbers
        )
        return jnp.sum(h.astype(jnp.float32) ** 2)

    weights = (on(target, first, dtype), on(target, second, dtype))
    return jax.grad(loss, argnums=(0, 1)), [weights, on(target, shape, dtype)]


# ------------------------------------------------------------------- report


def run(programs: list[Program], targets: tuple[str, ...]) -> list[dict]:
    """Compile every program for every target it claims; one row each."""
    rows = []
    for target in targets:
        why = available(target)
        for program in programs:
            if target not in program.targets and not (
                target == "gpu" and "h200" in program.targets
            ):
                continue
            row = {"program": program.name, "target": target}
            if why is not None:
                row.update(compiled=False, error=f"target unavailable: {why}")
            else:
                fn, args = program.build(target)
                row.update(compile_for(fn, args, target))
                row.pop("hlo", None)
            row["reference"] = program.reference
            row["index_bytes"] = program.index_bytes
            rows.append(row)
            print(_line(row), flush=True)
    _ratios(rows)
    return rows


def _ratios(rows: list[dict]) -> None:
    """Each row's bytes and temporaries over its reference's (same target)."""
    by_key = {(r["program"], r["target"]): r for r in rows}
    for row in rows:
        ref = by_key.get((row["reference"], row["target"]))
        if not (ref and ref.get("compiled") and row.get("compiled")):
            continue
        for key in ("bytes_accessed", "temp_bytes"):
            if key in row and ref.get(key):
                row[f"{key}_ratio"] = row[key] / ref[key]
        if row.get("index_bytes") and "bytes_accessed" in row:
            floor = ref["bytes_accessed"] + row["index_bytes"]
            row["floor_ratio"] = row["bytes_accessed"] / floor


def _line(row: dict) -> str:
    if not row.get("compiled"):
        return f"{row['target']:5} {row['program']}: {row['error']}"
    mb = (
        f" {row['bytes_accessed'] / 1e6:,.0f} MB accessed"
        if "bytes_accessed" in row
        else ""
    )
    return (
        f"{row['target']:5} {row['program']}: {len(row['kernels'])} kernels,"
        f"{mb} temp {row['temp_bytes'] / 1e6:,.0f} MB"
    )


def markdown(rows: list[dict]) -> str:
    """One table per target."""
    out = []
    for target in (*TARGETS, "gpu"):
        mine = [r for r in rows if r["target"] == target]
        if not mine:
            continue
        if target == "v5e":
            out += [
                "### TPU v5e (compile-only): XLA's TPU cost model",
                "",
                "| program | bytes accessed | vs reference | vs floor | temporaries"
                " | vs reference | flops | kernels | scatter / gather / while / sort |",
                "|---|---|---|---|---|---|---|---|---|",
            ]
        else:
            what = "H200 (compile-only)" if target == "h200" else "This machine's GPU"
            out += [
                f"### {what}: the compiled program",
                "",
                "| program | kernels | Triton | registers (spills) | PTX atomics"
                " (CAS loops) | temporaries | vs reference"
                " | scatter / gather / while / sort |",
                "|---|---|---|---|---|---|---|---|",
            ]
        for r in mine:
            if not r.get("compiled"):
                out.append(f"| {r['program']} | {r['error'][:120]} |" + " |" * 6)
                continue
            ops = " / ".join(str(r["ops"][op]) for op in OPS)
            temp = f"{r['temp_bytes'] / 1e6:,.0f} MB"
            temp_ratio = _ratio(r, "temp_bytes_ratio")
            if target == "v5e":
                out.append(
                    f"| {r['program']} | {r['bytes_accessed'] / 1e6:,.0f} MB"
                    f" | {_ratio(r, 'bytes_accessed_ratio')}"
                    f" | {_ratio(r, 'floor_ratio')} | {temp} | {temp_ratio}"
                    f" | {r['flops'] / 1e9:,.2f} G | {len(r['kernels'])} | {ops} |"
                )
            else:
                regs = ", ".join(
                    f"{k} {v['registers']}"
                    + (f" ({v['spill_bytes']} B)" if v["spill_bytes"] else "")
                    for k, v in r["registers"].items()
                    if k in r["triton"]
                )
                atomics = "no PTX in XLA's dump"
                if r["atomics"] is not None:
                    atomics = f"{r['atomics']} ({r['cas_loops']})"
                out.append(
                    f"| {r['program']} | {len(r['kernels'])} | {len(r['triton'])}"
                    f" | {regs or '-'} | {atomics}"
                    f" | {temp} | {temp_ratio} | {ops} |"
                )
        out.append("")
    return "\n".join(out)


def _ratio(row: dict, key: str) -> str:
    return f"{row[key]:.2f}x" if key in row else ""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--targets", default=",".join(TARGETS))
    parser.add_argument("--programs", default="", help="regex on program names")
    parser.add_argument("--quick", action="store_true", help="tiny shapes")
    parser.add_argument(
        "--networks",
        action="store_true",
        help="the pools of common networks instead of the benchmark shapes",
    )
    parser.add_argument(
        "--context",
        action="store_true",
        help="benchmark rows' pools between two convolutions (TPU only)",
    )
    parser.add_argument("--json", type=Path)
    parser.add_argument("--markdown", type=Path)
    args = parser.parse_args(argv)
    targets = tuple(t for t in args.targets.split(",") if t)
    if args.context:
        every = context_programs(args.quick)
    elif args.networks:
        every = network_programs()
    else:
        every = benchmark_programs(args.quick)
    programs = [p for p in every if re.search(args.programs, p.name)]
    rows = run(programs, targets)
    header = {
        "date": datetime.date.today().isoformat(),
        "jax": jax.__version__,
        "jaxlib": jax.lib.__version__ if hasattr(jax.lib, "__version__") else None,
        "note": "compile-only: XLA's estimates, not timings",
        "argv": sys.argv[1:],
    }
    if args.json:
        args.json.write_text(json.dumps({**header, "rows": rows}, indent=1) + "\n")
    table = markdown(rows)
    if args.markdown:
        title = (
            f"# Compiled for accelerators, {header['date']}, jax {header['jax']}\n\n"
        )
        args.markdown.write_text(title + header["note"] + ".\n\n" + table)
    print(table)
    return 0 if all(r.get("compiled") for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
