"""``python -m jaxpool.verify``: passes on the real ops, fails on a broken one."""

import inspect
import io
import json

import numpy as np
import pytest
from helpers import require

from jaxpool import _scan, verify

# The CPU's forms alone: these tests check the CPU's numbers; the other
# platforms' forms are traced and run in their own tests (tests/conftest.py).
pytestmark = pytest.mark.forms("cpu")


def test_verify_passes_on_every_op(tmp_path):
    out = io.StringIO()
    # float64: the finite-difference rows run only there.
    rows = verify.run(list(verify.OPS), ["float64"], True, False, out)
    assert {r.op for r in rows} == set(verify.OPS)
    assert rows and all(r.passed for r in rows), [r for r in rows if not r.passed]
    checks = {r.check for r in rows}
    assert "grad vs finite differences (rel err)" in checks
    assert "backward op vs float64 scatter (max abs err)" in checks
    assert "FAIL" not in out.getvalue()
    path = tmp_path / "rows.json"
    argv = ["--quick", "--dtype", "float32", "--no-torch", "--op", "max_unpool2d"]
    assert verify.main([*argv, "--device", "cpu", "--json", str(path)]) == 0
    assert all(r["passed"] for r in json.loads(path.read_text()))


def test_verify_compares_with_torch():
    require("torch")
    out = io.StringIO()
    ops = [
        "max_pool2d_with_argmax",
        "adaptive_max_pool3d",
        "max_unpool1d",
        "fractional_max_pool2d",
    ]
    rows = verify.run(ops, ["float32"], True, True, out)
    checks = {r.check for r in rows}
    assert "values, indices == torch (mismatches)" in checks
    assert "grad vs torch (max abs err)" in checks
    assert "unpool == torch (mismatches)" in checks
    assert all(r.passed for r in rows), [r for r in rows if not r.passed]


def test_verify_reports_a_wrong_tie_rule(monkeypatch, retrace, capsys):
    """Break the kernel's tie rule (the last maximum wins instead of the first):
    the tool must report FAIL and exit non-zero."""
    assert "(value > best)" in inspect.getsource(_scan._replaces)
    monkeypatch.setattr(
        _scan, "_replaces", lambda value, best: (value >= best) | (value != value)
    )
    argv = ["--quick", "--dtype", "float32", "--no-torch"]
    assert verify.main([*argv, "--op", "max_pool2d_with_argmax"]) == 1
    out = capsys.readouterr().out
    assert "indices == oracle (mismatches)" in out and "FAIL" in out


def test_verify_rejects_a_missing_device():
    with pytest.raises(SystemExit) as exit_info:
        verify.main(["--quick", "--device", "tpu"])
    assert exit_info.value.code == 2


def test_a_result_of_another_shape_or_dtype_is_a_failure_not_a_crash():
    """A kernel returning the wrong shape or dtype fails its row, naming both
    (rather than raising out of the comparison)."""
    check = verify._same("values", np.zeros((2, 3)), np.zeros((2, 2)))
    assert not check.passed and check.where == "(2, 3) float64 != (2, 2) float64"
    check = verify._same("indices", np.zeros(3, np.int64), np.zeros(3, np.int32))
    assert not check.passed and "int64 != (3,) int32" in check.where
    assert verify._mismatches(np.zeros(4), np.zeros(5)) == 5
