"""The policy's distributions over actions, from the parameters its head emits.

* :class:`CategoricalActions`: a ``Discrete`` space (one categorical over ``params [..., A]``, the logits), or a
  ``MultiDiscrete`` one (a categorical per dimension over its slice of the logits; the dimensions are chosen
  independently, so log-probabilities and entropies add up, as Stable-Baselines3's
  ``MultiCategoricalDistribution`` has it). Actions are ``[...]`` (Discrete) or ``[..., dims]`` (MultiDiscrete).
* :class:`GaussianActions`: a ``Box`` space of ``n`` dimensions: a diagonal Gaussian, ``params [..., 2n]`` being
  the mean and the log standard deviation of each dimension. An action ``u [..., n]`` is the Gaussian's sample;
  what the environment receives is :meth:`GaussianActions.env_action` of it, by one of two rules:

  - ``"clip"`` (the default; Stable-Baselines3's and CleanRL's rule): ``u`` clipped to the bounds, while the
    log-probability, the entropy and the KL divergence are the unbounded Gaussian's, of ``u``;
  - ``"tanh"``: ``low + (tanh(u) + 1) / 2 * (high - low)``, and the log-probability of that action, the
    Gaussian's of ``u`` less ``log |d action / d u|`` per dimension (the change of variables). PPO's ratio and the
    KL divergence are unchanged by the squash (the same ``u``, an invertible map); the entropy of the squashed
    distribution has no closed form, so the Gaussian's is used, as an upper bound.

  The most likely action (``deterministic``) is the mean, clipped or squashed. Log-probabilities, entropies and
  KL divergences add up over the dimensions (they are independent).

The KL divergence of each kind is over the whole distribution (every action, not only the one taken), as the KL
penalty of :mod:`.ppo` needs: for categoricals torch's ``kl_divergence``; for Gaussians the closed form
``log(s / s_old) + (s_old^2 + (m_old - m)^2) / (2 s^2) - 1/2`` per dimension.
"""

from __future__ import annotations

import functools
import math
from typing import List, Optional

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.distributions import Categorical, kl_divergence

BOUNDS = ("clip", "tanh")
LOG_2PI = math.log(2 * math.pi)


class CategoricalActions:
    """Discrete or MultiDiscrete actions (module docstring)."""

    def __init__(self, params: Tensor, dims: Optional[List[int]] = None):
        self.dims = dims
        self.logits = list(params.split(dims, dim=-1)) if dims else [params]  # per dimension, unnormalised

    @functools.cached_property
    def parts(self) -> List[Categorical]:
        """A torch ``Categorical`` per dimension (made when first needed: :meth:`mode` does without)."""
        return [Categorical(logits=part) for part in self.logits]

    def _join(self, per_part: List[Tensor]) -> Tensor:
        return torch.stack(per_part, dim=-1) if self.dims else per_part[0]

    def sample(self) -> Tensor:
        return self._join([part.sample() for part in self.parts])

    def mode(self) -> Tensor:
        """The most likely action (in each dimension)."""
        return self._join([logits.argmax(-1) for logits in self.logits])

    def log_prob(self, actions: Tensor) -> Tensor:
        if not self.dims:
            return self.parts[0].log_prob(actions)
        return sum(part.log_prob(actions[..., i]) for i, part in enumerate(self.parts))

    def entropy(self) -> Tensor:
        return sum(part.entropy() for part in self.parts)

    def kl_from(self, old: "CategoricalActions") -> Tensor:
        """KL(old || self) over the whole distribution (every action, not only the taken one) ``[...]``."""
        return sum(kl_divergence(o, n) for o, n in zip(old.parts, self.parts))


class GaussianActions:
    """Box actions: a diagonal Gaussian over ``u``, bounded by ``bounds`` (module docstring). ``params [..., 2n]``:
    means, then log standard deviations; ``low``, ``high``: ``[n]`` tensors of the bounds."""

    def __init__(self, params: Tensor, low: Tensor, high: Tensor, bounds: str = "clip"):
        n = params.size(-1) // 2
        self.mean, self.log_std = params[..., :n], params[..., n:]
        self.std = self.log_std.exp()
        self.low, self.high, self.bounds = low, high, bounds

    def sample(self) -> Tensor:
        return self.mean + self.std * torch.randn_like(self.mean)

    def mode(self) -> Tensor:
        """The mean (its action, clipped or squashed, is the most likely one)."""
        return self.mean

    def gaussian_log_prob(self, u: Tensor) -> Tensor:
        """The log-density of ``u [..., n]`` under the Gaussian, summed over the dimensions ``[...]``."""
        z = (u - self.mean) / self.std
        return (-0.5 * z * z - self.log_std - 0.5 * LOG_2PI).sum(-1)

    def log_prob(self, u: Tensor) -> Tensor:
        """The log-probability of the action ``u`` gives: the Gaussian's (``clip``), or that of the squashed action
        (``tanh``: less ``log((high - low) / 2 * (1 - tanh(u)^2))`` per dimension)."""
        log_prob = self.gaussian_log_prob(u)
        if self.bounds == "tanh":  # log(1 - tanh(u)^2) = 2 (log 2 - u - softplus(-2u)), stable for large |u|
            log_det = torch.log((self.high - self.low) / 2) + 2 * (math.log(2) - u - F.softplus(-2 * u))
            log_prob = log_prob - log_det.sum(-1)
        return log_prob

    def entropy(self) -> Tensor:
        """The Gaussian's entropy ``[...]`` (for ``tanh``, an upper bound of the squashed one's, up to the scale)."""
        return (0.5 + 0.5 * LOG_2PI + self.log_std).sum(-1)

    def kl_from(self, old: "GaussianActions") -> Tensor:
        """KL(old || self) of the two Gaussians, in closed form, summed over the dimensions ``[...]``."""
        var, old_var = self.std.pow(2), old.std.pow(2)
        return (self.log_std - old.log_std + (old_var + (old.mean - self.mean).pow(2)) / (2 * var) - 0.5).sum(-1)

    def env_action(self, u: Tensor) -> Tensor:
        """What the environment receives for ``u``: clipped to the bounds, or squashed into them."""
        return bounded(u, self.low, self.high, self.bounds)


def bounded(u: Tensor, low: Tensor, high: Tensor, bounds: str) -> Tensor:
    """Gaussian samples ``u [..., n]`` as the environment receives them: clipped to ``[low, high]`` (``"clip"``) or
    ``low + (tanh(u) + 1) / 2 * (high - low)`` (``"tanh"``)."""
    if bounds == "tanh":
        return low + (torch.tanh(u) + 1) * (high - low) / 2
    return torch.max(torch.min(u, high), low)


def action_code(env_action: Tensor, low: Tensor, high: Tensor) -> Tensor:
    """A Box action as the next step's input: scaled from its bounds to ``[-1, 1]``."""
    return 2 * (env_action - low) / (high - low) - 1


__all__ = ["BOUNDS", "CategoricalActions", "GaussianActions", "action_code", "bounded"]
