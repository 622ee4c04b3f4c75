"""``python -m jaxpool.verify``: passes on the real ops, fails on a broken one."""

import io

import jaxpool
from jaxpool import verify


def test_verify_passes():
    out = io.StringIO()
    rows = verify.run(
        ["max_pool3d_with_argmax"], ["float32", "bfloat16"], True, True, out
    )
    assert rows and all(r.passed for r in rows)
    assert "FAIL" not in out.getvalue()
    assert verify.main(["--quick", "--dtype", "float32", "--no-torch"]) == 0


def test_verify_reports_a_broken_op(monkeypatch, capsys):
    real = jaxpool.max_pool3d_with_argmax

    def one_based(x, *args):  # a wrong index convention
        values, indices = real(x, *args)
        return values, indices + 1

    monkeypatch.setattr(jaxpool, "max_pool3d_with_argmax", one_based)
    assert verify.main(["--quick", "--dtype", "float32", "--no-torch"]) == 1
    assert "FAIL" in capsys.readouterr().out
