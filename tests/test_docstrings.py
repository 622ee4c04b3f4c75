"""The ``>>>`` examples in every module's docstrings run (on the installed package)."""

import doctest
import importlib
import pkgutil
import re

import pytest
from helpers import require

import jaxpool

OPTIONAL = {
    "jaxpool.nnx": "flax",
    "jaxpool.linen": "flax",
    "jaxpool.eqx": "equinox",
    "jaxpool.keras": "keras",
}

MODULES = sorted(m.name for m in pkgutil.walk_packages(jaxpool.__path__, "jaxpool."))


def test_every_module_is_listed():
    assert "jaxpool._ops" in MODULES and "jaxpool.reference" in MODULES
    assert "jaxpool._tpu.backward" in MODULES  # a package's modules too


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    if name in OPTIONAL:
        require(OPTIONAL[name])
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0, f"{result.failed} doctest(s) failed in {name}"
    if name in (
        "jaxpool._ops",
        "jaxpool.reference",
        "jaxpool.tf",
        *OPTIONAL,
    ):
        assert result.attempted > 0, f"{name} lost its examples"


PUBLIC = ["jaxpool", "jaxpool.reference", "jaxpool.verify", "jaxpool.tf", *OPTIONAL]


@pytest.mark.parametrize("name", PUBLIC)
def test_public_docstrings_are_markdown(name):
    """The API reference renders docstrings as Markdown: a Sphinx role such as
    ``:func:`x``` would show as raw text (cross-references are written
    ``[`jaxpool.x`][]``, which the strict docs build resolves)."""
    if name in OPTIONAL:
        require(OPTIONAL[name])
    module = importlib.import_module(name)
    objects = [module, *(getattr(module, n) for n in getattr(module, "__all__", []))]
    for obj in objects:
        doc = obj.__doc__ or ""
        assert not re.search(r":(func|class|mod|meth|attr):`", doc), obj
