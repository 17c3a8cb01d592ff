"""The ``txl`` command. Each sub-command is a thin wrapper over the Python API.

Exit status and stderr, for every sub-command:

* 0: done.
* 2: bad input. User errors (``TXLError``: a file missing, empty, undecodable or foreign, a value out of
  range, a device this machine lacks), and ``OSError`` from reading or writing a file (permission denied,
  read-only or full disk, a path under a file), print one line ``txl CMD: error: ...`` that names the
  file, flag or field. argparse's own errors (an unknown flag, a value of the wrong type) also exit 2
  and print the usage first.
* 1: an unexpected exception (a bug): one line ``txl CMD: error: ExcType: message (set TXL_DEBUG=1 for
  the traceback)``; with ``TXL_DEBUG=1`` in the environment the traceback is shown instead.
* 130: interrupted (Ctrl-C).

Numeric options are range-checked before a command starts (:func:`check_range`, declared per
sub-command with :func:`checks`), so that nothing is read, computed or written for a bad value.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import signal
import sys
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import torch

from .convert import convert_checkpoint, convert_tf_checkpoint
from .data import original_vocab, read_hf_vocab
from .errors import ConfigError, TXLError
from .evaluation import cli as evaluation_cli
from .evaluation.cli import evaluate_checkpoint
from .evaluation.speed import check_eval_speed_args, format_table, run_eval_speed
from .generation import cli as generation_cli
from .training import load_run_config, train
from .training.config import builtin_config_names
from .training.distributed import check_nproc, launch
from .training.plot import plot_run
from .training.signals import StopNow, exit_status

COMMANDS: Dict[str, Callable[[argparse._SubParsersAction], None]] = {}


def command(fn):
    """Register a function that adds one sub-parser."""
    COMMANDS[fn.__name__.removeprefix("add_")] = fn
    return fn


# ---------------------------------------------------------------------------------------------- range checks
Check = Tuple[str, Optional[float], Optional[float], bool]  # (flag, lower, upper, lower bound excluded)


def check_range(flag: str, value, lo: Optional[float] = None, hi: Optional[float] = None,
                lo_open: bool = False) -> None:
    """ConfigError naming ``flag`` unless ``value`` (a number, a list of numbers or None) is finite and in
    ``[lo, hi]`` (``(lo, hi]`` with ``lo_open``); None bounds are not checked, a None value is not given."""
    if value is None:
        return
    for v in (value if isinstance(value, (list, tuple)) else [value]):
        if isinstance(v, float) and not math.isfinite(v):
            raise ConfigError(f"{flag}: must be a finite number, got {v}")
        below = lo is not None and (v <= lo if lo_open else v < lo)
        if below or (hi is not None and v > hi):
            raise ConfigError(f"{flag}: must be {_describe_range(lo, hi, lo_open)}, got {v}")


def _describe_range(lo, hi, lo_open: bool) -> str:
    if hi is None:
        return f"{'>' if lo_open else '>='} {lo}"
    if lo is None:
        return f"<= {hi}"
    return f"in {'(' if lo_open else '['}{lo}, {hi}]"


def checks(*items: Check) -> Dict[str, Sequence[Check]]:
    """``p.set_defaults(**checks(...))``: the numeric options of a sub-command and their ranges."""
    return {"range_checks": items}


def at_least(flag: str, lo: float) -> Check:
    return (flag, lo, None, False)


def positive(flag: str) -> Check:
    return (flag, 0, None, True)


def _check_options(args) -> None:
    """Apply the sub-command's declared range checks to the parsed values."""
    for flag, lo, hi, lo_open in getattr(args, "range_checks", ()):
        check_range(flag, getattr(args, flag.lstrip("-").replace("-", "_")), lo, hi, lo_open)


@command
def add_convert(sub) -> None:
    p = sub.add_parser("convert", help="convert an original, HuggingFace or TensorFlow Transformer-XL checkpoint",
                       description="Convert a state dict (.bin or .safetensors) saved by the original Transformer-XL "
                                   "code (MemTransformerLM) or by HuggingFace TransfoXLLMHeadModel, or a checkpoint of "
                                   "the authors' TensorFlow code (read without TensorFlow), into a transformer-xl "
                                   "checkpoint directory (config.json + model.safetensors, and vocab.json with "
                                   "--vocab or --vocab-from-corpus).")
    p.add_argument("state_dict", help="the state dict file (.bin, .pt or .safetensors); for --from tf the checkpoint "
                                      "prefix (e.g. model.ckpt-0, beside model.ckpt-0.index)")
    p.add_argument("out_dir", help="directory to write")
    p.add_argument("--from", dest="source", choices=["original", "hf", "tf"], required=True,
                   help="who wrote the checkpoint")
    p.add_argument("--config", required=True, metavar="ARGS.json",
                   help="constructor arguments under their original names (a HuggingFace config.json for --from hf; "
                        "for --from tf the authors' run flags as JSON, or a built-in config name: "
                        "docs/TF_CHECKPOINTS.md)")
    p.add_argument("--vocab", metavar="VOCAB.pkl",
                   help="--from hf: HuggingFace's vocab.pkl/vocab.bin, read without running it (no unpickling), "
                        "written as vocab.json")
    p.add_argument("--vocab-from-corpus", metavar="NAME", choices=["wt103", "wt2", "ptb", "enwik8", "text8", "lm1b"],
                   help="--from original|tf: rebuild the authors' vocabulary of this corpus (needs --data-dir)")
    p.add_argument("--data-dir", metavar="DIR", help="the corpus directory for --vocab-from-corpus")
    p.set_defaults(func=run_convert)


