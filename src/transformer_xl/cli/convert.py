"""``txl convert``: original, HuggingFace and TensorFlow checkpoints into a transformer-xl checkpoint directory.

A HuggingFace folder or hub id needs no conversion to be used (every command opens it directly); converting one
(``txl convert --from hf FOLDER_OR_ID OUT``) writes our files once, with its vocabulary.
"""

from __future__ import annotations

import logging
from pathlib import Path

from ..convert import convert_checkpoint, convert_tf_checkpoint
from ..convert.original import check_out_dir
from ..data import original_vocab
from ..data.vocab_files import ACCEPTED, read_vocab_file
from ..errors import ConfigError, DataError
from ..checkpoints.hub import VOCAB_NAMES
from ..pretrained import open_checkpoint
from .options import command

log = logging.getLogger(__name__)


@command
def add_convert(sub) -> None:
    p = sub.add_parser("convert", help="convert an original, HuggingFace or TensorFlow Transformer-XL checkpoint",
                       description="Convert a state dict (.bin or .safetensors) saved by the original Transformer-XL "
                                   "code (MemTransformerLM) or by HuggingFace TransfoXLLMHeadModel, or a checkpoint of "
                                   "the authors' TensorFlow code (read without TensorFlow), into a transformer-xl "
                                   "checkpoint directory (config.json + model.safetensors, and vocab.json). With "
                                   "--from hf and no --config, SOURCE may be a whole HuggingFace folder or a hub id.")
    p.add_argument("state_dict", metavar="SOURCE",
                   help="the state dict file (.bin, .pt or .safetensors); for --from tf the checkpoint prefix (e.g. "
                        "model.ckpt-0, beside model.ckpt-0.index); for --from hf without --config, a HuggingFace "
                        "folder or hub id")
    p.add_argument("out_dir", help="directory to write")
    p.add_argument("--from", dest="source", choices=["original", "hf", "tf"], required=True,
                   help="who wrote the checkpoint")
    p.add_argument("--config", metavar="ARGS.json",
                   help="constructor arguments under their original names (a HuggingFace config.json for --from hf; "
                        "for --from tf the authors' run flags as JSON, or a built-in config name: "
                        "docs/TF_CHECKPOINTS.md); required except for a HuggingFace folder or hub id")
    p.add_argument("--revision", help="--from hf with a hub id: a branch, tag or commit")
    p.add_argument("--vocab", metavar="FILE",
                   help=f"the vocabulary to write beside the weights (as vocab.json): {ACCEPTED}. Pickles are read "
                        f"without running them. Default with --from hf: the vocab.pkl/vocab.bin/vocab.txt beside the "
                        f"weights")
    p.add_argument("--vocab-from-corpus", metavar="NAME", choices=["wt103", "wt2", "ptb", "enwik8", "text8", "lm1b"],
                   help="rebuild the authors' vocabulary of this corpus (needs --data-dir)")
    p.add_argument("--data-dir", metavar="DIR", help="the corpus directory for --vocab-from-corpus")
    p.set_defaults(func=run_convert)


def _vocabulary(args):
    """The vocabulary to write: --vocab, --vocab-from-corpus, or (HuggingFace) the file beside the weights."""
    if args.vocab and args.vocab_from_corpus:
        raise ConfigError("--vocab and --vocab-from-corpus: give one of them")
    if args.vocab:
        return _read_vocab_option(args.vocab, args.source == "hf")
    if args.vocab_from_corpus:
        if not args.data_dir:
            raise ConfigError("--vocab-from-corpus: needs --data-dir DIR holding the corpus")
        return original_vocab(args.vocab_from_corpus, args.data_dir)
    if args.source == "hf":
        beside = Path(args.state_dict).parent
        found = next((beside / n for n in VOCAB_NAMES if (beside / n).is_file()), None)
        if found is not None:
            log.info("vocabulary: %s (beside the weights)", found)
            return read_vocab_file(found, huggingface=True)
    return None


def _read_vocab_option(path, huggingface: bool):
    try:
        return read_vocab_file(path, huggingface=huggingface)
    except DataError as exc:
        raise DataError(f"--vocab: {exc}") from None


def run_convert(args) -> int:
    if args.revision and (args.source != "hf" or args.config):
        raise ConfigError("--revision: only for --from hf with a hub id (and no --config)")
    if args.config is None and args.source != "hf":
        raise ConfigError(f"--config: required with --from {args.source} (the constructor arguments or run flags)")
    if args.config is None:
        return _convert_hf_folder(args)
    vocab = _vocabulary(args)
    if args.source == "tf":
        model = convert_tf_checkpoint(args.state_dict, args.config, args.out_dir, vocab=vocab)
    else:
        model = convert_checkpoint(args.state_dict, args.config, args.out_dir, source=args.source, vocab=vocab)
    _report(args.out_dir, model, vocab)
    return 0


def _convert_hf_folder(args) -> int:
    """A whole HuggingFace folder or hub id: opened as every command opens it, then written in our format."""
    vocab = _read_vocab_option(args.vocab, True) if args.vocab else None
    check_out_dir(args.out_dir)
    ckpt = open_checkpoint(args.state_dict, args.revision, require_tokenizer=False)
    if vocab is not None and len(vocab) != ckpt.model.config.n_token:
        raise ConfigError(f"--vocab: has {len(vocab):,} symbols but the model {ckpt.model.config.n_token:,}")
    vocab = vocab if vocab is not None else (ckpt.tokenizer.vocab if ckpt.tokenizer is not None else None)
    ckpt.model.save_pretrained(args.out_dir)
    if vocab is not None:
        vocab.save(args.out_dir)
    _report(args.out_dir, ckpt.model, vocab)
    return 0


def _report(out_dir, model, vocab) -> None:
    extra = f", vocabulary of {len(vocab):,} symbols" if vocab is not None else ""
    print(f"wrote {out_dir} ({model.num_parameters():,} parameters, attn_type={model.config.attn_type}{extra})")
    if vocab is None:
        log.warning("warning: %s has no vocabulary, so txl generate, score and eval cannot encode text for it; "
                    "convert again with --vocab FILE (%s) or --vocab-from-corpus NAME --data-dir DIR", out_dir,
                    ACCEPTED)
