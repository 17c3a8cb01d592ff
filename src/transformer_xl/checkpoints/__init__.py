"""Finding and reading models: :func:`~.hub.locate` (a folder, a run directory, a HuggingFace folder or a hub id),
:mod:`.loading` (our safetensors bit-exactly, other writers' state dicts without unpickling) and :mod:`.layouts`
(the config and state-dict layouts of the original code and of HuggingFace). Importing this package registers
:func:`~.loading.open_model` as the model's ``from_pretrained``."""

from .hub import Located, locate
from .loading import load_located, load_state_dict_file, model_config, open_model

__all__ = ["Located", "load_located", "load_state_dict_file", "locate", "model_config", "open_model"]
