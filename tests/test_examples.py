"""Each example script runs and prints what it promises."""

import subprocess
import sys
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


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
