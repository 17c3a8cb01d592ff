"""PPO (Schulman et al. 2017) for an agent with a memory, read top to bottom.

One iteration:

1. :func:`collect`: step every environment ``rollout`` times with its own memory, which is forgotten at episode
   starts; keep what the update needs, and the memory each environment had at the first step of every window of
   ``L`` steps.
2. :func:`advantages`: generalised advantage estimation (GAE, Schulman et al. 2016), cut at episode ends.
3. :func:`update`: ``epochs`` passes over minibatches of windows. Each window is replayed from the memory and
   ``starts`` that collection saw (the two-path parity: before the first gradient step the replay gives the
   collected log-probabilities and values, tested), and the clipped surrogate, value and entropy losses
   (:func:`ppo_loss`) are minimised.

GAE and the clipped loss are written out (each about ten lines) rather than taken from TorchRL: its
``ClipPPOLoss`` would run the memory core once for the actor and once for the critic, and the package would add
a dependency whose compiled extension must match the installed torch. A truncated episode is cut like a
terminated one (no bootstrap from its last observation), as CleanRL does; POPGym's episodes only terminate.
"""

from __future__ import annotations

import dataclasses
from typing import Dict, List

import numpy as np
import torch
from torch import Tensor
from torch.distributions import Categorical

from ..errors import ConfigError
from .agent import MemoryAgent, State, select, take_window_state


