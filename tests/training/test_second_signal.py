"""A second Ctrl-C stops ``txl train`` at once (exit 130); its message tells the truth about what is on disk:
the last complete checkpoint, to resume from, or that none was written yet."""

import os
import signal
import sys
import time

import pytest
import torch
from run_helpers import run_args, wait_child, write_corpus

from transformer_xl.training import checkpoint_files as ckpt


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return write_corpus(tmp_path_factory.mktemp("data") / "train.txt", 300, seed=0)


def train_with_two_sigints(args, at_step: int):
    """Fork the real CLI, which sends itself SIGINT twice during step ``at_step``; its exit status and stderr."""
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        os.close(read_fd)
        code = 3
        try:
            torch.set_num_threads(1)
            os.dup2(write_fd, 2)
            sys.stderr = os.fdopen(2, "w", buffering=1)  # pytest replaced sys.stderr with its capture
            from transformer_xl.cli import main
            from transformer_xl.training import loop

            step = loop.Trainer.train_step

            def step_then_two_sigints(self, *a):
                loss = step(self, *a)
                if self.step == at_step:
                    os.kill(os.getpid(), signal.SIGINT)  # the first: stop after this step, with a checkpoint
                    time.sleep(0.1)  # its handler runs here
                    os.kill(os.getpid(), signal.SIGINT)  # the second: stop at once
                    time.sleep(0.1)
                return loss

            loop.Trainer.train_step = step_then_two_sigints
            code = main(["train", *args])
        finally:
            os._exit(code)
    os.close(write_fd)
    with os.fdopen(read_fd) as fh:
        err = fh.read()
    return wait_child(pid), err


def test_second_sigint_before_any_checkpoint_says_nothing_was_written(tmp_path, data):
    run = tmp_path / "run"
    status, err = train_with_two_sigints(run_args(run, data, tmp_path / "cache"), at_step=1)
    assert status == 130, err
    assert "stopped at once by a second SIGINT" in err and "no checkpoint was written yet" in err, err
    assert "intact" not in err and "--resume" not in err, err
    assert ckpt.list_checkpoints(run) == []


def test_second_sigint_after_a_checkpoint_names_it(tmp_path, data):
    run = tmp_path / "run"
    status, err = train_with_two_sigints(run_args(run, data, tmp_path / "cache"), at_step=3)  # saved at step 2
    assert status == 130, err
    assert ckpt.latest_checkpoint(run).name == "step_00000002"
    assert f"the last checkpoint, {run / 'checkpoints' / 'step_00000002'}, is intact" in err and "--resume" in err, err
