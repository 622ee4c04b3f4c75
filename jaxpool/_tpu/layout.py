"""How a TPU stores arrays, and the layout rules of the TPU's backward that
follow from it.

A TPU stores the two minor axes of an array in tiles of 8 x 128 (sublanes x
lanes) and XLA's TPU compiler picks which axis takes the lanes. The model
here (:func:`padded`, :func:`lane_axis`) predicts both, and the rules decide
what the dense backward (``backward.covering_sum``) does with them: read tap
numbers instead of indices (:func:`coded`), move the ``(n, c)`` planes
behind the spatial axes (:func:`planes_minor`, :func:`plane_axes`), sum the
stride phases phase-major (:func:`phase_major`); and how narrow the forward's
codes may be (:func:`code_type`). Each rule was chosen on XLA's v5e cost
model; ``benchmarks/results/NOTES.md`` has the measurements.
"""

from __future__ import annotations

import math
from typing import Any

import jax.numpy as jnp

from .._windows import AxisWindows, PoolSpec, split, with_spatial


def code_type(bound: int) -> Any:
    """The narrowest of int8, int16 and int32 that holds ``0 .. bound``."""
    return jnp.int8 if bound <= 127 else jnp.int16 if bound < 2**15 else jnp.int32


ROWS, LANES = 8, 128  # a TPU tile's sublanes and lanes
TILE = ROWS * LANES  # 32-bit elements in one of a TPU's tiles


