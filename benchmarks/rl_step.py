"""What one collection step of an agent costs: the memory stepped through its ring of projected keys and values
(``RingStepper``, what ``txl rl``, ``TransformerXLPPO``, ``predict`` and TorchRL's module step with), through the
general decoding cache, and the fixed-length memory projected again at every step (the path the update's replay
takes), at several memory lengths, side by side in one process.

A step is one observation for each of ``--envs`` environments through the default agent (GTrXL, 2 layers,
d_model 64), without the environments: the figures are the agent's own cost. Each figure is the median over
``--repeats`` timings of ``--steps`` steps, after the memory is full; one torch thread by default (see
docs/RL.md, Threads). Prints a markdown table with the CPU named::

    python benchmarks/rl_step.py
    python benchmarks/rl_step.py --mem-lens 64 256 1024 --threads 1 2
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from common import cpu_description, markdown_table, table_row

from transformer_xl.rl import AgentConfig, MemoryAgent


def time_steps(step, steps: int, repeats: int) -> float:
    """Median seconds per step over ``repeats`` runs of ``steps`` steps."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(steps):
            step()
        times.append((time.perf_counter() - start) / steps)
    return statistics.median(times)


@torch.no_grad()
def measure(mem_len: int, envs: int, steps: int, repeats: int) -> tuple:
    torch.manual_seed(0)
    agent = MemoryAgent(AgentConfig(obs_dim=8, n_actions=4, mem_len=mem_len)).eval()
    obs, starts = torch.randn(envs, 8), torch.zeros(envs, dtype=torch.bool)
    state = [agent.initial_state(envs)]
    ring, cache = agent.stepper(envs), agent.stepper(envs)
    cache.core.fast = None  # the decoding cache's path
    cache.core.sync()
    for _ in range(mem_len + 8):  # a full memory: the steady state of a long episode
        state[0] = agent.step(obs, starts, state[0])[2]
        ring.step(obs, starts)
        cache.step(obs, starts)

    def fixed():
        state[0] = agent.step(obs, starts, state[0])[2]

    # interleaved, so that a drift of the machine's speed affects all alike
    a, b, c = [], [], []
    for _ in range(repeats):
        a.append(time_steps(fixed, steps, 1))
        b.append(time_steps(lambda: cache.step(obs, starts), steps, 1))
        c.append(time_steps(lambda: ring.step(obs, starts), steps, 1))
    return statistics.median(a), statistics.median(b), statistics.median(c)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mem-lens", type=int, nargs="*", default=[64, 256])
    parser.add_argument("--envs", type=int, default=16)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, nargs="*", default=[1])
    args = parser.parse_args()
    print(f"{cpu_description()}; torch {torch.__version__}; {args.envs} environments per step\n")
    print(markdown_table(["threads", "memory", "fixed-length memory, projected each step", "decoding cache", "ring",
                          "ring against projected / cache"]))
    base = {}
    for threads in args.threads:
        torch.set_num_threads(threads)
        for mem_len in args.mem_lens:
            fixed, cached, ring = measure(mem_len, args.envs, args.steps, args.repeats)
            base.setdefault(threads, ring)
            print(table_row([threads, f"M = {mem_len}", f"{fixed * 1e3:.2f} ms", f"{cached * 1e3:.2f} ms",
                             f"{ring * 1e3:.2f} ms ({ring / base[threads]:.2f}x M = {args.mem_lens[0]})",
                             f"{fixed / ring:.1f}x / {cached / ring:.1f}x"]), flush=True)


if __name__ == "__main__":
    main()
