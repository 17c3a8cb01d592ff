"""Looking at results: figures (:mod:`.figures`: image paths checked first, atomic writes; the curves of loss
against context length), a run's loss curves (:mod:`.loss_curves`, ``txl plot``) and per-token losses by the
distance to a token's previous occurrence (:mod:`.repeats`). Numbers in, images and statistics out: nothing here
imports the model."""

from .figures import check_image_path, plot_context
from .loss_curves import plot_run, read_loss_records

__all__ = ["check_image_path", "plot_context", "plot_run", "read_loss_records"]
