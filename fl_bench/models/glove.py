"""GloVe word vectors (Pennington et al. 2014) read from their text file, for Sent140's frozen embedding."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import torch

from fl_bench.data.downloads import fetch, locked, unpack
from fl_bench.errors import ConfigError, DataMissingError

GLOVE_URL = "https://nlp.stanford.edu/data/glove.6B.zip"
GLOVE_FILES = tuple(f"glove.6B.{dim}d.txt" for dim in (50, 100, 200, 300))  # what glove.6B.zip holds


def load_glove(path: str, vocab_size: int, dim: int) -> tuple[list[str], torch.Tensor]:
    """The first ``vocab_size`` words of a GloVe text file ("word v1 ... v_dim" per line, most
    frequent first) and their vectors [vocab_size, dim]; stops reading after vocab_size lines. A
    missing file named as one of glove.6B.zip's is fetched on first use (:func:`fetch_glove`)."""
    path = os.path.expanduser(path)
    if not os.path.isfile(path) and os.path.basename(path) in GLOVE_FILES:
        fetch_glove(Path(path))
    if not os.path.isfile(path):
        raise DataMissingError(
            f"GloVe vectors not found at {path}: set model.glove_path to a GloVe text file, or to a path ending in "
            f"{' or '.join(GLOVE_FILES)} (fetched from {GLOVE_URL} on first use), or train the embedding with "
            "model.embedding=random"
        )
    words: list[str] = []
    vectors = np.empty((vocab_size, dim), dtype=np.float32)
    with open(path, encoding="utf-8") as f:
        for line in f:
            if len(words) == vocab_size:
                break
            parts = line.rstrip().split(" ")
            if len(parts) != dim + 1:
                raise ConfigError(
                    f"{path} line {len(words) + 1} has {len(parts) - 1} values, expected model.embed_dim={dim}"
                )
            vectors[len(words)] = np.asarray(parts[1:], dtype=np.float32)
            words.append(parts[0])
    if len(words) < vocab_size:
        raise DataMissingError(
            f"{path} has only {len(words)} words, expected at least model.vocab_size={vocab_size}: "
            f"download it again from {GLOVE_URL} or lower model.vocab_size"
        )
    return words, torch.from_numpy(vectors)


def fetch_glove(path: Path) -> None:
    """glove.6B.zip (822 MB) downloaded into ``path``'s directory, and the member ``path`` names
    unpacked beside it (the archive is kept: another dimension needs no new download)."""
    with locked(path.parent):
        if not path.is_file():  # (or another run fetched it while this one waited)
            what_next = "run again, or train the embedding with model.embedding=random"
            unpack(fetch(GLOVE_URL, path.parent, what_next), path.parent, members=(path.name,))
