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
import logging
import os
import sys
from typing import List, Optional


from ..version import __version__
from ..errors import TXLError, one_line
from . import convert, train, evaluate, plot, generate, score, context, bench, export, lm_eval, rl  # noqa: F401,I001 (each registers its command, in this order)
from .options import COMMANDS, check_options


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="txl", description="Transformer-XL language models: train, evaluate, "
                                                             "generate and convert.")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    parser.add_argument("--version", action="version", version=version_line())
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for add in COMMANDS.values():
        add(sub)
    return parser


DEBUG_ENV = "TXL_DEBUG"


def version_line() -> str:
    """``txl 0.1.0 (torch 2.13.0+cpu, Python 3.11.7)``."""
    import platform

    import torch

    return f"txl {__version__} (torch {torch.__version__}, Python {platform.python_version()})"


def _os_error_line(exc: OSError) -> str:
    """``PATH: reason`` for a failed read or write (``PATH -> PATH2`` for a rename)."""
    reason = exc.strerror or one_line(exc)
    if exc.filename is None:
        return f"{type(exc).__name__}: {reason}"
    where = str(exc.filename) + (f" -> {exc.filename2}" if exc.filename2 is not None else "")
    return f"{where}: {reason}"


def run_command(args, name: str) -> int:
    """Check the options, then run ``args.func`` behind the guard described in the module docstring;
    return the exit status."""
    debug = os.environ.get(DEBUG_ENV, "") not in ("", "0")
    try:
        check_options(args)
        return int(args.func(args) or 0)
    except TXLError as exc:
        print(f"txl {name}: error: {one_line(exc)}", file=sys.stderr)
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
        print(f"txl {name}: error: {type(exc).__name__}: {one_line(exc)} (set {DEBUG_ENV}=1 for the traceback)",
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
