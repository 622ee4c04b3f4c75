"""Every public program compiled for an H200 and a TPU v5e, here on the CPU,
and the structural promises asserted on the compiled programs.

``benchmarks/compiled.py`` compiles for XLA's compile-only devices (the ``aot``
extra: the CUDA plugin with XLA's H200 spec, libtpu) and reads the facts of
each program: its optimized HLO, kernels, PTX and temporaries. Each test
compiles one program (every public op, fractional pools included, its
standalone backward of each algorithm, and ``jax.grad`` of each algorithm and
each implementation that claims the platform) and asserts:

- it compiles;
- no ``while`` loop (the CPU's fusion boundary stays on the CPU);
- no gather in the forward of strided windows, no scatter in a deterministic
  program (``"gather"``, and ``jax.grad``'s ``"auto"`` on accelerators);
- on the H200: no atomics in the PTX of a deterministic program, and atomics
  in the scatter's (so the check sees them); a Triton kernel in every
  ``implementation="pallas"`` program and in no other;
- on the H200, temporaries of at most a few times the program's arguments
  and outputs (on a TPU, tiny arrays are tiled to (8, 128) and mostly kept on
  the chip: the TPU's temporaries are bounded on the benchmark shapes below).
"""

from __future__ import annotations

import functools
import json
import math
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import NO_SKIP, require

import jaxpool
from jaxpool import _policy
from jaxpool._tpu import layout

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import compiled
import tpu_ops
import tpu_rules

# The full tier (tests/conftest.py): compiling for an H200 and a v5e takes minutes.
pytestmark = pytest.mark.full

BENCHMARKS = Path(compiled.__file__).resolve().parent

# (shape, pool arguments, adaptive output size) per number of spatial axes:
# overlapping strided windows (kernel 3, stride 2, padding 1) and irregular
# adaptive windows, where the scatter and the gather differ.
CASES = {
    1: ((2, 3, 16), (3, 2, 1), (5,)),
    2: ((2, 3, 12, 12), (3, 2, 1), (5, 7)),
    3: ((2, 3, 8, 8, 8), (3, 2, 1), (3, 5, 3)),
}
# Fractional max pooling: (shape, kernel, output size); windows drawn from
# samples, an argument of the program.
FRACTIONAL = {2: ((2, 3, 13, 11), 2, (6, 5)), 3: ((2, 3, 9, 8, 7), 2, (4, 3, 3))}
# The measured budgets of the TPU programs (XLA's cost model for a v5e).
BUDGETS = tomllib.loads((BENCHMARKS / "targets" / "tpu_v5e.toml").read_text())


def _label(row: dict) -> str:
    return row["label"]


def _pool_row(row: dict) -> tuple[str, tuple, tuple, dict]:
    """A budget row's ``(label, shape, window, options)`` for
    ``compiled.pool_programs``."""
    options: dict = {}
    if "dtype" in row:
        options["dtype"] = jnp.dtype(row["dtype"])
    if row.get("channels_last"):
        options["channels_last"] = True
    return row["label"], tuple(row["shape"]), tuple(row["window"]), options


# H200 temporaries at most this many times the arguments and outputs together.
TEMP_BOUND = 4


class Case:
    """One program: ``fn`` of ``shapes``, and what it promises."""

    def __init__(self, name, fn, shapes, *, kind, deterministic, pallas=False):
        self.name, self.fn, self.shapes = name, fn, shapes
        self.kind = kind  # "forward", "backward" or "grad"
        self.deterministic, self.pallas = deterministic, pallas


