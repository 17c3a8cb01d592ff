"""Two versions of this package, side by side: training step, evaluation and cached decoding, ms per call.

Each source tree (a ``src`` folder, e.g. of a ``git worktree`` at another commit) runs the same workloads in a
fresh subprocess, alternating between the trees for ``--rounds`` rounds, so that a drift of the shared machine
hits both alike; the table shows each tree's median over the rounds and the ratio. The model is the base-like
configuration of the README (4 layers, d_model 256, 8 heads of 32, d_inner 1024, tgt_len = mem_len = 128,
batch 8, vocabulary 10k, dropout 0.1, Adam); decoding is batch 1 with mem_len 2048 (``--decode-mem``).

    git worktree add /tmp/old <commit>
    python benchmarks/versions.py /tmp/old/src src --rounds 5
    python benchmarks/versions.py /tmp/old/src src --model '{"cutoffs": [2000, 6000], "div_val": 2}'

Prints the CPU model and its flags first (the figures depend on them).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import cpu_description, markdown_table, run_json, table_row

WORKER = r'''
import json, sys, time, statistics, torch
torch.manual_seed(0)
torch.set_num_threads(int(sys.argv[1]))
steps, decode_mem, fields = int(sys.argv[2]), int(sys.argv[3]), json.loads(sys.argv[4])
from transformer_xl import TransformerXL, TransformerXLConfig
from transformer_xl.generation import DecodingCache
cfg = TransformerXLConfig(**{**dict(n_token=10000, n_layer=4, n_head=8, d_model=256, d_head=32, d_inner=1024,
                                    tgt_len=128, mem_len=128, dropout=0.1), **fields})
model = TransformerXL(cfg)
opt = torch.optim.Adam(model.parameters(), lr=2.5e-4)
g = torch.Generator().manual_seed(1)
data = torch.randint(0, 10000, (8, 129 * (steps + 4)), generator=g)

def timed(fn, n):
    out = []
    for i in range(n):
        t0 = time.perf_counter(); fn(i); out.append(time.perf_counter() - t0)
    return statistics.median(out[2:]) * 1000

mems = [None]
def train_step(i):
    model.train()
    x = data[:, i * 128:(i + 1) * 128]; y = data[:, i * 128 + 1:(i + 1) * 128 + 1]
    out = model(x, y, mems=mems[0]); mems[0] = out.mems
    opt.zero_grad(set_to_none=True); out.loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 0.25); opt.step()

eval_mems = [None]
@torch.no_grad()
def eval_step(i):
    model.eval()
    x = data[:, i * 128:(i + 1) * 128]; y = data[:, i * 128 + 1:(i + 1) * 128 + 1]
    eval_mems[0] = model(x, y, mems=eval_mems[0]).mems

result = {"train_ms": timed(train_step, steps), "decode_ms": float("nan")}
if cfg.attn_type == 0:  # cached decoding is the relative attention's
    model.eval()
    model.reset_length(1, 0, decode_mem)
    cache = DecodingCache(model, 1)
    with torch.no_grad():
        cache.extend(data[:1, :decode_mem])
    @torch.no_grad()
    def decode_step(i):
        model.crit.log_probs(cache.extend(data[:1, i:i + 1])[:, -1])
    result["decode_ms"] = timed(decode_step, 4 * steps)
    model.reset_length(128, 0, 128)
result["eval_ms"] = timed(eval_step, steps)
print(json.dumps(result))
'''


def run(src: str, threads: int, steps: int, decode_mem: int, fields: dict) -> dict:
    env = {**os.environ, "PYTHONPATH": str(Path(src).resolve())}
    return run_json([sys.executable, "-c", WORKER, str(threads), str(steps), str(decode_mem), json.dumps(fields)],
                    env=env, check=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("old", help="the first source tree (its src folder)")
    p.add_argument("new", help="the second source tree")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--threads", type=int, default=min(2, os.cpu_count() or 1))
    p.add_argument("--decode-mem", type=int, default=2048)
    p.add_argument("--model", default="{}", help='config fields over the base-like model, as JSON, e.g. '
                   '\'{"cutoffs": [2000, 6000], "div_val": 2}\' or \'{"attn_type": 3}\'')
    args = p.parse_args()
    fields = json.loads(args.model)
    print(cpu_description())
    print(f"base-like model with {fields or 'no changes'}")
    results = {"old": [], "new": []}
    for r in range(args.rounds):
        for name in (("old", "new") if r % 2 == 0 else ("new", "old")):
            results[name].append(run(getattr(args, name), args.threads, args.steps, args.decode_mem, fields))
    print(markdown_table(["workload", f"{args.old} ms", f"{args.new} ms", "new / old"]))
    for key, label in (("train_ms", "training step"), ("eval_ms", "evaluation segment"),
                       ("decode_ms", f"cached decoding, M = {args.decode_mem}")):
        old = statistics.median(r[key] for r in results["old"])
        new = statistics.median(r[key] for r in results["new"])
        print(table_row([label, f"{old:.2f}", f"{new:.2f}", f"{new / old:.3f}"]))


if __name__ == "__main__":
    main()
