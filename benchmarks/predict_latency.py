"""One environment, one step per call: what ``predict`` costs, as a policy in a real-time loop calls it.

    python benchmarks/predict_latency.py

On POPGym's RepeatPreviousEasy (``--env``), one torch thread, a fresh untrained policy of each library's default
size (the cost does not depend on the weights): ``MemoryAgent.predict`` (``txl rl``'s agent), ``TransformerXLPPO``'s
``predict`` (Stable-Baselines3's face), and sb3-contrib's ``RecurrentPPO.predict`` (an LSTM) when installed. Each
call passes back the state the previous one returned and ``episode_start`` from the environment, as SB3's
documentation shows; the environment's own step is not timed. Prints the median of ``--repeats`` timings of
``--calls`` calls, in milliseconds a call, with the CPU named.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import cpu_description, markdown_table, table_row


def timed(predict, env, calls: int) -> float:
    """Seconds per ``predict`` call over ``calls`` steps of ``env`` (its step not timed)."""
    obs, _ = env.reset(seed=0)
    state, start, spent = None, np.ones((1,), dtype=bool), 0.0
    for _ in range(calls):
        begin = time.perf_counter()
        action, state = predict(obs, state, start)
        spent += time.perf_counter() - begin
        obs, _, terminated, truncated, _ = env.step(action)
        start = np.array([terminated or truncated])
        if start[0]:
            obs, _ = env.reset()
    return spent / calls


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--env", default="popgym-RepeatPreviousEasy-v0")
    p.add_argument("--calls", type=int, default=500)
    p.add_argument("--repeats", type=int, default=5)
    args = p.parse_args()
    torch.set_num_threads(1)
    import gymnasium as gym

    from transformer_xl.rl.envs import register_env_family
    from transformer_xl.torchrl import agent_for_env

    register_env_family(args.env)
    env = gym.make(args.env)
    agent = agent_for_env(args.env).eval()
    policies = {"MemoryAgent.predict (GTrXL)": lambda o, s, e: agent.predict(o, s, e, deterministic=True)}
    try:
        from transformer_xl.sb3 import TransformerXLPPO

        txl = TransformerXLPPO("MlpPolicy", args.env, n_steps=256, device="cpu")
        policies["TransformerXLPPO.predict"] = lambda o, s, e: txl.predict(o, s, e, deterministic=True)
    except ImportError:
        pass
    try:
        from sb3_contrib import RecurrentPPO

        lstm = RecurrentPPO("MlpLstmPolicy", args.env, device="cpu")
        policies["sb3-contrib RecurrentPPO.predict (LSTM)"] = lambda o, s, e: lstm.predict(o, s, e, deterministic=True)
    except ImportError:
        pass
    print(f"# {cpu_description()}; {args.env}, one environment, {args.calls} calls x {args.repeats}")
    print(markdown_table(["policy", "ms a call (median)"]))
    results = {name: [] for name in policies}
    for _ in range(args.repeats):  # interleaved: a drift of the machine's speed affects all alike
        for name, predict in policies.items():
            results[name].append(timed(predict, env, args.calls))
    for name, values in results.items():
        print(table_row([name, f"{statistics.median(values) * 1e3:.2f}"]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
