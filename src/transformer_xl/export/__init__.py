"""Export with memory as input and output: ONNX (onnxruntime) and ``torch.export`` programs.

:func:`export_model` writes the segment graph of :mod:`.graph` (``input_ids``, ``mems``, ``mems_mask`` in;
``log_probs``, ``new_mems``, ``new_mems_mask`` out; dynamic batch and segment length) and its description.
``export_model(..., graph="decode")`` writes the graph of cached decoding instead (:mod:`.decode`: one token
per row, the projected keys and values as state, O(d^2) per token). ``txl export CKPT OUT.onnx|OUT.pt2
[--graph decode]`` is the same from the command line.
"""

from .decode import DecodeGraph, fresh_state
from .exporter import ExportResult, export_model, export_program, graph_format, max_segment
from .graph import SegmentGraph, fresh_memory

__all__ = ["DecodeGraph", "ExportResult", "SegmentGraph", "export_model", "export_program", "fresh_memory",
           "fresh_state", "graph_format", "max_segment"]
