"""What the programs lowered for a TPU hold: the TPU's own forms.

``jit(f).trace(*args).lower(lowering_platforms=("tpu",))`` runs on this
CPU-only machine and emits the TPU branch of the platform seam alone. On a
TPU the forward is one variadic ``reduce_window`` (adaptive windows of two
sizes: one variadic reduction per spatial axis; no gather, no scatter, no
loop); the deterministic gather backward holds no scatter (a TPU serialises
them), and where the windows are regular with dilation 1 (the dense form,
which ``jax.grad``'s ``auto`` then runs) no gather either. Each check is
shown to fire on another platform's program, so none passes for nothing.
"""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import pytest
from cases import PROGRAM_OPS, PROGRAM_POOLS, programs
from helpers import lowered

DENSE = [  # regular windows, dilation 1: the dense backward, no gather
    "max_pool1d k3 s2 p1",
    "max_pool2d k3 s2 p1",
    "max_pool3d k3 s2 p1",
    "max_pool3d k2 s2",
    "max_pool3d k4 s1 p2 (axis passes)",
]
POOL_FORWARDS = [name for name in PROGRAM_OPS if not name.startswith("max_unpool")]


def _holds(text: str, op: str) -> bool:
    return f'"stablehlo.{op}"' in text or f"stablehlo.{op} " in text


def _two_operands(text: str) -> bool:
    """Whether every reduction of ``text`` reduces two operands (the values
    and one code) and at least one was found."""
    counts = re.findall(
        r'%\w+:(\d+) = (?:"stablehlo\.reduce_window"|stablehlo\.reduce\()', text
    )
    return bool(counts) and set(counts) == {"2"}


def _reductions(text: str) -> int:
    """How many reductions with a reducer of their own (not a plain
    ``applies stablehlo.and``) ``text`` holds."""
    return len(re.findall(r"stablehlo\.reduce\(.*\n\s*reducer\(", text))


@pytest.mark.parametrize("name", POOL_FORWARDS)
def test_tpu_forward_is_window_reductions(name):
    """One variadic window reduction; for adaptive windows (each of these
    ops has an axis of windows of two sizes), one reduction per spatial axis:
    each axis of two sizes of window in the stage's lanes (the last, here) a
    window reduction over it dilated (``_reduce.stage``), the others
    a plain variadic reduction over the taps of a copy of that axis (where
    the lanes hold the batch, every axis:
    :func:`test_tpu_adaptive_forward_copies_where_the_batch_takes_the_lanes`),
    each of the values and one code: the chosen element's offset along the
    axes reduced so far, not a code of the stage's axis beside the offsets
    that the earlier stages chose (a third operand, which XLA writes out
    and reads back)."""
    op = PROGRAM_OPS[name]
    x = jax.ShapeDtypeStruct(op.shape, jnp.float32)
    text = lowered(op.forward, (x,), "tpu")
    nd = len(op.shape) - 2
    if name.startswith("adaptive"):
        dilated = text.count("base_dilations")
        assert text.count("stablehlo.reduce_window") == dilated >= 1
        assert dilated + _reductions(text) == nd
        assert _two_operands(text)
    else:
        assert text.count("stablehlo.reduce_window") == 1
    _check_bodies(text, nd)


def _check_bodies(text: str, nd: int) -> None:
    """No gather, scatter, loop or integer division in a TPU forward, and its
    reductions' bodies cheap to compile."""
    for absent in ("gather", "scatter", "while"):
        assert not _holds(text, absent), absent
    bodies = [
        body
        for reduction in ("stablehlo.reduce_window", "stablehlo.reduce(")
        for body in text.split(reduction)[1:]
    ]
    for body in bodies:
        # No integer division in a reduction's body: XLA's TPU compiler takes
        # a minute over one (a 8x64x64x32 k3 s2 p1 forward: 73 s, 3.7 s
        # without).
        body = body.split("})")[0]
        assert "stablehlo.compare" in body  # the body was found
        assert "divide" not in body and "remainder" not in body  # ops or calls
        # Each of the two codes split into its axes' residues once (a multiply
        # and a shift, then a multiply back, an axis past the first), the
        # axes' steps weighted once: split per comparison, a quotient and a
        # remainder an axis, XLA's TPU compiler took 50 s over an
        # 8x192x16x28² k3 s1 p1 forward (32 multiplies in 3-D), 7 s so (11).
        assert body.count("stablehlo.multiply") <= 2 * 2 * (nd - 1) + nd
    # Nor in the decoding of the chosen codes after it: divided by the axes'
    # weights (`//`, then `%`), XLA's TPU compiler took 31.8 s over a
    # 2x32x96³ k3 s1 p1 forward, 2.9 s split as the comparator splits them.
    assert not _holds(text, "divide")


