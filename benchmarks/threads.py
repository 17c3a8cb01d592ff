"""Threads for small workloads: 1 or 2 torch threads, OpenMP spinning or passive, on idle or shared cores.

Three workloads of the package, each timed in its own process (so that the thread settings take effect before
torch starts): an evaluation segment of the default byte model (batch 8 x 64 tokens, memory 64), one token of
cached decoding with the same model, and one step of the default ``txl rl`` agent (16 environments). Each runs
with 1 and 2 threads, with OpenMP's default wait policy and with ``OMP_WAIT_POLICY=PASSIVE``, on idle cores and
with a busy process sharing them (``--cores`` pins everything to the same cores). Prints the median ms per call.

    python benchmarks/threads.py --cores 0,1
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

WORKLOADS = ("eval segment", "decoding token", "rl agent step")

CHILD = r"""
import json, sys, time, torch
from transformer_xl import TransformerXL, TransformerXLConfig
from transformer_xl.generation import DecodingCache
from transformer_xl.rl import AgentConfig, MemoryAgent
workload, repeat = sys.argv[1], int(sys.argv[2])
torch.manual_seed(0)
cfg = TransformerXLConfig(n_token=256, n_layer=4, d_model=128, n_head=4, d_head=32, d_inner=512, tgt_len=64,
                          mem_len=64, dropout=0.0)
times = []
with torch.no_grad():
    if workload == "eval segment":
        model, x = TransformerXL(cfg).eval(), torch.randint(0, 256, (8, 65))
        mems = model(x[:, :64], x[:, 1:]).mems
        def call():
            model(x[:, :64], x[:, 1:], mems=mems)
    elif workload == "decoding token":
        model = TransformerXL(cfg).eval()
        cache = DecodingCache(model, 1, decoding="sliding")
        cache.extend(torch.randint(0, 256, (1, 64)))
        cache.end_prompt()
        tok = torch.zeros(1, 1, dtype=torch.long)
        def call():
            model.crit.log_probs(cache.extend(tok)[:, -1])
    else:
        agent = MemoryAgent(AgentConfig(obs_dim=4, n_actions=4)).eval()
        state, obs, starts = agent.initial_state(16), torch.zeros(16, 4), torch.zeros(16, dtype=torch.bool)
        def call():
            global state
            state = agent.step(obs, starts, state)[2]
    for _ in range(3):
        call()
    for _ in range(repeat):
        t = time.perf_counter(); call(); times.append(time.perf_counter() - t)
times.sort()
print(json.dumps({"median_ms": 1e3 * times[len(times) // 2]}))
"""


def run(workload: str, threads: int, passive: bool, cores: str, repeat: int) -> float:
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    env.pop("OMP_WAIT_POLICY", None)
    if passive:
        env["OMP_WAIT_POLICY"] = "PASSIVE"
    cmd = (["taskset", "-c", cores] if cores else []) + [sys.executable, "-c", CHILD, workload, str(repeat)]
    from common import run_json

    return run_json(cmd, env=env, check=True)["median_ms"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cores", default="", help="pin to these cores, e.g. 0,1 (and the busy process too)")
    parser.add_argument("--repeat", type=int, default=30)
    args = parser.parse_args()
    from common import cpu_description, markdown_table, table_row

    print(cpu_description().split(" | torch")[0], f"| cores {args.cores or 'all'}")
    print(markdown_table(["workload", "cores", "1 thread", "2 threads", "2 threads, OMP_WAIT_POLICY=PASSIVE"]))
    for busy in (False, True):
        hog = None
        if busy:  # one busy process on the same cores: a shared machine
            pin = ["taskset", "-c", args.cores] if args.cores else []
            hog = subprocess.Popen(pin + [sys.executable, "-c", "while True: pass"])
            time.sleep(0.5)
        try:
            for workload in WORKLOADS:
                cells = [run(workload, 1, False, args.cores, args.repeat), run(workload, 2, False, args.cores,
                                                                               args.repeat),
                         run(workload, 2, True, args.cores, args.repeat)]
                print(table_row([workload, "shared with a busy process" if busy else "idle",
                                 *(f"{c:.2f} ms" for c in cells)]), flush=True)
        finally:
            if hog is not None:
                hog.kill()


if __name__ == "__main__":
    main()
