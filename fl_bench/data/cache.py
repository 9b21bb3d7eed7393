"""The prepared-dataset cache: one ``.npy`` file per array plus ``meta.json``.

Arrays are memory-mapped when loaded, so opening a 660k-client cache costs O(1) and reading a
client touches only that client's rows (the LEAF natural partition keeps the stored order).

``meta.json`` carries a manifest written by ``save_prepared``: every data file's byte size and
blake2b checksum, and each array's shape and dtype. ``load_prepared`` checks a cache against it,
and checks what every cache must satisfy (rows agree within a split, integer labels in
``[0, num_classes)``), so a damaged cache fails with one line instead of training on garbage.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from fl_bench.data.federated import Examples
from fl_bench.errors import DataMissingError

_FIELDS = ("x", "y", "user", "coarse")
_SPLITS = ("train", "test")
_LABELS = ("y", "user", "coarse")  # one integer per example
_NAMES = tuple(f"{split}_{field}.npy" for split in _SPLITS for field in _FIELDS)
_STAMP = "verified.json"  # the files whose checksum matched, by (size, mtime, ctime): see _check_manifest

log = logging.getLogger(__name__)


def _checksum(path: Path) -> str:
    digest = hashlib.blake2b(digest_size=16)
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()


def _manifest_entry(path: Path, array: np.ndarray | None = None) -> dict[str, Any]:
    entry: dict[str, Any] = {"bytes": path.stat().st_size, "blake2b": _checksum(path)}
    if array is not None:
        entry.update(shape=list(array.shape), dtype=array.dtype.str)
    return entry


def _stat(path: Path) -> list[int]:
    stat = path.stat()
    return [stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns]


def _write_stamp(directory: Path, stamps: dict[str, list[int]]) -> None:
    try:  # atomic, so parallel runs opening the cache never read half a stamp
        with tempfile.NamedTemporaryFile("w", dir=directory, prefix=f".{_STAMP}.", delete=False) as tmp:
            json.dump(stamps, tmp)
        os.replace(tmp.name, directory / _STAMP)
    except OSError:
        pass  # a read-only cache: still correct, its files are just hashed again on the next open


def save_prepared(directory: Path, train: Examples, test: Examples, meta: dict[str, Any], vocab: list[str] | None = None) -> None:
    """Written into a private temporary directory, then renamed into place: two runs preparing the
    same cache at once (parallel sweep jobs) never read each other's half-written files."""
    directory.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{directory.name}.", dir=directory.parent))
    manifest = {}
    for split, examples in zip(_SPLITS, (train, test)):
        for field in _FIELDS:
            value = getattr(examples, field)
            if value is not None:
                path = staging / f"{split}_{field}.npy"
                np.save(path, np.ascontiguousarray(value))
                manifest[path.name] = _manifest_entry(path, np.asarray(value))
    if vocab is not None:
        (staging / "vocab.json").write_text(json.dumps(vocab))
        manifest["vocab.json"] = _manifest_entry(staging / "vocab.json")
    # The files were hashed just now; renaming the directory keeps their stat, so the first open is O(1) too.
    _write_stamp(staging, {name: _stat(staging / name) for name in manifest})
    # meta.json last: its presence marks a complete cache
    (staging / "meta.json").write_text(json.dumps({**meta, "manifest": manifest}, indent=2))
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
    """Whether ``directory`` holds a complete cache (its meta.json, written last, exists); its files
    are checked only by :func:`load_prepared`."""
    return (directory / "meta.json").is_file()


def load_prepared(
    directory: Path, num_classes: int | None = None, command: str = "python -m fl_bench.data prepare <dataset>"
) -> tuple[Examples, Examples, dict[str, Any], list[str] | None]:
    """The cache's splits (memory-mapped), its meta (without the manifest) and vocabulary, after
    the checks in the module docstring. A failed check raises DataMissingError naming the file and
    ``command``, the prepare command that rebuilds this cache."""

    def bad(path: Path, problem: str) -> DataMissingError:
        return DataMissingError(f"prepared cache file {path} {problem}: rebuild the cache with `{command}`")

    meta_file = directory / "meta.json"
    meta = _read_json(meta_file, bad)
    if not isinstance(meta, dict) or "source" not in meta:
        raise bad(meta_file, "lacks the key 'source' (not written by prepare)")
    manifest = meta.pop("manifest", None)
    arrays = {}
    for path in (directory / name for name in _NAMES if (directory / name).exists()):
        try:  # allow_pickle stays False: a cache holds plain arrays, never Python objects
            arrays[path.name] = np.load(path, mmap_mode="c")  # "c": copy-on-write, writable for torch
        except (ValueError, OSError, EOFError):
            raise bad(path, "is not a plain .npy array (pickled objects, cut short or overwritten)") from None
    if manifest is None:
        log.warning("prepared cache %s has no manifest (written by an older fl_bench), so its checksums cannot be "
                    "verified: re-prepare it with `%s`", directory, command)
    else:
        _check_manifest(directory, manifest, arrays, bad)
    vocab_file = directory / "vocab.json"
    vocab = _read_json(vocab_file, bad) if vocab_file.exists() else None
    splits = [_check_split(directory, split, arrays, num_classes, bad) for split in _SPLITS]
    return splits[0], splits[1], meta, vocab


