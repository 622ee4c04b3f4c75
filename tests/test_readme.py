"""The README's and the docs' Python examples run as written, and do what
their text says.

Every ```python block runs on its own (each imports what it uses); a block
that imports an optional dependency needs it. Blocks are found by what they
are, not where they stand: each expectation below applies to whichever block
defines its name, and every expectation must meet a block.
"""

import re
from pathlib import Path

import jax
import numpy as np
import pytest
from helpers import require

ROOT = Path(__file__).resolve().parent.parent
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
OPTIONAL = {
    "flax": "flax",
    "equinox": "equinox",
    "torch": "torch",
    "torchax": "torchax",
    "keras": "keras",
    "tensorflow": "tensorflow",
}


def _blocks(path: Path) -> list[str]:
    return re.findall(r"```python\n(.*?)```", path.read_text(), re.S)


def _needs(block: str) -> set[str]:
    """The optional packages a block imports (``jaxpool.nnx`` needs flax)."""
    imported = set(re.findall(r"^\s*(?:from|import)\s+([\w.]+)", block, re.M))
    layers = {
        "jaxpool.nnx": "flax",
        "jaxpool.linen": "flax",
        "jaxpool.eqx": "equinox",
        "jaxpool.keras": "keras",
    }
    needs = {OPTIONAL[m.split(".")[0]] for m in imported if m.split(".")[0] in OPTIONAL}
    for module, dep in layers.items():
        if module in imported or re.search(
            rf"from jaxpool import {module.split('.')[1]}\b", block
        ):
            needs.add(dep)
    if "get_topology_desc(" in block and '"tpu"' in block:
        needs.add("libtpu")  # the aot extra's compile-only TPU
    return needs


# name defined by a block -> what must hold in that block's namespace
EXPECTATIONS = {
    "grad_input": lambda ns: ns["grad_input"].shape == ns["x"].shape,
    "values": lambda ns: (
        ns["values"].shape[:2] == ns["x"].shape[:2] and ns["indices"].dtype == np.int32
    ),
    "grad_images": lambda ns: (
        ns["grad_images"].shape == ns["images"].shape
        and ns["pooled"].shape == (8, 64, 7, 7)
        and ns["pooled_w"].shape == (8, 64, 50, 13)
    ),
    "fractional": lambda ns: (
        ns["fractional"].shape == (8, 16, 16, 16)
        and np.array_equal(
            np.take_along_axis(
                np.asarray(ns["maps"]).reshape(8, 16, -1),
                np.asarray(ns["where"]).reshape(8, 16, -1),
                axis=-1,
            ),
            np.asarray(ns["fractional"]).reshape(8, 16, -1),
        )
    ),
    "restored": lambda ns: (
        ns["restored"].shape == ns["features"].shape
        and float(ns["restored"].max()) == float(ns["features"].max())
    ),
    "grads": lambda ns: ns["grads"]["conv"]["kernel"].shape == (3, 3, 3, 1, 8),
    "batch": lambda ns: ns["batch"].shape == (4, 3, 8, 8, 8),
    "head": lambda ns: ns["pooled"].shape == (4, 2, 2, 16),
    "message": lambda ns: "holds 16 at position [0 0 1 1]" in ns["message"],
    # Sharded along D like its input, and one device's gradient to the bit.
    "volume_grad": lambda ns: (
        ns["volume_grad"].sharding.spec[2] == "d"
        and np.array_equal(
            np.asarray(ns["volume_grad"]),
            np.asarray(jax.jit(jax.grad(ns["segnet_block"]))(ns["x"])),
        )
    ),
    "values_dot": lambda ns: ns["values_dot"].shape == ns["values"].shape,
    "hvp": lambda ns: np.allclose(
        ns["hvp"], np.tensordot(ns["hessian"], ns["v"], axes=4), rtol=1e-5, atol=1e-5
    ),
    "repeat": lambda ns: (
        ns["grad_x"].shape == ns["x"].shape
        and np.array_equal(np.asarray(ns["grad_x"]), np.asarray(ns["repeat"]))
    ),
    # docs/tensorflow.md: a SAME pool of odd sizes unpooled to its input's.
    "decoded": lambda ns: (
        ns["decoded"].shape == ns["x"].shape
        and ns["pooled"].shape == (4, 23, 30, 16)
        and ns["x_grad"].shape == ns["x"].shape
    ),
    "same": lambda ns: ns["same"] is True,
    "unpooled": lambda ns: (
        tuple(ns["unpooled"].shape) == (None, 45, 60, 16)
        and ns["indices"].dtype == "int32"
    ),
    # The step reads its input at least once: XLA's TPU cost model, not zero.
    "tpu_bytes": lambda ns: ns["tpu_bytes"] >= ns["x"].size * 4,
}

CASES = [
    (path, k, block) for path in DOCUMENTS for k, block in enumerate(_blocks(path))
]


def test_every_document_has_examples_and_every_expectation_a_block():
    assert _blocks(ROOT / "README.md")
    defined = set()
    for _, _, block in CASES:
        defined |= set(re.findall(r"^\s*(\w+)\s*(?:,\s*\w+\s*)*=(?!=)", block, re.M))
        defined |= set(re.findall(r"^\s*\w+\s*,\s*(\w+)\s*=(?!=)", block, re.M))
    assert set(EXPECTATIONS) <= defined, set(EXPECTATIONS) - defined


@pytest.mark.parametrize(
    "path, k, block",
    CASES,
    ids=[f"{path.relative_to(ROOT)}-{k}" for path, k, _ in CASES],
)
def test_python_block_runs(path, k, block):
    for dep in _needs(block):
        require(dep)
    namespace: dict = {}
    exec(compile(block, f"{path}[{k}]", "exec"), namespace)
    jax.block_until_ready([v for v in namespace.values() if isinstance(v, jax.Array)])
    for name, holds in EXPECTATIONS.items():
        if name in namespace:
            assert holds(namespace), f"{name} in {path.name} block {k}"
