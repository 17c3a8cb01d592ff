"""``txl convert``: original, HuggingFace and TensorFlow checkpoints into a transformer-xl checkpoint directory
(:func:`transformer_xl.jobs.convert_to_folder`).

A HuggingFace folder or hub id needs no conversion to be used (every command opens it directly); converting one
(``txl convert --from hf FOLDER_OR_ID OUT``) writes our files once, with its vocabulary.
"""

from __future__ import annotations

import logging

from ..jobs import ConvertSettings, convert_to_folder
from ..text.vocab_files import ACCEPTED

log = logging.getLogger(__name__)


def add(sub) -> None:
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


def run_convert(args) -> int:
    settings = ConvertSettings(source=args.source, config=args.config, revision=args.revision, vocab=args.vocab,
                               vocab_from_corpus=args.vocab_from_corpus, data_dir=args.data_dir)
    done = convert_to_folder(args.state_dict, args.out_dir, settings)
    model, vocab = done.model, done.vocab
    extra = f", vocabulary of {len(vocab):,} symbols" if vocab is not None else ""
    print(f"wrote {args.out_dir} ({model.num_parameters():,} parameters, attn_type={model.config.attn_type}{extra})")
    if vocab is None:
        log.warning("warning: %s has no vocabulary, so txl generate, score and eval cannot encode text for it; "
                    "convert again with --vocab FILE (%s) or --vocab-from-corpus NAME --data-dir DIR", args.out_dir,
                    ACCEPTED)
    return 0
