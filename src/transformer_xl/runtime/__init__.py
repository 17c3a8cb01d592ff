"""Run-time planning: will a forward pass, a training step or decoding fit in the memory this machine has, and
which attention back-end makes it fit (:mod:`.footprint`)."""

from .footprint import check_decoding_fits, check_fits, fit_attention, fit_loaded, forward_footprint, weight_bytes

__all__ = ["check_decoding_fits", "check_fits", "fit_attention", "fit_loaded", "forward_footprint", "weight_bytes"]
