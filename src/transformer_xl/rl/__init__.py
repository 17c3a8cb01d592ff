"""Reinforcement learning with a Transformer-XL memory: a PPO agent (GTrXL by default) on Gymnasium environments.

:func:`~.runner.train_agent` is ``txl rl``; :class:`~.agent.MemoryAgent` is the agent (a memory core and policy and
value heads), :mod:`.ppo` the algorithm read top to bottom, :mod:`.envs` the environments. Needs the ``rl`` extra
(gymnasium, popgym).
"""

from .agent import AgentConfig, MemoryAgent
from .ppo import PPOConfig

__all__ = ["AgentConfig", "MemoryAgent", "PPOConfig"]
