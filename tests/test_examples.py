"""Each example script runs and does what it promises (learning included)."""

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import require

# The full tier (tests/conftest.py): the examples train for a while.
pytestmark = [pytest.mark.full, pytest.mark.forms("cpu")]

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_quickstart():
    result = subprocess.run(
        [sys.executable, str(EXAMPLES / "quickstart.py")],
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    )
    assert "matches jaxpool.reference: yes" in result.stdout
    assert "ones at the 16 argmax positions" in result.stdout
    assert "gradient sums to 36.0" in result.stdout


def test_train_3d_cnn_learns():
    for dep in ("flax", "optax", "tqdm"):
        require(dep)
    result = _load("train_3d_cnn").main(["--steps", "60"])
    # 60 steps of batch 32: held-out loss falls clearly, accuracy leaves chance.
    assert result["end_loss"] < 0.7 * result["start_loss"], result
    assert result["end_accuracy"] >= 0.75, result


def test_segnet_unpool_learns_and_saves_a_png(tmp_path):
    for dep in ("flax", "optax", "tqdm", "matplotlib"):
        require(dep)
    out = tmp_path / "segnet.png"
    result = _load("segnet_unpool").main(["--steps", "60", "--out", str(out)])
    assert result["end_loss"] < 0.3 * result["start_loss"], result
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_keras_segnet_learns_saves_and_loads(tmp_path):
    require("keras")
    out = tmp_path / "segnet.keras"
    result = _load("keras_segnet").main(
        ["--epochs", "4", "--train", "256", "--out", str(out)]
    )
    # 32 steps: the held-out loss falls by half or more; the saved model loads
    # (its jaxpool layers registered) and predicts the same, bit for bit.
    assert result["end_loss"] < 0.5 * result["start_loss"], result
    assert result["reloaded_same"] == 1.0, result
