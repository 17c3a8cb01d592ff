"""Helpers of the training tests: a small structured corpus, the arguments of a tiny run that exercises memory,
chunks, dropout, saving and pruning, and waiting for a forked training child."""

import os
import random
import signal
import time
from pathlib import Path

from transformer_xl.training import checkpoint_files as ckpt

MAX_STEPS = 12


def write_corpus(path: Path, n_lines: int, seed: int, words: range = range(30)) -> Path:
    rng = random.Random(seed)
    vocab = [f"w{i}" for i in words]
    # a little structure (each word tends to follow the previous one) so that validation loss falls
    lines = []
    for _ in range(n_lines):
        i = rng.randrange(len(vocab))
        line = []
        for _ in range(10):
            i = (i + 1) % len(vocab) if rng.random() < 0.7 else rng.randrange(len(vocab))
            line.append(vocab[i])
        lines.append(" ".join(line))
    path.write_text("\n".join(lines) + "\n")
    return path


def run_args(run_dir: Path, data: Path, cache: Path, max_steps: int = MAX_STEPS):
    """Dropout (RNG), 2 chunks with memory, frequent saves, pruning to 2 and validation every 3 steps."""
    return ["--dataset", "text", "--train-file", str(data), "--cache-dir", str(cache), "--run-dir", str(run_dir),
            "--n-layer", "1", "--d-model", "16", "--n-head", "2", "--d-head", "8", "--d-inner", "32",
            "--tgt-len", "8", "--mem-len", "8", "--batch-size", "4", "--batch-chunk", "2", "--dropout", "0.1",
            "--lr", "0.01", "--warmup-steps", "2", "--max-steps", str(max_steps), "--log-interval", "1",
            "--eval-interval", "3", "--save-interval", "2", "--keep-checkpoints", "2", "--eval.batch-size", "4",
            "--eval.max-steps", "2", "--progress", "false", "--tensorboard", "false", "--num-threads", "1"]


def wait_child(pid: int, timeout: float = 120.0) -> int:
    """The child's wait status, as ``-signum`` when a signal ended it."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
        time.sleep(0.01)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    raise AssertionError("the training child did not finish")


def leftovers(run: Path):
    """Temporary or incomplete things in a run directory."""
    found = [p.name for p in run.iterdir() if p.name.startswith(".") and p.name != ".lock"]
    found += [p.name for p in (run / "checkpoints").iterdir() if not (p / ckpt.COMPLETE).is_file()]
    return found
