"""Gymnasium environments for the agent: a vector of environments stepped together, observations as vectors.

* :func:`make_envs` builds ``n`` copies of one environment id in a ``gymnasium.vector.SyncVectorEnv`` with the
  same-step autoreset: the step that ends an episode returns the next episode's first observation, so a
  ``done`` at step ``t`` is a start at step ``t + 1``. POPGym ids (``popgym-RepeatFirstEasy-v0`` ...) are
  registered by importing ``popgym``.
* :class:`ObservationEncoder` turns any observation of a ``Discrete``, ``MultiDiscrete``, ``MultiBinary``,
  ``Box``, or a ``Tuple``/``Dict`` of them, into a float vector ``[obs_dim]`` (one-hot codes for discrete parts).
* Only ``Discrete`` action spaces are supported; anything else is one line.

Everything that is the user's to fix (no ``rl`` extra, an unknown id, an unsupported space) is one
:class:`~transformer_xl.errors.TXLError` line.
"""

from __future__ import annotations

import difflib
import importlib
from typing import List

import numpy as np
import torch
from torch import Tensor

from ..errors import ConfigError, MissingExtraError, one_line

RL_EXTRA_HINT = 'txl rl needs gymnasium: pip install "transformer-xl[rl]"'


def gymnasium():
    """The gymnasium module, or one MissingExtraError line naming the extra."""
    try:
        return importlib.import_module("gymnasium")
    except ImportError:
        raise MissingExtraError(RL_EXTRA_HINT) from None


def register_env_family(env_id: str) -> None:
    """Import the package that registers ``env_id`` with gymnasium (``popgym-...`` ids need ``popgym``)."""
    if env_id.startswith("popgym-"):
        try:
            importlib.import_module("popgym")
        except ImportError:
            raise MissingExtraError(f'{env_id} needs popgym: pip install "transformer-xl[rl]"') from None


def check_env_id(env_id: str) -> None:
    """One ConfigError line for an id gymnasium does not know, with the nearest registered ids."""
    gym = gymnasium()
    register_env_family(env_id)
    if env_id in gym.envs.registry:
        return
    near = difflib.get_close_matches(env_id, list(gym.envs.registry), n=3, cutoff=0.6)
    hint = f"; did you mean {', '.join(near)}?" if near else "; see gymnasium.pprint_registry() for the ids"
    raise ConfigError(f"env: unknown environment id {env_id!r}{hint}")


def make_envs(env_id: str, n: int, seed: int):
    """``n`` copies of ``env_id`` stepped together, same-step autoreset, reset with seeds ``seed .. seed+n-1``.
    Returns ``(envs, first_observations)``."""
    gym = gymnasium()
    check_env_id(env_id)
    from gymnasium.vector import AutoresetMode, SyncVectorEnv  # the rl extra, imported on use

    def make():
        return gym.make(env_id)

    try:
        envs = SyncVectorEnv([make for _ in range(n)], autoreset_mode=AutoresetMode.SAME_STEP)
    except Exception as exc:  # an environment's constructor can raise anything
        raise ConfigError(f"env: {env_id} could not be created ({type(exc).__name__}: {one_line(exc)})") from None
    check_action_space(envs.single_action_space, env_id)
    obs, _ = envs.reset(seed=seed)
    envs.single_action_space.seed(seed)
    return envs, obs


def check_action_space(space, env_id: str) -> int:
    """The number of actions of a ``Discrete`` space; anything else is one ConfigError line."""
    gym = gymnasium()
    if not isinstance(space, gym.spaces.Discrete):
        raise ConfigError(f"env: {env_id} has actions {space}; txl rl supports discrete actions (Discrete(n)) only")
    return int(space.n)


class ObservationEncoder:
    """A float vector for each observation of ``space`` (module docstring): ``encode(batch) -> [E, obs_dim]``."""

    def __init__(self, space, env_id: str = "env"):
        self.parts = _parts(space, env_id)
        self.dim = sum(width for _, width, _ in self.parts)

    def encode(self, obs) -> Tensor:
        """A batch of observations as the vector environment returns them -> ``[E, obs_dim]`` float32."""
        columns: List[np.ndarray] = []
        for path, width, kind in self.parts:
            value = obs
            for key in path:
                value = value[key]
            value = np.asarray(value)
            batch = value.shape[0]
            if kind == "box":
                columns.append(value.reshape(batch, -1).astype(np.float32))
            else:  # one-hot codes of integers in [0, n) for each of kind's sizes
                sizes = kind
                flat = value.reshape(batch, -1).astype(np.int64)
                for i, n in enumerate(sizes):
                    code = np.zeros((batch, n), dtype=np.float32)
                    code[np.arange(batch), np.clip(flat[:, i], 0, n - 1)] = 1.0
                    columns.append(code)
        return torch.from_numpy(np.concatenate(columns, axis=1))


def _parts(space, env_id: str, path=()) -> list:
    """``[(path, width, kind)]``: kind is ``"box"`` (floats as they are) or a tuple of one-hot sizes."""
    gym = gymnasium()
    spaces = gym.spaces
    if isinstance(space, spaces.Discrete):
        return [(path, int(space.n), (int(space.n),))]
    if isinstance(space, spaces.MultiDiscrete):
        sizes = tuple(int(n) for n in np.asarray(space.nvec).reshape(-1))
        return [(path, sum(sizes), sizes)]
    if isinstance(space, spaces.MultiBinary):
        return [(path, int(np.prod(space.shape)), "box")]
    if isinstance(space, spaces.Box):
        return [(path, int(np.prod(space.shape)), "box")]
    if isinstance(space, spaces.Tuple):
        return [part for i, sub in enumerate(space.spaces) for part in _parts(sub, env_id, path + (i,))]
    if isinstance(space, spaces.Dict):
        return [part for key, sub in space.spaces.items() for part in _parts(sub, env_id, path + (key,))]
    raise ConfigError(f"env: {env_id} has observations {space}; txl rl reads Discrete, MultiDiscrete, MultiBinary, "
                      f"Box, and Tuple or Dict of them")