def _cases() -> dict[str, Case]:
    cases = {}

    def add(case: Case) -> None:
        cases[case.name] = case

    for nd, (shape, (k, s, p), output_size) in CASES.items():
        pool = getattr(jaxpool, f"max_pool{nd}d_with_argmax")
        pool_backward = getattr(jaxpool, f"max_pool{nd}d_with_argmax_backward")
        adaptive = getattr(jaxpool, f"adaptive_max_pool{nd}d")
        adaptive_backward = getattr(jaxpool, f"adaptive_max_pool{nd}d_backward")
        unpool = getattr(jaxpool, f"max_unpool{nd}d")
        window = (k, s, p)
        pooled = jax.eval_shape(lambda x, f=pool, a=window: f(x, *a), _abstract(shape))
        out_shape = pooled[0].shape
        adaptive_shape = (*shape[:2], *output_size)
        families = {
            f"max_pool{nd}d": (
                lambda x, f=pool, a=window, **kw: f(x, *a, **kw),
                lambda g, x, i, f=pool_backward, a=window, **kw: f(g, x, i, *a, **kw),
                out_shape,
            ),
            f"adaptive_max_pool{nd}d": (
                lambda x, f=adaptive, o=output_size, **kw: f(x, o, **kw),
                lambda g, x, i, f=adaptive_backward, **kw: f(g, x, i, **kw),
                adaptive_shape,
            ),
        }
        for family, (forward, backward, pooled_shape) in families.items():
            add(
                Case(
                    f"{family} forward",
                    forward,
                    [shape],
                    kind="forward",
                    deterministic=True,
                )
            )
            _add_backwards(add, family, backward, pooled_shape, shape)
            implementations = [("xla", "auto"), ("xla", "scatter"), ("xla", "gather")]
            implementations.append(("pallas", "auto"))
            for implementation, algorithm in implementations:
                add(
                    Case(
                        f"{family} grad {algorithm} {implementation}",
                        _grad(
                            forward, algorithm=algorithm, implementation=implementation
                        ),
                        [shape],
                        kind="grad",
                        deterministic=algorithm != "scatter",
                        pallas=implementation == "pallas",
                    )
                )
            add(
                Case(
                    f"{family} forward pallas",
                    functools.partial(forward, implementation="pallas"),
                    [shape],
                    kind="forward",
                    deterministic=True,
                    pallas=True,
                )
            )

        def unpooled(x, i, unpool=unpool, size=shape[2:]):
            return unpool(x, i, output_size=size)

        add(
            Case(
                f"max_unpool{nd}d forward",
                unpooled,
                [out_shape, (out_shape, jnp.int32)],
                kind="forward",
                deterministic=False,  # a scatter, of distinct indices
            )
        )
        add(
            Case(
                f"max_unpool{nd}d grad",
                jax.grad(lambda x, i, f=unpooled: jnp.sum(f(x, i) ** 2)),
                [out_shape, (out_shape, jnp.int32)],
                kind="grad",
                deterministic=False,
            )
        )
    for nd, (shape, kernel, output_size) in FRACTIONAL.items():
        pool = getattr(jaxpool, f"fractional_max_pool{nd}d")
        pool_backward = getattr(jaxpool, f"fractional_max_pool{nd}d_backward")
        samples = (*shape[:2], nd)
        pooled_shape = (*shape[:2], *output_size)

        def forward(x, u, f=pool, k=kernel, o=output_size, **kw):
            return f(x, k, o, samples=u, **kw)

        name = f"fractional_max_pool{nd}d"
        add(
            Case(
                f"{name} forward",
                forward,
                [shape, samples],
                kind="forward",
                deterministic=True,
            )
        )
        _add_backwards(add, name, pool_backward, pooled_shape, shape)
        for algorithm in ("auto", "scatter", "gather"):

            def grad(x, u, forward=forward, algorithm=algorithm):
                return _grad(lambda x, **kw: forward(x, u, **kw), algorithm=algorithm)(
                    x
                )

            add(
                Case(
                    f"{name} grad {algorithm} xla",
                    grad,
                    [shape, samples],
                    kind="grad",
                    deterministic=algorithm != "scatter",
                )
            )
    return cases


def _add_backwards(add, family, backward, pooled_shape, shape) -> None:
    """The standalone backward op of ``family`` with each algorithm."""
    for algorithm in ("scatter", "gather"):

        def standalone(g, x, i, algorithm=algorithm):
            return backward(g, x, i, algorithm=algorithm)

        add(
            Case(
                f"{family}_backward {algorithm}",
                standalone,
                [pooled_shape, shape, (pooled_shape, jnp.int32)],
                kind="backward",
                deterministic=algorithm == "gather",
            )
        )


def _abstract(shape):
    return jax.ShapeDtypeStruct(shape, jnp.float32)


def _grad(forward, **kw):
    """``jax.grad`` of a weighted sum of the pooled values."""

    def loss(x):
        values = forward(x, **kw)[0]
        w = jnp.asarray(np.linspace(-1, 1, values.size, dtype=np.float32))
        return jnp.sum(w.reshape(values.shape) * values)

    return jax.grad(loss)


CASE_SET = _cases()


@functools.cache
def _target(target: str) -> None:
    require("jax_cuda12_plugin" if target == "h200" else "libtpu")
    why = compiled.available(target)
    if why is not None:
        reason = f"no compile-only {target} here: {why}"
        if NO_SKIP:
            pytest.fail(f"{reason}; JAXPOOL_NO_SKIP=1 forbids skipping")
        pytest.skip(reason)


def _params():
    for target in compiled.TARGETS:
        for name, case in CASE_SET.items():
            if case.pallas and target != "h200":
                continue  # Pallas's kernels are Triton's: GPUs only
            yield pytest.param(target, name, id=f"{target}-{name}")


