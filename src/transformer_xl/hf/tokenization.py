"""``TransfoXLTokenizer`` for transformers 5: a face over :class:`~transformer_xl.text.TransformerXLTokenizer`.

``AutoTokenizer.from_pretrained(name)`` opens what ``TransformerXLTokenizer.from_pretrained`` opens: HuggingFace's
``vocab.pkl`` (read without unpickling: nothing in the file runs), ``vocab.bin``/``vocab.txt``, or this package's
``vocab.json``/``tokenizer.json``, from a hub id, a folder or a run.

A HuggingFace vocabulary tokenizes as transformers 4.35's ``TransfoXLTokenizer`` did: the whole text with the Moses
rules and the ``@,@`` number splits, newlines being white space, no ``<eos>`` added; unknown words become
``<unk>``. This package's vocabularies (words, characters, bytes, BPE) tokenize as their corpus was, each line
ended by a newline getting ``<eos>`` (:meth:`TransformerXLTokenizer.encode`). Decoding gives readable text: Moses
detokenized, numbers joined (``1 @,@ 000`` -> ``1,000``), ``<eos>`` as a newline.

The class name is transformers 4.35's, so a ``tokenizer_config.json`` naming ``TransfoXLTokenizer`` opens it.
``save_pretrained`` writes ``vocab.json`` (and transformers' ``tokenizer_config.json``), never a pickle.
"""

from __future__ import annotations

from pathlib import Path
from typing import Dict, List, Optional, Tuple

from transformers import PreTrainedTokenizer

from ..checkpoints.hub import VOCAB_NAMES
from ..files import CONFIG_NAME
from ..text.hf_vocab import HFVocab
from ..text.tokenizer import TransformerXLTokenizer

#: from_pretrained arguments of transformers that change nothing here.
IGNORED_LOAD_ARGS = frozenset({"_from_auto", "_from_pipeline", "_commit_hash", "trust_remote_code", "proxies",
                               "force_download", "subfolder", "use_fast", "tokenizer_type", "config",
                               "code_revision", "gguf_file", "padding_side"})


class TransfoXLTokenizer(PreTrainedTokenizer):
    """transformers' tokenizer interface over a :class:`TransformerXLTokenizer` (``self.txl``), module docstring.

    ``TransfoXLTokenizer(txl_tokenizer)`` wraps one; ``from_pretrained(name)`` opens one. ``<eos>`` is the end of
    sequence token and ``<unk>`` the unknown one when the vocabulary has them; there is no padding token (set
    ``tokenizer.pad_token = "<eos>"`` to pad a batch, and see docs/TRANSFORMERS.md on padding).
    """

    model_input_names = ["input_ids", "attention_mask"]
    vocab_files_names = {"vocab_file": "vocab.json"}

    def __init__(self, txl: Optional[TransformerXLTokenizer] = None, vocab_file: Optional[str] = None, **kwargs):
        if txl is None:
            if vocab_file is None:
                raise ValueError("TransfoXLTokenizer: give a TransformerXLTokenizer or a vocab_file, or use "
                                 "TransfoXLTokenizer.from_pretrained(name)")
            txl = TransformerXLTokenizer.from_folder(Path(vocab_file).parent)
        self.txl = txl
        self._sym2idx = getattr(txl.vocab, "sym2idx", None)
        for name, symbol in (("eos_token", "<eos>"), ("unk_token", "<unk>")):
            if self._sym2idx is not None and symbol in self._sym2idx:
                kwargs.setdefault(name, symbol)
        kwargs.setdefault("clean_up_tokenization_spaces", False)
        super().__init__(**kwargs)

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path, *inputs, revision: Optional[str] = None, cache_dir=None,
                        token=None, local_files_only: bool = False, **kwargs) -> "TransfoXLTokenizer":
        """The tokenizer of a hub id, a folder (a model's, or one this class saved) or a run (module docstring)."""
        if inputs:
            raise TypeError(f"TransfoXLTokenizer.from_pretrained: unexpected positional arguments {inputs!r}")
        for name in [k for k in kwargs if k in IGNORED_LOAD_ARGS]:
            kwargs.pop(name)
        path = Path(str(pretrained_model_name_or_path)).expanduser()
        alone = path.is_dir() and not (path / CONFIG_NAME).is_file() and any((path / n).is_file() for n in VOCAB_NAMES)
        if alone:  # a tokenizer saved on its own, without a model's config.json
            txl = TransformerXLTokenizer.from_folder(path)
        else:
            txl = TransformerXLTokenizer.from_pretrained(pretrained_model_name_or_path, revision=revision,
                                                         cache_dir=cache_dir, token=token,
                                                         local_files_only=local_files_only)
        tokenizer = cls(txl, **kwargs)
        tokenizer.name_or_path = str(pretrained_model_name_or_path)
        return tokenizer

    # ------------------------------------------------------------------ the vocabulary
    @property
    def vocab_size(self) -> int:
        return len(self.txl)

    def get_vocab(self) -> Dict[str, int]:
        if self._sym2idx is not None:
            return dict(self._sym2idx)
        return {self._convert_id_to_token(i): i for i in range(len(self.txl))}

    def _convert_token_to_id(self, token: str) -> int:
        if self._sym2idx is not None:
            return self.txl.vocab.get_idx(token)
        return self.txl.token_ids([token], what="token")[0]

    def _convert_id_to_token(self, index: int) -> str:
        return self.txl.convert_ids_to_tokens([index])[0]

    # ------------------------------------------------------------------ text
    def tokenize(self, text: str, **kwargs) -> List[str]:
        """The symbols of ``text`` (module docstring); transformers' pipeline arguments such as
        ``add_space_before_punct_symbol`` change nothing, as in transformers 4.35."""
        vocab = self.txl.vocab
        if isinstance(vocab, HFVocab):
            return vocab.words(text)  # unknown words stay as they are; their id is <unk>'s
        return self.txl.convert_ids_to_tokens(self.txl.encode(text, warn_unknown=False))

    def convert_tokens_to_string(self, tokens: List[str]) -> str:
        return self.txl.decode([self._convert_token_to_id(t) for t in tokens])

    def save_vocabulary(self, save_directory: str, filename_prefix: Optional[str] = None) -> Tuple[str, ...]:
        """Write the vocabulary as this package's ``vocab.json`` (or ``tokenizer.json`` for BPE); no pickle."""
        if filename_prefix:
            raise ValueError("filename_prefix: not supported; the vocabulary is vocab.json in the folder")
        return (str(self.txl.save_pretrained(save_directory)),)


__all__ = ["TransfoXLTokenizer"]