@dataclasses.dataclass
class PPOConfig:
    """Optimisation of the agent (defaults solve POPGym's easy memory tasks; see the README)."""

    envs: int = 16
    rollout: int = 128  # steps per environment per iteration
    epochs: int = 4
    minibatches: int = 8
    lr: float = 5e-4
    anneal_lr: bool = True
    gamma: float = 0.99
    gae_lambda: float = 0.95
    clip: float = 0.2
    ent_coef: float = 0.01
    vf_coef: float = 0.5
    max_grad_norm: float = 0.5

    def check(self, window: int) -> None:
        for name in ("envs", "rollout", "epochs", "minibatches"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name}: must be >= 1, got {getattr(self, name)}")
        if self.rollout % window:
            raise ConfigError(f"rollout: must be a multiple of the window ({window}), got {self.rollout}")
        if (self.envs * self.rollout // window) % self.minibatches:
            raise ConfigError(f"minibatches: must divide the {self.envs * self.rollout // window} windows of an "
                              f"iteration, got {self.minibatches}")


@dataclasses.dataclass
class Batch:
    """One iteration's experience, time first: ``[T, E, ...]``; ``window_states[w]``: the state at step ``w*L``."""

    obs: Tensor  # [T, E, obs_dim]
    starts: Tensor  # [T, E] bool: an episode begins at this step
    actions: Tensor  # [T, E]
    log_probs: Tensor  # [T, E]
    values: Tensor  # [T, E]
    rewards: Tensor  # [T, E]
    dones: Tensor  # [T, E] bool: the episode ended with this step's action
    window_states: List[State]
    last_value: Tensor  # [E]: the value of the observation after the last step
    advantages: Tensor = None  # [T, E], from advantages()
    returns: Tensor = None  # [T, E]


class Collector:
    """Steps the environments and keeps each one's memory between iterations; counts finished episodes."""

    def __init__(self, envs, encoder, agent: MemoryAgent, first_obs):
        self.envs, self.encoder, self.agent = envs, encoder, agent
        n = envs.num_envs
        self.obs = encoder.encode(first_obs)  # [E, obs_dim]
        self.starts = torch.ones(n, dtype=torch.bool)  # every environment begins an episode
        self.state = agent.initial_state(n)
        self.running = np.zeros(n)
        self.finished: List[float] = []  # returns of finished episodes, in order

    @torch.no_grad()
    def collect(self, rollout: int, window: int) -> Batch:
        """``rollout`` steps of every environment (module docstring, step 1)."""
        agent = self.agent
        obs, starts, actions, log_probs, values, rewards, dones, window_states = ([] for _ in range(8))
        for t in range(rollout):
            if t % window == 0:
                window_states.append(take_window_state(self.state))
            logits, value, self.state = agent.step(self.obs, self.starts, self.state)
            dist = Categorical(logits=logits)
            action = dist.sample()
            next_obs, reward, terminated, truncated, _ = self.envs.step(action.numpy())
            done = np.logical_or(terminated, truncated)
            self._count(reward, done)
            obs.append(self.obs)
            starts.append(self.starts)
            actions.append(action)
            log_probs.append(dist.log_prob(action))
            values.append(value)
            rewards.append(torch.as_tensor(reward, dtype=torch.float32))
            dones.append(torch.as_tensor(done))
            self.obs, self.starts = self.encoder.encode(next_obs), torch.as_tensor(done)  # same-step autoreset
        _, last_value, _ = agent.step(self.obs, self.starts, self.state)  # a look ahead: the state is not kept
        stack = torch.stack
        return Batch(stack(obs), stack(starts), stack(actions), stack(log_probs), stack(values), stack(rewards),
                     stack(dones), window_states, last_value)

    def _count(self, reward, done) -> None:
        self.running += reward
        for i in np.flatnonzero(done):
            self.finished.append(float(self.running[i]))
            self.running[i] = 0.0


def advantages(batch: Batch, gamma: float, lam: float) -> None:
    """GAE over ``[T, E]``, cut where an episode ended (module docstring, step 2); fills ``advantages``, ``returns``."""
    adv = torch.zeros_like(batch.rewards)
    last = torch.zeros_like(batch.last_value)
    for t in reversed(range(batch.rewards.size(0))):
        next_value = batch.last_value if t == batch.rewards.size(0) - 1 else batch.values[t + 1]
        alive = (~batch.dones[t]).float()
        delta = batch.rewards[t] + gamma * next_value * alive - batch.values[t]
        last = delta + gamma * lam * alive * last
        adv[t] = last
    batch.advantages, batch.returns = adv, adv + batch.values


def windows(x: Tensor, window: int) -> Tensor:
    """``[T, E, ...]`` -> ``[W*E, L, ...]``: window ``w`` of environment ``e`` is row ``w*E + e``."""
    t, e = x.shape[:2]
    return x.view(t // window, window, e, *x.shape[2:]).transpose(1, 2).reshape(t // window * e, window,
                                                                                *x.shape[2:])


def window_state(batch: Batch, rows: Tensor) -> State:
    """The memory at the first step of each window ``rows`` (numbered as :func:`windows` numbers them)."""
    stacked = tuple(torch.stack(parts) for parts in zip(*batch.window_states))  # each [W, E, ...]
    return tuple(t.reshape(-1, *t.shape[2:])[rows] for t in stacked) if stacked else ()


def replay(agent: MemoryAgent, batch: Batch, rows: Tensor, window: int):
    """Log-probabilities of the taken actions, values and entropies of windows ``rows``: 3 x ``[N, L]``."""
    obs, starts, actions = (windows(x, window)[rows] for x in (batch.obs, batch.starts, batch.actions))
    logits, value, _ = agent.replay(obs, starts, window_state(batch, rows))
    dist = Categorical(logits=logits)
    return dist.log_prob(actions), value, dist.entropy()


def ppo_loss(new_log_probs: Tensor, old_log_probs: Tensor, adv: Tensor, values: Tensor, returns: Tensor,
             entropy: Tensor, cfg: PPOConfig):
    """The clipped surrogate objective, the value loss and the entropy bonus: ``(loss, stats)``."""
    adv = (adv - adv.mean()) / (adv.std() + 1e-8)
    ratio = (new_log_probs - old_log_probs).exp()
    policy_loss = -torch.min(ratio * adv, ratio.clamp(1 - cfg.clip, 1 + cfg.clip) * adv).mean()
    value_loss = 0.5 * (values - returns).pow(2).mean()
    loss = policy_loss + cfg.vf_coef * value_loss - cfg.ent_coef * entropy.mean()
    with torch.no_grad():
        stats = {"policy_loss": policy_loss.item(), "value_loss": value_loss.item(), "entropy": entropy.mean().item(),
                 "approx_kl": ((ratio - 1) - (new_log_probs - old_log_probs)).mean().item(),
                 "clipfrac": ((ratio - 1).abs() > cfg.clip).float().mean().item()}
    return loss, stats


def update(agent: MemoryAgent, optimizer, batch: Batch, cfg: PPOConfig, window: int, gen: torch.Generator
           ) -> Dict[str, float]:
    """``epochs`` passes over shuffled minibatches of windows (module docstring, step 3); mean statistics."""
    n_windows = batch.obs.size(0) // window * batch.obs.size(1)
    old = [windows(x, window) for x in (batch.log_probs, batch.advantages, batch.returns)]
    totals: Dict[str, float] = {}
    count = 0
    for _ in range(cfg.epochs):
        for rows in torch.randperm(n_windows, generator=gen).chunk(cfg.minibatches):
            new_log_probs, values, entropy = replay(agent, batch, rows, window)
            old_log_probs, adv, returns = (x[rows] for x in old)
            loss, stats = ppo_loss(new_log_probs, old_log_probs, adv, values, returns, entropy, cfg)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            stats["grad_norm"] = float(torch.nn.utils.clip_grad_norm_(agent.parameters(), cfg.max_grad_norm))
            optimizer.step()
            for k, v in stats.items():
                totals[k] = totals.get(k, 0.0) + v
            count += 1
    return {k: v / count for k, v in totals.items()}


__all__ = ["Batch", "Collector", "PPOConfig", "advantages", "ppo_loss", "replay", "select", "update", "windows"]
