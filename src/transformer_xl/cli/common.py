"""What the commands share to open what they work on: a checkpoint by any name (:mod:`transformer_xl.pretrained`),
its config and its run.

Every ``CKPT`` argument accepts what ``TransformerXL.from_pretrained`` accepts: a hub id (``org/name``, with
``--revision``), a folder of ours, a run directory, or a HuggingFace TransfoXL folder.
"""

from __future__ import annotations

from pathlib import Path

from ..data import load_vocab
from ..errors import CheckpointError, DataError
from ..checkpoints.hub import RUN_CONFIG_NAME, Located, locate
from ..model import TransformerXLConfig
from ..checkpoints.loading import model_config
from ..pretrained import Checkpoint, open_checkpoint

CKPT_HELP = ("a hub id (org/name), a checkpoint folder (ours, or a HuggingFace TransfoXL folder with its "
             "vocab.pkl) or a run directory (its best/, else its last checkpoint)")


def add_checkpoint_args(p, nargs=None) -> None:
    """The ``CKPT`` positional argument and ``--revision``."""
    p.add_argument("checkpoint" if nargs is None else "checkpoints", metavar="CKPT", nargs=nargs, help=CKPT_HELP)
    p.add_argument("--revision", help="for hub ids: a branch, tag or commit (default: main)")


def locate_checkpoint(name, args) -> Located:
    """The files of a ``CKPT`` argument (hub files fetched through huggingface_hub)."""
    return locate(name, getattr(args, "revision", None))


def open_for_inference(args, require_tokenizer: bool = True) -> Checkpoint:
    """``args.checkpoint`` opened on ``args.device`` with ``--tgt-len``/``--mem-len`` (checked before the weights
    are read) and its tokenizer."""
    return open_checkpoint(args.checkpoint, getattr(args, "revision", None), device=args.device,
                           require_tokenizer=require_tokenizer, tgt_len=args.tgt_len, mem_len=args.mem_len)


def run_config_of(located: Located, hint: str = "") -> Path:
    """The ``run.yaml`` of the run a checkpoint belongs to (its corpus); one line when it has none."""
    if located.run_dir is None:
        raise CheckpointError(f"{located.source}: no {RUN_CONFIG_NAME} beside the checkpoint, so its corpus is "
                              f"unknown{hint}")
    return located.run_dir / RUN_CONFIG_NAME


def check_vocab(located: Located, corpus) -> None:
    saved = load_vocab(located.directory, huggingface=located.format == "hf")
    if len(saved) != len(corpus.vocab) or saved.to_dict() != corpus.vocab.to_dict():
        raise DataError(f"{located.directory}: the checkpoint's vocabulary ({len(saved)} symbols) does not match "
                        f"the corpus' ({len(corpus.vocab)} symbols)")


def load_model_config(located: Located) -> TransformerXLConfig:
    """The checkpoint's config (ours, or HuggingFace's mapped), read without loading the weights."""
    return model_config(located)


def weight_bytes(model) -> int:
    """Bytes of the loaded weights (already resident, so not counted again against the free memory)."""
    return sum(p.numel() * p.element_size() for p in model.parameters())
