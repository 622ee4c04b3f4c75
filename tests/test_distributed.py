"""Training across processes: two processes of 4 CPU devices each, joined by
``jax.distributed`` on localhost (gloo), run one SegNet step sharded over
batch and depth (tests/distributed_main.py), and every process's shards of
the loss, indices and gradients equal the step on one device."""

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

MAIN = Path(__file__).resolve().parent / "distributed_main.py"

# The full tier: two JAX processes and gloo's rendezvous, about 10 s.
pytestmark = pytest.mark.full


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def test_two_processes_train_one_step_as_one_device():
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    runs = [
        subprocess.Popen(
            [sys.executable, str(MAIN), str(port), str(process)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for process in (0, 1)
    ]
    outputs = []
    for run in runs:
        try:
            out, err = run.communicate(timeout=240)
        finally:
            run.kill()
        assert run.returncode == 0, err[-3000:]
        outputs.append(json.loads(out.strip().splitlines()[-1]))
    assert [o["process"] for o in outputs] == [0, 1]
    assert not set(outputs[0]["devices"]) & set(outputs[1]["devices"])
    for o in outputs:
        assert o["shards"] == 4  # each process holds half of the 8 shards
        assert o["indices_equal"] and o["loss_close"], o
        assert o["grad_x_close"] and o["grad_kernel_close"], o
        assert o["indices_sharded"] and o["grad_x_sharded"], o
        # Halos of the depth axis, and the loss's and the kernel's gradient's
        # sums: no array gathered.
        assert set(o["collectives"]) <= {"collective-permute", "all-reduce"}, o
