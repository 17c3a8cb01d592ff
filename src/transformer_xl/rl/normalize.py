"""Running statistics for continuous control, as Gymnasium's ``NormalizeObservation`` and ``NormalizeReward`` keep
them (and CleanRL's ``ppo_continuous_action`` wraps its environments with both), but kept where a trained agent
needs them:

* :class:`ObservationNormalizer`: a module of the agent, so its mean and variance are saved with the weights
  (``model.safetensors``) and a loaded agent (``predict``, ``txl rl-eval``) normalises exactly as training did.
  Collection updates them with every batch of observations it sees and keeps the normalised vectors, which the
  update replays as they were (the statistics move between collection and the update; the inputs do not).
* :class:`RewardScaler`: the rewards the update learns from, divided by the running standard deviation of the
  discounted return (and clipped to ``[-clip, clip]``); the return the run reports is the environment's own. Its
  state goes into a run's checkpoints, so a resumed run scales as the killed one did.

The running mean and variance are merged batch by batch (Chan et al.'s parallel algorithm, as Gymnasium's
``RunningMeanStd``), starting from a mean of 0, a variance of 1 and a count of 1e-4.
"""

from __future__ import annotations

from typing import Optional

import numpy as np
import torch
from torch import Tensor, nn

EPSILON = 1e-8


def merged(mean, var, count, batch_mean, batch_var, batch_count):
    """Mean, variance and count of two sets of samples from each one's (Chan et al.)."""
    delta = batch_mean - mean
    total = count + batch_count
    new_mean = mean + delta * batch_count / total
    m2 = var * count + batch_var * batch_count + delta * delta * count * batch_count / total
    return new_mean, m2 / total, total


class ObservationNormalizer(nn.Module):
    """``(x - mean) / sqrt(var + 1e-8)``, clipped to ``[-clip, clip]``, over observation vectors ``[..., d]``, with
    the statistics of every batch it was updated with (buffers: saved and loaded with the agent)."""

    def __init__(self, dim: int, clip: float = 10.0):
        super().__init__()
        self.clip = clip
        self.register_buffer("mean", torch.zeros(dim, dtype=torch.float64))
        self.register_buffer("var", torch.ones(dim, dtype=torch.float64))
        self.register_buffer("count", torch.tensor(1e-4, dtype=torch.float64))

    @torch.no_grad()
    def update(self, x: Tensor) -> None:
        """Merge the observations ``x [N, d]`` into the statistics."""
        x = x.detach().to(torch.float64).reshape(-1, self.mean.numel())
        mean, var, count = merged(self.mean, self.var, self.count, x.mean(0), x.var(0, unbiased=False),
                                  float(x.size(0)))
        self.mean.copy_(mean)
        self.var.copy_(var)
        self.count.fill_(float(count))

    def forward(self, x: Tensor, update: bool = False) -> Tensor:
        """``x [..., d]`` normalised by the statistics (after merging ``x`` into them when ``update``)."""
        if update:
            self.update(x)
        out = (x.to(torch.float64) - self.mean) / torch.sqrt(self.var + EPSILON)
        return out.clamp(-self.clip, self.clip).to(x.dtype)


class RewardScaler:
    """Rewards divided by the running standard deviation of the discounted return of each environment's episode so
    far (``NormalizeReward``'s rule: the return is ``gamma * return + reward``, forgotten where an episode ended),
    clipped to ``[-clip, clip]``."""

    def __init__(self, n: int, gamma: float, clip: float = 10.0):
        self.gamma, self.clip = gamma, clip
        self.returns = np.zeros(n)
        self.mean, self.var, self.count = 0.0, 1.0, 1e-4

    def __call__(self, reward: np.ndarray, done: np.ndarray) -> np.ndarray:
        """Scaled rewards ``[E]`` for one step's ``reward [E]`` and ``done [E]`` (the statistics updated first)."""
        self.returns = self.returns * self.gamma + reward
        mean, var, count = merged(self.mean, self.var, self.count, float(self.returns.mean()),
                                  float(self.returns.var()), float(self.returns.size))
        self.mean, self.var, self.count = float(mean), float(var), float(count)
        self.returns[np.asarray(done, dtype=bool)] = 0.0
        return np.clip(reward / np.sqrt(self.var + EPSILON), -self.clip, self.clip)

    def state_dict(self) -> dict:
        """The statistics, for a run's checkpoint (the running returns are not: environments restart on resume)."""
        return {"mean": self.mean, "var": self.var, "count": self.count}

    def load_state_dict(self, state: Optional[dict]) -> None:
        if state:
            self.mean, self.var, self.count = float(state["mean"]), float(state["var"]), float(state["count"])


__all__ = ["ObservationNormalizer", "RewardScaler", "merged"]
