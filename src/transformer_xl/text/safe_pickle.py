"""Reading a pickled vocabulary without running it.

Unpickling executes whatever callables the file names (``os.system``, ``builtins.exec`` ... : CVE-2023-7018 for
HuggingFace's ``TransfoXLTokenizer``). :func:`load_plain_pickle` never imports a module and never calls a real
function of the file's choosing:

* plain containers (``OrderedDict``, ``Counter``, ``set`` ...) are built as usual;
* the objects a HuggingFace tokenizer dict carries (sacremoses' Moses objects, ``re._compile`` patterns,
  ``AddedToken``, ``Trie``, objects of ``tokenizers`` / ``regex``) become inert :class:`InertObject` placeholders
  that only record their name and arguments;
* any other global, and every persistent reference (tensor storages), is refused with a one-line
  :class:`~transformer_xl.errors.DataError` naming it.

Three containers are understood: a plain pickle (``pickle.dump``), a ``torch.save`` zip archive (its
``*/data.pkl``) and the legacy ``torch.save`` format (magic number, protocol, system info, then the object).
"""

from __future__ import annotations

import io
import pickle
import zipfile
from collections import Counter, OrderedDict
from pathlib import Path
from typing import Any, Dict, Tuple

from .._io import PathLike, check_file
from ..errors import DataError, TXLError, one_line

#: The first pickle of a legacy ``torch.save`` file is this integer.
TORCH_LEGACY_MAGIC = 0x1950A86A20F9469CFC6C
ZIP_MAGIC = b"PK\x03\x04"

#: Python 2 spellings of the modules we accept (a custom ``find_class`` sees them unmapped).
_PY2_MODULES = {"__builtin__": "builtins", "copy_reg": "copyreg"}

#: Module prefixes whose globals become placeholders (never imported, never called).
INERT_MODULES = ("sacremoses", "transformers", "tokenizers", "pytorch_transformers", "pytorch_pretrained_bert",
                 "regex", "re", "sre_compile", "_regex")


class InertObject:
    """Stands for an object of a class or function the pickle named; records arguments and state only."""

    global_name = "?"

    def __new__(cls, *args, **kwargs):
        obj = object.__new__(cls)
        obj.args, obj.kwargs, obj.state, obj.items = args, kwargs, None, []
        return obj

    def __init__(self, *args, **kwargs):
        pass

    def __setstate__(self, state) -> None:
        self.state = state

    def __setitem__(self, key, value) -> None:
        self.items.append((key, value))

    def append(self, value) -> None:
        self.items.append(value)

    def extend(self, values) -> None:
        self.items.extend(values)

    def __repr__(self) -> str:
        return f"<inert {self.global_name}>"


_INERT_CLASSES: Dict[str, type] = {}


def _inert_class(qualname: str) -> type:
    """One placeholder class per global name (a plain ``type`` call: nothing is imported)."""
    if qualname not in _INERT_CLASSES:
        _INERT_CLASSES[qualname] = type("Inert", (InertObject,), {"global_name": qualname})
    return _INERT_CLASSES[qualname]


def _latin1_bytes(text: str, encoding: str = "utf-8") -> bytes:
    """``_codecs.encode`` as protocol-2 pickles use it for ``bytes``: only str -> latin-1 / utf-8 bytes."""
    if not isinstance(text, str) or encoding.lower().replace("_", "-") not in ("latin1", "latin-1", "utf-8", "utf8"):
        raise DataError(f"refusing _codecs.encode({type(text).__name__}, {encoding!r}) in a vocabulary pickle")
    return text.encode(encoding)


def _reconstructor(cls, base, state):
    """``copyreg._reconstructor`` (protocol 0/1 objects), allowed for placeholder classes only."""
    if not (isinstance(cls, type) and issubclass(cls, InertObject)):
        raise DataError(f"refusing copyreg._reconstructor for {getattr(cls, '__name__', cls)!r} in a vocabulary pickle")
    return cls.__new__(cls, state)


