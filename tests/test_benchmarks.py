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