def _read_json(path: Path, bad) -> Any:
    try:
        return json.loads(path.read_text())
    except (ValueError, OSError):  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise bad(path, "is not valid JSON") from None


def _check_manifest(directory: Path, manifest: Any, arrays: dict[str, np.ndarray], bad) -> None:
    """Sizes, shapes and dtypes on every open: O(1), from stat and the .npy headers. Checksums read
    whole files (seconds for a multi-GB cache), so a file whose checksum matched is recorded in
    ``verified.json`` under its size, mtime and ctime, and is hashed again only once any of them
    changes: a file overwritten, copied or restored (cp -p keeps mtime, not ctime) is re-checked.
    Like git's index, this misses only a same-size rewrite within the timestamp tick of a check."""
    meta_file = directory / "meta.json"
    well_formed = lambda entry: isinstance(entry, dict) and {"bytes", "blake2b"} <= entry.keys()  # noqa: E731
    if not isinstance(manifest, dict) or not all(map(well_formed, manifest.values())):
        raise bad(meta_file, "has a malformed manifest")
    present = set(arrays) | ({"vocab.json"} if (directory / "vocab.json").exists() else set())
    differ = sorted(present ^ manifest.keys())
    if differ:
        raise bad(directory / differ[0], "is missing" if differ[0] in manifest else "is not in the cache's manifest")
    try:
        verified = json.loads((directory / _STAMP).read_text())
    except (ValueError, OSError):
        verified = None
    if not isinstance(verified, dict):
        verified = {}  # no stamp, or an unreadable one: hash every file again
    stamps = {}
    for name, entry in manifest.items():
        path = directory / name
        stamps[name] = _stat(path)
        if stamps[name][0] != entry["bytes"]:
            raise bad(path, f"has {stamps[name][0]} bytes, the manifest says {entry['bytes']}")
        if name in arrays:
            found, listed = [arrays[name].dtype.str, list(arrays[name].shape)], [entry.get("dtype"), entry.get("shape")]
            if found != listed:
                raise bad(path, f"holds {found[0]} {found[1]}, the manifest says {listed[0]} {listed[1]}")
        if verified.get(name) != stamps[name] and _checksum(path) != entry["blake2b"]:
            raise bad(path, "does not match its checksum in the manifest (its content changed)")
    if stamps != verified:
        _write_stamp(directory, stamps)


def _check_split(directory: Path, split: str, arrays: dict[str, np.ndarray], num_classes: int | None, bad) -> Examples:
    """What every cache must satisfy, manifest or not (Examples would assert, or cast float labels)."""
    fields = {field: arrays.get(f"{split}_{field}.npy") for field in _FIELDS}
    for field in ("x", "y"):
        if fields[field] is None:
            raise bad(directory / f"{split}_{field}.npy", "is missing")
    rows = len(fields["x"])
    for field in _LABELS:
        value, path = fields[field], directory / f"{split}_{field}.npy"
        if value is None:
            continue
        if value.ndim != 1 or len(value) != rows:
            raise bad(path, f"has shape {value.shape}, {split}_x.npy has {rows} rows: want ({rows},)")
        if not np.issubdtype(value.dtype, np.integer):
            raise bad(path, f"holds {value.dtype} values, not integers")
    y = fields["y"]
    # min/max read every label once: a few bytes per example, and partitioning reads them all anyway.
    if num_classes is not None and len(y):
        low, high = int(y.min()), int(y.max())
        if low < 0 or high >= num_classes:
            raise bad(directory / f"{split}_y.npy", f"has labels {low}..{high} outside [0, {num_classes})")
    return Examples(**fields)
