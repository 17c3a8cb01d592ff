"""``txl bench``: measurements (``eval-speed``: the paper's Table 9 on this machine).
"""

from __future__ import annotations


import torch

from ..evaluation.speed import check_eval_speed_args, format_table, run_eval_speed
from .options import at_least, checks, command


@command
def add_bench(sub) -> None:
    p = sub.add_parser("bench", help="measurements (eval-speed: sliding-window vanilla vs Transformer-XL)")
    what = p.add_subparsers(dest="bench", metavar="WHAT", required=True)
    q = what.add_parser("eval-speed", help="the paper's Table 9 on this machine")
    q.add_argument("--attn-lens", type=int, nargs="+", default=[128, 256, 512, 1024])
    q.add_argument("--vanilla-tokens", type=int, default=64, help="predictions timed for the vanilla model")
    q.add_argument("--xl-tokens", type=int, default=4096, help="predictions timed for Transformer-XL")
    q.add_argument("--n-layer", type=int, default=4)
    q.add_argument("--d-model", type=int, default=256)
    q.add_argument("--n-head", type=int, default=8)
    q.add_argument("--d-inner", type=int, default=1024)
    q.add_argument("--plot", default="eval_speed.png", help="PNG path")
    q.set_defaults(func=run_bench_eval_speed,
                   **checks(at_least("--attn-lens", 1), at_least("--vanilla-tokens", 1), at_least("--xl-tokens", 1),
                            at_least("--n-layer", 1), at_least("--d-model", 1), at_least("--n-head", 1),
                            at_least("--d-inner", 1)))


def run_bench_eval_speed(args) -> int:
    check_eval_speed_args(args.attn_lens, args.vanilla_tokens, args.xl_tokens, args.n_layer, args.d_model,
                          args.n_head, args.d_inner, args.plot)
    print(f"models: n_layer {args.n_layer}, d_model {args.d_model}, n_head {args.n_head}, d_inner {args.d_inner}, "
          f"byte vocabulary; {torch.get_num_threads()} threads; tokens from the built-in corpus", flush=True)
    rows = run_eval_speed(args.attn_lens, args.vanilla_tokens, args.xl_tokens, args.n_layer, args.d_model,
                          args.n_head, args.d_inner, args.plot)
    print(format_table(rows))
    print(f"wrote {args.plot}")
    return 0
