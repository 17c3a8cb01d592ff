"""The ``txl`` command. Each sub-command is a thin wrapper over the Python API.

User errors (``TXLError``) print one line on stderr and exit with status 2; no traceback.
"""

from __future__ import annotations

import argparse
import logging
import sys
from typing import Callable, Dict, List, Optional

from .errors import TXLError

COMMANDS: Dict[str, Callable[[argparse._SubParsersAction], None]] = {}


def command(fn):
    """Register a function that adds one sub-parser."""
    COMMANDS[fn.__name__.removeprefix("add_")] = fn
    return fn


@command
def add_convert(sub) -> None:
    p = sub.add_parser("convert", help="convert an original or HuggingFace Transformer-XL state dict",
                       description="Convert a state dict (.bin or .safetensors) saved by the original Transformer-XL "
                                   "code (MemTransformerLM) or by HuggingFace TransfoXLLMHeadModel into a "
                                   "transformer-xl checkpoint directory (config.json + model.safetensors).")
    p.add_argument("state_dict", help="the state dict file (.bin, .pt or .safetensors)")
    p.add_argument("out_dir", help="directory to write")
    p.add_argument("--from", dest="source", choices=["original", "hf"], required=True,
                   help="who wrote the state dict")
    p.add_argument("--config", required=True, metavar="ARGS.json",
                   help="constructor arguments under their original names (a HuggingFace config.json works for --from hf)")
    p.set_defaults(func=run_convert)


def run_convert(args) -> int:
    from .convert import convert_checkpoint

    model = convert_checkpoint(args.state_dict, args.config, args.out_dir, source=args.source)
    print(f"wrote {args.out_dir} ({model.num_parameters():,} parameters, attn_type={model.config.attn_type})")
    return 0


@command
def add_train(sub) -> None:
    p = sub.add_parser("train", allow_abbrev=False, help="train a model (with no arguments: a small model on the built-in corpus)",
                       description="Train a Transformer-XL. Options not listed here override config fields: "
                                   "--lr 0.001, --max-steps 500, --n-layer 6, --eval.mem-len 256 ...",
                       epilog=f"built-in configs: {', '.join(_builtin_configs())}")
    p.add_argument("--config", default=None, help="a YAML file or the name of a built-in config (default: default)")
    p.add_argument("--resume", action="store_true", help="continue the run in --run-dir from its last checkpoint")
    p.add_argument("--nproc", type=int, metavar="N", help="train with N processes on this machine: runs this command "
                   "under torchrun (DistributedDataParallel; FSDP with --parallel fsdp); see docs/DISTRIBUTED.md")
    p.set_defaults(func=run_train, overrides_allowed=True)


def _builtin_configs():
    from .training.config import builtin_config_names

    return builtin_config_names()


def run_train(args) -> int:
    from .training import load_run_config, train

    cfg = load_run_config(args.config, args.overrides)
    if args.nproc is not None and args.nproc != 1:  # the same command, without --nproc, in N processes under torchrun
        from .training.distributed import check_nproc, launch

        check_nproc(args.nproc, cfg.train, args.resume)
        argv = (["-v"] if args.verbose else []) + ["train"] + (["--config", args.config] if args.config else []) \
            + (["--resume"] if args.resume else []) + list(args.overrides)
        return launch(args.nproc, argv)
    result = train(cfg, resume=args.resume)
    if result.rank != 0:
        return 0
    best = "n/a" if result.best_valid_loss is None else f"{result.best_valid_loss:.4f}"
    print(f"done: {result.steps} steps ({result.stopped_by}), best valid loss {best}; run in {result.run_dir}")
    return 0


