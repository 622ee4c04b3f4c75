"""CPU, GPU and TPU from one machine: every op lowers for each platform, the
accelerator programs hold none of the CPU-only forms, and ``jax.export``
serialises for all three at once.

JAX lowers for any platform on a CPU-only machine
(``jit(f).trace(*args).lower(lowering_platforms=(p,))``); only the branch of
the platform seam for that platform is emitted. The CPU-only forms (see the
design docs) each leave a mark in the lowered program, which these tests look
for: the fusion boundary is a ``while`` loop, the value read-back a gather,
the phase split a concatenate, the flat scatter a scatter without batching
dimensions. Each mark is also shown present in the CPU program, so that a
check which could never fire does not pass for nothing.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from cases import ALGORITHMS, PROGRAM_OPS, programs
from helpers import (
    assert_same,
    count_primitive,
    lowered,
    make_input,
    platform_forms,
    require,
    rng_for,
)
from jax import export

import jaxpool

ACCELERATORS = ("cuda", "tpu")


def _marks(text: str) -> dict[str, bool]:
    """Which CPU-only forms a lowered program holds."""
    scatters = re.findall(r'"stablehlo\.scatter".*', text)
    return {
        "fusion boundary (while loop)": "stablehlo.while" in text,
        "flat scatter": any("input_batching_dims" not in s for s in scatters),
    }


@pytest.mark.parametrize("platform", ACCELERATORS)
@pytest.mark.parametrize("name", PROGRAM_OPS)
def test_accelerator_programs_hold_no_cpu_form(name, platform):
    """Every program of every op lowers for the accelerator, without the
    CPU's fusion boundary or flat scatter (each present on CPU, below)."""
    for program, (f, args) in programs(name).items():
        text = lowered(f, args, platform)
        marks = {mark for mark, found in _marks(text).items() if found}
        assert not marks, (program, marks)


def test_cpu_programs_hold_the_cpu_forms():
    """The negative control: the same checks find each CPU form in the CPU
    programs, so they can fail."""
    found = set()
    for name in PROGRAM_OPS:
        for f, args in programs(name).values():
            found |= {m for m, hit in _marks(lowered(f, args, "cpu")).items() if hit}
    assert found == set(_marks(""))


@pytest.mark.parametrize("platform", ACCELERATORS)
@pytest.mark.parametrize("name", [n for n, op in PROGRAM_OPS.items() if op.strided])
def test_accelerator_forward_of_strided_windows_has_no_gather(name, platform):
    """The values are carried through the scan with the index (no read-back
    gather, which a TPU does not have and a GPU pays as a second pass), and no
    phase-split copy is built; the CPU program has the read-back."""
    op = PROGRAM_OPS[name]
    x = jax.ShapeDtypeStruct(op.shape, jnp.float32)
    text = lowered(op.forward, (x,), platform)
    assert '"stablehlo.gather"' not in text
    assert "stablehlo.concatenate" not in text
    assert '"stablehlo.gather"' in lowered(op.forward, (x,), "cpu")


def test_cpu_forward_splits_phases_where_it_pays():
    op = PROGRAM_OPS["max_pool3d k3 s2 p1"]
    x = jax.ShapeDtypeStruct(op.shape, jnp.float32)
    assert "stablehlo.concatenate" in lowered(op.forward, (x,), "cpu")


@pytest.mark.parametrize("forms, gathers", [("default", 0), ("cpu", 4)])
def test_irregular_adaptive_windows_take_one_selection_per_axis(forms, gathers):
    """97x131 -> 13x17: two sizes of windows per axis. The forward reduces one
    axis at a time from a copy of it in which every window is its taps (it
    once gathered every tap: 56 gathers): the accelerators' copy is slices,
    and their program holds no gather at all; the CPU's, of more than
    ``_scan.FEW_TAPS`` taps an axis, is a gather per array and axis (H's
    values, W's values and the indices chosen along H) beside its read-back
    of the values."""
    x = jax.ShapeDtypeStruct((4, 32, 97, 131), jnp.float32)
    with platform_forms(forms):
        jaxpr = jax.make_jaxpr(lambda x: jaxpool.adaptive_max_pool2d(x, (13, 17)))(x)
    assert count_primitive(jaxpr, "gather") == gathers


