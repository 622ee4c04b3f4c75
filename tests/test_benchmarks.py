"""The benchmark scripts keep working: each runs once on tiny shapes."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


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


@pytest.mark.parametrize(
    "script", ["bench_max_pool3d.py", "bench_adaptive_max_pool2d.py"]
)
def test_benchmark_smoke(tmp_path, script):
    rows = run_script(tmp_path, script, "--quick")
    figures = {(r["figure"], r["contender"]) for r in rows}
    assert ("forward", "jaxpool") in figures
    assert ("backward", "jaxpool gather") in figures
    assert all(r["median_ms"] > 0 for r in rows if "median_ms" in r)
    assert "forward temp memory" in {r["figure"] for r in rows}


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


def test_profile_smoke(tmp_path):
    """The per-op profile finds XLA ops with time in every program."""
    rows = run_script(tmp_path, "profile_ops.py", "--quick", "--calls", "2")
    assert {r["figure"] for r in rows} == {"forward", "backward", "train step"}
    assert len(rows) == 6  # one 3-D pool and one adaptive head, three programs
    for row in rows:
        assert row["wall_ms"] > 0 and row["ops"], row
        assert all(us >= 0 for _, us in row["ops"])
    backward = next(r for r in rows if r["figure"] == "backward")
    assert any("scatter" in op for op, _ in backward["ops"])