@command
def add_eval(sub) -> None:
    p = sub.add_parser("eval", help="evaluate a run or checkpoint on a split (loss, ppl or bpc, tokens/s)")
    p.add_argument("checkpoint", metavar="RUN_OR_CHECKPOINT", help="a run directory (uses best/, else the last "
                                                                   "checkpoint) or a checkpoint directory")
    p.add_argument("--split", default="test", choices=["train", "valid", "test"])
    p.add_argument("--mode", default="segment", choices=["segment", "sliding"],
                   help="segment: segments with memory (Transformer-XL); sliding: a fresh window of --tgt-len "
                        "tokens for every prediction, moved by one (the vanilla Transformer's evaluation)")
    p.add_argument("--tgt-len", type=int, help="segment length, or the window with --mode sliding (default: training value)")
    p.add_argument("--mem-len", type=int, help="memory length (default: training value)")
    p.add_argument("--ext-len", type=int, help="extended context length (default: training value)")
    p.add_argument("--clamp-len", type=int, help="clamp relative distances (default: training value)")
    p.add_argument("--same-length", action="store_true", default=None, help="every query sees mem_len keys")
    p.add_argument("--batch-size", type=int, default=10)
    p.add_argument("--max-steps", type=int, help="evaluate only the first N segments (with --mode sliding: N predictions per row)")
    p.add_argument("--data-dir", help="local copy of the corpus (default: the run's)")
    p.add_argument("--device", default="auto")
    p.add_argument("--precision", default="fp32", choices=["fp32", "bf16", "fp16"],
                   help="autocast precision of the forward passes (fp16 needs a GPU)")
    p.add_argument("--compile", action="store_true", help="torch.compile the model first (pays off on long evaluations)")
    p.add_argument("--attn-chunk", type=int, default=0, metavar="N",
                   help="memory-efficient attention (attn_type 0): keys streamed N at a time (e.g. 256), so peak "
                        "memory no longer grows with --mem-len; same results")
    p.add_argument("--fused-attention", action="store_true",
                   help="the fused Triton attention kernel (CUDA with triton installed; elsewhere the plain path)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run_eval)


def run_eval(args) -> int:
    import json

    from .evaluation.cli import evaluate_checkpoint

    result, info = evaluate_checkpoint(args)
    if args.json:
        print(json.dumps({**result.to_dict(), **info}, sort_keys=True))
    else:
        print(f"{info['split']} ({info['mode']}): loss {result.loss:.4f} | {result.metric} {result.value:.4f} | "
              f"{result.tokens:,} tokens in {result.seconds:.1f} s ({result.tokens_per_s:,.0f} tokens/s) | "
              f"tgt_len {info['tgt_len']} mem_len {info['mem_len']} clamp_len {info['clamp_len']} "
              f"same_length {info['same_length']}")
    return 0


@command
def add_plot(sub) -> None:
    p = sub.add_parser("plot", help="draw a run's loss curves to a PNG")
    p.add_argument("run_dir")
    p.add_argument("--out", help="PNG path (default: RUN_DIR/loss.png)")
    p.set_defaults(func=run_plot)


def run_plot(args) -> int:
    from .training.plot import plot_run

    print(f"wrote {plot_run(args.run_dir, args.out)}")
    return 0


def _add_inference_args(p) -> None:
    p.add_argument("checkpoint", metavar="CKPT", help="a run directory or a checkpoint directory")
    p.add_argument("--tgt-len", type=int, help="segment length (default: training value)")
    p.add_argument("--mem-len", type=int, help="memory length (default: training value)")
    p.add_argument("--device", default="auto")


@command
def add_generate(sub) -> None:
    p = sub.add_parser("generate", help="continue a prompt, printing tokens as they come")
    _add_inference_args(p)
    p.add_argument("--prompt", required=True, help="text to continue (read segment by segment into memory)")
    p.add_argument("--max-new-tokens", type=int, default=100)
    p.add_argument("--greedy", action="store_true", help="take the most likely token (no sampling)")
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--top-k", type=int, default=0, help="sample among the k most likely (0: off)")
    p.add_argument("--top-p", type=float, default=1.0, help="nucleus sampling mass (1: off)")
    p.add_argument("--repetition-penalty", type=float, default=1.0)
    p.add_argument("--seed", type=int, help="for reproducible sampling")
    p.add_argument("--stop", nargs="*", metavar="TOKEN", help="stop at these tokens (e.g. '<eos>')")
    p.set_defaults(func=lambda args: _generation_cli().run_generate(args))


@command
def add_score(sub) -> None:
    p = sub.add_parser("score", help="per-token log-probs and perplexity of a document, with memory")
    _add_inference_args(p)
    p.add_argument("file", help="UTF-8 text file")
    p.add_argument("--doc-sep", default="blank", choices=["blank", "none"],
                   help="blank: documents are separated by blank lines (memory resets at each); none: one document")
    p.add_argument("--tokens", action="store_true", help="also print every token's log-probability")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=lambda args: _generation_cli().run_score(args))


