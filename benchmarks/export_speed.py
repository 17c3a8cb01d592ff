"""Milliseconds per token of the exported segment graph: the eager model, the torch.export program and
onnxruntime, side by side in one process.

Three workloads, each with the state carried from call to call: scoring (segments of ``tgt_len`` tokens, batch 1)
and single-token steps (T = 1) through the segment graph, whose memory is re-projected at every call; and
single-token steps through the cached decoding graph (``--graph decode``: projected keys and values as state;
eager: ``DecodingCache``). Rounds alternate the
three runners so that a drift of the machine hits them alike; the table shows medians. The model is the README's
base-like one (4 layers, d_model 256, 8 heads of 32, d_inner 1024, tgt_len = mem_len = 128, vocabulary 10k) with
random weights, or ``--checkpoint`` (anything ``open_checkpoint`` opens).

    python benchmarks/export_speed.py [--checkpoint runs/default] [--rounds 5] [--threads 2]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).parent))
from common import cpu_description, markdown_table, table_row

from transformer_xl import TransformerXL, TransformerXLConfig, open_checkpoint
from transformer_xl.export import export_model, fresh_memory, fresh_state
from transformer_xl.generation import DecodingCache


def runners(model, folder: Path):
    """``{name: fn(ids, mems, mask) -> (log_probs, mems, mask)}`` for eager, torch.export and onnxruntime."""
    import onnxruntime as ort

    export_model(model, folder / "m.pt2")
    export_model(model, folder / "m.onnx")
    program = torch.export.load(str(folder / "m.pt2")).module()
    options = ort.SessionOptions()
    options.intra_op_num_threads = torch.get_num_threads()
    session = ort.InferenceSession(str(folder / "m.onnx"), options)

    def eager(ids, mems, mask):
        out = model.transformer(ids, list(mems.unbind(0)), mask, fixed_memory=True)
        log_probs = model.crit.log_probs(out[0].reshape(-1, out[0].size(-1)))
        return log_probs, torch.stack(out[1]), out[2]

    def onnx(ids, mems, mask):
        out = session.run(None, {"input_ids": ids.numpy(), "mems": mems.numpy(), "mems_mask": mask.numpy()})
        return [torch.from_numpy(np.asarray(x)) for x in out]

    return {"eager": eager, "torch.export": program, "onnxruntime": onnx}


def decode_runners(model, folder: Path):
    """``{name: step(ids [1, 1], state) -> state}`` of cached decoding: eager, torch.export, onnxruntime."""
    import onnxruntime as ort

    slots = model.mem_len + model.tgt_len
    export_model(model, folder / "d.pt2", graph="decode")
    export_model(model, folder / "d.onnx", graph="decode")
    program = torch.export.load(str(folder / "d.pt2")).module()
    options = ort.SessionOptions()
    options.intra_op_num_threads = torch.get_num_threads()
    session = ort.InferenceSession(str(folder / "d.onnx"), options)

    def graph_step(run):
        def step(ids, state):
            keys, values, hidden, t = state if state else (*fresh_state(model, 1, slots), 0)
            pos, start = torch.tensor([t]), torch.tensor([t // model.tgt_len * model.tgt_len])
            out = run(ids, keys, values, hidden, pos, start)
            return (*out[1:], t + 1)
        return step

    def onnx(ids, keys, values, hidden, pos, start):
        feeds = {"input_ids": ids.numpy(), "keys": keys.numpy(), "values": values.numpy(),
                 "hidden": hidden.numpy(), "position": pos.numpy(), "segment_start": start.numpy()}
        return [torch.from_numpy(np.asarray(x)) for x in session.run(None, feeds)]

    def eager(ids, cache):
        cache = cache or DecodingCache(model, 1)
        model.crit.log_probs(cache.extend(ids)[:, -1])
        return cache

    return {"eager": eager, "torch.export": graph_step(program), "onnxruntime": graph_step(onnx)}


@torch.no_grad()
def decode_ms(step, data, calls: int) -> float:
    state, times = None, []
    for c in range(calls):
        start = time.perf_counter()
        state = step(data[:, c:c + 1], state)
        times.append(time.perf_counter() - start)
    return statistics.median(times[4:]) * 1000  # after 4 warm-up steps


@torch.no_grad()
def ms_per_token(fn, model, data, seg: int, calls: int) -> float:
    mems, mask = fresh_memory(model, 1)
    times = []
    for c in range(calls):
        ids = data[:, c * seg:(c + 1) * seg]
        start = time.perf_counter()
        _, mems, mask = fn(ids, mems, mask)
        times.append((time.perf_counter() - start) / seg)
    return statistics.median(times[2:]) * 1000


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--checkpoint")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    if args.checkpoint:
        model = open_checkpoint(args.checkpoint, require_tokenizer=False).model
    else:
        model = TransformerXL(TransformerXLConfig(n_token=10000, n_layer=4, n_head=8, d_model=256, d_head=32,
                                                  d_inner=1024, tgt_len=128, mem_len=128)).eval()
    print(cpu_description())
    data = torch.randint(0, model.config.n_token, (1, 128 * model.tgt_len))
    with tempfile.TemporaryDirectory() as folder:
        fns, steps = runners(model, Path(folder)), decode_runners(model, Path(folder))
        results = {(name, w): [] for name in fns for w in ("segment", "token", "decode")}
        for r in range(args.rounds):
            for name in (list(fns) if r % 2 == 0 else list(fns)[::-1]):
                results[(name, "segment")].append(ms_per_token(fns[name], model, data, model.tgt_len, 8))
                results[(name, "token")].append(ms_per_token(fns[name], model, data, 1, 40))
                results[(name, "decode")].append(decode_ms(steps[name], data, 2 * model.tgt_len))
    print(markdown_table(["runner", f"scoring, segments of {model.tgt_len}", "single-token steps, segment graph",
                          "single-token steps, decoding graph"]))
    for name in fns:
        seg, tok, dec = (statistics.median(results[(name, w)]) for w in ("segment", "token", "decode"))
        print(table_row([name, f"{seg:.3f} ms/token", f"{tok:.2f} ms/token", f"{dec:.2f} ms/token"]))


if __name__ == "__main__":
    main()
