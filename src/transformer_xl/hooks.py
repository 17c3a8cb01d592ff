"""Functions a lower layer calls and a higher layer provides, named by the package itself.

The model layer writes its own files but does not find or read other writers' files: its ``from_pretrained``
calls the opener of the checkpoints layer. The package's ``__init__`` names that opener here as
``"module:attribute"`` without importing it (``import transformer_xl`` imports no torch). Python runs the
package's ``__init__`` before any module inside it, so whichever path brought a class in
(``from transformer_xl.model import TransformerXL``, ``transformer_xl.TransformerXL``, ...), the name is known before
the first call, which imports the function.
"""

from __future__ import annotations

import importlib
from typing import Any, Callable, Dict

_NAMED: Dict[str, str] = {}
_RESOLVED: Dict[str, Callable[..., Any]] = {}


def provide(hook: str, target: str) -> None:
    """Name the function behind ``hook`` as ``"package.module:function"``; it is imported on first use."""
    module, _, attribute = target.partition(":")
    if not module or not attribute:
        raise ValueError(f"hook {hook!r}: {target!r} is not 'module:function'")
    _NAMED[hook] = target
    _RESOLVED.pop(hook, None)


def resolve(hook: str) -> Callable[..., Any]:
    """The function behind ``hook``, imported the first time it is asked for."""
    if hook not in _RESOLVED:
        if hook not in _NAMED:  # the package's __init__ names every hook before any module can ask
            raise LookupError(f"no function is provided for the hook {hook!r}")
        module, _, attribute = _NAMED[hook].partition(":")
        _RESOLVED[hook] = getattr(importlib.import_module(module), attribute)
    return _RESOLVED[hook]
