"""Text in and out of a checkpoint's vocabulary: prompts, streaming detokenisation, scoring."""

from __future__ import annotations

import codecs
import logging
from dataclasses import dataclass, field
from typing import Iterable, List, Sequence

import numpy as np
import torch

from ..data.hf_vocab import GLUE_SYMBOLS
from ..errors import DataError

log = logging.getLogger(__name__)

EOS = "<eos>"


def _line_words(vocab, line: str) -> List[str]:
    """A word-level vocabulary's symbols of one line (its own tokenization: whitespace, or HuggingFace's Moses)."""
    words = getattr(vocab, "words", None)
    if words is not None:
        return list(words(line))
    return [s.lower() for s in line.split()] if vocab.lower_case else line.split()


def encode_prompt(vocab, text: str) -> List[int]:
    """Token ids of a prompt. At word level every line ended by a newline gets ``<eos>``, the last
    (unfinished) line does not; each line is tokenized as the vocabulary's corpus was (whitespace split, or
    HuggingFace's Moses rules for a converted ``vocab.pkl``); out-of-vocabulary words become ``<unk>`` with a
    warning."""
    if not text:
        raise DataError("prompt: empty prompt; give some text to continue")
    if getattr(vocab, "level", None) != "word":
        return [int(i) for i in vocab.encode(text)]
    lines = text.split("\n")
    ids, unknown = [], []
    for n, line in enumerate(lines):
        symbols = _line_words(vocab, line)
        if n < len(lines) - 1 and vocab.add_eos:
            symbols.append(EOS)
        unknown += [s for s in symbols if s not in vocab]
        ids += [vocab.get_idx(s) for s in symbols]
    if not ids:
        raise DataError("prompt: the prompt has no tokens (only whitespace)")
    if unknown:
        shown = ", ".join(sorted(set(unknown))[:5])
        log.warning("warning: %d prompt word(s) not in the vocabulary, mapped to <unk>: %s", len(unknown), shown)
    return ids


class StreamDecoder:
    """Turns token ids into text piece by piece, as the corpus writes it: words joined by spaces
    with ``<eos>`` as a newline, characters as they are, bytes decoded as UTF-8 (incrementally, so
    a multi-byte character is printed once complete).

    A vocabulary with a detokenizer (HuggingFace's, :class:`~transformer_xl.data.HFVocab`) is shown as
    readable text: each line is re-detokenized as it grows (Moses rules, ``1 @,@ 000`` -> ``1,000``) and only
    the new text is returned; number/dash glue symbols are held back until the next symbol, and :meth:`flush`
    returns what is still held. ``context`` (the prompt's ids) lets the first words join the prompt's last line
    correctly; without it, a line continued after the prompt starts with a space unless it is punctuation.
    """

    def __init__(self, vocab, after_newline: bool = True, context: Sequence[int] = ()):
        self.vocab = vocab
        self.level = getattr(vocab, "level", "word")
        self.at_line_start = after_newline
        self._utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._bpe_ids: List[int] = []
        self._bpe_text = ""
        self._detok = getattr(vocab, "detokenize", None)
        if self._detok is not None:
            self._start_line(vocab, after_newline, context)

    # ---------------------------------------------------------------- detokenized (HuggingFace) lines
    def _start_line(self, vocab, after_newline: bool, context: Sequence[int]) -> None:
        syms = [vocab.get_sym(int(i)) for i in context]
        while EOS in syms:
            syms = syms[syms.index(EOS) + 1:]
        if not syms and not after_newline:
            syms = ["x"]  # stands for the prompt's unfinished line: new words get a space, punctuation none
        self._line, self._n_shown = syms, len(syms)
        self._shown = self._detok(syms)

    def _line_text(self, final: bool) -> str:
        """New readable text of the current line (all of it when ``final``, else glue symbols held back)."""
        k = len(self._line)
        while not final and k and self._line[k - 1] in GLUE_SYMBOLS:
            k -= 1
        if k <= self._n_shown:
            return ""
        text = self._detok(self._line[:k])
        if text.startswith(self._shown):
            new = text[len(self._shown):]
        else:  # the detokenizer revised text already shown: show the new symbols plainly
            new = " " + " ".join(self._line[self._n_shown:k])
        self._shown, self._n_shown = text, k
        return new

    def _detok_piece(self, token: int) -> str:
        sym = self.vocab.get_sym(token)
        if sym != EOS:
            self._line.append(sym)
            return self._line_text(final=False)
        rest = self._line_text(final=True)
        self._line, self._n_shown, self._shown = [], 0, ""
        return rest + "\n"

    def flush(self) -> str:
        """Text still held back (an unfinished multi-byte character, trailing glue symbols); call at the end."""
        if self._detok is not None:
            return self._line_text(final=True)
        if self.level == "byte":
            return self._utf8.decode(b"", final=True)
        return ""

    def piece(self, token: int) -> str:
        if self._detok is not None:
            return self._detok_piece(token)
        if self.level == "byte":
            if getattr(self.vocab, "kind", "") == "bytes":  # ByteVocab: id = byte value
                return self._utf8.decode(bytes([token]))
            sym = self.vocab.get_sym(token)  # Vocab at byte level: decimal strings, maybe <eos>
            if not sym.isdigit():
                return self._utf8.decode(b"", final=True) + ("\n" if sym == EOS else "")
            return self._utf8.decode(bytes([int(sym)]))
        if self.level == "bpe":
            self._bpe_ids.append(token)
            text = self.vocab.decode(self._bpe_ids)
            new, self._bpe_text = text[len(self._bpe_text):], text
            return new
        sym = self.vocab.get_sym(token)
        if sym == EOS:
            self.at_line_start = True
            return "\n"
        if self.level == "char":
            return sym
        out = sym if self.at_line_start else " " + sym
        self.at_line_start = False
        return out


