"""Where ``txl rl --vector async`` pays off: environment steps per second of whole ``txl rl`` runs with Gymnasium's
``SyncVectorEnv`` (one process) against its ``AsyncVectorEnv`` (one process per environment), on environments
whose own step costs nothing, some waiting, or some computing.

The environment is POPGym's RepeatPreviousEasy, as it is (``cost_ms 0``) or with each step made to cost
``cost_ms`` milliseconds more: ``wait`` sleeps (a simulator in another process, a robot, a remote service: the
core is free meanwhile) and ``busy`` computes (a physics step in Python: the core is taken). This file is also
the environment's module: ``txl rl rl_vector:CostlyRepeat-v0 --env-kwargs '{"cost_ms": 1, "kind": "wait"}'``
imports it from the current folder, as a user's own environment is. Each run is ``txl rl`` with ``--envs 16``,
one torch thread, ``--steps`` steps; the figure is its ``steps / seconds``. Prints a markdown table with the CPU
named::

    python benchmarks/rl_vector.py
    python benchmarks/rl_vector.py --costs 0 0.5 2 --steps 16384
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import gymnasium as gym

HERE = Path(__file__).parent
ENV_ID = "CostlyRepeat-v0"


class CostlyRepeat(gym.Wrapper):
    """POPGym's RepeatPreviousEasy whose every step costs ``cost_ms`` more: slept (``wait``) or computed (``busy``)."""

    metadata = {"render_modes": []}  # gymnasium >= 1.2 checks the class's own, which a Wrapper has as a property

    def __init__(self, cost_ms: float = 0.0, kind: str = "wait"):
        import popgym  # noqa: F401  registers the popgym-* ids

        super().__init__(gym.make("popgym-RepeatPreviousEasy-v0"))
        self.cost, self.kind = cost_ms / 1000.0, kind

    def step(self, action):
        if self.kind == "wait":
            time.sleep(self.cost)
        else:
            end = time.perf_counter() + self.cost
            while time.perf_counter() < end:
                pass
        return self.env.step(action)


if ENV_ID not in gym.envs.registry:
    gym.register(ENV_ID, entry_point=CostlyRepeat)


def run(vector: str, cost_ms: float, kind: str, steps: int, work: Path) -> float:
    run_dir = work / f"{vector}-{kind}-{cost_ms}"
    cmd = [sys.executable, "-m", "transformer_xl", "rl", f"rl_vector:{ENV_ID}", "--env-kwargs",
           json.dumps({"cost_ms": cost_ms, "kind": kind}), "--vector", vector, "--steps", str(steps), "--threads",
           "1", "--json", "--no-progress", "--run-dir", str(run_dir)]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    from common import run_json  # here, not above: the children import this file as the environment's module

    result = run_json(cmd, cwd=HERE, env=env)
    if "error" in result:
        raise SystemExit(f"{' '.join(cmd)}: {result['error']}")
    return result["steps"] / result["seconds"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--costs", type=float, nargs="*", default=[0.0, 0.5, 2.0], help="extra ms per step")
    parser.add_argument("--kinds", nargs="*", default=["wait", "busy"], choices=["wait", "busy"])
    parser.add_argument("--steps", type=int, default=8192)
    args = parser.parse_args()
    import tempfile

    sys.path.insert(0, str(HERE))
    from common import cpu_description, markdown_table, table_row

    print(cpu_description(), f"| {os.cpu_count()} cores | txl rl --envs 16 --threads 1 --steps {args.steps}")
    print()
    print(markdown_table(["extra cost of a step", "sync (steps/s)", "async (steps/s)", "async / sync"]))
    with tempfile.TemporaryDirectory() as tmp:
        for kind in args.kinds:
            for cost in args.costs:
                if cost == 0 and kind != args.kinds[0]:
                    continue
                sync = run("sync", cost, kind, args.steps, Path(tmp))
                async_ = run("async", cost, kind, args.steps, Path(tmp))
                what = "none" if cost == 0 else f"{cost:g} ms {'waiting' if kind == 'wait' else 'computing'}"
                print(table_row([what, f"{sync:,.0f}", f"{async_:,.0f}", f"{async_ / sync:.2f}x"]), flush=True)


if __name__ == "__main__":
    main()
