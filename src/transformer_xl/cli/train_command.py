"""``txl train``: train or resume a run (in N processes under torchrun with ``--nproc N``).
"""

from __future__ import annotations

import signal
import sys
from pathlib import Path

from ..checkpoints.hub import RUN_CONFIG_NAME, latest_checkpoint
from ..data.corpus import check_dataset
from ..training import load_run_config, train
from ..training.launch import check_nproc, launch
from ..training.run_config import builtin_config_names
from ..training.signals import StopNow, exit_status


def add(sub) -> None:
    p = sub.add_parser("train", allow_abbrev=False,
                       help="train a model (with no arguments: a small model on the built-in corpus)",
                       description="Train a Transformer-XL. Options not listed here override config fields: "
                                   "--lr 0.001, --max-steps 500, --n-layer 6, --eval.mem-len 256 ...",
                       epilog=f"built-in configs: {', '.join(_builtin_configs())}")
    p.add_argument("--config", default=None, help="a YAML file or the name of a built-in config (default: default)")
    p.add_argument("--resume", action="store_true", help="continue the run in --run-dir from its last checkpoint")
    p.add_argument("--nproc", type=int, metavar="N", help="train with N processes on this machine: runs this command "
                   "under torchrun (DistributedDataParallel; FSDP with --parallel fsdp); see docs/DISTRIBUTED.md")
    p.add_argument("--init-from", metavar="CKPT", help="fine-tune: start from this checkpoint (or run directory: its "
                   "best/ or last checkpoint), keeping its model and vocabulary, with a fresh optimiser and schedule; "
                   "with --resume, a run directory that already has checkpoints resumes them instead")
    p.set_defaults(func=run_train, overrides_allowed=True)


def _builtin_configs():
    return builtin_config_names()


def _run_config(args):
    """The run's config; ``--resume`` without ``--config`` reads the run directory's own run.yaml (the command
    line's overrides on top), so the run goes on with the settings it started with."""
    cfg = load_run_config(args.config, args.overrides, init_from=args.init_from)
    saved = Path(cfg.train.run_dir) / RUN_CONFIG_NAME
    if args.resume and args.config is None and saved.is_file():
        args.config = str(saved)
        cfg = load_run_config(args.config, args.overrides, init_from=args.init_from)
    return cfg


def run_train(args) -> int:
    cfg = _run_config(args)
    check_dataset(cfg.data.dataset, "--train-file")
    if args.nproc is not None and args.nproc != 1:  # the same command, without --nproc, in N processes under torchrun

        check_nproc(args.nproc, cfg.train, args.resume)
        argv = (["-v"] if args.verbose else []) + ["train"] + (["--config", args.config] if args.config else []) \
            + (["--resume"] if args.resume else []) + (["--init-from", args.init_from] if args.init_from else []) \
            + list(args.overrides)
        return launch(args.nproc, argv)
    try:
        result = train(cfg, resume=args.resume)
    except StopNow as stop:
        print(f"txl train: stopped at once by a second {stop.name}; {_left_to_resume(cfg.train.run_dir)}",
              file=sys.stderr)
        return exit_status(stop.signum)
    if result.rank != 0:
        return 0 if result.stopped_by in ("max_steps", "max_time") else exit_status(_signum(result.stopped_by))
    if result.stopped_by not in ("max_steps", "max_time"):
        print(f"interrupted by {result.stopped_by} at step {result.steps}: checkpoint written to {result.checkpoint}; "
              f"continue with --resume", file=sys.stderr)
        return exit_status(_signum(result.stopped_by))
    best = "n/a" if result.best_valid_loss is None else f"{result.best_valid_loss:.4f}"
    scope = result.valid_scope if result.best_valid_loss is not None else ""
    print(f"done: {result.steps} steps ({result.stopped_by}), best valid loss {best}{scope}; run in {result.run_dir}")
    return 0


def _left_to_resume(run_dir) -> str:
    """What a run stopped at once leaves on disk: its last complete checkpoint, or nothing to resume."""
    latest = latest_checkpoint(run_dir)
    if latest is None:
        return "no checkpoint was written yet; nothing to resume"
    return f"the last checkpoint, {latest}, is intact (rerun with --resume)"


def _signum(name: str) -> int:
    return int(getattr(signal, name, signal.SIGINT))