def padded(shape: tuple[int, ...]) -> int:
    """Elements of a 32-bit array of ``shape`` as a TPU stores it: its two
    minor axes in tiles of 8 x 128."""
    if len(shape) < 2:
        return -(-math.prod(shape) // LANES) * LANES
    *major, rows, lanes = shape
    return math.prod(major) * -(-rows // ROWS) * ROWS * -(-lanes // LANES) * LANES


def row_windows(shape: tuple[int, ...], spec: PoolSpec) -> AxisWindows | None:
    """The windows of one row where the forward's window reduction of a 1-D
    pool over an array of ``shape`` runs in rows of the TPU's tiles
    (``_reduce.window_argmax``), or None where it does not.

    XLA's TPU compiler compiles a window reduction of two operands in time
    that grows with the length of the reduced axis, about 1.3 ms per window
    and tap along it (2x8x3584 k2 s2: 15 s; the builtin's one-operand pool,
    8x16x512 k7 s1 p3, 0.19 s). A 1-D pool over ``(*B, C, L)`` whose planes
    fill whole tiles' rows (``C`` a multiple of 8) and whose axis whole rows
    of ``128 * stride`` positions is the same array as ``(*B, C / 8, rows, 8,
    128 * stride)``: that view and its results' view back are bitcasts
    (bfloat16's too), and each row pooled as a plane of its own compiles in
    time that no longer grows with ``L`` (2x8x3584: 0.20 s), at no more
    bytes of XLA's cost model. Not where:

    - a window crosses from one row into the next (padding, or an extent
      past the stride): reduced apart and written into the rows' results,
      those cost 2-9x the bytes;
    - the rows are a multiple of 8: XLA's layout assignment then takes them
      for the tiles' sublanes in a train step and copies the input so
      (32x64x4096 k2 s2: 541 MB against 373); rows of 2 or 4 times the
      length instead lose the fusion of the indices into the backward's tap
      numbers (407 MB).

    The performance record's "The 1-D TPU forward in rows of its tiles"
    gives the measurements."""
    if spec.nd != 1 or spec.trail or len(shape) < 2:
        return None
    if not all(isinstance(n, int) for n in shape):  # jax.export's symbols
        return None
    (w,) = spec.axes
    if w.starts or w.offset or w.extent > w.stride or w.out * w.stride != w.size:
        return None
    if shape[-2] % ROWS:
        return None
    lanes = LANES * w.stride
    rows = w.size // lanes
    if w.size % lanes or rows < 2 or rows % ROWS == 0:
        return None
    return AxisWindows(lanes, LANES, w.taps, w.stride, 0, w.dilation)


def lane_axis(shape: tuple[int, ...]) -> int:
    """The axis XLA's TPU default layout stores minor, in the 128 lanes: the
    one that pads them least, the last of equals (v5e: 32x112²x64 and
    8x64³x32 channels-last keep W there, 32x256x28² and 4x256x40³ C; a
    row-major 8x32³x64 keeps C, as 32x64x112² keeps W)."""
    waste = [(-(-n // LANES) * LANES / max(n, 1), -a) for a, n in enumerate(shape)]
    return -min(waste)[1]


def plane_sizes(spec: PoolSpec, shape: tuple[int, ...]) -> tuple[int, ...]:
    """The sizes of the ``(n, c)`` planes' axes of an array of ``shape``: the
    leading ones, then channels-last's trailing ones."""
    first, stop = split(len(shape), spec.nd, spec.trail)
    return (*shape[:first], *shape[stop:])


def planes_minor(spec: PoolSpec, shape: tuple[int, ...]) -> bool:
    """Whether ``backward.covering_sum`` runs with the ``(n, c)`` planes moved
    behind the spatial axes, ``(*S, N * C)``, for arrays of ``shape`` (the
    output grid's): where the input and output grids then pad a TPU's 8 x 128
    tiles less (8x32x64³ k3 s2: W = 64 fills half of 128 lanes, the output's
    32 a quarter; N * C = 256 fills two lane tiles), and for channels-last
    arrays only where XLA lays the input out with a spatial axis in the lanes
    (:func:`lane_axis`; where the channels stay in the lanes, moving costs
    more); nor where XLA lays the batch in the lanes (a batch of 128 or more
    that pads them least), whose planes are minor already: moving them
    transposed the indices, the gradients and the sum for nothing. Not for
    symbolic sizes (``jax.export``'s). The performance record's "The planes
    moved to the minor axis", "Channels-last planes moved where XLA lays W in
    the lanes" and "The planes in place where the batch takes the lanes"
    give the measurements."""
    first, stop = split(len(shape), spec.nd, spec.trail)
    if first == 0 or not all(isinstance(n, int) for n in shape):
        return False
    spatial = (spec.in_size, spec.out_size)
    grids = [with_spatial(shape, spec.nd, spec.trail, s) for s in spatial]
    lanes = lane_axis(grids[0])
    batch = first if spec.trail else first - 1  # the leading axes but C
    if lanes < batch or (spec.trail and lanes >= stop):
        return False
    planes = math.prod(plane_sizes(spec, shape))
    return sum(padded((*s, planes)) for s in spatial) < sum(map(padded, grids))


def plane_axes(spec: PoolSpec, shape: tuple[int, ...]) -> tuple[int, ...]:
    """The axes the ``(n, c)`` planes of an array of ``shape`` take behind
    the spatial ones when :func:`planes_minor`: their own, ``(*S, N, C)``,
    where the channels fill the TPU's 128 lanes, as XLA's TPU default layout
    often already holds them (4x256x40³ is ``{1,4,3,2,0}``, 32x256x28² is
    ``{1,0,3,2}``), so that moving them is a bitcast or moves whole tiles;
    else one axis of ``N * C`` planes, ``(*S, N * C / 128, 128)`` where they
    fill whole 8 x 128 tiles and the sum reads tap numbers (:func:`coded`:
    with stride phases to interleave, every spatial axis is then major, and
    interleaving the phases moves whole tiles instead of shuffling sublanes;
    with stride 1 there is nothing to interleave, and tiles' rows cost more),
    ``(*S, N * C)`` otherwise. The performance record's "The planes in tiles'
    rows" and "The planes on their own axes where the channels fill the
    lanes" give the measurements."""
    planes = plane_sizes(spec, shape)
    if planes[-1] % LANES == 0:
        return planes
    if coded(spec) and math.prod(planes) % TILE == 0:
        return (math.prod(planes) // LANES, LANES)
    return (math.prod(planes),)


def coded(spec: PoolSpec) -> bool:
    """Whether ``backward.covering_sum`` reads tap numbers (``backward.tap_codes``)
    instead of the indices: where some stride exceeds 1, so that each of
    several phases reads them again; and for channels-last 2-D pools (Flax's
    layout), where the int8 numbers cross the planes' transpose and tiles in
    place of the int32 indices. Elsewhere with stride 1, one loop reads the
    one padded index array for every tap, and the codes' arithmetic costs
    more than its int8 reads save on some shape measured (in 1-D, two shapes
    of three). The performance record's "Tap
    numbers instead of indices" and "Tap numbers at stride 1, in
    channels-last 2-D pools" give the measurements
    (``benchmarks/tpu_rules.py --rule codes``)."""
    return any(w.stride > 1 for w in spec.axes) or (spec.nd == 2 and spec.trail > 0)


def phase_major(spec: PoolSpec, in_one_axis: bool) -> bool:
    """Whether ``backward.covering_sum`` computes the stride phases in one loop,
    phase major (``backward.phase_major_sum``): wherever it reads tap numbers
    (:func:`coded`; with stride 1, one phase), except where the planes move
    behind the spatial axes as one axis (the last spatial axis is then the
    rows of the TPU's tiles, and the transpose back would interleave along
    them).

    16-bit 2-D pools whose channels do not fill whole lanes are summed phase
    major as well, though the pool alone costs more so. Alone, the pool's
    input is an entry parameter, which XLA's memory-space assignment
    prefetches into VMEM for the forward in four slices, and the cost model
    counts the prefetch. Between two convolutions, as a network holds it
    (``benchmarks/compiled.py --context``), there is no such prefetch, and the
    whole step costs less. The performance record's "Phases summed
    phase-major" and "Between two convolutions" give the measurements."""
    return coded(spec) and not in_one_axis
