"""TorchRL's PPO with three memories side by side: ``benchmarks/torchrl_ppo.py`` for each task, module and seed
(two runs at a time, one thread each), then one table.

    python benchmarks/torchrl_ppo_table.py --out results/torchrl_ppo

Each run writes ``OUT/TASK-MODULE-seedN.json`` (the recipe's ``--json`` line) and is skipped when that file
exists, so the grid continues where it stopped. The table: mean return (± standard error over seeds) at 100k and
300k steps (the last 100 episodes before that step), the steps at which the return first reached 0.8 (per seed),
env steps/s of the whole loop and wall time.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import markdown_table, run_json

HERE = Path(__file__).resolve().parent
TASKS = ("popgym-RepeatPreviousEasy-v0", "popgym-RepeatFirstEasy-v0")
MODULES = ("txl", "lstm", "mlp")


def run(out: Path, task: str, module: str, seed: int, steps: int) -> dict:
    path = out / f"{task}-{module}-seed{seed}.json"
    if not path.exists():
        record = run_json([sys.executable, str(HERE / "torchrl_ppo.py"), "--env", task, "--module", module,
                           "--seed", str(seed), "--steps", str(steps), "--json"])
        if "error" in record:
            raise SystemExit(f"{task} {module} seed {seed} failed: {record['error']}")
        path.write_text(json.dumps(record) + "\n", encoding="utf-8")
    return json.loads(path.read_text(encoding="utf-8"))


def at(curve, step: int):
    before = [c["return"] for c in curve if c["step"] <= step and c["return"] is not None]
    return before[-1] if before else None


def first_reach(curve, level: float):
    return next((c["step"] for c in curve if c["return"] is not None and c["return"] >= level), None)


def mean_se(values):
    values = [v for v in values if v is not None]
    if not values:
        return "-"
    se = statistics.stdev(values) / len(values) ** 0.5 if len(values) > 1 else 0.0
    return f"{statistics.mean(values):.2f} ± {se:.2f}"


def table(results) -> str:
    body = []
    for task in TASKS:
        for module in MODULES:
            rows = [r for r in results if r["env"] == task and r["module"] == module]
            if not rows:
                continue
            reach = ", ".join(f"{s // 1000}k" if s else "never" for s in (first_reach(r["curve"], 0.8) for r in rows))
            speed = statistics.mean(r["steps_per_s"] for r in rows)
            wall = statistics.mean(r["seconds"] for r in rows)
            name = task.removeprefix("popgym-").removesuffix("-v0")
            body.append([name, module, mean_se(at(r["curve"], 100_000) for r in rows),
                         mean_se(at(r["curve"], 300_000) for r in rows), reach, f"{speed:,.0f}",
                         f"{wall / 60:.1f} min"])
    return markdown_table(["task", "memory", "return at 100k", "return at 300k", "steps to 0.8 (per seed)",
                           "env steps/s", "wall"], body)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default="results/torchrl_ppo")
    p.add_argument("--steps", type=int, default=300_000)
    p.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    p.add_argument("--modules", nargs="+", default=list(MODULES), choices=MODULES)
    p.add_argument("--tasks", nargs="+", default=list(TASKS))
    p.add_argument("--parallel", type=int, default=2)
    args = p.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    grid = [(t, m, s) for s in args.seeds for t in args.tasks for m in args.modules]
    with ThreadPoolExecutor(args.parallel) as pool:
        results = list(pool.map(lambda job: run(out, *job, args.steps), grid))
    text = table(results)
    (out / "table.md").write_text(text + "\n", encoding="utf-8")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
