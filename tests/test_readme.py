"""The README's Python examples run as written."""

import re
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"


def test_readme_python_blocks_run():
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)
    assert blocks
    namespace: dict = {}
    for block in blocks:
        exec(compile(block, str(README), "exec"), namespace)
    assert namespace["grad_input"].shape == namespace["x"].shape
    assert namespace["grad_images"].shape == namespace["images"].shape
    assert namespace["grad_xs"].sharding.spec[:2] == ("n", "c")