def test_tpu_adaptive_forward_copies_where_the_batch_takes_the_lanes():
    """Where XLA lays the batch in the TPU's lanes (a batch of 128), the
    adaptive forward reduces each axis by a plain variadic reduction over the
    taps of a copy of that axis, with no window reduction: slicing a major
    axis costs nothing there."""
    op = PROGRAM_OPS["adaptive_max_pool2d 10x11->3x4"]
    x = jax.ShapeDtypeStruct((128, *op.shape[1:]), jnp.float32)
    text = lowered(op.forward, (x,), "tpu")
    assert "stablehlo.reduce_window" not in text
    assert _reductions(text) == 2
    assert _two_operands(text)
    _check_bodies(text, 2)


def test_cpu_forwards_hold_no_window_reduction():
    """The negative control: the CPU's forward of a regular pool scans the
    taps (XLA:CPU runs that several times faster), with no reduction of them,
    as does its two-size adaptive forward (in passes, one an axis); the CUDA
    forward of a strided pool is one window reduction, as the TPU's."""
    for name in ("max_pool3d k3 s2 p1", "adaptive_max_pool3d 9x10x11->2x3x4"):
        op = PROGRAM_OPS[name]
        x = jax.ShapeDtypeStruct(op.shape, jnp.float32)
        text = lowered(op.forward, (x,), "cpu")
        assert "stablehlo.reduce_window" not in text, name
        assert _reductions(text) == 0, name
    op = PROGRAM_OPS["max_pool3d k3 s2 p1"]
    x = jax.ShapeDtypeStruct(op.shape, jnp.float32)
    assert lowered(op.forward, (x,), "cuda").count("stablehlo.reduce_window") == 1


@pytest.mark.parametrize("name", PROGRAM_POOLS)
def test_tpu_gradients_hold_no_scatter(name):
    """The deterministic gather (in ``jax.grad`` and standalone) holds no
    scatter, nor does ``jax.grad``'s ``auto`` where the TPU has its dense
    form; ``algorithm="scatter"`` is the scatter, as asked."""
    for program, (f, args) in programs(name).items():
        text = lowered(f, args, "tpu")
        deterministic = program in ("grad gather", "backward gather")
        if deterministic or (program == "grad auto" and name in DENSE):
            assert not _holds(text, "scatter"), program
        elif program == "grad scatter":
            assert _holds(text, "scatter"), program


@pytest.mark.parametrize("name", DENSE)
def test_tpu_dense_backward_holds_no_gather(name):
    for program, (f, args) in programs(name).items():
        if program.startswith("grad") or program == "backward gather":
            text = lowered(f, args, "tpu")
            assert not _holds(text, "gather"), program
            assert not _holds(text, "while"), program


def test_other_gradients_hold_the_forms_the_tpu_leaves_out():
    """The negative controls: the CUDA gradient with ``algorithm="scatter"``
    scatters and its gather backward gathers; on a TPU a standalone scatter
    backward (indices from anywhere) still scatters."""
    found = programs("max_pool3d k3 s2 p1")
    f, args = found["grad scatter"]
    assert _holds(lowered(f, args, "cuda"), "scatter")
    f, args = found["backward gather"]
    assert _holds(lowered(f, args, "cuda"), "gather")
    f, args = found["backward scatter"]
    assert _holds(lowered(f, args, "tpu"), "scatter")
