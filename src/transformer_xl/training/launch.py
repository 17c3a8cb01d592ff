"""``txl train --nproc N``: the same command in N processes on this machine under torchrun.

The processes join one process group (:func:`transformer_xl.training.distributed.setup`); this module only
starts them, after checking that the launch could start or resume, and passes SIGTERM on to torchrun.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
from typing import List, Sequence

from ..errors import ConfigError
from . import checkpoint_files as ckpt
from .distributed import check_batch_split, torchrun_env


def launch_command(nproc: int, argv: Sequence[str]) -> List[str]:
    """``python -m torch.distributed.run --standalone --nproc-per-node N -m transformer_xl ARGV``."""
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(nproc),
            "--max-restarts", "0", "-m", "transformer_xl", *argv]


def check_nproc(nproc: int, t, resume: bool) -> None:
    """Refuse a launch that could not start or resume, before starting any process."""
    if nproc < 1:
        raise ConfigError(f"--nproc: must be at least 1, got {nproc}")
    check_batch_split(t.batch_size, t.batch_chunk, nproc)
    latest = ckpt.latest_checkpoint(t.run_dir) if resume else None
    if latest is not None:
        ckpt.check_global_batch(latest, t.batch_size)


def launch(nproc: int, argv: Sequence[str]) -> int:
    """Run ``txl ARGV`` in ``nproc`` processes on this machine under torchrun; its exit status."""
    if torchrun_env() is not None:
        raise ConfigError(f"--nproc: this process already runs under torchrun (WORLD_SIZE="
                          f"{os.environ['WORLD_SIZE']}); drop --nproc")
    with subprocess.Popen(launch_command(nproc, argv)) as proc, _forward_sigterm(proc):
        try:
            return proc.wait()
        except KeyboardInterrupt:  # torchrun stops its workers on SIGTERM
            proc.terminate()
            proc.wait()
            raise


@contextlib.contextmanager
def _forward_sigterm(proc: subprocess.Popen):
    """While waiting for torchrun, pass a SIGTERM sent to this process on to it, so it stops its workers."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: proc.send_signal(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