def run_convert(args) -> int:
    if args.vocab and args.vocab_from_corpus:
        raise ConfigError("--vocab and --vocab-from-corpus: give one of them")
    vocab = None
    if args.vocab:

        if args.source != "hf":
            raise ConfigError("--vocab: a HuggingFace vocab.pkl goes with --from hf "
                              "(original and TensorFlow checkpoints: --vocab-from-corpus NAME --data-dir DIR)")
        vocab = read_hf_vocab(args.vocab)
    elif args.vocab_from_corpus:

        if not args.data_dir:
            raise ConfigError("--vocab-from-corpus: needs --data-dir DIR holding the corpus")
        vocab = original_vocab(args.vocab_from_corpus, args.data_dir)
    if args.source == "tf":
        model = convert_tf_checkpoint(args.state_dict, args.config, args.out_dir, vocab=vocab)
    else:
        model = convert_checkpoint(args.state_dict, args.config, args.out_dir, source=args.source, vocab=vocab)
    extra = f", vocabulary of {len(vocab):,} symbols" if vocab is not None else ""
    print(f"wrote {args.out_dir} ({model.num_parameters():,} parameters, attn_type={model.config.attn_type}{extra})")
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
    p.add_argument("--init-from", metavar="CKPT", help="fine-tune: start from this checkpoint (or run directory: its "
                   "best/ or last checkpoint), keeping its model and vocabulary, with a fresh optimiser and schedule; "
                   "with --resume, a run directory that already has checkpoints resumes them instead")
    p.set_defaults(func=run_train, overrides_allowed=True)


def _builtin_configs():
    return builtin_config_names()


def run_train(args) -> int:
    cfg = load_run_config(args.config, args.overrides, init_from=args.init_from)
    if args.nproc is not None and args.nproc != 1:  # the same command, without --nproc, in N processes under torchrun

        check_nproc(args.nproc, cfg.train, args.resume)
        argv = (["-v"] if args.verbose else []) + ["train"] + (["--config", args.config] if args.config else []) \
            + (["--resume"] if args.resume else []) + (["--init-from", args.init_from] if args.init_from else []) \
            + list(args.overrides)
        return launch(args.nproc, argv)
    try:
        result = train(cfg, resume=args.resume)
    except StopNow as stop:
        print(f"txl train: stopped at once by a second {stop.name}; the last checkpoint written is intact "
              f"(rerun with --resume)", file=sys.stderr)
        return exit_status(stop.signum)
    if result.rank != 0:
        return 0 if result.stopped_by in ("max_steps", "max_time") else exit_status(_signum(result.stopped_by))
    if result.stopped_by not in ("max_steps", "max_time"):
        print(f"interrupted by {result.stopped_by} at step {result.steps}: checkpoint written to {result.checkpoint}; "
              f"continue with --resume", file=sys.stderr)
        return exit_status(_signum(result.stopped_by))
    best = "n/a" if result.best_valid_loss is None else f"{result.best_valid_loss:.4f}"
    print(f"done: {result.steps} steps ({result.stopped_by}), best valid loss {best}; run in {result.run_dir}")
    return 0


def _signum(name: str) -> int:
    return int(getattr(signal, name, signal.SIGINT))


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
    p.add_argument("--dataset", help="the corpus to evaluate on, encoded with the checkpoint's vocabulary: a named "
                                     "corpus (with --data-dir), or 'text' with --test-file/--valid-file/--train-file "
                                     "(default: the run's corpus, from run.yaml)")
    p.add_argument("--data-dir", help="local copy of the corpus (default: the run's)")
    p.add_argument("--test-file", help="with --dataset text: the file evaluated by --split test")
    p.add_argument("--valid-file", help="with --dataset text: the file evaluated by --split valid")
    p.add_argument("--train-file", help="with --dataset text: the file evaluated by --split train")
    p.add_argument("--cache-dir", help="corpus cache (default: $TXL_CACHE_DIR or ~/.cache/transformer-xl)")
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
    p.set_defaults(func=run_eval, **checks(at_least("--tgt-len", 1), at_least("--mem-len", 0),
                                           at_least("--ext-len", 0), at_least("--clamp-len", -1),
                                           at_least("--batch-size", 1), at_least("--max-steps", 1)))