@pytest.mark.parametrize("target, name", list(_params()))
def test_compiles_with_its_promises(target, name):
    _target(target)
    case = CASE_SET[name]
    args = [
        compiled.on(target, *(s if isinstance(s[0], tuple) else (s,)))
        for s in case.shapes
    ]
    facts = compiled.compile_for(case.fn, args, target)
    assert facts["compiled"], facts["error"]
    # On a GPU whose jaxlib adds floats atomically, auto runs the scatter.
    gpu_auto = target == "h200" and " grad auto xla" in name
    native = _policy.gpu_scatter(_policy.environment(False))
    deterministic = case.deterministic and not (gpu_auto and native)
    ops = facts["ops"]
    assert ops["while"] == 0, "a while loop (the CPU's fusion boundary?)"
    strided = not any(f in name for f in ("adaptive", "unpool", "fractional"))
    if case.kind == "forward" and strided:
        assert ops["gather"] == 0, "a gather in the forward of strided windows"
    # A TPU picks a 2-D fractional pool's rows by one-hot matmuls
    # (_fractional.TPU_TAKES), in the forward and the deterministic backward.
    picks = case.kind == "forward" or " grad auto" in name or " grad gather" in name
    if target == "v5e" and name.startswith("fractional_max_pool2d") and picks:
        assert ops["gather"] == 0, "a gather in the TPU's 2-D fractional pool"
    irregular = name.startswith(("adaptive_max_pool2d", "adaptive_max_pool3d"))
    if target == "v5e" and irregular and " grad auto" in name:
        # Windows of two sizes have no dense TPU form: auto runs the scatter,
        # which a TPU runs one update at a time (the gather's fallback costs
        # 3.7x its bytes; docs/performance.md). The 1-D case, 16 -> 5, is
        # regular (width 4, stride 3): the dense form.
        assert ops["scatter"] == 1, "auto's TPU form for adaptive windows"
    elif deterministic:
        assert ops["scatter"] == 0, "a scatter in a deterministic program"
    if target == "h200":
        if deterministic:
            assert facts["atomics"] == 0, "atomics in a deterministic program"
        elif "unpool" not in name:
            assert facts["atomics"] > 0, "the scatter's atomics went unseen"
        assert bool(facts["triton"]) == case.pallas, facts["kernels"]
        if case.pallas:
            assert facts["triton_calls"] == len(facts["triton"])
            spilled = {k: v for k, v in facts["registers"].items() if v["spill_bytes"]}
            assert not spilled, f"register spills: {spilled}"
        io = facts["argument_bytes"] + facts["output_bytes"]
        assert facts["temp_bytes"] <= TEMP_BOUND * io, (facts["temp_bytes"], io)


def test_the_checks_see_what_they_look_for():
    """The HLO and PTX readers count what they claim to: a scatter and a
    gather in hand-written HLO, a CAS loop and a float atomic in PTX lines."""
    hlo = """
  %gather.1 = f32[4]{0} gather(f32[8]{0} %a, s32[4,1]{1,0} %i), offset_dims={}
  ROOT %scatter-add.0 = f32[8]{0} scatter(%z, %i, %u), update_window_dims={}
  %w = (s32[], f32[8]) while((s32[], f32[8]) %t), condition=%c, body=%b
  %m = f32[8]{0} multiply(%a, %a), metadata={op_name="scatter(gather(x))"}
"""
    assert compiled.count_ops(hlo, "gather") == 1
    assert compiled.count_ops(hlo, "scatter") == 1
    assert compiled.count_ops(hlo, "while") == 1
    assert compiled.count_ops(hlo, "sort") == 0
    ptx = """
\tld.global.f32 \t%f1, [%rd1];
\tatom.relaxed.sys.global.cas.b32 \t%r5, [%rd5], %r97, %r96;
\tatom.relaxed.sys.global.add.f32 \t%f2, [%rd5], %f1;
\tred.global.add.u32 \t[%rd2], 1;
"""
    assert compiled.ptx_atomics(ptx) == {
        "atomics": 3,
        "cas_loops": 1,
        "float_atomic_adds": 1,
    }


def test_gpu_facts_without_ptx_are_unknown(tmp_path):
    """jaxlib 0.11.2 dumped no PTX on the lent H200: its atomics are unknown
    (``None``, shown as such), not "0 (0)", which says the program has none."""
    (tmp_path / "m.thunk_sequence.txt").write_text(
        "0: kernel] fusion grid: [4, 1, 1]\n"
    )
    facts = compiled._gpu_facts(tmp_path, "ROOT %fusion = f32[8]{0} fusion(%a)")
    assert facts["kernels"] == ["fusion [4,1,1]"]
    assert facts["atomics"] is None and facts["cas_loops"] is None
    (tmp_path / "m.ptx").write_text("\tatom.global.add.f32 \t%f2, [%rd5], %f1;\n")
    facts = compiled._gpu_facts(tmp_path, "")
    assert (facts["atomics"], facts["float_atomic_adds"]) == (1, 1)


