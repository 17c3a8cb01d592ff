"""``txl plot``: a run's loss curves as an image.
"""

from __future__ import annotations

from ..analysis.loss_curves import plot_run


def add(sub) -> None:
    p = sub.add_parser("plot", help="draw a run's loss curves to a PNG")
    p.add_argument("run_dir")
    p.add_argument("--out", help="image path, .png (default), .pdf or .svg (default: RUN_DIR/loss.png)")
    p.set_defaults(func=run_plot)


def run_plot(args) -> int:
    print(f"wrote {plot_run(args.run_dir, args.out)}")
    return 0