def run_eval(args) -> int:
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
    p.add_argument("--out", help="image path, .png (default), .pdf or .svg (default: RUN_DIR/loss.png)")
    p.set_defaults(func=run_plot)


def run_plot(args) -> int:
    print(f"wrote {plot_run(args.run_dir, args.out)}")
    return 0


_INFERENCE_CHECKS = (at_least("--tgt-len", 1), at_least("--mem-len", 0))


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
    p.add_argument("--decoding", choices=["segment", "sliding"],
                   help="how the memory moves (default: the checkpoint's): segment, every tgt_len tokens as in "
                        "training; sliding, the prompt as one segment and then one token per step, each seeing the "
                        "mem_len states before it (HuggingFace's generate; the default of converted HF models)")
    p.set_defaults(func=lambda args: generation_cli.run_generate(args),
                   **checks(*_INFERENCE_CHECKS, at_least("--max-new-tokens", 1), positive("--temperature"),
                            at_least("--top-k", 0), ("--top-p", 0, 1, True), positive("--repetition-penalty"),
                            ("--seed", -(1 << 63), (1 << 64) - 1, False)))


@command
def add_score(sub) -> None:
    p = sub.add_parser("score", help="per-token log-probs and perplexity of a document, with memory")
    _add_inference_args(p)
    p.add_argument("file", help="UTF-8 text file")
    p.add_argument("--doc-sep", default="blank", choices=["blank", "none"],
                   help="blank: documents are separated by blank lines (memory resets at each); none: one document")
    p.add_argument("--tokens", action="store_true", help="also print every token's log-probability")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=lambda args: generation_cli.run_score(args), **checks(*_INFERENCE_CHECKS))


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
    p.set_defaults(func=lambda args: evaluation_cli.run_context(args),
                   **checks(at_least("--lengths", 1), at_least("--batch-size", 1), at_least("--max-tokens", 1)))


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
    q.set_defaults(func=run_bench_eval_speed,
                   **checks(at_least("--attn-lens", 1), at_least("--vanilla-tokens", 1), at_least("--xl-tokens", 1),
                            at_least("--n-layer", 1), at_least("--d-model", 1), at_least("--n-head", 1),
                            at_least("--d-inner", 1)))


def run_bench_eval_speed(args) -> int:
    check_eval_speed_args(args.attn_lens, args.vanilla_tokens, args.xl_tokens, args.n_layer, args.d_model,
                          args.n_head, args.d_inner, args.plot)
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


DEBUG_ENV = "TXL_DEBUG"


def _one_line(exc: BaseException) -> str:
    """The exception's message on one line (whitespace collapsed), at most 500 characters."""
    text = " ".join(str(exc).split())
    return text if len(text) <= 500 else text[:497] + "..."


def _os_error_line(exc: OSError) -> str:
    """``PATH: reason`` for a failed read or write (``PATH -> PATH2`` for a rename)."""
    reason = exc.strerror or _one_line(exc) or type(exc).__name__
    if exc.filename is None:
        return f"{type(exc).__name__}: {reason}"
    where = str(exc.filename) + (f" -> {exc.filename2}" if exc.filename2 is not None else "")
    return f"{where}: {reason}"


def run_command(args, name: str) -> int:
    """Check the options, then run ``args.func`` behind the guard described in the module docstring;
    return the exit status."""
    debug = os.environ.get(DEBUG_ENV, "") not in ("", "0")
    try:
        _check_options(args)
        return int(args.func(args) or 0)
    except TXLError as exc:
        print(f"txl {name}: error: {_one_line(exc)}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print(f"txl {name}: interrupted", file=sys.stderr)
        return 130
    except OSError as exc:
        if debug:
            raise
        print(f"txl {name}: error: {_os_error_line(exc)}", file=sys.stderr)
        return 2
    except Exception as exc:  # noqa: BLE001 - the guard: a bug gets one line, not a traceback
        if debug:
            raise
        print(f"txl {name}: error: {type(exc).__name__}: {_one_line(exc)} (set {DEBUG_ENV}=1 for the traceback)",
              file=sys.stderr)
        return 1


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
    return run_command(args, args.command + (f" {args.bench}" if getattr(args, "bench", None) else ""))


if __name__ == "__main__":
    sys.exit(main())
