"""A user's own memory task with no flags: ``txl rl tmaze:TMaze-v0 --env-kwargs '{"corridor": N}'`` (the T-maze of
``benchmarks/user_envs/tmaze.py``: the side shown at the first step only, a corridor of N steps, the choice at the
junction, +1 or -1), as a user would type it, with every default; and its continuous twin (``ContinuousTMaze-v0``,
Box actions). Each run is ``txl rl`` in a fresh process with one torch thread, ``--parallel`` at a time; the table
gives the mean return of the last 100 episodes, the steps at which it first reached 0.8, the wall time, and the
lines the run ended with (its hints)::

    python benchmarks/rl_user_tasks.py --seeds 3 --out user_tasks.jsonl
    python benchmarks/rl_user_tasks.py --table user_tasks.jsonl
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import torch
from common import cpu_description, first_reach, jsonl_rows, run_json

HERE = Path(__file__).parent / "user_envs"
#: (name, id, constructor arguments, flags): the flags are the documented ones for a memory longer than the default.
TASKS = [("corridor 10", "tmaze:TMaze-v0", {"corridor": 10}, []),
         ("corridor 40", "tmaze:TMaze-v0", {"corridor": 40}, []),
         ("corridor 100, --mem-len 128", "tmaze:TMaze-v0", {"corridor": 100}, ["--mem-len", "128"]),
         ("continuous, corridor 40", "tmaze:ContinuousTMaze-v0", {"corridor": 40}, [])]
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
torch.set_num_threads(1)  # as in the runs, so that the line names them
CPU = cpu_description()


def run(task: tuple, seed: int, root: Path, out: Path) -> None:
    name, env_id, kwargs, flags = task
    run_dir = root / f"{name.replace(' ', '_').replace(',', '')}-{seed}"
    start = time.perf_counter()
    result = run_json([sys.executable, "-m", "transformer_xl", "rl", env_id, "--env-kwargs", json.dumps(kwargs),
                       "--seed", str(seed), "--run-dir", str(run_dir), "--json", "--no-progress", *flags], env=ENV,
                      cwd=HERE)
    wall = time.perf_counter() - start
    if "error" in result:
        row = {"error": result["error"]}
    else:
        curve = [{"step": r["step"], "mean_return": r["mean_return"]} for r in jsonl_rows(run_dir / "metrics.jsonl")]
        row = {"mean_return": result["mean_return"], "steps": result["steps"], "seconds": result["seconds"],
               "hints": result["hints"], "first_08": first_reach(curve, 0.8), "curve": curve}
    row.update(task=name, seed=seed, wall=round(wall, 1), cpu=CPU)
    with open(out, "a") as fh:
        fh.write(json.dumps(row) + "\n")
    print(f"  {name} seed {seed}: {row.get('error') or round(row['mean_return'], 3)}, {wall:.0f} s", flush=True)


def table(path: Path) -> str:
    rows = {}
    for r in jsonl_rows(path):
        rows.setdefault(r["task"], []).append(r)
    lines = ["| task (no flags but these) | seeds | mean return, each seed | first 0.8 (each seed) | wall time per run "
             "(max) | lines at the end |", "|---|---|---|---|---|---|"]
    for name, runs in rows.items():
        ok = sorted((r for r in runs if "error" not in r), key=lambda r: r["seed"])
        returns = ", ".join(f"{r['mean_return']:.2f}" for r in ok)
        firsts = ", ".join(f"{r['first_08'] / 1000:.0f}k" if r["first_08"] else "never" for r in ok)
        hints = sum(bool(r["hints"]) for r in ok)
        wall = max(r["wall"] for r in ok) / 60 if ok else 0
        lines.append(f"| {name} | {len(ok)} | {returns} | {firsts} | {wall:.1f} min | "
                     f"{'none' if not hints else f'hints in {hints} of {len(ok)}'} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--tasks", nargs="*", default=[t[0] for t in TASKS], help="task names, as in the table")
    parser.add_argument("--parallel", type=int, default=2)
    parser.add_argument("--out", type=Path, default=Path("user_tasks.jsonl"))
    parser.add_argument("--table", type=Path)
    args = parser.parse_args()
    if args.table:
        print(table(args.table))
        return
    print(CPU, f"| {args.parallel} runs at a time", flush=True)
    done = {(r["task"], r["seed"]) for r in jsonl_rows(args.out)} if args.out.is_file() else set()
    jobs = [(t, seed) for seed in range(1, args.seeds + 1) for t in TASKS if t[0] in args.tasks
            and (t[0], seed) not in done]
    with tempfile.TemporaryDirectory() as tmp, ThreadPoolExecutor(args.parallel) as pool:
        for future in [pool.submit(run, t, seed, Path(tmp), args.out.resolve()) for t, seed in jobs]:
            future.result()
    print()
    print(table(args.out))


if __name__ == "__main__":
    main()
