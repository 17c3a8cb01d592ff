"""A small memory task for the agent tests: remember the cue of the first step until the last.

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


class BoxActions(gym.Env):
    """An environment with continuous actions, which the agent refuses."""

    observation_space = gym.spaces.Discrete(2)
    action_space = gym.spaces.Box(-1.0, 1.0, (1,), dtype=np.float32)

    def reset(self, *, seed=None, options=None):
        return 0, {}

    def step(self, action):
        return 0, 0.0, True, False, {}
