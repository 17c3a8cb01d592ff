"""What ``txl`` answers before torch loads: a folder named on the command line that is not there.

``txl generate runs/defualt --prompt hi`` is a typo whose answer needs only the file system, but building the
parser imports every command and torch (2.5 s or more). :func:`answer` reads the command line with the
arguments each sub-command takes (``arguments.json`` beside this module, written from the parser and checked
against it by the tests) and, when the model, run or agent folder the command is given does not exist and is not a
hub id, returns the line the command itself would print (:mod:`transformer_xl.paths` holds the words). Anything
else (a folder that exists, a hub id, a flag it does not know, ``-h``) returns None and the command runs as usual.
Standard library and tier-0 modules only.
"""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path
from typing import Dict, List, Optional

from ..paths import is_local_path, no_such_agent_folder, no_such_folder

SPEC_NAME = "arguments.json"
#: Sub-commands whose first positional argument is a model (a folder, a run or a hub id): its one line is
#: ``no such folder ...``; ``convert`` only ``--from hf`` (the other sources check their config first).
MODEL_FIRST = ("generate", "eval", "score", "export", "convert")
AGENT_FIRST = ("rl-eval",)


def load_spec() -> Dict[str, dict]:
    """``{command: {"options": {"--flag": nargs}, "positionals": [nargs, ...]}}`` (``nargs``: 0 for a switch,
    1 for one value, ``"*"``, ``"+"``, ``"?"`` or a count)."""
    return json.loads(resources.files("transformer_xl.cli").joinpath(SPEC_NAME).read_text(encoding="utf-8"))


def positionals(words: List[str], options: Dict[str, object]) -> Optional[List[str]]:
    """The positional words of one sub-command's arguments, as argparse would read them; None when a word is
    something this reading leaves to argparse (an option it does not know, ``--``, ``-h``)."""
    found, i = [], 0
    while i < len(words):
        word = words[i]
        if word == "--" or word in ("-h", "--help"):
            return None
        if word.startswith("-") and len(word) > 1 and not _is_number(word):
            name, eq, _ = word.partition("=")
            if name not in options:
                return None
            nargs = options[name]
            i += 1
            if eq or nargs in (0, "?"):
                if nargs == "?" and not eq and i < len(words) and not words[i].startswith("-"):
                    i += 1
                continue
            count = len(words) if nargs in ("*", "+") else int(nargs)
            while count and i < len(words) and (not words[i].startswith("-") or _is_number(words[i])):
                i, count = i + 1, count - 1
            continue
        found.append(word)
        i += 1
    return found


def _is_number(word: str) -> bool:
    try:
        float(word)
        return True
    except ValueError:
        return False


def answer(argv: List[str]) -> Optional[str]:
    """``txl CMD: error: ...`` for a folder that is not there, or None (module docstring)."""
    if not argv or argv[0].startswith("-"):
        return None
    command, rest = argv[0], argv[1:]
    if command not in MODEL_FIRST + AGENT_FIRST:
        return None
    try:
        spec = load_spec()[command]
    except (OSError, ValueError, KeyError):
        return None
    words = positionals(rest, spec["options"])
    if not words:
        return None
    name = words[0]
    if Path(name).expanduser().exists():
        return None
    if command in AGENT_FIRST:
        return f"txl {command}: error: {no_such_agent_folder(Path(name))}"
    if command == "convert" and _value(rest, "--from") != "hf":
        return None
    if not is_local_path(name):
        return None  # a hub id: the command looks it up
    return f"txl {command}: error: {no_such_folder(name)}"


def _value(words: List[str], option: str) -> Optional[str]:
    for i, word in enumerate(words):
        if word == option and i + 1 < len(words):
            return words[i + 1]
        if word.startswith(option + "="):
            return word.partition("=")[2]
    return None