SAFE_GLOBALS: Dict[Tuple[str, str], Any] = {
    ("collections", "OrderedDict"): OrderedDict, ("collections", "Counter"): Counter,
    ("builtins", "set"): set, ("builtins", "frozenset"): frozenset, ("builtins", "dict"): dict,
    ("builtins", "list"): list, ("builtins", "tuple"): tuple, ("builtins", "bytearray"): bytearray,
    ("builtins", "object"): object, ("_codecs", "encode"): _latin1_bytes,
    ("copyreg", "_reconstructor"): _reconstructor,
}


def _is_inert_module(module: str) -> bool:
    return any(module == m or module.startswith(m + ".") for m in INERT_MODULES)


class _PlainUnpickler(pickle.Unpickler):
    """An unpickler whose globals are limited to :data:`SAFE_GLOBALS` and inert placeholders."""

    def __init__(self, stream, origin: str):
        super().__init__(stream, encoding="utf-8")
        self.origin = origin

    def find_class(self, module: str, name: str) -> Any:
        module = _PY2_MODULES.get(module, module)
        if (module, name) in SAFE_GLOBALS:
            return SAFE_GLOBALS[(module, name)]
        if _is_inert_module(module):
            return _inert_class(f"{module}.{name}")
        raise DataError(f"{self.origin}: refusing to load: the pickle calls {module}.{name}, which a vocabulary "
                        f"never needs (unpickling it could run arbitrary code)")

    def persistent_load(self, pid: Any) -> Any:
        raise DataError(f"{self.origin}: refusing to load: the pickle holds persistent references (tensor "
                        f"storages), which a vocabulary never has")


def _unpickle(stream, origin: str) -> Any:
    """One object from ``stream``; every failure of a damaged pickle becomes one DataError line."""
    try:
        return _PlainUnpickler(stream, origin).load()
    except TXLError:
        raise
    except EOFError:
        raise DataError(f"{origin}: truncated pickle (the file ends before the object does)") from None
    except (pickle.UnpicklingError, ValueError, TypeError, AttributeError, IndexError, KeyError, UnicodeError,
            OverflowError, MemoryError, RecursionError) as exc:
        reason = f"{type(exc).__name__}: {one_line(exc, first=True)}"
        raise DataError(f"{origin}: not a readable pickle ({reason})") from None


def _from_zip(path: Path) -> Any:
    """The object of a ``torch.save`` zip archive (its single ``data.pkl``)."""
    try:
        with zipfile.ZipFile(path) as archive:
            names = [n for n in archive.namelist() if n == "data.pkl" or n.endswith("/data.pkl")]
            if len(names) != 1:
                raise DataError(f"{path}: a zip archive without exactly one data.pkl; not a torch.save file")
            data = archive.read(names[0])
    except (zipfile.BadZipFile, OSError, EOFError) as exc:
        raise DataError(f"{path}: damaged zip archive ({exc})") from None
    return _unpickle(io.BytesIO(data), f"{path}:{names[0]}")


def load_plain_pickle(path: PathLike) -> Any:
    """The object stored in a pickle, a ``torch.save`` zip or a legacy ``torch.save`` file, built from plain
    data and inert placeholders only (see the module docstring). Raises DataError with one line."""
    p = check_file(path, "pickle file")
    data = p.read_bytes()
    if data.startswith(ZIP_MAGIC):
        return _from_zip(p)
    stream = io.BytesIO(data)
    obj = _unpickle(stream, str(p))
    if type(obj) is int and obj == TORCH_LEGACY_MAGIC:
        for _ in ("protocol version", "system info"):
            _unpickle(stream, str(p))
        obj = _unpickle(stream, str(p))
    return obj


def looks_like_pickle(path: PathLike) -> bool:
    """True when a file starts like a pickle (protocol 2+) or a ``torch.save`` zip archive."""
    try:
        with open(path, "rb") as f:
            head = f.read(4)
    except OSError:
        return False
    return head.startswith(ZIP_MAGIC) or (len(head) >= 2 and head[0] == 0x80 and 2 <= head[1] <= 5)


__all__ = ["INERT_MODULES", "InertObject", "SAFE_GLOBALS", "load_plain_pickle", "looks_like_pickle"]
