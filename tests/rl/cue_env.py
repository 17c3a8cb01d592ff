"""Small memory tasks for the agent tests: remember the cue of the first step until the last.

Observations ``Discrete(3)``: the cue (0 or 1) at the first step, then 2 (nothing) for a delay of 2 to ``max_delay``
steps, drawn per episode (so episodes end at any phase of a replayed window, and memory spans windows). At the last
step the action is scored: +1 if it names the cue, -1 if not; every other step gives 0. A policy without memory
scores 0 on average; one that remembers scores 1.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np


class CueMemory(gym.Env):
    def __init__(self, max_delay: int = 5):
        self.observation_space = gym.spaces.Discrete(3)
        self.action_space = gym.spaces.Discrete(2)
        self.max_delay = max_delay
        self.t, self.cue, self.delay = 0, 0, 2

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t, self.cue = 0, int(self.np_random.integers(2))
        self.delay = int(self.np_random.integers(2, self.max_delay + 1))
        return self.cue, {}

    def step(self, action):
        self.t += 1
        if self.t <= self.delay:
            return 2, 0.0, False, False, {}
        return 2, (1.0 if int(action) == self.cue else -1.0), True, False, {}


class ContinuousCue(gym.Env):
    """The cue task with a continuous answer: the cue (-1 or +1, a Box observation) at the first step, then 0 for a
    delay of 2 to ``max_delay`` steps; at the last step the action ``a`` in [-1, 1] is scored ``1 - |a - cue|``
    (every other step gives 0). A policy without memory scores 0 at best (the middle); one that remembers, 1."""

    def __init__(self, max_delay: int = 5):
        self.observation_space = gym.spaces.Box(-1.0, 1.0, (1,), dtype=np.float32)
        self.action_space = gym.spaces.Box(-1.0, 1.0, (1,), dtype=np.float32)
        self.max_delay = max_delay
        self.t, self.cue, self.delay = 0, 1.0, 2

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t, self.cue = 0, float(self.np_random.choice([-1.0, 1.0]))
        self.delay = int(self.np_random.integers(2, self.max_delay + 1))
        return np.array([self.cue], dtype=np.float32), {}

    def step(self, action):
        self.t += 1
        zero = np.zeros(1, dtype=np.float32)
        if self.t <= self.delay:
            return zero, 0.0, False, False, {}
        return zero, 1.0 - abs(float(np.asarray(action).reshape(-1)[0]) - self.cue), True, False, {}


class BadActions(gym.Env):
    """Actions the agent cannot take: ``kind`` "infinite" (an unbounded Box), "matrix" (a Box of shape (2, 2)) or
    "dict" (a Dict of a Discrete and a Box)."""

    observation_space = gym.spaces.Discrete(2)

    def __init__(self, kind: str = "infinite"):
        self.action_space = {"infinite": gym.spaces.Box(-np.inf, np.inf, (2,), dtype=np.float32),
                             "matrix": gym.spaces.Box(-1.0, 1.0, (2, 2), dtype=np.float32),
                             "dict": gym.spaces.Dict({"go": gym.spaces.Discrete(2),
                                                      "speed": gym.spaces.Box(0.0, 1.0, (1,))})}[kind]

    def reset(self, *, seed=None, options=None):
        return 0, {}

    def step(self, action):
        return 0, 0.0, True, False, {}
