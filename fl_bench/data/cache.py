"""The prepared-dataset cache: one ``.npy`` file per array plus ``meta.json``.

Arrays are memory-mapped when loaded, so opening a 660k-client cache costs O(1) and reading a
client touches only that client's rows (the LEAF natural partition keeps the stored order).
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from fl_bench.data.federated import Examples

_FIELDS = ("x", "y", "user", "coarse")
_SPLITS = ("train", "test")


def save_prepared(directory: Path, train: Examples, test: Examples, meta: dict[str, Any], vocab: list[str] | None = None) -> None:
    """Written into a private temporary directory, then renamed into place: two runs preparing the
    same cache at once (parallel sweep jobs) never read each other's half-written files."""
    directory.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{directory.name}.", dir=directory.parent))
    for split, examples in zip(_SPLITS, (train, test)):
        for field in _FIELDS:
            value = getattr(examples, field)
            if value is not None:
                np.save(staging / f"{split}_{field}.npy", np.ascontiguousarray(value))
    if vocab is not None:
        (staging / "vocab.json").write_text(json.dumps(vocab))
    (staging / "meta.json").write_text(json.dumps(meta, indent=2))  # its presence marks a complete cache
    old = None
    if directory.exists():  # an older cache (re-prepare) or one another run just finished: swap it out
        old = Path(tempfile.mkdtemp(prefix=f".{directory.name}.old.", dir=directory.parent))
        try:
            directory.rename(old / "cache")
        except OSError:
            pass  # another run swapped it out first
    try:
        staging.rename(directory)
    except OSError:  # another run renamed its identical copy in first
        shutil.rmtree(staging, ignore_errors=True)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def is_prepared(directory: Path) -> bool:
    return (directory / "meta.json").is_file()


def load_prepared(directory: Path) -> tuple[Examples, Examples, dict[str, Any], list[str] | None]:
    def load(split: str) -> Examples:
        # mmap_mode="c": copy-on-write pages, so torch.from_numpy gets a writable array without a copy.
        arrays = {
            field: np.load(path, mmap_mode="c") if (path := directory / f"{split}_{field}.npy").exists() else None
            for field in _FIELDS
        }
        return Examples(**arrays)

    vocab_file = directory / "vocab.json"
    vocab = json.loads(vocab_file.read_text()) if vocab_file.exists() else None
    return load("train"), load("test"), json.loads((directory / "meta.json").read_text()), vocab
