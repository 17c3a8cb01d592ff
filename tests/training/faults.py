"""Fault injection for the kill-and-resume tests, from the test side: wrappers around functions of
``transformer_xl.training.checkpoint_files`` that SIGKILL the process the n-th time it passes a named point inside
checkpoint writing, pruning or the best/ swap. Production code carries no test hook.

=====================  ==========================================================================
point                  the moment
=====================  ==========================================================================
checkpoint_files       half of a checkpoint's files written (before optimizer.json)
checkpoint_written     the whole temporary checkpoint written, not yet renamed into place
checkpoint_renamed     the checkpoint renamed into place, older ones not yet pruned
prune_unmarked         an old checkpoint's marker removed, its files not yet
best_copied            best/'s new copy complete beside it, not yet swapped in
best_swapped_out       the old best/ moved aside, the new one not yet in place
=====================  ==========================================================================
"""

import contextlib
import os
import signal
import sys
from types import SimpleNamespace

from transformer_xl.training import checkpoint_files as ckpt

POINTS = ("checkpoint_files", "checkpoint_written", "checkpoint_renamed", "prune_unmarked", "best_copied",
          "best_swapped_out")


def _wrap(passed):
    """Replacements of checkpoint.py's functions that call ``passed(point)`` at each point."""
    write_json, write_dir, prune, unmark, fsync_dir = (ckpt.write_json, ckpt._write_checkpoint_dir,
                                                       ckpt.prune_checkpoints, ckpt._unmark, ckpt._fsync_dir)

    def write_json_(path, value):
        if path.name == "optimizer.json":
            passed("checkpoint_files")
        return write_json(path, value)

    def write_dir_(*args, **kwargs):
        write_dir(*args, **kwargs)
        passed("checkpoint_written")

    def prune_(*args, **kwargs):
        passed("checkpoint_renamed")
        return prune(*args, **kwargs)

    def unmark_(directory):
        unmark(directory)
        if sys._getframe(1).f_code.co_name == "prune_checkpoints":
            passed("prune_unmarked")

    def fsync_dir_(path):
        fsync_dir(path)
        if path.name.startswith(".tmp_best_"):
            passed("best_copied")

    def replace_(src, dst):
        os.replace(src, dst)
        if str(dst).rsplit("/", 1)[-1].startswith(".old_best_"):
            passed("best_swapped_out")

    return {"write_json": write_json_, "_write_checkpoint_dir": write_dir_, "prune_checkpoints": prune_,
            "_unmark": unmark_, "_fsync_dir": fsync_dir_,
            "os": SimpleNamespace(**{**{k: getattr(os, k) for k in dir(os) if not k.startswith("__")},
                                     "replace": replace_})}


@contextlib.contextmanager
def passing(passed):
    """Within the block, ``passed(point)`` is called every time a point is passed."""
    saved = {name: getattr(ckpt, name) for name in ("write_json", "_write_checkpoint_dir", "prune_checkpoints",
                                                    "_unmark", "_fsync_dir", "os")}
    for name, fn in _wrap(passed).items():
        setattr(ckpt, name, fn)
    try:
        yield
    finally:
        for name, fn in saved.items():
            setattr(ckpt, name, fn)


def count_passes():
    """A dict that :func:`passing` fills with the number of passes of each point."""
    counts = {}
    return counts, lambda point: counts.__setitem__(point, counts.get(point, 0) + 1)


def kill_at(point: str, nth: int):
    """A ``passed`` callback that SIGKILLs this process the ``nth`` time it passes ``point``."""
    seen = {"n": 0}

    def passed(name):
        if name == point:
            seen["n"] += 1
            if seen["n"] == nth:
                os.kill(os.getpid(), signal.SIGKILL)

    return passed
