"""``generate`` under transformers 5 (``transformer_xl.hf``) against transformers 4.35.2, on the same folder.

transformers 4.35.2's ``TransfoXLLMHeadModel.generate`` keeps each layer's states as memory and projects all of
them through W_k and W_v again at every new token: O(M d^2) per token. The face keeps the projected keys and values
in a decoding cache instead: O(d^2 + M d). This script writes one model with 4.35.2's ``save_pretrained``, then for
each memory length M times both on it, greedy and 4-beam, batch 1, and checks that the tokens are the same.

ms per new token = (CPU time of ``generate`` for N new tokens - CPU time for 1) / (N - 1): the prompt's reading is
left out. Each time is the best of ``--repeat``. Both sides run one torch thread (``--threads``) in turn, M by M, so
the machine's drift touches both alike. The face's process also times the package's own cached decoder
(``transformer_xl.generate``, greedy, sliding decoding) on the same folder: what the face adds around each step.

Run it with the main environment's python (transformers 4.35.2); the transformers-5 side runs in
``$TXL_HF5_PYTHON`` (default ``.venv-hf5/bin/python``)::

    python benchmarks/hf_generate_speed.py --mem-lens 128 512 2048 --new-tokens 100
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]


def best_time(fn, repeat: int) -> float:
    """The least CPU time of ``repeat`` calls of ``fn`` (CPU time: what other tenants of the machine take is left
    out)."""
    best = float("inf")
    for _ in range(repeat):
        start = time.process_time()
        fn()
        best = min(best, time.process_time() - start)
    return best


def per_token(run, new_tokens: int, repeat: int) -> dict:
    """ms per new token of ``run(n) -> the n new tokens`` (the prompt left out), and its tokens."""
    with torch.no_grad():
        tokens = run(new_tokens)
        full = best_time(lambda: run(new_tokens), repeat)
        one = best_time(lambda: run(1), repeat)
    return {"ms": 1000.0 * (full - one) / (new_tokens - 1), "tokens": tokens}


def time_generate(model, prompt: torch.Tensor, new_tokens: int, num_beams: int, repeat: int) -> dict:
    """:func:`per_token` of ``model.generate``, for one model and memory length."""
    kwargs = dict(do_sample=False, num_beams=num_beams, pad_token_id=0, eos_token_id=None)
    return per_token(lambda n: model.generate(prompt, max_new_tokens=n, **kwargs)[0, prompt.size(1):].tolist(),
                     new_tokens, repeat)


def measure(open_model, args, mem_len: int) -> dict:
    model = open_model(mem_len)
    prompt = torch.tensor([args.prompt])
    return {f"beam{b}": time_generate(model, prompt, args.new_tokens, b, args.repeat) for b in (1, 4)}


# ---------------------------------------------------------------------------- transformers 5 (the face)
def face_side(args) -> None:
    from transformers import AutoModelForCausalLM

    import transformer_xl.hf  # noqa: F401  (registers "transfo-xl")
    from transformer_xl import generate

    torch.set_num_threads(args.threads)
    face = AutoModelForCausalLM.from_pretrained(args.folder, mem_len=args.mem_lens[0]).eval()
    result = measure(lambda m: face, args, args.mem_lens[0])
    prompt = torch.tensor([args.prompt])
    result["own"] = per_token(lambda n: generate(face.txl, prompt, max_new_tokens=n, do_sample=False,
                                                 decoding="sliding")[0], args.new_tokens, args.repeat)
    Path(args.json_out).write_text(json.dumps(result))


# ---------------------------------------------------------------------------- transformers 4.35.2 (the judge)
def judge_side(args) -> None:
    import transformers
    from common import cpu_description, markdown_table, table_row
    from transformers import TransfoXLConfig, TransfoXLLMHeadModel

    transformers.logging.set_verbosity_error()
    torch.set_num_threads(args.threads)
    hf5 = Path(os.environ.get("TXL_HF5_PYTHON", REPO / ".venv-hf5" / "bin" / "python"))
    if not hf5.exists():
        sys.exit(f"no transformers-5 environment at {hf5}: set TXL_HF5_PYTHON or make .venv-hf5 (docs/TRANSFORMERS.md)")
    torch.manual_seed(0)
    cfg = TransfoXLConfig(vocab_size=args.vocab, cutoffs=[args.vocab // 5, args.vocab // 2], d_model=args.d_model,
                          d_embed=args.d_model, n_head=args.n_head, d_head=args.d_model // args.n_head,
                          d_inner=4 * args.d_model, n_layer=args.n_layer, div_val=1, tgt_len=128, mem_len=128,
                          clamp_len=1000, dropout=0.0, dropatt=0.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = TransfoXLLMHeadModel(cfg).eval()
        for p in model.parameters():  # weights with some spread, so that the tokens depend on the memory
            p.data.normal_(0.0, 0.1)
    args.prompt = torch.randint(0, args.vocab, (args.prompt_len,)).tolist()
    params = sum(p.numel() for p in model.parameters())
    print(f"{cpu_description()}\ntorch {torch.__version__}, {args.threads} thread(s); model: {args.n_layer} layers, "
          f"d_model {args.d_model}, {args.n_head} heads, vocabulary {args.vocab} (adaptive softmax), {params:,} "
          f"parameters; prompt {args.prompt_len} tokens, {args.new_tokens} new tokens, batch 1, best of "
          f"{args.repeat}\n", flush=True)
    print(markdown_table(["M", "4.35.2 greedy ms/token", "face greedy", "ratio", "own greedy", "ratio",
                          "4.35.2 beam 4", "face beam 4", "ratio", "same tokens"]))
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "model"
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model.save_pretrained(folder, safe_serialization=True)

            def open_judge(mem_len):
                m = TransfoXLLMHeadModel.from_pretrained(folder).eval()
                m.reset_memory_length(mem_len)
                return m

            for mem_len in args.mem_lens:
                judge = measure(open_judge, args, mem_len)
                out = Path(tmp) / f"face-{mem_len}.json"
                argv = [str(hf5), __file__, "--side", "face", "--folder", str(folder), "--json-out", str(out),
                        "--mem-lens", str(mem_len), "--new-tokens", str(args.new_tokens), "--repeat",
                        str(args.repeat), "--threads", str(args.threads), "--prompt", json.dumps(args.prompt)]
                env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
                env.update(PYTHONPATH=str(REPO / "src"), HF_HUB_OFFLINE="1", TRANSFORMERS_VERBOSITY="error",
                           OMP_NUM_THREADS=str(args.threads))
                subprocess.run(argv, check=True, env=env)
                face = json.loads(out.read_text())
                same = all(judge[k]["tokens"] == face[k]["tokens"] for k in judge)
                same = same and face["own"]["tokens"] == judge["beam1"]["tokens"]
                g, b = judge["beam1"]["ms"], judge["beam4"]["ms"]
                fg, fb, og = face["beam1"]["ms"], face["beam4"]["ms"], face["own"]["ms"]
                print(table_row([mem_len, f"{g:.2f}", f"{fg:.2f}", f"{g / fg:.1f}x", f"{og:.2f}", f"{g / og:.1f}x",
                                 f"{b:.2f}", f"{fb:.2f}", f"{b / fb:.1f}x", "yes" if same else "NO"]), flush=True)
    print(f"\n(transformers {transformers.__version__} here; the face ran transformers 5 in {hf5})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mem-lens", type=int, nargs="+", default=[128, 512, 2048])
    ap.add_argument("--new-tokens", type=int, default=100)
    ap.add_argument("--prompt-len", type=int, default=32)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--n-layer", type=int, default=4)
    ap.add_argument("--d-model", type=int, default=256)
    ap.add_argument("--n-head", type=int, default=8)
    ap.add_argument("--vocab", type=int, default=10000)
    ap.add_argument("--side", choices=["judge", "face"], default="judge", help=argparse.SUPPRESS)
    ap.add_argument("--folder", help=argparse.SUPPRESS)
    ap.add_argument("--json-out", help=argparse.SUPPRESS)
    ap.add_argument("--prompt", type=json.loads, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.new_tokens < 2:
        ap.error("--new-tokens: at least 2")
    if args.side == "face":
        face_side(args)
    else:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        judge_side(args)


if __name__ == "__main__":
    main()
