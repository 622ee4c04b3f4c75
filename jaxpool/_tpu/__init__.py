"""The TPU forms: the backward without a gather or a scatter, and the layout
rules.

A TPU has no vector gather and serialises scatters, and XLA compiles each
strided slice of a tiled minor axis to a relayout. So on a TPU:

- **the forward** is ``_reduce.window_argmax`` with compact codes: one
  variadic ``lax.reduce_window`` over the values and a small code of each
  element's position;
- **the backward** (``backward.covering_sum``, for the windows
  ``backward.dense`` accepts): each stride phase of the input adds, tap by
  tap, the gradients of the windows whose index is its position, read from
  the output grid shifted by the tap, and the phases are interleaved once:
  the ``"gather"`` backward's sum, in its order, with no gather;
- **the layout rules** (``layout``): a model of how a TPU pads its 8 x 128
  tiles and which axis XLA lays in the lanes, and the rules tuned on XLA's
  v5e cost model that it decides (tap numbers instead of indices, the
  ``(n, c)`` planes moved behind the spatial axes, the phases summed
  phase-major, the narrowest codes). ``benchmarks/results/NOTES.md`` has the
  measurements behind each rule.
"""

from .backward import covering_sum, dense

__all__ = ["covering_sum", "dense"]