def test_many_adaptive_windows_are_gathered():
    """Past 64 windows along an axis the selection is one gather (a concatenate
    of thousands of slices would compile slowly)."""
    x = jax.ShapeDtypeStruct((1, 1, 300, 7), jnp.float32)
    with platform_forms("default"):
        jaxpr = jax.make_jaxpr(lambda x: jaxpool.adaptive_max_pool2d(x, (97, 7)))(x)
    assert count_primitive(jaxpr, "gather") == 2  # values, indices


# ----------------------------------------------------------------- export


EXPORTED = [
    "max_pool3d k3 s2 p1",
    "max_pool1d k3 s2 p1",
    "adaptive_max_pool2d 10x11->3x4",
    "max_unpool2d",
]


def _export(f: Callable[..., Any], *args: Any) -> export.Exported:
    """``f`` exported for CPU, CUDA and TPU, serialised with its VJP and read
    back."""
    exported = export.export(jax.jit(f), platforms=("cpu", "cuda", "tpu"))(*args)
    return export.deserialize(exported.serialize(vjp_order=1))


@pytest.fixture(scope="module")
def flatbuffers():
    return require("flatbuffers")  # jax.export needs it to serialise


@pytest.mark.parametrize("name", EXPORTED)
def test_export_for_three_platforms_equals_the_direct_call(flatbuffers, name):
    op = PROGRAM_OPS[name]
    x = make_input(rng_for("export", name), op.shape, "float32", "ties")
    rehydrated = _export(op.forward, x)
    assert rehydrated.platforms == ("cpu", "cuda", "tpu")
    for got, want in zip(
        jax.tree.leaves(rehydrated.call(x)), jax.tree.leaves(op.forward(x)), strict=True
    ):
        assert_same(got, want)

    def loss(f):
        return lambda x: jnp.sum(jax.tree.leaves(f(x))[0] ** 2)

    assert_same(jax.grad(loss(rehydrated.call))(x), jax.grad(loss(op.forward))(x))


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_exported_backward_equals_the_direct_call(flatbuffers, algorithm):
    op = PROGRAM_OPS["max_pool2d k3 s2 p1"]
    x = make_input(rng_for("export-bwd"), op.shape, "float32", "ties")
    values, indices = op.forward(x)
    g = jnp.asarray(np.arange(values.size, dtype=np.float32).reshape(values.shape))

    def backward(g, i):
        return op.backward(g, x, i, algorithm=algorithm)

    rehydrated = _export(backward, g, indices)
    assert_same(rehydrated.call(g, indices), backward(g, indices))


@pytest.mark.full  # symbolic shapes compile slowly
@pytest.mark.parametrize("name", EXPORTED)
def test_symbolic_batch_dimension(flatbuffers, name):
    """One exported program serves every batch size; a training step too."""
    op = PROGRAM_OPS[name]
    shape = export.symbolic_shape(", ".join(["b", *map(str, op.shape[1:])]))
    x_spec = jax.ShapeDtypeStruct(shape, jnp.float32)

    def step(x):
        return jax.grad(lambda x: jnp.sum(jax.tree.leaves(op.forward(x))[0] ** 2))(x)

    forward, train = _export(op.forward, x_spec), _export(step, x_spec)
    for batch in (1, 3):
        x = make_input(
            rng_for("symbolic", name, str(batch)),
            (batch, *op.shape[1:]),
            "float32",
            "random",
        )
        for got, want in zip(
            jax.tree.leaves(forward.call(x)),
            jax.tree.leaves(op.forward(x)),
            strict=True,
        ):
            assert_same(got, want)
        assert_same(train.call(x), step(x))


@pytest.mark.parametrize(
    "call, name",
    [
        (lambda x: jaxpool.max_pool2d_with_argmax(x, 2), "max_pool2d_with_argmax"),
        (lambda x: jaxpool.adaptive_max_pool2d(x, 3), "adaptive_max_pool2d"),
        (
            lambda x: jaxpool.max_pool2d_with_argmax_backward(
                x, jax.ShapeDtypeStruct(x.shape, x.dtype), x.astype(jnp.int32), 1
            ),
            "max_pool2d_with_argmax_backward",
        ),
    ],
)
def test_symbolic_spatial_size_is_a_clear_error(call, name):
    shape = export.symbolic_shape("2, 3, h, 8")
    with pytest.raises(
        ValueError,
        match=rf"{name}: the spatial sizes of `x` must be static ints.*"
        r"got shape \(2, 3, h, 8\)",
    ):
        export.export(jax.jit(call), platforms=("cpu",))(
            jax.ShapeDtypeStruct(shape, jnp.float32)
        )
