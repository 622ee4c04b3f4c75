"""The ``>>>`` examples in every module's docstrings run (on the installed package)."""

import doctest
import importlib
import pkgutil

import pytest
from helpers import require

import jaxpool

OPTIONAL = {"jaxpool.nnx": "flax", "jaxpool.linen": "flax", "jaxpool.eqx": "equinox"}

MODULES = sorted(m.name for m in pkgutil.iter_modules(jaxpool.__path__, "jaxpool."))


def test_every_module_is_listed():
    assert "jaxpool._max_pool" in MODULES and "jaxpool.reference" in MODULES


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    if name in OPTIONAL:
        require(OPTIONAL[name])
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0, f"{result.failed} doctest(s) failed in {name}"
    if name in (
        "jaxpool._max_pool",
        "jaxpool._adaptive",
        "jaxpool._unpool",
        "jaxpool.reference",
        *OPTIONAL,
    ):
        assert result.attempted > 0, f"{name} lost its examples"