@pytest.mark.parametrize("row", BUDGETS["forward_floor"], ids=_label)
def test_tpu_forward_costs_near_its_floor(row):
    """On the benchmark shapes, XLA's TPU cost model rates the forward (values
    and indices) within the row's bound of its floor, ``lax.reduce_window``'s
    values-only bytes plus the int32 indices', with no temporaries
    (``benchmarks/targets/tpu_v5e.toml``, ``forward_floor``)."""
    _target("v5e")
    label, shape, window, _ = _pool_row(row)
    bound = row["bound"]
    programs = compiled.pool_programs(label, shape, *window)
    forward, ref = _on_v5e(programs, label, "forward", "reduce_window forward")
    indices = math.prod(_pooled_shape(shape, window)) * 4
    floor = ref["bytes_accessed"] + indices
    assert forward["bytes_accessed"] <= bound * floor
    assert forward["temp_bytes"] == 0


def test_tpu_adaptive_forward_bytes_do_not_grow_with_the_output():
    """Adaptive windows of two sizes along the axis in the TPU's lanes are one
    window reduction over that axis dilated (``_reduce.stage``): XLA's
    TPU cost model rates the forward within a small multiple of the input's
    bytes, with no gather (``benchmarks/targets/tpu_v5e.toml``,
    ``adaptive_forward``; read as a run of a copy of the axis, each window
    was a slice padded to whole lanes: 106 times the input)."""
    _target("v5e")
    row = BUDGETS["adaptive_forward"]
    label, shape = row["label"], tuple(row["shape"])
    programs = compiled.adaptive_programs(label, shape, tuple(row["output_size"]))
    (forward,) = _on_v5e(programs, label, "forward")
    assert forward["bytes_accessed"] <= row["input_multiple"] * math.prod(shape) * 4
    assert compiled.count_ops(forward["hlo"], "gather") == 0


def _on_v5e(programs, label: str, *names: str) -> list[dict]:
    """The facts of the programs ``f"{label} {name}"`` of ``programs`` (the
    benchmark script's), compiled for the v5e."""
    by_name = {p.name: p for p in programs}
    facts = []
    for name in names:
        program = by_name[f"{label} {name}"]
        facts.append(compiled.compile_for(*program.build("v5e"), "v5e"))
        assert facts[-1]["compiled"], (name, facts[-1]["error"])
    return facts


