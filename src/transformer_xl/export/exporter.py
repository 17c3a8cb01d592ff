"""Writing the segment graph (:mod:`.graph`) as ONNX or as a ``torch.export`` program.

:func:`export_model` takes a model (or any name ``open_checkpoint`` takes) and an output path whose suffix picks
the format: ``.onnx`` (``torch.onnx.export(dynamo=True)``; needs the ``export`` extra: onnx, onnxscript) or
``.pt2`` (``torch.export.save``; load it with ``torch.export.load(path).module()``). Beside the graph it writes
``OUT.json`` (the inputs and outputs, the fresh start, the lengths, the decoding the model declares) and, when the
checkpoint has one, its vocabulary as ``OUT.vocab.json``. Anything that cannot be exported is one
:class:`~transformer_xl.errors.ConfigError` line.
"""

from __future__ import annotations

import contextlib
import copy
import io
import json
import logging
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import torch
from torch.export import Dim

from ..errors import ConfigError
from ..files import atomic_write, atomic_write_text
from ..model import TransformerXL
from .graph import SegmentGraph, fresh_memory

log = logging.getLogger(__name__)

FORMATS = (".onnx", ".pt2")
EXPORT_EXTRA_HINT = 'ONNX export needs onnx and onnxscript: pip install "transformer-xl[export]"'
INPUTS = ("input_ids", "mems", "mems_mask")
OUTPUTS = ("log_probs", "new_mems", "new_mems_mask")


@dataclass
class ExportResult:
    """What was written: the graph, its description (``OUT.json``) and the vocabulary (or None)."""

    graph: Path
    description: Path
    vocabulary: Optional[Path]
    max_segment: Optional[int]


def graph_format(path) -> str:
    """``.onnx`` or ``.pt2`` from the output path (ConfigError naming the suffix otherwise)."""
    suffix = Path(path).suffix.lower()
    if suffix not in FORMATS:
        raise ConfigError(f"{path}: unknown export format {suffix or '(no suffix)'!r}; the suffix picks it: .onnx "
                          f"(ONNX, for onnxruntime) or .pt2 (torch.export)")
    return suffix


def max_segment(model: TransformerXL) -> Optional[int]:
    """The longest segment the graph takes: ``tgt_len + ext_len`` where learned position tables bound it
    (attn_type 1 and 3), else None (any length)."""
    cfg = model.config
    return cfg.tgt_len + cfg.ext_len if cfg.attn_type in (1, 3) else None


def _prepared(model: TransformerXL) -> TransformerXL:
    """A copy of the model as the graph runs it: evaluation mode, the plain attention, ext_len 0."""
    model = copy.deepcopy(model).cpu().float().eval()
    model.set_attention("plain")
    model.reset_length(model.tgt_len, 0, model.mem_len)
    return model


def _example(model: TransformerXL):
    """Example inputs for tracing: batch 2, a segment of min(tgt_len, 2..) tokens, a fresh memory."""
    seq = max(2, min(model.tgt_len, max_segment(model) or model.tgt_len))
    mems, mask = fresh_memory(model, 2)
    return torch.zeros(2, seq, dtype=torch.long), mems, mask


def _dynamic_shapes(model: TransformerXL):
    batch = Dim("batch", min=1)
    seq = Dim("seq", min=1, max=max_segment(model)) if max_segment(model) else Dim("seq", min=1)
    return {"input_ids": {0: batch, 1: seq}, "mems": {1: batch}, "mems_mask": {0: batch}}


def export_program(model: TransformerXL) -> torch.export.ExportedProgram:
    """The ``torch.export`` program of the segment graph, with dynamic batch and segment length."""
    graph = SegmentGraph(_prepared(model))
    with torch.no_grad():
        return torch.export.export(graph, _example(graph.model), dynamic_shapes=_dynamic_shapes(graph.model))


