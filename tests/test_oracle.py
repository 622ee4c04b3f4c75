"""Every op against the NumPy oracle, exactly, in every kernel form.

The grids of ``cases`` (strided, adaptive and fractional pools) and the
property sweeps run under each form of ``helpers.FORMS``: the CPU's own, the
other accelerators' and the TPU's (the seam emits them here on the CPU, so
they are checked bit for bit; ``tests/test_export.py`` and
``tests/test_tpu_programs.py`` check that they are what the accelerators get),
the Pallas kernels in Pallas's interpreter, and (the grids) the forms under a
mesh, whose partitioning ``tests/test_sharding.py`` reads. Every input kind is in each
call's planes (``helpers.make_planes``); forward values and indices, the
gradient through ``jax.vjp``, the standalone backward op and the deterministic
backward must equal the oracle bit for bit (``jaxpool.verify.compare``, the
routine ``python -m jaxpool.verify`` runs). The CPU's forms are the quick
tier; the others run with ``--full``.
"""

from __future__ import annotations

import math

import pytest
from cases import (
    ADAPTIVE,
    DTYPES,
    FRACTIONAL,
    POOLS,
    adaptive_cases,
    fractional_cases,
    pool_cases,
)
from helpers import (
    check_adaptive,
    check_against_oracle,
    check_drawn,
    check_pool,
    form_options,
    fractional_ops,
    fractional_oracle,
    fractional_samples,
    make_planes,
    rng_for,
    row_dtypes,
)
from hypothesis import event, given, settings

FULL = pytest.mark.full


# The Pallas interpreter is slow: one dtype a row, in turn (every dtype meets
# many configurations). The turn restarts where a table's rows of another
# origin begin (POOLS: the 3-D grid's 13 rows, then the 1-D and 2-D ones).
PALLAS_TURN = ["float32", "bfloat16", "float32", "bfloat16", "float64", "float16"]


