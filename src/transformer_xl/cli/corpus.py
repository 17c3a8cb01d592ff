"""The split that ``txl eval`` and ``txl context`` read for a checkpoint.

By default it is the corpus of the checkpoint's run (``run.yaml`` beside it; ``--data-dir`` and ``--cache-dir``
point at other copies), in the vocabulary saved with the checkpoint when the run was fine-tuned. Or the user
names one (``--dataset NAME --data-dir DIR``, or ``--dataset text --test-file FILE``), encoded with the
checkpoint's own vocabulary: the only way for a checkpoint without a run (converted, HuggingFace's, a hub id).
"""

from __future__ import annotations

from ..data import load_run_corpus, load_vocab
from ..errors import DataError
from ..evaluation.vocab_data import SPLITS, EvalData, EvalSource, split_for_checkpoint
from ..checkpoints.hub import Located
from ..training import load_run_config
from .common import check_vocab, run_config_of
from .options import check_dataset


def add_corpus_args(p, use: str) -> None:
    """``--dataset``, ``--data-dir``, ``--test-file``/``--valid-file``/``--train-file`` and ``--cache-dir``;
    ``use`` says what the command does with the corpus (``"evaluate on"``)."""
    p.add_argument("--dataset", help=f"the corpus to {use}, encoded with the checkpoint's vocabulary: a named "
                                     f"corpus (with --data-dir), or 'text' with --test-file/--valid-file/--train-file "
                                     f"(default: the run's corpus, from run.yaml)")
    p.add_argument("--data-dir", help="local copy of the corpus (default: the run's)")
    for split in ("test", "valid", "train"):
        p.add_argument(f"--{split}-file", help=f"with --dataset text: the file read by --split {split}")
    p.add_argument("--cache-dir", help="corpus cache (default: $TXL_CACHE_DIR or ~/.cache/transformer-xl)")


def check_corpus_args(args) -> None:
    """Before anything is read: ``--dataset`` names a known corpus or ``text`` (one ConfigError line)."""
    if args.dataset:
        check_dataset(args.dataset, f"--{args.split}-file")


def checkpoint_split(located: Located, args, n_token: int) -> EvalData:
    """The split ``args.split`` for the checkpoint ``located`` (module docstring), in a vocabulary of the
    model's ``n_token`` symbols."""
    source = EvalSource(args.dataset, args.data_dir, args.cache_dir,
                        {s: getattr(args, f"{s}_file") for s in SPLITS if getattr(args, f"{s}_file")})
    data = split_for_checkpoint(located.directory, args.split, source) if source.given else _run_split(located, args)
    if data.n_token != n_token:
        raise DataError(f"{located.directory}: model has {n_token} tokens, corpus vocabulary {data.n_token}")
    return data


def _run_split(located: Located, args) -> EvalData:
    """The split of the run's own corpus (run.yaml), checked against the checkpoint's vocabulary."""
    run_config = run_config_of(located, f"; name one with --dataset NAME --data-dir DIR, or --dataset text "
                                        f"--{args.split}-file FILE")
    overrides = []
    for flag in ("data_dir", "cache_dir"):
        if getattr(args, flag):
            overrides += [f"--{flag.replace('_', '-')}", getattr(args, flag)]
    cfg = load_run_config(str(run_config), overrides)
    vocab = load_vocab(located.directory) if cfg.train.init_from else None  # a fine-tuned run's own vocabulary
    corpus = load_run_corpus(cfg.data, vocab, located.directory)
    check_vocab(located, corpus)
    return EvalData(corpus.split(args.split), corpus.level, cfg.data.dataset, len(corpus.vocab),
                    cfg.train.keep_cpu_memory)