def _write_onnx(model: TransformerXL, path: Path) -> None:
    try:
        import onnx  # noqa: F401
        import onnxscript  # noqa: F401
    except ImportError:
        raise ConfigError(EXPORT_EXTRA_HINT) from None
    graph = SegmentGraph(_prepared(model))
    with warnings.catch_warnings(), _quiet(), torch.no_grad():
        warnings.simplefilter("ignore")
        program = torch.onnx.export(graph, _example(graph.model), dynamo=True, input_names=list(INPUTS),
                                    output_names=list(OUTPUTS), dynamic_shapes=_dynamic_shapes(graph.model),
                                    verbose=False)
        atomic_write(path, lambda tmp: program.save(str(tmp)), suffix=".onnx")


def _write_pt2(model: TransformerXL, path: Path) -> None:
    program = export_program(model)
    atomic_write(path, lambda tmp: torch.export.save(program, str(tmp)), suffix=".pt2")


@contextlib.contextmanager
def _quiet():
    """The ONNX exporter and its optimiser print their progress through print and logging (INFO and WARNING);
    keep them out of the command's output while it runs."""
    logging.disable(logging.WARNING)
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            yield
    finally:
        logging.disable(logging.NOTSET)


def describe(model: TransformerXL, graph_path: Path, vocabulary: Optional[Path]) -> dict:
    """The contents of ``OUT.json``."""
    cfg = model.config
    n, m, d = cfg.n_layer, model.mem_len, cfg.d_model
    return {
        "format": "transformer-xl-export", "version": 1, "graph": graph_path.name, "kind": "segment",
        "inputs": {"input_ids": {"shape": ["B", "T"], "dtype": "int64"},
                   "mems": {"shape": [n, "B", m, d], "dtype": "float32"},
                   "mems_mask": {"shape": ["B", m], "dtype": "bool", "true_means": "hidden slot"}},
        "outputs": {"log_probs": {"shape": ["B", "T", cfg.n_token], "dtype": "float32"},
                    "new_mems": {"shape": [n, "B", m, d], "dtype": "float32"},
                    "new_mems_mask": {"shape": ["B", m], "dtype": "bool"}},
        "fresh_start": {"mems": 0.0, "mems_mask": cfg.mem_init != "zeros",
                        "why": "mem_init 'zeros': mem_len zero states, visible" if cfg.mem_init == "zeros"
                        else "mem_init 'empty': no memory, so every slot hidden"},
        "n_layer": n, "mem_len": m, "d_model": d, "n_token": cfg.n_token, "tgt_len": model.tgt_len,
        "max_segment": max_segment(model), "decoding": cfg.decoding, "mem_init": cfg.mem_init,
        "vocabulary": None if vocabulary is None else vocabulary.name,
    }


def export_model(model: TransformerXL, out, vocab=None) -> ExportResult:
    """Write ``model``'s segment graph to ``out`` (``.onnx`` or ``.pt2``), ``OUT.json`` and, with ``vocab`` (a
    vocabulary of :mod:`transformer_xl.data`), ``OUT.vocab.json``. Returns what was written."""
    out = Path(out)
    fmt = graph_format(out)
    if not out.parent.exists():
        raise ConfigError(f"{out}: the folder {out.parent} does not exist")
    if not out.parent.is_dir():
        raise ConfigError(f"{out}: {out.parent} is a file, not a folder")
    (_write_onnx if fmt == ".onnx" else _write_pt2)(model, out)
    vocabulary = None
    if vocab is not None:
        vocabulary = out.with_name(out.name + ".vocab.json")
        vocab.save(vocabulary)
    description = out.with_name(out.name + ".json")
    atomic_write_text(description, json.dumps(describe(model, out, vocabulary), indent=2) + "\n")
    return ExportResult(out, description, vocabulary, max_segment(model))


__all__ = ["ExportResult", "FORMATS", "describe", "export_model", "export_program", "graph_format", "max_segment"]
