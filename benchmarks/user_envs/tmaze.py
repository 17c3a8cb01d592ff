"""A user's own memory task, as one would write it: a T-maze. The side (0 or 1) is shown at the first step only,
then a corridor of ``corridor`` steps, then the choice at the junction: +1 if it names the side, -1 if not (0 on
average for an agent that does not remember). ``txl rl tmaze:TMaze-v0 --env-kwargs '{"corridor": 40}'`` from this
folder trains on it (benchmarks/rl_user_tasks.py)."""
import gymnasium as gym
import numpy as np


class TMaze(gym.Env):
    def __init__(self, corridor: int = 4):
        self.corridor = corridor
        self.observation_space = gym.spaces.Box(0.0, 1.0, (4,), dtype=np.float32)
        self.action_space = gym.spaces.Discrete(2)

    def _obs(self):
        o = np.zeros(4, dtype=np.float32)
        if self.t == 0:
            o[self.cue] = 1.0
        o[3 if self.t >= self.corridor else 2] = 1.0
        return o

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t, self.cue = 0, int(self.np_random.integers(2))
        return self._obs(), {}

    def step(self, action):
        self.t += 1
        if self.t <= self.corridor:
            return self._obs(), 0.0, False, False, {}
        return self._obs(), (1.0 if int(action) == self.cue else -1.0), True, False, {"length": self.t}


gym.register("TMaze-v0", entry_point=TMaze)


class ContinuousTMaze(TMaze):
    """The same T-maze with a continuous answer: at the junction the action a in [-1, 1] is scored 1 - 2|a - side|
    for the side at -1 or +1 (so +1 for the side, -1 for the other, 0 for the middle, where an agent that does
    not remember does best)."""

    def __init__(self, corridor: int = 4):
        super().__init__(corridor)
        self.action_space = gym.spaces.Box(-1.0, 1.0, (1,), dtype=np.float32)

    def step(self, action):
        self.t += 1
        if self.t <= self.corridor:
            return self._obs(), 0.0, False, False, {}
        side = 2.0 * self.cue - 1.0
        return self._obs(), 1.0 - abs(float(np.asarray(action).reshape(-1)[0]) - side), True, False, {}


gym.register("ContinuousTMaze-v0", entry_point=ContinuousTMaze)
