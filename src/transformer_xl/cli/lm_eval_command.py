"""``txl lm-eval ARGS``: EleutherAI's lm-evaluation-harness command line with the model ``transformer-xl``.

Every argument goes to lm-eval's own command line unchanged (``--model transformer-xl`` is added when no
``--model`` is given); see :mod:`transformer_xl.lm_eval`. Without the ``lm-eval`` extra, one line names it.
"""

from __future__ import annotations

import argparse


def add(sub) -> None:
    p = sub.add_parser("lm-eval", add_help=False, prefix_chars="\0",
                       help="run lm-evaluation-harness (lm_eval) with a checkpoint: txl lm-eval --model_args "
                            "pretrained=CKPT --tasks ... (every argument goes to lm-eval unchanged)")
    p.add_argument("lm_eval_args", nargs=argparse.REMAINDER)
    p.set_defaults(func=run_lm_eval)


def run_lm_eval(args) -> int:
    # imported here: transformer_xl.lm_eval imports lm-eval itself (an optional extra), and registers the model
    from .. import lm_eval as harness

    return harness.run_cli(args.lm_eval_args)
