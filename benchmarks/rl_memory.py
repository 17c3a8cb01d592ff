"""What memory buys an agent: ``txl rl`` on POPGym memory tasks, several agents, several seeds, one table.

Agents (each ``txl rl`` with its defaults except the flag shown):

* GTrXL: the default (``--gating gru --mem-len 64``);
* TrXL: the same without gates (``--gating none``);
* no memory: ``--mem-len 0`` (the current observation only);
* GRU: ``--core gru``, a GRU policy of the same width;
* GTrXL with a short memory: ``--mem-len 16`` (RepeatFirst needs the 51 steps of an episode).

Each run is one process with one torch thread (``--threads 1``), ``--parallel`` runs at a time (default 2: one
per core of a 2-core machine). Prints a markdown table of the mean return of the last 100 episodes (mean and
standard deviation over the seeds), the steps at which the mean return first reached 0.9, and the wall time, with
the CPU named::

    python benchmarks/rl_memory.py                          # the README's table: 3 seeds, default steps
    python benchmarks/rl_memory.py --seeds 1 --steps 50000  # a quick look
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import cpu_description, jsonl_rows, markdown_table, run_json

AGENTS = {
    "GTrXL": [],
    "TrXL (no gates)": ["--gating", "none"],
    "no memory (--mem-len 0)": ["--mem-len", "0"],
    "GRU": ["--core", "gru"],
}
SHORT_MEMORY = ("GTrXL, --mem-len 16", ["--mem-len", "16"])
TASKS = ["popgym-RepeatFirstEasy-v0", "popgym-RepeatPreviousEasy-v0"]
SOLVED = 0.9


def run_one(task: str, flags: list, seed: int, steps: int, root: Path) -> dict:
    run_dir = root / f"{task}-{'_'.join(flags) or 'default'}-{seed}".replace("/", "_")
    cmd = [sys.executable, "-m", "transformer_xl", "rl", task, "--seed", str(seed), "--threads", "1", "--json",
           "--no-progress", "--run-dir", str(run_dir), *flags] + (["--steps", str(steps)] if steps else [])
    start = time.perf_counter()
    result = run_json(cmd, env={**os.environ, "OMP_NUM_THREADS": "1"})
    wall = time.perf_counter() - start
    if "error" in result:
        raise SystemExit(f"{' '.join(cmd)} failed: {result['error']}")
    records = jsonl_rows(run_dir / "metrics.jsonl")
    hit = next((r["step"] for r in records if (r.get("mean_return") or -1e9) >= SOLVED), None)
    print(f"  {task} {' '.join(flags) or '(defaults)'} seed {seed}: mean return {result['mean_return']:.3f}, "
          f"0.9 reached at {hit}, {wall:.0f} s", flush=True)
    return {**result, "wall": wall, "solved_at": hit}


def summarise(results: list) -> list:
    returns = [r["mean_return"] for r in results]
    spread = f" ± {statistics.stdev(returns):.2f}" if len(returns) > 1 else ""
    solved = [r["solved_at"] for r in results]
    hits = [s for s in solved if s]
    reached = f"{statistics.median(hits) / 1000:.0f}k ({len(hits)}/{len(solved)})" if hits else f"— (0/{len(solved)})"
    return [f"{statistics.mean(returns):.2f}{spread}", reached,
            f"{statistics.mean(r['wall'] for r in results) / 60:.1f} min"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=0, help="environment steps per run (0: txl rl's default)")
    parser.add_argument("--parallel", type=int, default=2, help="runs at a time, one thread each (default 2)")
    parser.add_argument("--tasks", nargs="*", default=TASKS)
    args = parser.parse_args()
    import torch

    torch.set_num_threads(1)
    print(cpu_description(), f"| {args.parallel} runs at a time, 1 thread each", flush=True)
    jobs = [(task, name, flags, seed) for task in args.tasks for name, flags in AGENTS.items()
            for seed in range(1, args.seeds + 1)]
    jobs += [(TASKS[0], SHORT_MEMORY[0], SHORT_MEMORY[1], seed) for seed in range(1, args.seeds + 1)
             if TASKS[0] in args.tasks]
    with tempfile.TemporaryDirectory() as tmp, ThreadPoolExecutor(args.parallel) as pool:
        futures = [(job, pool.submit(run_one, job[0], job[2], job[3], args.steps, Path(tmp))) for job in jobs]
        rows = {}
        for (task, name, _, _), future in futures:
            rows.setdefault((task, name), []).append(future.result())
    head = ["task", "agent", "mean return (last 100 episodes)", "steps to 0.9 (median, runs)", "wall time per run"]
    print("\n" + markdown_table(head, [[task.removeprefix("popgym-"), name, *summarise(results)]
                                       for (task, name), results in rows.items()]))


if __name__ == "__main__":
    main()
