"""int8 for CPU inference: onnxruntime's dynamic quantisation of the exported graph against fp32 and bf16.

For a trained checkpoint (a run directory or a folder): the segment graph is exported (``txl export``), its
weights quantised to int8 with ``onnxruntime.quantization.quantize_dynamic`` (activations quantised on the fly),
and the first ``--segments`` segments of the run's validation split are scored with the memory carried by four
paths: onnxruntime fp32, onnxruntime int8, and the eager model with fp32 and with bf16 weights. Prints the loss
of each (its cost against fp32) and ms per segment, with the CPU named; the paths alternate segment by segment.

    python benchmarks/int8.py runs/default --segments 40 --threads 2
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).parent))
from common import cpu_description, markdown_table, table_row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("checkpoint")
    parser.add_argument("--segments", type=int, default=40)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    import onnxruntime as ort

    from transformer_xl.export import export_model, fresh_memory
    from transformer_xl.export.quantize import quantize_int8
    from transformer_xl.jobs import CorpusChoice, checkpoint_split
    from transformer_xl.pretrained import find_checkpoint

    torch.set_num_threads(args.threads)
    found = find_checkpoint(args.checkpoint)
    model = found.load_model("cpu")
    data = checkpoint_split(found, "valid", CorpusChoice())
    L = model.tgt_len
    n = args.batch * (args.segments * L + 1)
    ids = torch.as_tensor(np.asarray(data.ids[:n], dtype=np.int64)).view(args.batch, -1)  # [B, T]
    with tempfile.TemporaryDirectory() as tmp:
        fp32_path, int8_path = Path(tmp) / "model.onnx", Path(tmp) / "model.int8.onnx"
        export_model(model, fp32_path)
        shutil.copyfile(fp32_path, int8_path)
        quantize_int8(int8_path)  # what `txl export --precision int8` writes
        options = ort.SessionOptions()
        options.intra_op_num_threads = args.threads
        sessions = {name: ort.InferenceSession(str(p), options) for name, p in
                    (("onnxruntime fp32", fp32_path), ("onnxruntime int8", int8_path))}
        bf16 = found.load_model("cpu", torch.bfloat16)
        paths = {**{k: ("ort", s) for k, s in sessions.items()}, "eager fp32": ("eager", model),
                 "eager bf16 weights": ("eager", bf16)}
        state = {k: None for k in paths}
        nll = {k: 0.0 for k in paths}
        seconds = {k: [] for k in paths}
        for s in range(args.segments):
            x, y = ids[:, s * L:(s + 1) * L], ids[:, s * L + 1:(s + 1) * L + 1]
            for name, (kind, runner) in paths.items():
                start = time.perf_counter()
                if kind == "ort":
                    mems, mask = state[name] or [t.numpy() for t in fresh_memory(model, args.batch)]
                    log_probs, mems, mask = runner.run(None, {"input_ids": x.numpy(), "mems": mems,
                                                               "mems_mask": mask})
                    state[name] = (mems, mask)
                    loss = -np.take_along_axis(log_probs, y.numpy()[..., None], -1).mean()
                else:
                    with torch.no_grad():
                        out = runner(x, y, mems=state[name])
                    state[name], loss = out.mems, float(out.loss)
                seconds[name].append(time.perf_counter() - start)
                nll[name] += float(loss) / args.segments
    print(cpu_description(), f"| onnxruntime {ort.__version__}")
    print(f"{args.checkpoint}: {args.segments} segments of {L} x batch {args.batch}, memory carried\n")
    print(markdown_table(["path", "loss (nats)", "vs fp32", "ms per segment (median)", "speed vs eager fp32"]))
    base_loss, base_time = nll["eager fp32"], statistics.median(seconds["eager fp32"])
    for name in paths:
        t = statistics.median(seconds[name])
        print(table_row([name, f"{nll[name]:.4f}", f"{100 * (nll[name] - base_loss) / base_loss:+.2f}%",
                         f"{1e3 * t:.1f}", f"{base_time / t:.2f}x"]))


if __name__ == "__main__":
    main()
