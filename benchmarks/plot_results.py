"""Bar chart of benchmark results (needs the `bench` extra: matplotlib).

    python benchmarks/plot_results.py benchmarks/results/max_pool3d.json \
        benchmarks/results/adaptive_max_pool2d.json -o docs/assets/cpu.png

One panel per figure (forward, backward, train step): median time per shape and
contender, log scale, with the run's date, machine and versions in the title.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("results", nargs="+", help="JSON files from the bench scripts")
    parser.add_argument("-o", "--output", default="docs/assets/cpu.png")
    args = parser.parse_args(argv)
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        message = f"plot_results.py needs matplotlib: pip install '.[bench]' ({e})"
        raise SystemExit(message) from None

    runs = [json.loads(Path(p).read_text()) for p in args.results]
    rows = [r for run in runs for r in run["rows"] if "median_ms" in r]
    meta = runs[0]["meta"]
    figures = ["forward", "backward", "train step"]
    fig, axes = plt.subplots(len(figures), 1, figsize=(11, 4 * len(figures)))
    for ax, figure in zip(axes, figures, strict=True):
        chosen = [r for r in rows if r["figure"] == figure]
        shapes = list(dict.fromkeys(r["shape"] for r in chosen))
        contenders = list(dict.fromkeys(r["contender"] for r in chosen))
        width = 0.8 / max(1, len(contenders))
        for c, contender in enumerate(contenders):
            times = [
                next(
                    (
                        r["median_ms"]
                        for r in chosen
                        if r["shape"] == s and r["contender"] == contender
                    ),
                    0,
                )
                for s in shapes
            ]
            ax.bar(
                [i + c * width for i in range(len(shapes))],
                times,
                width,
                label=contender,
            )
        ax.set_xticks(
            [i + width * (len(contenders) - 1) / 2 for i in range(len(shapes))]
        )
        ax.set_xticklabels(shapes, fontsize=8)
        ax.set_yscale("log")
        ax.set_ylabel("median ms (log)")
        ax.set_title(figure)
        ax.legend(fontsize=8)
    fig.suptitle(
        f"jaxpool CPU benchmarks, {meta['date']}: {meta['cpus']} cores "
        f"{meta['machine']}, jax {meta['jax']}, torch {meta['torch']} "
        f"({meta['torch_threads']} threads)"
    )
    fig.tight_layout()
    fig.savefig(args.output, dpi=90)
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
