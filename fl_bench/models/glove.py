"""GloVe word vectors (Pennington et al. 2014) read from their text file, for Sent140's frozen embedding."""

from __future__ import annotations

import os

import numpy as np
import torch

from fl_bench.errors import ConfigError, DataMissingError


GLOVE_URL = "https://nlp.stanford.edu/data/glove.6B.zip"


def load_glove(path: str, vocab_size: int, dim: int) -> tuple[list[str], torch.Tensor]:
    """The first ``vocab_size`` words of a GloVe text file ("word v1 ... v_dim" per line, most
    frequent first) and their vectors [vocab_size, dim]; stops reading after vocab_size lines."""
    path = os.path.expanduser(path)
    if not os.path.isfile(path):
        raise DataMissingError(
            f"GloVe vectors not found at {path}: download glove.6B.zip from {GLOVE_URL} and unzip it so that "
            f"glove.6B.300d.txt is at that path (or set model.glove_path), or train the embedding with model.embedding=random"
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
