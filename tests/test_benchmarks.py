"""The benchmark scripts keep working: each runs once on tiny shapes."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


@pytest.mark.parametrize(
    "script", ["bench_max_pool3d.py", "bench_adaptive_max_pool2d.py"]
)
def test_benchmark_smoke(tmp_path, script):
    out = tmp_path / "rows.json"
    run = subprocess.run(
        [sys.executable, str(BENCHMARKS / script), "--quick", "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    rows = json.loads(out.read_text())["rows"]
    figures = {(r["figure"], r["contender"]) for r in rows}
    assert ("forward", "jaxpool") in figures and (
        "backward",
        "jaxpool gather",
    ) in figures
    assert all(r["median_ms"] > 0 for r in rows if "median_ms" in r)
    assert "forward temp memory" in {r["figure"] for r in rows}


def test_layout_benchmark_smoke(tmp_path):
    out = tmp_path / "rows.json"
    run = subprocess.run(
        [
            sys.executable,
            str(BENCHMARKS / "bench_layout.py"),
            "--quick",
            "--no-torch",
            "--json",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    rows = json.loads(out.read_text())["rows"]
    contenders = {(r["figure"], r["contender"]) for r in rows}
    for figure in ("forward", "train step"):
        for contender in ("native", "transpose", "channels-first"):
            assert (figure, contender) in contenders
    assert all(r["median_ms"] > 0 for r in rows)


def test_benchmark_takes_a_case_from_the_command_line(tmp_path):
    out = tmp_path / "rows.json"
    case = "((1, 3, 6, 5, 7), 3, 2, 1)"
    script = str(BENCHMARKS / "bench_max_pool3d.py")
    run = subprocess.run(
        [sys.executable, script, "--case", case, "--reps", "2", "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    rows = json.loads(out.read_text())["rows"]
    assert {r["shape"] for r in rows} == {"1x3x6x5x7 k3 s2 p1"}


def test_profile_smoke(tmp_path):
    """The per-op profile finds XLA ops with time in every program."""
    out = tmp_path / "profile.json"
    run = subprocess.run(
        [
            sys.executable,
            str(BENCHMARKS / "profile_ops.py"),
            "--quick",
            "--calls",
            "2",
            "--json",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    rows = json.loads(out.read_text())["rows"]
    assert {r["figure"] for r in rows} == {"forward", "backward", "train step"}
    assert len(rows) == 6  # one 3-D pool and one adaptive head, three programs
    for row in rows:
        assert row["wall_ms"] > 0 and row["ops"], row
        assert all(us >= 0 for _, us in row["ops"])
    backward = next(r for r in rows if r["figure"] == "backward")
    assert any("scatter" in op for op, _ in backward["ops"])
