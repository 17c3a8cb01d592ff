"""``txl train`` against the original ``train.py`` on Penn Treebank, end to end, the same settings, N threads each.

The original is the authors' ``pytorch/train.py`` (a clone of kimiyoung/transformer-xl; ``--original DIR`` or
``$TXL_ORIGINAL_DIR`` names its ``pytorch`` folder). It runs from a temporary copy of that folder in which three
things are adjusted, none changing what it computes: its masks' ``.byte()`` becomes ``.bool()`` (uint8 masks are
refused by ``masked_fill``), ``utils/proj_adaptive_softmax.py`` reads
``torch.version.cuda`` as ``"0.0"`` when it is None (it parses it at import and never uses it); and ``ptb`` joins
the ``--dataset`` choices of ``train.py`` (its ``data_utils.py`` reads PTB, its argument parser omits it). Its data
folder is a temporary one whose ``train.txt``/``valid.txt``/``test.txt`` link to the PTB files.

Both run our ``ptb`` config's model and optimisation (16 layers, d_model 380, 10 heads of 38, d_inner 900,
dropout 0.6, dropatt 0.2, tgt_len = mem_len = 70, batch 20, Adam 2.5e-4, cosine, clip 0.25; the original's
word-level PTB vocabulary, no adaptive softmax, tied weights) for ``--steps`` steps, with ``OMP_NUM_THREADS``
and ``MKL_NUM_THREADS`` set to ``--threads`` and no validation before the end. Reported per run:

- ms per step in the steady state: the median over the log intervals after the first (the original's own
  ``ms/batch``; ours from ``metrics.jsonl``'s ``tokens_per_s``);
- seconds from launch to the last training step: start-up, corpus reading (ours from a cold corpus cache) and
  every step, as a user waits.

    python benchmarks/train_vs_original.py --original ~/transformer-xl/pytorch --steps 40 --log-interval 10
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import cpu_description, markdown_table

MODEL = dict(n_layer=16, d_model=380, n_head=10, d_head=38, d_inner=900, dropout=0.6, dropatt=0.2, tgt_len=70,
             mem_len=70)
TRAIN = dict(batch_size=20, lr=0.00025, clip=0.25)


def prepare_original(original: Path, work: Path) -> Path:
    code = work / "original"
    shutil.copytree(original, code)
    mt = code / "mem_transformer.py"
    mt.write_text(mt.read_text(encoding="utf-8").replace(".byte()", ".bool()"), encoding="utf-8")
    pas = code / "utils" / "proj_adaptive_softmax.py"
    pas.write_text(pas.read_text(encoding="utf-8").replace("torch.version.cuda.split",
                                                           "(torch.version.cuda or '0.0').split"),
                   encoding="utf-8")
    tp = code / "train.py"
    tp.write_text(tp.read_text(encoding="utf-8").replace("choices=['wt103', 'lm1b', 'enwik8', 'text8']",
                                                         "choices=['wt103', 'lm1b', 'enwik8', 'text8', 'ptb']"),
                  encoding="utf-8")
    return code


def prepare_data(ptb: Path, work: Path) -> Path:
    data = work / "ptb"
    data.mkdir()
    for split in ("train", "valid", "test"):
        (data / f"{split}.txt").symlink_to((ptb / f"ptb.{split}.txt").resolve())
    return data


def run_original(code: Path, data: Path, work: Path, args, env) -> dict:
    cmd = [sys.executable, "-u", "train.py", "--data", str(data), "--dataset", "ptb",
           "--work_dir", str(work / "orig_run"),
           "--n_layer", str(MODEL["n_layer"]), "--d_model", str(MODEL["d_model"]), "--n_head", str(MODEL["n_head"]),
           "--d_head", str(MODEL["d_head"]), "--d_inner", str(MODEL["d_inner"]), "--dropout", str(MODEL["dropout"]),
           "--dropatt", str(MODEL["dropatt"]), "--tgt_len", str(MODEL["tgt_len"]), "--mem_len", str(MODEL["mem_len"]),
           "--eval_tgt_len", str(MODEL["tgt_len"]), "--batch_size", str(TRAIN["batch_size"]), "--optim", "adam",
           "--lr", str(TRAIN["lr"]), "--scheduler", "cosine", "--warmup_step", "0", "--clip", str(TRAIN["clip"]),
           "--max_step", str(args.steps), "--log-interval", str(args.log_interval), "--eval-interval", "1000000000"]
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=code, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    ms, end, lines = [], None, []
    for line in proc.stdout:
        lines.append(line)
        m = re.search(r"ms/batch\s+([\d.]+)", line)
        if m:
            ms.append(float(m.group(1)))
        if "End of training" in line:
            end = time.perf_counter() - start
            proc.kill()  # what follows loads a saved model for the test split: not part of training
            break
    proc.wait()
    if end is None:
        sys.exit("train_vs_original.py: the original train.py stopped early:\n" + "".join(lines[-15:]))
    return {"ms_per_step": statistics.median(ms[1:] or ms), "seconds": end}


def run_ours(data: Path, work: Path, args, env) -> dict:
    run_dir = work / "ours_run"
    # a cold corpus cache: the corpus is read as the original reads it
    env = dict(env, TXL_CACHE_DIR=str(work / "cache"))
    cmd = ["txl", "train", "--config", "ptb", "--data-dir", str(data), "--run-dir", str(run_dir),
           "--max-steps", str(args.steps), "--log-interval", str(args.log_interval), "--eval-interval", "1000000000",
           "--num-threads", str(args.threads)]
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    metrics, end = run_dir / "metrics.jsonl", None
    while proc.poll() is None:
        time.sleep(0.05)
        rows = read_metrics(metrics)
        if rows and rows[-1]["step"] >= args.steps:
            end = time.perf_counter() - start
            proc.kill()  # what follows is the final validation and checkpoint: not part of training
            break
    out = proc.communicate()[0]
    rows = read_metrics(metrics)
    if end is None:
        sys.exit("train_vs_original.py: txl train stopped early:\n" + out[-2000:])
    tokens = TRAIN["batch_size"] * MODEL["tgt_len"]
    ms = [1e3 * tokens / r["tokens_per_s"] for r in rows if r.get("split") == "train"]
    return {"ms_per_step": statistics.median(ms[1:] or ms), "seconds": end}


def read_metrics(path: Path) -> list:
    if not path.exists():
        return []
    rows = []
    for line in path.read_text().splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        if row.get("split") == "train":
            rows.append(row)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--original", default=os.environ.get("TXL_ORIGINAL_DIR"))
    default_data = Path(os.environ.get("TXL_DATA_DIR", Path(__file__).resolve().parents[1].parent / "shared" / "data"))
    parser.add_argument("--ptb", default=str(default_data / "ptb"), help="folder with ptb.{train,valid,test}.txt")
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--log-interval", type=int, default=10)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    if not args.original:
        sys.exit("train_vs_original.py: give the original code's 'pytorch' folder with --original DIR or "
                 "$TXL_ORIGINAL_DIR")
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads), MKL_NUM_THREADS=str(args.threads))
    print(cpu_description().rsplit(",", 1)[0] + f", {args.threads} thread(s) per run")
    print(f"PTB, the ptb config's model (16 x 380, 24M parameters), batch 20 x 70 tokens, {args.steps} steps, "
          f"logged every {args.log_interval}")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        code = prepare_original(Path(args.original).expanduser(), work)
        data = prepare_data(Path(args.ptb), work)
        theirs = run_original(code, data, work, args, env)
        ours = run_ours(Path(args.ptb), work, args, env)
    print(markdown_table(["run", "ms/step (steady)", "seconds to the last step (start-up included)"], [
        ["original train.py", f"{theirs['ms_per_step']:.0f}", f"{theirs['seconds']:.1f}"],
        ["txl train", f"{ours['ms_per_step']:.0f}", f"{ours['seconds']:.1f}"],
        ["**speed-up**", f"**{theirs['ms_per_step'] / ours['ms_per_step']:.2f}x**",
         f"**{theirs['seconds'] / ours['seconds']:.2f}x**"]]))


if __name__ == "__main__":
    main()
