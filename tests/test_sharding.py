"""SPMD over 8 host devices: pooling and its backward move no arrays between them.

The scenarios run in a subprocess (tests/sharding_main.py), since the device
count flag only takes effect before JAX starts.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

MAIN = Path(__file__).resolve().parent / "sharding_main.py"
OPS = ["max_pool3d", "adaptive_max_pool2d"]
MESHES = ["auto", "explicit"]


@pytest.fixture(scope="module")
def results():
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    run = subprocess.run(
        [sys.executable, str(MAIN)],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr[-4000:]
    return json.loads(run.stdout)


@pytest.mark.parametrize("algorithm", ["scatter", "gather"])
@pytest.mark.parametrize("mesh", MESHES)
@pytest.mark.parametrize("op", OPS)
def test_sharded_train_step_moves_no_arrays(results, op, mesh, algorithm):
    r = results[f"{op}/{mesh}/{algorithm}"]
    assert r["array_traffic"] == []
    assert set(r["collectives"]) <= {"all-reduce"}  # the scalar loss only
    assert r["x_sharded"] and r["grad_sharded"] and r["grad_shards"] == 8
    assert r["loss_close"] and r["grad_equal"]  # the numbers of one device


@pytest.mark.parametrize("op", OPS)
def test_negative_control_merged_planes_are_flagged(results, op):
    # Auto axes: the same check sees the arrays move.
    auto = results[f"{op}/auto/merged"]
    assert auto["array_traffic"], "the checker missed a merged N*C scatter"
    assert {"all-gather"} <= set(auto["collectives"])
    assert not auto["grad_sharded"]
    # Explicit axes: the bad layout is refused at trace time instead.
    assert results[f"{op}/explicit/merged"]["raised"] == "ShardingTypeError"


@pytest.mark.parametrize("op", OPS)
def test_shard_map(results, op):
    r = results[f"{op}/shard_map"]
    assert r["collectives"] == [] and r["equal"]
