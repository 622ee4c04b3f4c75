"""Benchmark adaptive_max_pool2d against PyTorch CPU.

    python benchmarks/bench_adaptive_max_pool2d.py            # the tracked shapes
    python benchmarks/bench_adaptive_max_pool2d.py --quick    # tiny shapes (smoke test)
    python benchmarks/bench_adaptive_max_pool2d.py \
        --json benchmarks/results/adaptive_max_pool2d.json

Rows as in bench_max_pool3d.py: forward and backward against torch's
adaptive_max_pool2d and adaptive_max_pool2d_backward (default threads and one),
then the forward's temporary memory.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _timing
from _timing import bench_op

import jaxpool

# (N, C, H, W), (oH, oW)
SHAPES = [
    ((8, 64, 56, 56), (7, 7)),  # integer ratio
    ((8, 64, 50, 50), (7, 7)),  # uniform overlapping windows (size 8, step 7)
    ((4, 32, 97, 131), (13, 17)),  # irregular windows
]
QUICK = [((1, 2, 10, 9), (3, 4)), ((1, 2, 8, 8), (2, 2))]
LARGE = [  # --large, for accelerators: 206-411 MB inputs
    ((256, 64, 56, 56), (7, 7)),
    ((256, 64, 50, 50), (7, 7)),
    ((128, 64, 97, 131), (13, 17)),
]


def ops(case, torch):
    """One case's name and calls, as in bench_max_pool3d.ops."""
    shape, out = case
    return (
        f"{'x'.join(map(str, shape))} -> {out[0]}x{out[1]}",
        lambda x, **kw: jaxpool.adaptive_max_pool2d(x, out, **kw),
        jaxpool.adaptive_max_pool2d_backward,
        lambda xt: torch.nn.functional.adaptive_max_pool2d(
            xt, out, return_indices=True
        ),
        lambda gt, xt, it: torch.ops.aten.adaptive_max_pool2d_backward(gt, xt, it),
    )


def cases(shapes, dtype, reps, torch, bandwidth):
    rows = []
    for case in shapes:
        name, pool, backward, torch_pool, torch_backward = ops(case, torch)
        x = np.random.default_rng(0).standard_normal(case[0]).astype(dtype)
        rows += bench_op(
            name,
            x,
            pool,
            backward,
            torch_pool,
            torch_backward,
            None,
            reps,
            torch,
            bandwidth,
        )
    return rows


def main(argv=None):
    _timing.main(__doc__.split("\n")[0], cases, SHAPES, QUICK, argv, None, LARGE)


if __name__ == "__main__":
    main()