def _pooled_shape(shape, window):
    k, s, p = window
    return (*shape[:2], *((n + 2 * p - k) // s + 1 for n in shape[2:]))


def test_lane_axis_is_xlas_default():
    """``layout.lane_axis`` predicts the axis XLA's TPU default layout keeps in
    the lanes, which decides whether the dense backward moves its planes
    (``layout.planes_minor``: not where a channels-last array's channels or
    any array's batch take the lanes): the one that pads them least, the
    last of equals (a v5e's entry layouts, channels-first and channels-last;
    31 shapes agreed when it was written)."""
    _target("v5e")
    shapes = [
        (32, 112, 112, 64),  # W: 112 pads 128 less than 64
        (32, 56, 56, 64),  # C: 64 pads less than 56
        (8, 64, 64, 64, 32),  # W of equal D, H, W
        (8, 32, 32, 32, 32),  # C: the last of equals
        (32, 1000, 64),
        (32, 256, 28, 28),  # C, channels-first
        (32, 64, 112, 112),
        (2, 9, 10, 11, 6),
        (256, 1000, 64),  # N: a batch of 256 fills the lanes
        (256, 64, 1000),  # N, channels-first
        (128, 14, 14, 64),  # N
    ]
    for shape in shapes:
        program = jax.jit(lambda x: x + 1).lower(compiled.on("v5e", shape))
        text = program.compile().as_text()
        entry = re.search(r"entry_computation_layout=\{\(f32\[[\d,]*\]\{(\d+)", text)
        assert entry is not None, text[:500]
        assert int(entry.group(1)) == layout.lane_axis(shape), shape


@pytest.mark.parametrize("name", tpu_rules.RULES)
def test_tpu_rules_compile_both_ways_and_report_the_rule(name):
    """``benchmarks/tpu_rules.py``, the measure behind three rules of the TPU's
    forms (``layout.coded`` at stride 1, ``layout.planes_minor`` where the
    batch takes the lanes, ``layout.row_windows``): its two programs are the
    two forms (different bytes), the rule's own is named and its program is
    the one ``"auto"`` compiles, and the rule is left as it was."""
    _target("v5e")
    rule = tpu_rules.RULES[name]
    own = getattr(layout, rule.function)
    label, shape, window, options = rule.quick[0]
    row = tpu_rules.measure(rule, label, shape, window, options)
    assert getattr(layout, rule.function) is own
    assert row["taken"] == rule.forms[1][0]  # tap numbers; planes in place; rows
    assert row[rule.forms[0][0]] != row[rule.forms[1][0]], row
    programs = compiled.pool_programs(label, shape, *window, pallas=False, **options)
    (auto,) = _on_v5e(programs, label, "step auto")
    assert auto["bytes_accessed"] / 1e6 == row[row["taken"]], (auto, row)


@pytest.mark.parametrize("row", BUDGETS["train_step"], ids=_label)
def test_tpu_train_step_costs_no_more_than_the_builtin(row):
    """``jax.grad``'s ``"auto"`` on a v5e is the dense gather (no scatter, no
    gather, no select-and-scatter) over the (n, c) planes moved to the minor
    axis where that pads the TPU's tiles less, by tap number where strides
    exceed 1; XLA's cost model rates its bytes and temporaries within the
    row's ratios of ``jax.grad`` through ``lax.reduce_window``, whose
    select-and-scatter selects in an order of its own
    (``benchmarks/targets/tpu_v5e.toml``, ``train_step``; about a minute of
    compiling a row)."""
    _target("v5e")
    label, shape, window, options = _pool_row(row)
    options = {"dtype": jnp.float32, "pallas": False, **options}
    programs = compiled.pool_programs(label, shape, *window, **options)
    step, ref = _on_v5e(programs, label, "step auto", "reduce_window step")
    for op in ("select-and-scatter", "scatter", "gather", "sort"):
        assert compiled.count_ops(step["hlo"], op) == 0, op
    figures = (step["bytes_accessed"], step["temp_bytes"])
    most = (
        row["bytes"] * ref["bytes_accessed"],
        row["temporaries"] * ref["temp_bytes"],
    )
    assert figures[0] <= most[0] and figures[1] <= most[1], (figures, most)


@pytest.mark.parametrize(
    "row", BUDGETS["value_and_grad"], ids=lambda row: f"{row['label']} {row['dtype']}"
)
def test_tpu_resnet_stem_step_that_reads_the_values_is_at_parity(row):
    """Where the loss is returned too (``jax.value_and_grad``), as a network
    reads the pool's values, ``lax.reduce_window``'s step runs its forward as
    well: there Flax's ResNet-stem pool costs a v5e at most the row's share of
    the builtin's bytes and temporaries (``benchmarks/targets/tpu_v5e.toml``,
    ``value_and_grad``)."""
    _target("v5e")
    label, shape, window, options = _pool_row(row)
    programs = compiled.pool_programs(label, shape, *window, pallas=False, **options)
    step, ref = _on_v5e(
        programs, label, "value_and_grad auto", "reduce_window value_and_grad"
    )
    assert step["bytes_accessed"] <= row["bytes"] * ref["bytes_accessed"]
    assert step["temp_bytes"] <= row["temporaries"] * ref["temp_bytes"]


@pytest.mark.parametrize("label", BUDGETS["networks"]["labels"])
def test_tpu_network_pool_step_that_reads_the_values_is_at_parity(label):
    """Pools of common networks (``benchmarks/compiled.py --networks``): on a
    small grid with many channels the gradient alone costs 1.6-2.8x the
    builtin's bytes (one select-and-scatter), but the step that reads the
    values costs a v5e at most the budget's share of the builtin's
    (``benchmarks/targets/tpu_v5e.toml``, ``networks``), with no scatter,
    gather, while or sort."""
    _target("v5e")
    step, ref = _on_v5e(
        compiled.network_programs(),
        label,
        "value_and_grad auto",
        "reduce_window value_and_grad",
    )
    most = BUDGETS["networks"]["bytes"]
    assert step["bytes_accessed"] <= most * ref["bytes_accessed"]
    assert not any(step["ops"].values()), step["ops"]


def test_context_programs_hold_the_pool_between_convolutions():
    """``benchmarks/compiled.py --context`` (quick: one tiny case): the two
    programs are the same network's train step, the weights' and the
    input's gradients through two convolutions, and differ in the pool:
    the builtin's select-and-scatter, or jaxpool's dense gather (its
    variadic window reduction, no select-and-scatter, scatter or gather)."""
    _target("v5e")
    programs = compiled.context_programs(quick=True)
    assert [p.reference for p in programs] == [None, programs[0].name]
    ref, step = (compiled.compile_for(*p.build("v5e"), "v5e") for p in programs)
    for facts in (ref, step):
        assert facts["compiled"], facts["error"]
        # Each convolution's forward and its two gradients.
        assert compiled.count_ops(facts["hlo"], "convolution") >= 4
    assert compiled.count_ops(ref["hlo"], "select-and-scatter") == 1
    assert compiled.count_ops(step["hlo"], "select-and-scatter") == 0
    assert not any(step["ops"].values()), step["ops"]
    windows = re.findall(
        r"= \(\w+\[[\d,]*\][^ ]*, s8\[[^=]*reduce-window\(", step["hlo"]
    )
    assert len(windows) == 1, windows


# ------------------------------------------------------- the GPU's "auto"

GPU_CASE = "max_pool3d grad auto xla"


def _compile_case(name: str, target: str) -> dict:
    case = CASE_SET[name]
    args = [compiled.on(target, s) for s in case.shapes]
    facts = compiled.compile_for(case.fn, args, target)
    assert facts["compiled"], facts["error"]
    return facts


@pytest.mark.parametrize("jaxlib", [(0, 10, 2), (0, 11, 0), (0, 11, 1), (0, 12, 0)])
def test_gpu_auto_follows_the_installed_jaxlib(monkeypatch, retrace, jaxlib):
    """``jax.grad``'s ``"auto"`` for overlapping windows on a GPU: the scatter
    from the jaxlib whose float scatter-add is a native atomic (0.11.1), the
    deterministic gather (no scatter, no atomic) before it. The compiled
    program is the installed jaxlib's; the rule reads ``_policy.JAXLIB``."""
    _target("h200")
    monkeypatch.delenv("XLA_FLAGS", raising=False)
    monkeypatch.setattr(_policy, "JAXLIB", jaxlib)
    facts = _compile_case(GPU_CASE, "h200")
    native = jaxlib >= (0, 11, 1)
    assert facts["ops"]["scatter"] == int(native)
    assert (facts["atomics"] > 0) == native


DETERMINISM = """
import json, sys
sys.path.insert(0, {benchmarks!r})
import compiled, jax, jax.numpy as jnp, jaxpool
from jaxpool import _policy
_policy.JAXLIB = (0, 12, 0)  # a jaxlib with native float atomics
out = {{}}
for algorithm in ("auto", "scatter"):
    def loss(x, algorithm=algorithm):
        values = jaxpool.max_pool3d_with_argmax(x, 3, 2, 1, algorithm=algorithm)[0]
        return jnp.sum(values * values)
    facts = compiled.compile_for(jax.grad(loss), [compiled.on("h200", {shape})], "h200")
    out[algorithm] = {{k: facts.get(k) for k in ("error", "ops", "atomics", "kernels")}}
print(json.dumps(out))
"""


@pytest.mark.parametrize("flag", _policy.DETERMINISM_FLAGS)
def test_gpu_determinism_flags_select_the_gather(flag):
    """With either of XLA's determinism flags in ``XLA_FLAGS`` (read once, so
    in a fresh process), ``"auto"`` runs the deterministic gather even where
    the scatter's adds are native: no scatter and no atomic in its program.
    The negative control: an explicit ``"scatter"`` under the same flag is
    what XLA then compiles, a sort-based scatter."""
    _target("h200")
    script = DETERMINISM.format(benchmarks=str(BENCHMARKS), shape=CASES[3][0])
    env = {**os.environ, "XLA_FLAGS": f"--{flag}=true", "JAX_PLATFORMS": "cpu"}
    run = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    facts = json.loads(run.stdout.strip().splitlines()[-1])
    auto, control = facts["auto"], facts["scatter"]
    assert auto["error"] is None and control["error"] is None, facts
    assert auto["ops"]["scatter"] == 0 and auto["atomics"] == 0, auto
    assert auto["ops"]["sort"] == 0
    assert control["ops"]["sort"] > 0, control
    assert len(control["kernels"]) > len(auto["kernels"])


def test_tpu_step_under_a_mesh_moves_no_arrays():
    """A bfloat16 train step sharded over (N, C) on a v5e 2x2, with Explicit
    and Auto axes: no collective in the compiled program (under a mesh the
    TPU's backward is XLA's covering sum, local to each plane)."""
    _target("v5e")
    from jax.experimental import topologies
    from jax.sharding import AxisType, Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    devices = topologies.get_topology_desc("v5e:2x2", "tpu").devices
    collective = re.compile(
        r"\s(all-gather|all-to-all|collective-permute|reduce-scatter|all-reduce)"
        r"(?:-start)?\("
    )

    def loss(x, w):
        values = jaxpool.max_pool3d_with_argmax(x, 3, 2, 1)[0]
        return jnp.sum(w * values.astype(jnp.float32))

    for kind in (AxisType.Explicit, AxisType.Auto):
        mesh = Mesh(np.array(devices).reshape(2, 2), ("n", "c"), axis_types=(kind,) * 2)
        planes = NamedSharding(mesh, P("n", "c"))
        x = jax.ShapeDtypeStruct((4, 4, 8, 8, 8), jnp.bfloat16, sharding=planes)
        w = jax.ShapeDtypeStruct((4, 4, 4, 4, 4), jnp.float32, sharding=planes)

        with jax.set_mesh(mesh):
            step = jax.jit(jax.grad(loss)).trace(x, w).lower().compile().as_text()
        assert collective.findall(step) == [], kind


@pytest.mark.parametrize(
    "label, shape, dtype",
    [
        ("8x32x64³ k3 s2 p1", (8, 32, 64, 64, 64), jnp.float32),
        ("8x32x64³ k3 s2 p1", (8, 32, 64, 64, 64), jnp.bfloat16),
        ("32x64x112² k3 s2 p1", (32, 64, 112, 112), jnp.float32),
    ],
)
def test_tpu_ops_rows_add_up_to_the_cost_model(label, shape, dtype):
    """``benchmarks/tpu_ops.py``, which the performance record's per-op
    accounts come from, counts each array as XLA's TPU cost model does, its
    two minor axes padded to whole tiles of 8 rows x 128 lanes: on the
    forwards of a 3-D pool (float32 with int8 codes, bfloat16) and a 2-D one,
    and on their ``reduce_window`` references, its rows add up to the cost
    model's bytes, to within 64 KB of 0.3-1.1 GB (the cost model charges a
    few scalar-sized reads of its own: 4.6 KB). Unpadded (W = 64 in 128
    lanes) they fall short by half or more; with the 8-bit codes' rows padded
    to 32, as four to a 32-bit word would store them, the 2-D forward's
    (W = 112 rows) come to 18 MB more."""
    _target("v5e")
    programs = compiled.pool_programs(label, shape, 3, 2, 1, pallas=False, dtype=dtype)
    for facts in _on_v5e(programs, label, "forward", "reduce_window forward"):
        ops = tpu_ops.entry_ops(facts["hlo"])
        assert ops and {"reduce-window"} <= {op.opcode for op in ops}
        rows = sum(op.read + op.written for op in ops)
        assert abs(rows - facts["bytes_accessed"]) <= 2**16, (
            rows,
            facts["bytes_accessed"],
        )


def test_tpu_ops_prints_each_op_and_both_totals(capsys):
    """``benchmarks/tpu_ops.py``'s command line: a program's rows (the
    window reduction of the 3-D builtin forward reads the 537 MB input, W =
    64 in 128 lanes, and writes 134 MB) and the two totals; a pattern that
    names no program is an error."""
    _target("v5e")
    assert tpu_ops.main(["--programs", "^8x32x64³ k2 s2 reduce_window forward$"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"536\.9 \+ +134\.2  reduce-window", out), out
    assert "the rows: 671.1 MB; the cost model: 671.1 MB" in out, out
    assert tpu_ops.main(["--programs", "no such program"]) == 1


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_tpu_one_dimensional_pools_in_rows_cost_no_more_bytes(dtype, monkeypatch):
    """A 1-D pool of disjoint windows whose planes and axis fill whole rows of
    the TPU's tiles is reduced in those rows (``layout.row_windows``): the
    view of the input and of the results are bitcasts (no copy, no
    transpose), and XLA's cost model rates the forward and the train step at
    no more bytes than the same programs reduced along the whole axis (which
    compile several times slower: the performance record)."""
    _target("v5e")
    shape = (2, 16, 1280)  # 5 rows of 256 positions, 128 windows each

    def programs():
        def pool(x):
            return jaxpool.max_pool1d_with_argmax(x, 2, 2)

        def step(x):
            return jax.grad(lambda x: jnp.sum(pool(x)[0].astype(jnp.float32) ** 2))(x)

        arg = [compiled.on("v5e", shape, dtype)]
        jax.clear_caches()
        facts = [compiled.compile_for(f, arg, "v5e") for f in (pool, step)]
        assert all(f["compiled"] for f in facts), facts
        return facts

    rows = programs()
    reductions = re.findall(r"= \(\w+\[([\d,]+)\].*? reduce-window\(", rows[0]["hlo"])
    assert reductions and all(r.endswith(",5,8,128") for r in reductions), reductions
    for op in ("copy", "transpose"):
        assert compiled.count_ops(rows[0]["hlo"], op) == 0, op
    monkeypatch.setattr(layout, "row_windows", lambda shape, spec: None)
    whole = programs()
    for what, a, b in zip(("forward", "step"), rows, whole, strict=True):
        assert a["bytes_accessed"] <= b["bytes_accessed"], (what, a, b)


# ------------------------------------------------------------ program sizes

import compile_time  # noqa: E402

SIZES_FILE = BENCHMARKS / "targets" / "program_size.json"
SIZES = json.loads(SIZES_FILE.read_text())
# Over the recorded counts: another jax's passes fuse a few instructions
# differently. A program that grows with the window's volume again is many
# times its budget (the H200's 3-D k7 s1 p3 train step held 5,354 when its
# forward scanned the taps).
HEADROOM = 1.1
# The table's programs in groups that compile in similar times.
SIZE_GROUPS = {
    "pools 1-D 2-D": r"^[12]-D k\d s\d( p\d)?( d2)? (forward|step)$",
    "pools 3-D": r"^3-D k\d s\d( p\d)?( d2)? (forward|step)$",
    "adaptive": r"adaptive",
    "fractional": r"fractional",
    "composites": r"backward|Hessian|unpool|per-example",
}


def _over_budget(target: str, found: dict[str, int]) -> list[str]:
    budgets = SIZES[target]
    assert set(found) <= set(budgets), f"programs missing from {SIZES_FILE}"
    return [
        f"{name}: {n} instructions, over {budgets[name]} (+{HEADROOM - 1:.0%})"
        for name, n in found.items()
        if n > HEADROOM * budgets[name]
    ]


@pytest.mark.parametrize("group", list(SIZE_GROUPS))
@pytest.mark.parametrize("target", ["cpu", "h200", "v5e", "mesh"])
def test_programs_hold_their_size(target, group):
    """Each program of ``benchmarks/compile_time.py``'s table compiles to no
    more optimized HLO instructions than its budget: a program's size is
    what its compile time follows, and unlike a time it is no noise."""
    if target in ("h200", "v5e"):
        _target(target)
    chosen = [
        p for p in compile_time.programs() if re.search(SIZE_GROUPS[group], p.name)
    ]
    assert chosen, group
    over = _over_budget(target, compile_time.sizes(target, chosen))
    assert not over, (
        f"{target}: programs over their size budgets in {SIZES_FILE}: "
        + "; ".join(over)
        + " (if the growth is meant: compile_time.py --budgets)"
    )


def test_a_program_over_its_budget_is_reported():
    """The check fails a program past its budget and its headroom, and
    names it."""
    name = next(iter(SIZES["cpu"]))
    budget = SIZES["cpu"][name]
    assert _over_budget("cpu", {name: budget}) == []
    assert name in _over_budget("cpu", {name: int(budget * HEADROOM) + 1})[0]


def test_budgets_take_the_measured_programs_alone(tmp_path, monkeypatch):
    """``compile_time.py --merge --budgets`` writes the budgets of the
    programs it measured and leaves every other one as it was: not the
    merged table's counts, which may be older than the budgets (it once
    wrote them over every budget of the target)."""
    table, budgets = tmp_path / "table.json", tmp_path / "budgets.json"
    old = {"jaxpool_s": 1, "builtin_s": 1, "ratio": 1, "builtin_instructions": 1}
    rows = [
        {"target": "cpu", "program": p, "jaxpool_instructions": 1, **old}
        for p in ("1-D k2 s2 forward", "1-D k2 s2 step")
    ]
    table.write_text(json.dumps({"header": "a table", "rows": rows}))
    budgets.write_text(
        json.dumps({"cpu": {"1-D k2 s2 forward": 5, "1-D k2 s2 step": 7}})
    )
    monkeypatch.setattr(compile_time, "BUDGETS", budgets)
    argv = ["--targets", "cpu", "--programs", "^1-D k2 s2 forward$", "--repeats", "1"]
    argv += ["--json", str(table), "--merge", "--budgets"]
    monkeypatch.setattr(sys, "argv", ["compile_time.py", *argv])
    compile_time.main()
    written = json.loads(budgets.read_text())["cpu"]
    measured = json.loads(table.read_text())["rows"][0]["jaxpool_instructions"]
    assert written == {"1-D k2 s2 forward": measured, "1-D k2 s2 step": 7}
    assert measured > 5  # measured: neither the budget nor the table's count


def test_size_groups_cover_the_table():
    names = [p.name for p in compile_time.programs()]
    for target, budgets in SIZES.items():
        assert set(budgets) == set(names), f"{SIZES_FILE}: {target}"
    for name in names:
        hits = [g for g, pattern in SIZE_GROUPS.items() if re.search(pattern, name)]
        assert len(hits) == 1, (name, hits)
