"""The benchmark scripts keep working: each runs once on tiny shapes."""

import itertools
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import jax
import pytest
from helpers import require

# The full tier (tests/conftest.py): the benchmarks run for a while.
pytestmark = pytest.mark.full

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))
import _timing  # noqa: E402
import reproducibility  # noqa: E402


def run_script(tmp_path, script: str, *args: str) -> list[dict]:
    """Run ``benchmarks/<script> *args --json FILE``; the rows it wrote."""
    out = tmp_path / "rows.json"
    run = subprocess.run(
        [sys.executable, str(BENCHMARKS / script), *args, "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(out.read_text())["rows"]


def test_layout_benchmark_smoke(tmp_path):
    rows = run_script(tmp_path, "bench_layout.py", "--quick", "--no-torch")
    contenders = {(r["figure"], r["contender"]) for r in rows}
    for figure in ("forward", "train step"):
        for contender in ("native", "transpose", "channels-first"):
            assert (figure, contender) in contenders
    assert all(r["median_ms"] > 0 for r in rows)


def test_benchmark_takes_a_case_from_the_command_line(tmp_path):
    case = "((1, 3, 6, 5, 7), 3, 2, 1)"
    rows = run_script(tmp_path, "bench_max_pool3d.py", "--case", case, "--reps", "2")
    assert {r["shape"] for r in rows} == {"1x3x6x5x7 k3 s2 p1"}


def test_distinct_counts_results_by_their_bits():
    """The reproducibility count compares bits where the results are: a
    signed zero or one changed element is a second result, in JAX and in
    torch; the same array every time is one."""
    jnp = jax.numpy
    signs = itertools.cycle([0.0, -0.0])
    steps = itertools.cycle([0, 1, 2])

    def zeros():
        return jnp.zeros(5).at[0].set(next(signs))

    def bumps():
        return jnp.ones(3, jnp.bfloat16).at[1].add(next(steps))

    assert reproducibility.distinct(zeros, 4) == (2, 0.0)
    assert reproducibility.distinct(bumps, 6) == (3, 2.0)
    assert reproducibility.distinct(lambda: jnp.ones(3), 5) == (1, 0.0)
    torch = require("torch")
    assert reproducibility.distinct(lambda: torch.ones(4) * next(signs), 4) == (
        2,
        0.0,
    )
    assert reproducibility.distinct(lambda: torch.ones(4) * next(steps), 4) == (
        3,
        2.0,
    )
    assert reproducibility.distinct(lambda: torch.zeros(4), 3) == (1, 0.0)


def test_interleaved_queues_calls_on_an_accelerator(monkeypatch):
    """On an accelerator each sample queues several calls and waits once, so
    that it times the device rather than one call's dispatch; the time is per
    call."""
    monkeypatch.setattr(_timing, "queue_depth", lambda: 3)
    calls, waits = [], []
    monkeypatch.setattr(_timing, "_ready", lambda out: waits.append(out))
    (timing,) = _timing.interleaved([lambda: calls.append(1) or len(calls)], 4, 1)
    assert len(calls) == 1 + 4 * 3
    assert waits == [1, 4, 7, 10, 13]  # the warm-up's, then each sample's last
    assert timing.median > 0


def _profile_rows(text: str, implementation: str) -> list:
    """``(figure, wall ms, [(op, us), ...])`` of each row that
    ``profile_ops.py`` printed for ``implementation``."""
    rows = []
    for line in text.split(f"implementation={implementation}\n", 1)[1].splitlines():
        if line.startswith("date="):  # the next run's
            break
        row = re.match(r".{28} (\S.*?)\s+wall\s+([\d.]+) ms \| us: (.*)$", line)
        if row:
            ops = [op.rsplit(" ", 1) for op in row[3].split(", ")]
            rows.append((row[1], float(row[2]), [(op, float(us)) for op, us in ops]))
    return rows


def test_gpu_check_runs_dry(tmp_path):
    """benchmarks/gpu_check.sh, the one prepared run for a lent GPU, works end
    to end: its dry mode runs every step on tiny shapes and the CPU, and
    writes the files the device tool can return (at most 8). Its benchmark
    steps are the benchmarks' smoke test (``--quick``, XLA's and Pallas's
    contenders and torch's)."""
    require("torch")  # the script measures against it
    out = tmp_path / "gpu_out"
    run = subprocess.run(
        ["bash", str(BENCHMARKS / "gpu_check.sh")],
        capture_output=True,
        text=True,
        timeout=600,
        # the script's python3 is this interpreter, activated or not
        env={
            **os.environ,
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
            "GPU_CHECK_DRY": "1",
            "OUT": str(out),
        },
    )
    assert run.returncode == 0, run.stderr[-3000:]
    files = sorted(p.name for p in out.iterdir())
    assert len(files) <= 8, files
    summary = (out / "summary.txt").read_text()
    assert "passed" in summary and "== done" in summary
    # The benchmarks' rows (--quick): their figures for each contender.
    for name in ("gpu_max_pool3d.json", "gpu_adaptive.json"):
        rows = json.loads((out / name).read_text())["rows"]
        assert {"jaxpool pallas", "jaxpool", "torch"} <= {r["contender"] for r in rows}
        figures = {(r["figure"], r["contender"]) for r in rows}
        assert ("forward", "jaxpool") in figures
        assert ("backward", "jaxpool gather") in figures
        if name == "gpu_max_pool3d.json":  # a train step of each backward auto may run
            assert {
                ("train step", f"jaxpool {a}") for a in ("scatter", "gather")
            } <= figures
        assert all(r["median_ms"] > 0 for r in rows if "median_ms" in r)
        assert "forward temp memory" in {r["figure"] for r in rows}
    assert "jaxpool pallas gather" in (out / "reproducibility.txt").read_text()
    profile = (out / "profile.txt").read_text()
    assert "torch forward" in profile
    # torch's profiler keeps CUPTI once it has run: every jaxpool program is
    # profiled before torch's.
    figures = [figure for figure, _, _ in _profile_rows(profile, "pallas")]
    first_torch = figures.index("torch forward")
    assert figures[first_torch:] == ["torch forward", "torch backward"] * 2, figures
    # The per-op profile of XLA's programs finds XLA ops with time in each:
    # one 3-D pool and one adaptive head, three programs each.
    rows = _profile_rows(profile, "xla")
    assert [figure for figure, _, _ in rows] == [
        "forward",
        "backward scatter",
        "train step",
    ] * 2, rows
    for _, wall_ms, ops in rows:
        assert wall_ms > 0 and ops and all(us >= 0 for _, us in ops), rows
    assert all(
        any("scatter" in op for op, _ in ops)
        for f, _, ops in rows
        if f == "backward scatter"
    )
    require("jax_cuda12_plugin")  # the compile-only H200 of the dry run
    facts = json.loads((out / "compiled.json").read_text())["rows"]
    pallas = [r for r in facts if r["program"].endswith("pallas")]
    assert pallas and all(r["compiled"] and r["triton"] for r in pallas), pallas


def test_side_by_side_compares_a_revision_with_the_working_tree():
    """The tree against its own HEAD: a row with both timings and compile
    times (the script fails where the two trees' outputs differ)."""
    run = subprocess.run(
        [
            *(sys.executable, str(BENCHMARKS / "side_by_side.py"), "--rev", "HEAD"),
            *("--cases", "8x16x32²", "--step", "--reps", "2"),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    rows = [line for line in run.stdout.splitlines() if "before" in line]
    assert len(rows) == 2 and "train steps" in rows[0], run.stdout
    assert re.search(
        r"fractional 8x16x32² .* now .* \(\d+\.\d\dx\); compiled in", rows[1]
    )
