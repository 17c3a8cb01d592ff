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
    args = parser.parse_args(argv)
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
