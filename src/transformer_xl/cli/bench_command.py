"""``txl bench``: measurements (``eval-speed``: the paper's Table 9 on this machine,
:func:`transformer_xl.jobs.run_eval_speed`).
"""

from __future__ import annotations

import torch

from ..devices import resolve_device
from ..jobs import EvalSpeedSettings, check_eval_speed, run_eval_speed
from ..jobs.eval_speed import format_table
from .options import at_least, checks


def add(sub) -> None:
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
    q.add_argument("--device", default="auto", help="auto (CUDA when available), cpu, cuda or cuda:N")
    q.set_defaults(func=run_bench_eval_speed,
                   **checks(at_least("--attn-lens", 1), at_least("--vanilla-tokens", 1), at_least("--xl-tokens", 1),
                            at_least("--n-layer", 1), at_least("--d-model", 1), at_least("--n-head", 1),
                            at_least("--d-inner", 1)))


def run_bench_eval_speed(args) -> int:
    s = EvalSpeedSettings(attn_lens=args.attn_lens, vanilla_tokens=args.vanilla_tokens, xl_tokens=args.xl_tokens,
                          n_layer=args.n_layer, d_model=args.d_model, n_head=args.n_head, d_inner=args.d_inner,
                          plot=args.plot, device=args.device)
    check_eval_speed(s)
    device = resolve_device(s.device)
    where = torch.cuda.get_device_name(device) if device.type == "cuda" else f"{torch.get_num_threads()} threads"
    print(f"models: n_layer {s.n_layer}, d_model {s.d_model}, n_head {s.n_head}, d_inner {s.d_inner}, "
          f"byte vocabulary; {device.type} ({where}); tokens from the built-in corpus", flush=True)
    print(format_table(run_eval_speed(s)))
    print(f"wrote {s.plot}")
    return 0