def _grid(table, restart=()):
    """``(name, dtype, form)``: the row's dtypes in the CPU's forms
    (``helpers.row_dtypes``); float32 in one of the accelerators' and the
    TPU's forms and bfloat16 in the other, swapped from row to row; on every
    other row one dtype in Pallas's interpreter (:data:`PALLAS_TURN`), and
    on the rows between float32 or bfloat16 in the forms under a mesh."""
    params = []
    turn = 0
    for k, name in enumerate(table):
        turn = 0 if k in restart else turn
        for dtype, marks in row_dtypes(turn):
            params.append(pytest.param(name, dtype, "cpu", marks=marks))
        dtypes = ("float32", "bfloat16") if turn % 2 == 0 else ("bfloat16", "float32")
        for form, dtype in zip(("default", "tpu"), dtypes, strict=True):
            params.append(pytest.param(name, dtype, form, marks=FULL))
        if k % 2 == 0:  # every other row: Pallas's interpreter is slow
            pallas = PALLAS_TURN[(turn // 2) % len(PALLAS_TURN)]
            params.append(pytest.param(name, pallas, "pallas", marks=FULL))
        else:  # and the forms under a mesh on the others
            mesh = ("float32", "bfloat16")[(k // 2) % 2]
            params.append(pytest.param(name, mesh, "mesh", marks=FULL))
        turn += 1
    return params


GRIDS = {
    "POOLS": (POOLS, _grid(POOLS, restart=(13,))),
    "ADAPTIVE": (ADAPTIVE, _grid(ADAPTIVE)),
    "FRACTIONAL": (FRACTIONAL, _grid(FRACTIONAL)),
}


@pytest.mark.parametrize("table", GRIDS)
def test_grids_meet_every_dtype_of_each_form_at_each_rank(table):
    """Rows take their dtypes in turn, not all of them: for each number of
    spatial axes, the CPU's forms still meet every dtype and the
    accelerators' and the TPU's float32 and bfloat16 (a table reordered so
    that a rank's rows fall on one turn would lose some); the forms under a
    mesh meet both in each table."""
    rows, params = GRIDS[table]
    met = {}
    for param in params:
        name, dtype, form = param.values
        met.setdefault((rows[name][0], form), set()).add(dtype)
    for nd in {row[0] for row in rows.values()}:
        assert met[nd, "cpu"] == set(DTYPES), (nd, met[nd, "cpu"])
        for form in ("default", "tpu"):
            assert met[nd, form] == {"float32", "bfloat16"}, (nd, form, met[nd, form])
    # The forms under a mesh, on half the rows: both dtypes in each table.
    mesh = set().union(*(d for (nd, form), d in met.items() if form == "mesh"))
    assert mesh == {"float32", "bfloat16"}, mesh


@pytest.mark.parametrize("name, dtype, form", GRIDS["POOLS"][1])
def test_max_pool(name, dtype, form):
    nd, shape, kwargs = POOLS[name]
    check_pool(nd, shape, kwargs, rng_for(name, dtype), dtype, **form_options(form))


@pytest.mark.parametrize("name, dtype, form", GRIDS["ADAPTIVE"][1])
def test_adaptive_max_pool(name, dtype, form):
    nd, shape, output_size = ADAPTIVE[name]
    rng = rng_for(name, dtype)
    check_adaptive(nd, shape, output_size, rng, dtype, **form_options(form))


@pytest.mark.parametrize(
    "name, dtype, form", [p for p in GRIDS["FRACTIONAL"][1] if p.values[2] != "pallas"]
)
def test_fractional_max_pool(name, dtype, form):
    """Fractional pools have no Pallas kernel: the CPU's, accelerators' and
    TPU's forms."""
    nd, shape, kernel, out = FRACTIONAL[name]
    rng = rng_for("fractional", name, dtype)
    x = make_planes(rng, shape, dtype)
    samples = fractional_samples(rng, x.shape, nd, dtype)
    forward, backward = fractional_ops(nd, kernel, out, samples, {})
    planes = samples[0] if len(shape) == nd + 1 else samples
    want = fractional_oracle(x, kernel, planes, out)
    check_against_oracle(forward, backward, x, want, nd, rng, dtype)


# The sweeps: fewer examples in the slower forms (each draws a new program).
SWEEP_EXAMPLES = {"cpu": None, "default": 25, "tpu": 25, "pallas": 8}
FRACTIONAL_EXAMPLES = 12
SWEEP_FORMS = [
    "cpu",
    *(pytest.param(form, marks=FULL) for form in ("default", "tpu", "pallas")),
]


def _thorough() -> bool:
    """Whether the thorough profile is loaded (``--hypothesis-profile``)."""
    return (
        settings.default.max_examples == settings.get_profile("thorough").max_examples
    )


def _sweep(form, run, most=None):
    """``run`` as a hypothesis test in ``form``: the profile's examples in the
    CPU's forms, fewer in the others, at most ``most``; the profile's in every
    form under the thorough one, which is run on request (``--full -k "sweep
    and tpu" --hypothesis-profile=thorough``: the TPU's forms)."""
    examples = SWEEP_EXAMPLES[form]
    if most is not None:
        examples = most if examples is None else min(examples, most)
    return (
        run if examples is None or _thorough() else settings(max_examples=examples)(run)
    )


@pytest.mark.parametrize("form", SWEEP_FORMS)
def test_max_pool_sweep(form):
    """Random valid strided pools: shapes, every padding form, ceil_mode,
    dilation, layouts, dtypes and input kinds (``--hypothesis-show-statistics``
    shows what was drawn)."""

    @given(pool_cases())
    def run(case):
        want = check_drawn(case, **form_options(form))
        nd = case["nd"]
        windows = zip(case["stride"], case["kernel"], case["dilation"], strict=True)
        overlapping = any(s < d * (k - 1) + 1 for s, k, d in windows)
        event(f"{nd}-d, {case['dtype']}, {case['kind']}")
        event("overlapping windows" if overlapping else "disjoint windows")
        pairs = any(isinstance(p, tuple) for p in case["padding"])
        event("a (lo, hi) pair" if pairs else "ints")
        event("channels-last" if case["channels_last"] else "channels-first")
        if (want[1] >= math.prod(case["shape"][-nd:])).any():
            event("a window with no in-bounds tap")

    _sweep(form, run)()


# The fractional sweep in all three forms cost CI about 45 s of wall time
# (1,944 tests in 624-633 s, 582 without it), past its 10 minutes: its
# accelerators' forms are collected under the thorough profile only (the
# grid rows above run those forms in the full tier).
FRACTIONAL_SWEEP_FORMS = [
    "cpu",
    *(pytest.param(f, marks=FULL) for f in ("default", "tpu") if _thorough()),
]


@pytest.mark.parametrize("form", FRACTIONAL_SWEEP_FORMS)
def test_fractional_max_pool_sweep(form):
    """Random fractional pools (no Pallas kernel): kernels, input sizes,
    outputs from one window to the most PyTorch allows, layouts, batched or
    not, dtypes (whose rounding moves PyTorch's window starts) and input
    kinds."""

    @given(fractional_cases())
    def run(case):
        check_drawn(case, **form_options(form))
        spatial = case["shape"][-case["nd"] :]
        windows = zip(spatial, case["kernel"], case["output_size"], strict=True)
        event(f"{case['nd']}-d, {case['dtype']}, {case['kind']}")
        event("channels-last" if case["channels_last"] else "channels-first")
        if any(o == n - k + 1 - (case["nd"] == 3) for n, k, o in windows):
            event("an axis of the most windows")
        if any(o == 1 for o in case["output_size"]):
            event("an axis of one window")

    # Each pool compiles several programs: fewer examples than the others'.
    _sweep(form, run, most=FRACTIONAL_EXAMPLES)()


@pytest.mark.parametrize("form", SWEEP_FORMS)
def test_adaptive_max_pool_sweep(form):
    """Random adaptive pools, outputs smaller and larger than the input."""

    @given(adaptive_cases())
    def run(case):
        want = check_drawn(case, **form_options(form))
        spatial = case["shape"][-case["nd"] :]
        full = want[0].shape[-case["nd"] :]
        event(f"{case['nd']}-d")
        uneven = any(s % o for s, o in zip(spatial, full, strict=True))
        event("non-integer ratio" if uneven else "integer ratios")
        larger = any(o > s for s, o in zip(spatial, full, strict=True))
        event("output larger than input" if larger else "output not larger")

    _sweep(form, run)()
