"""An actor-critic agent with a memory: observation vector -> memory core -> policy logits and value.

The core holds what the agent remembers, one state per environment, and runs two ways that give the same
numbers (tested):

* :meth:`MemoryAgent.step`: one observation per environment, during collection;
* :meth:`MemoryAgent.replay`: windows of ``L`` steps with the state the collection had at the window's first
  step, during the update.

Cores:

* ``trxl``: the Transformer-XL backbone (GTrXL with ``gating="gru"``) with a memory of fixed length ``mem_len``
  per environment. Its context slides: every step sees the ``mem_len`` steps of its episode before it and
  itself (``same_length`` with the TensorFlow rule over a fixed memory), so a step taken alone and the same step
  inside a window attend to the same states. ``mem_len=0`` is the same agent without memory: it sees the current
  observation only.
* ``gru``: a GRU of the same width, the recurrent baseline.

Each step's input is the observation vector and a flag that is 1 at the first step of an episode (the memory is
forgotten there: ``starts``), so the agent can tell where its episode began.

State layout (environments first, so a minibatch of windows selects rows): ``trxl``: ``(mems [E, n_layer, M, d],
mems_mask [E, M])``, or ``()`` without memory; ``gru``: ``(h [E, d],)``.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Optional, Tuple

import torch
from safetensors.torch import save_file
from torch import Tensor, nn

from ..checkpoints.loading import load_safetensors
from ..errors import CheckpointError, ConfigError
from ..files import WEIGHTS_NAME, atomic_write, write_json
from ..model import TransformerXLBackbone, TransformerXLConfig
from ..model.saving import load_into, unique_state_dict, weights_metadata

AGENT_CONFIG = "agent.json"
CORES = ("trxl", "gru")
State = Tuple[Tensor, ...]


@dataclasses.dataclass
class AgentConfig:
    """The agent's shape: its environment's observation size and actions, and the memory core."""

    obs_dim: int
    n_actions: int
    core: str = "trxl"  # trxl | gru
    d_model: int = 64
    n_layer: int = 2
    n_head: int = 4
    d_head: int = 16
    d_inner: int = 128
    mem_len: int = 64  # steps each step sees before it (0: no memory, the current observation only)
    window: int = 16  # steps per replayed window in the update
    gating: str = "gru"  # gru (GTrXL) | none (Transformer-XL with pre-LN residuals)
    gate_bias: float = 2.0
    env_id: str = ""

    def __post_init__(self):
        if self.core not in CORES:
            raise ConfigError(f"core: must be one of {', '.join(CORES)}, got {self.core!r}")
        for name in ("obs_dim", "n_actions", "d_model", "window"):
            if int(getattr(self, name)) < 1:
                raise ConfigError(f"{name}: must be >= 1, got {getattr(self, name)}")
        if self.mem_len < 0:
            raise ConfigError(f"mem_len: must be >= 0, got {self.mem_len}")

    def backbone_config(self) -> TransformerXLConfig:
        """The Transformer-XL of the ``trxl`` core: vectors in (the observation and the start flag), sliding context."""
        return TransformerXLConfig(d_input=self.obs_dim + 1, n_layer=self.n_layer, n_head=self.n_head,
                                   d_model=self.d_model, d_head=self.d_head, d_inner=self.d_inner, dropout=0.0,
                                   tgt_len=self.window, mem_len=self.mem_len, same_length=self.mem_len > 0,
                                   same_length_extra=1, pre_lnorm=True, gating=self.gating, gate_bias=self.gate_bias)

    @classmethod
    def from_dict(cls, values: dict) -> "AgentConfig":
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ConfigError(f"unknown agent config field(s): {', '.join(unknown)}")
        return cls(**values)


class TrXLCore(nn.Module):
    """The Transformer-XL backbone with a fixed-length memory per environment (module docstring)."""

    def __init__(self, config: AgentConfig):
        super().__init__()
        self.backbone = TransformerXLBackbone(config.backbone_config())
        self.mem_len = config.mem_len

    def initial_state(self, n: int) -> State:
        """``(mems [n, n_layer, M, d], mems_mask [n, M])``: zeros, every slot hidden; ``()`` without memory."""
        if self.mem_len == 0:
            return ()
        mems = torch.stack(self.backbone.init_mems(n, fixed=True), dim=1)
        return mems, self.backbone.init_mems_mask(n)

    def forward(self, x: Tensor, starts: Tensor, state: State) -> Tuple[Tensor, State]:
        """``x [N, T, d_in]``, ``starts [N, T]`` after ``state`` -> ``(hidden [N, T, d], state after the T steps)``."""
        if self.mem_len == 0:  # each step alone: T windows of one step
            n, t = x.shape[:2]
            out = self.backbone(inputs_embeds=x.reshape(n * t, 1, -1))
            return out.hidden_states.view(n, t, -1), ()
        mems, mask = state
        out = self.backbone(inputs_embeds=x, mems=list(mems.unbind(1)), mems_mask=mask, starts=starts,
                            fixed_memory=True)
        return out.hidden_states, (torch.stack(out.mems, dim=1), out.mems_mask)


class GRUCore(nn.Module):
    """A GRU of width ``d_model`` after a linear input layer; its state is zeroed at every start."""

    def __init__(self, config: AgentConfig):
        super().__init__()
        self.inp = nn.Linear(config.obs_dim + 1, config.d_model)
        self.cell = nn.GRUCell(config.d_model, config.d_model)
        self.d_model = config.d_model

    def initial_state(self, n: int) -> State:
        return (torch.zeros(n, self.d_model, device=self.inp.weight.device),)

    def forward(self, x: Tensor, starts: Tensor, state: State) -> Tuple[Tensor, State]:
        (h,) = state
        inp = torch.relu(self.inp(x))  # [N, T, d]
        outs = []
        for t in range(x.size(1)):
            h = self.cell(inp[:, t], h * (~starts[:, t]).to(h.dtype)[:, None])
            outs.append(h)
        return torch.stack(outs, dim=1), (h,)


class MemoryAgent(nn.Module):
    """Policy and value heads on a memory core (module docstring)."""

    def __init__(self, config: AgentConfig):
        super().__init__()
        self.config = config
        self.core = TrXLCore(config) if config.core == "trxl" else GRUCore(config)
        self.norm = nn.LayerNorm(config.d_model)  # the pre-LN stack's states, normalised for the heads
        self.policy = nn.Linear(config.d_model, config.n_actions)
        self.value = nn.Linear(config.d_model, 1)
        nn.init.orthogonal_(self.policy.weight, gain=0.01)  # near-uniform first policy
        nn.init.zeros_(self.policy.bias)
        nn.init.orthogonal_(self.value.weight, gain=1.0)
        nn.init.zeros_(self.value.bias)

    def initial_state(self, n: int) -> State:
        return self.core.initial_state(n)

    def inputs(self, obs: Tensor, starts: Tensor) -> Tensor:
        """The core's input: observation vectors ``[..., obs_dim]`` and the start flag -> ``[..., obs_dim + 1]``."""
        return torch.cat([obs, starts.to(obs.dtype)[..., None]], dim=-1)

    def replay(self, obs: Tensor, starts: Tensor, state: State) -> Tuple[Tensor, Tensor, State]:
        """Windows: ``obs [N, T, obs_dim]``, ``starts [N, T]`` after ``state`` -> ``(logits [N, T, A],
        value [N, T], state after them)``."""
        hidden, state = self.core(self.inputs(obs, starts), starts, state)
        hidden = self.norm(hidden)  # [N, T, d]
        return self.policy(hidden), self.value(hidden).squeeze(-1), state

    def step(self, obs: Tensor, starts: Tensor, state: State) -> Tuple[Tensor, Tensor, State]:
        """One step of every environment: ``obs [E, obs_dim]``, ``starts [E]`` -> ``(logits [E, A], value [E],
        state)``."""
        logits, value, state = self.replay(obs[:, None], starts[:, None], state)
        return logits[:, 0], value[:, 0], state

    # ------------------------------------------------------------------ files
    def save_pretrained(self, directory) -> None:
        """``agent.json`` (:class:`AgentConfig`) and ``model.safetensors`` (every weight) in ``directory``."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        tensors = {k: v.contiguous() for k, v in unique_state_dict(self).items()}
        atomic_write(directory / WEIGHTS_NAME, lambda tmp: save_file(tensors, tmp, metadata=weights_metadata()))
        write_json(directory / AGENT_CONFIG, dataclasses.asdict(self.config))

    @classmethod
    def from_pretrained(cls, directory, map_location="cpu") -> "MemoryAgent":
        """An agent saved by :meth:`save_pretrained` (a folder, or a run directory's ``agent/``), in eval mode."""
        directory = Path(directory)
        if (directory / "agent" / AGENT_CONFIG).is_file():
            directory = directory / "agent"
        path = directory / AGENT_CONFIG
        if not path.is_file():
            raise CheckpointError(f"{directory}: not an agent folder (no {AGENT_CONFIG})")
        try:
            config = AgentConfig.from_dict(json.loads(path.read_text(encoding="utf-8")))
        except (ValueError, TypeError) as exc:
            raise CheckpointError(f"{path}: {exc}") from None
        agent = cls(config)
        load_into(agent, load_safetensors(directory / WEIGHTS_NAME), str(directory / WEIGHTS_NAME))
        return agent.to(map_location).eval()


def select(state: State, rows) -> State:
    """The states of some environments (``rows``: indices or a mask over the first dimension)."""
    return tuple(t[rows] for t in state)


def detach(state: State) -> State:
    return tuple(t.detach() for t in state)


def take_window_state(state: State, device: Optional[torch.device] = None) -> State:
    """A copy of ``state`` to replay a window from later."""
    return tuple(t.detach().clone() if device is None else t.detach().to(device, copy=True) for t in state)
