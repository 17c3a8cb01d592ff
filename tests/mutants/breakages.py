"""Deliberate breakages, one for each property a test of the suite claims and once passed without: loaded as a
pytest plugin (``-p breakages``, this folder on ``PYTHONPATH``) and chosen by ``TXL_BREAKAGE=<name>``.

Each breakage is applied with a monkeypatch once the tests are collected (test modules included, for breakages of
a test's own timing) and undone at the end; nothing here is imported by a normal run. ``test_breakages.py`` runs
each target test under its breakage and asserts that it turns red.
"""

from __future__ import annotations

import os
import sys
from typing import Callable, Dict

import pytest

BREAKAGES: Dict[str, Callable[[pytest.MonkeyPatch], None]] = {}


def breakage(name: str):
    def register(fn):
        BREAKAGES[name] = fn
        return fn

    return register


def _raise(*args, **kwargs):
    raise RuntimeError("broken on purpose")


@breakage("generate-raises")
def _generate_raises(mp):
    """``txl generate`` produces nothing: its text function always raises."""
    from transformer_xl.jobs import continuation

    mp.setattr(continuation, "generate_text", _raise)


@breakage("eval-drops-lengths")
def _eval_drops_lengths(mp):
    """``txl eval`` drops ``--clamp-len`` and ``--same-length`` before evaluating (its JSON still echoes them)."""
    import dataclasses

    from transformer_xl.jobs import checkpoint_eval

    evaluate = checkpoint_eval.evaluate

    def without_them(model, data, settings):
        cfg = model.config
        lengths = settings.lengths.replace(clamp_len=cfg.clamp_len, same_length=cfg.same_length)
        return evaluate(model, data, dataclasses.replace(settings, lengths=lengths))

    mp.setattr(checkpoint_eval, "evaluate", without_them)


@breakage("streamed-zeros")
def _streamed_zeros(mp):
    """The streamed attention back-end returns zeros."""
    import torch

    from transformer_xl.model.attention import backends

    mp.setitem(backends._BACKENDS, "streamed",
               backends.Backend("streamed", lambda call: torch.zeros_like(call.q), takes_rows=True))


@breakage("readme-loop-forgets")
def _readme_loop_forgets(mp):
    """The generation part of the onnxruntime loop (docs/EXPORT.md, once the README's) passes a fresh memory to
    every call instead of the one the graph returned."""
    module = sys.modules["test_readme_loop"]
    shown = module.shown
    broken = shown("onnx-loop").replace("run(seg[:L], mems, mask)", "run(seg[:L], *fresh())")
    assert "*fresh()" in broken, "the documented loop no longer reads as this breakage expects"
    mp.setattr(module, "shown", lambda name: broken if name == "onnx-loop" else shown(name))


@breakage("lm-eval-generates-from-last-token")
def _lm_eval_generates_from_last_token(mp):
    """lm-eval's ``generate_until`` continues only the last token of each context."""
    import transformer_xl.lm_eval as harness

    generate = harness.generate
    mp.setattr(harness, "generate", lambda model, prompts, sampling: generate(model, [p[-1:] for p in prompts],
                                                                               sampling))


@breakage("kill-after-the-run")
def _kill_after_the_run(mp):
    """The kill-and-resume test's kill lands after the training child has finished (two complete runs compared)."""
    module = sys.modules["test_kill_resume"]

    def when_it_has_ended(run, pid, rng, step_seconds):
        os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)  # ended, left for the test to reap

    mp.setattr(module, "kill_moment", when_it_has_ended)


@breakage("bf16-ignores-amx")
def _bf16_ignores_amx(mp):
    """Native bf16 is decided without AMX (only avx512_bf16 and Arm's bf16 count)."""
    from transformer_xl import devices

    mp.setattr(devices, "_cpu_has_bf16", lambda: bool((devices.cpu_flags() or set()) & {"avx512_bf16", "bf16"}))


@breakage("cpu-flags-misread")
def _cpu_flags_misread(mp):
    """The processor's flags are misread: bf16 instructions where it has none, none where it has them."""
    from transformer_xl import devices

    flags = devices.cpu_flags()
    has = bool(flags and flags & {"avx512_bf16", "amx_bf16", "bf16"})
    mp.setattr(devices, "cpu_flags", lambda cpuinfo="/proc/cpuinfo": set() if has else {"avx512_bf16"})


@breakage("memory-joined-backwards")
def _memory_joined_backwards(mp):
    """When the memory keeps states of the previous segment and of this one, it puts this segment's first."""
    import torch

    from transformer_xl.model import backbone, memory

    def update_mems(hids, mems, mem_len, ext_len):
        mlen = 0 if not mems else mems[0].size(1)
        beg, end = memory.cache_window(mlen, hids[0].size(1), mem_len, ext_len)
        if beg >= mlen:
            return memory.update_mems(hids, mems, mem_len, ext_len)
        return [torch.cat([h[:, :end - mlen], m[:, beg:]], dim=1).detach() for m, h in zip(mems, hids)]

    mp.setattr(backbone, "update_mems", update_mems)