def _generation_cli():
    from .generation import cli

    return cli


@command
def add_context(sub) -> None:
    p = sub.add_parser("context", help="loss against context length; RECL for two or more models",
                       description="Evaluate each model at increasing context lengths (Transformer-XL: memory with "
                                   "same_length; models without memory: sliding windows), plot loss against context "
                                   "length, and with two or more models compute the paper's Relative Effective "
                                   "Context Length (r=0.1 and r=1).")
    p.add_argument("checkpoints", nargs="+", metavar="CKPT", help="run or checkpoint directories")
    p.add_argument("--lengths", type=int, nargs="+", default=[16, 32, 64, 128, 256])
    p.add_argument("--split", default="valid", choices=["train", "valid", "test"])
    p.add_argument("--batch-size", type=int, default=10)
    p.add_argument("--max-tokens", type=int, default=500, help="predictions per row (default 500)")
    p.add_argument("--names", nargs="*", help="labels for the models (default: directory names)")
    p.add_argument("--plot", help="PNG path (default: context.png in the current directory)", default="context.png")
    p.add_argument("--json", action="store_true")
    p.add_argument("--data-dir")
    p.add_argument("--device", default="auto")
    p.set_defaults(func=lambda args: _context_cli().run_context(args))


def _context_cli():
    from .evaluation import cli

    return cli


@command
def add_bench(sub) -> None:
    p = sub.add_parser("bench", help="measurements (eval-speed: sliding-window vanilla vs Transformer-XL)")
    what = p.add_subparsers(dest="bench", metavar="WHAT", required=True)
    q = what.add_parser("eval-speed", help="the paper's Table 9 on this machine")
    q.add_argument("--attn-lens", type=int, nargs="+", default=[128, 256, 512, 1024])
    q.add_argument("--vanilla-tokens", type=int, default=64, help="predictions timed for the vanilla model")
    q.add_argument("--xl-tokens", type=int, default=4096, help="predictions timed for Transformer-XL")
    q.add_argument("--n-layer", type=int, default=4)
    q.add_argument("--d-model", type=int, default=256)
    q.add_argument("--n-head", type=int, default=8)
    q.add_argument("--d-inner", type=int, default=1024)
    q.add_argument("--plot", default="eval_speed.png", help="PNG path")
    q.set_defaults(func=run_bench_eval_speed)


def run_bench_eval_speed(args) -> int:
    import torch

    from .evaluation.speed import format_table, run_eval_speed

    print(f"models: n_layer {args.n_layer}, d_model {args.d_model}, n_head {args.n_head}, d_inner {args.d_inner}, "
          f"byte vocabulary; {torch.get_num_threads()} threads; tokens from the built-in corpus", flush=True)
    rows = run_eval_speed(args.attn_lens, args.vanilla_tokens, args.xl_tokens, args.n_layer, args.d_model,
                          args.n_head, args.d_inner, args.plot)
    print(format_table(rows))
    print(f"wrote {args.plot}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="txl", description="Transformer-XL language models: train, evaluate, "
                                                             "generate and convert.")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for add in COMMANDS.values():
        add(sub)
    return parser


def main(argv: Optional[List[str]] = None) -> int:
    parser = build_parser()
    args, rest = parser.parse_known_args(argv)
    if rest and not getattr(args, "overrides_allowed", False):
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    args.overrides = rest
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO, format="%(message)s")
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except TXLError as exc:
        print(f"txl {args.command}: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print(f"txl {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
