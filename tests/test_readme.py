"""The README's Python examples run as written."""

import re
from pathlib import Path

from helpers import require

README = Path(__file__).resolve().parent.parent / "README.md"
# Blocks that use an optional dependency, by what they import.
OPTIONAL = {
    "from flax": "flax",
    "from jaxpool import linen": "flax",
    "jpeqx": "equinox",
}


def _blocks():
    return re.findall(r"```python\n(.*?)```", README.read_text(), re.S)


def _needs(block: str) -> set[str]:
    return {dep for marker, dep in OPTIONAL.items() if marker in block}


def test_readme_python_blocks_run():
    blocks = _blocks()
    assert blocks
    namespace: dict = {}
    for block in blocks:
        if not _needs(block):
            exec(compile(block, str(README), "exec"), namespace)
    assert namespace["grad_input"].shape == namespace["x"].shape
    assert namespace["restored"].shape == namespace["x"].shape
    assert namespace["grad_images"].shape == namespace["images"].shape
    assert namespace["v"].shape == (8, 25, 25, 64)
    assert namespace["grad_xs"].sharding.spec[:2] == ("n", "c")
    assert "holds 16 at position [0 0 1 1]" in namespace["err"].get()


def test_readme_layer_blocks_run():
    blocks = _blocks()
    optional = [b for b in blocks if _needs(b)]
    assert len(optional) == 3  # NNX, Linen, Equinox
    for dep in set().union(*map(_needs, optional)):
        require(dep)
    namespace: dict = {}
    exec(compile(blocks[0], str(README), "exec"), namespace)  # the imports
    for block in optional:
        exec(compile(block, str(README), "exec"), namespace)
    assert namespace["grads"]["conv"]["kernel"].shape == (3, 3, 3, 1, 8)
    assert namespace["pooled"].shape == (4, 2, 2, 16)
    assert namespace["batch"].shape == (4, 3, 8, 8, 8)