@breakage("heads-sized-by-d-model")
def _heads_sized_by_d_model(mp):
    """The attention layers size their heads d_model / n_head, whatever d_head the config says."""
    from transformer_xl.model import positions

    def attn_args(cfg):
        return (cfg.n_head, cfg.d_model, cfg.d_model // cfg.n_head, cfg.dropout, cfg.dropatt, cfg.pre_lnorm,
                cfg.layer_norm_epsilon)

    mp.setattr(positions, "_attn_args", attn_args)


@breakage("run-config-drops-d-inner")
def _run_config_drops_d_inner(mp):
    """A run config's model section loses d_inner on its way to the model (the default is used)."""
    import dataclasses

    from transformer_xl.model import TransformerXLConfig
    from transformer_xl.training.run_config import ModelSection

    config = ModelSection.config
    default = {f.name: f.default for f in dataclasses.fields(TransformerXLConfig)}["d_inner"]
    mp.setattr(ModelSection, "config", lambda self, n_token: config(self, n_token).replace(d_inner=default))


@breakage("segment-generation-forgets")
def _segment_generation_forgets(mp):
    """Generation without a decoding cache runs the open segment without the memory of the full ones."""
    from transformer_xl.generation.generate import SegmentDecoder

    mp.setattr(SegmentDecoder, "_run", lambda self: self.model(torch_tensor([self.segment], self.device)))


def torch_tensor(rows, device):
    import torch

    return torch.tensor(rows, dtype=torch.long, device=device)


@breakage("hf-clusters-kept-in-their-order")
def _hf_clusters_kept_in_their_order(mp):
    """A HuggingFace state dict's tail clusters are read in HuggingFace's order, not reversed."""
    from transformer_xl.checkpoints import layouts

    mp.setattr(layouts, "_reverse_clusters", lambda tensors: None)


@breakage("context-losses-misaligned")
def _context_losses_misaligned(mp):
    """The per-token losses of a context length come back shifted by one token."""
    import torch

    from transformer_xl.evaluation import context

    segment_losses = context.segment_losses
    mp.setattr(context, "segment_losses", lambda *a, **k: torch.roll(segment_losses(*a, **k), 1, dims=1))


@breakage("pickle-reader-runs-payloads")
def _pickle_reader_runs_payloads(mp):
    """The vocabulary reader unpickles with pickle itself: whatever the file names runs."""
    import pickle

    from transformer_xl.text import safe_pickle

    mp.setattr(safe_pickle, "_unpickle", lambda stream, origin: pickle.load(stream))


@breakage("target-log-probs-in-bf16")
def _target_log_probs_in_bf16(mp):
    """The adaptive softmax's log-probabilities of targets pass through bf16 before they are returned."""
    from transformer_xl.model.adaptive import ProjectedAdaptiveLogSoftmax

    forward = ProjectedAdaptiveLogSoftmax.forward
    mp.setattr(ProjectedAdaptiveLogSoftmax, "forward",
               lambda self, hidden, target: forward(self, hidden, target).bfloat16().float())


@breakage("memory-not-detached")
def _memory_not_detached(mp):
    """The memory keeps the graph of the segment it came from: gradients flow back into earlier segments."""
    import torch

    from transformer_xl.model import backbone, memory

    def update_mems(hids, mems, mem_len, ext_len):
        mlen = 0 if not mems else mems[0].size(1)
        beg, end = memory.cache_window(mlen, hids[0].size(1), mem_len, ext_len)
        if beg >= mlen:
            return [h[:, beg - mlen:end - mlen] for h in hids]
        return [torch.cat([m[:, beg:], h[:, :end - mlen]], dim=1) for m, h in zip(mems, hids)]

    mp.setattr(backbone, "update_mems", update_mems)


@breakage("corpus-cache-rewritten")
def _corpus_cache_rewritten(mp):
    """A cached corpus is written again each time it is loaded (without tokenizing anything again)."""
    import numpy as np

    from transformer_xl.data import corpus

    load = corpus.load_corpus_files

    def rewriting(directory):
        cached = load(directory)
        if cached is None:
            return None
        vocab, arrays, meta = cached
        corpus.save_corpus(directory, vocab, {k: np.array(v) for k, v in arrays.items()}, meta)
        return load(directory)

    mp.setattr(corpus, "load_corpus_files", rewriting)


@breakage("default-corpus-rebuilt")
def _default_corpus_rebuilt(mp):
    """A corpus is built again at every load: its cache is never found."""
    from transformer_xl.data import corpus

    load, calls = corpus.load_corpus_files, []

    def forgetful(directory):  # the first look misses; the read-back after writing finds it
        calls.append(directory)
        return None if len(calls) % 2 else load(directory)

    mp.setattr(corpus, "load_corpus_files", forgetful)


def pytest_configure(config):
    name = os.environ.get("TXL_BREAKAGE", "")
    if name not in BREAKAGES:
        raise pytest.UsageError(f"TXL_BREAKAGE: unknown breakage {name!r}; known: {', '.join(sorted(BREAKAGES))}")


def pytest_collection_finish(session):
    mp = pytest.MonkeyPatch()
    BREAKAGES[os.environ["TXL_BREAKAGE"]](mp)
    session.config.add_cleanup(mp.undo)
    print(f"breakage {os.environ['TXL_BREAKAGE']} applied", file=sys.stderr)