@dataclass
class DocumentScore:
    tokens: int  # predicted tokens (all but the first of the document)
    nll: float  # summed negative log-likelihood, nats
    token_logprobs: List[float] = field(default_factory=list)

    @property
    def loss(self) -> float:
        return self.nll / max(self.tokens, 1)


@torch.no_grad()
def score_ids(model, ids: np.ndarray, keep_tokens: bool = True) -> DocumentScore:
    """Stream one document through the model segment by segment with memory (fresh at its start)."""
    ids = torch.as_tensor(np.asarray(ids, dtype=np.int64))
    device = next(model.parameters()).device
    if ids.numel() < 2:
        return DocumentScore(tokens=0, nll=0.0)
    inputs, labels = ids[:-1], ids[1:]
    mems, nll, logprobs = None, 0.0, []
    for s in range(0, inputs.numel(), model.tgt_len):
        inp = inputs[s:s + model.tgt_len][None].to(device)
        tgt = labels[s:s + model.tgt_len][None].to(device)
        out = model(inp, tgt, mems=mems)
        mems = out.mems
        nll += float(out.losses.double().sum())
        if keep_tokens:
            logprobs += (-out.losses[0]).tolist()
    return DocumentScore(tokens=int(labels.numel()), nll=nll, token_logprobs=logprobs)


def split_documents(text: str, mode: str) -> List[str]:
    """``none``: the whole file is one document; ``blank``: documents are separated by blank lines."""
    if mode == "none":
        return [text]
    if mode != "blank":
        raise DataError(f"--doc-sep: must be 'blank' or 'none', got {mode!r}")
    docs, current = [], []
    for line in text.split("\n"):
        if line.strip():
            current.append(line)
        elif current:
            docs.append("\n".join(current) + "\n")
            current = []
    if current:
        docs.append("\n".join(current) + "\n")
    return docs


def symbols(vocab, ids: Iterable[int]) -> List[str]:
    get = getattr(vocab, "get_sym", None)
    return [get(int(i)) if get else str(int(i)) for i in ids]


__all__ = ["DocumentScore", "StreamDecoder", "encode_prompt", "score_ids", "split_documents",
           "symbols"]
