"""LEAF (Caldas et al. 2018): its JSON schema, its sampling/filtering/splitting scripts, its raw
conversions for Sent140 and CelebA, and conversion of LEAF records to compact example arrays.

The functions reproduce LEAF's scripts (github.com/TalwalkarLab/leaf, ``data/utils/sample.py``,
``remove_users.py``, ``split_data.py``, ``data/sent140/preprocess/*.py``,
``data/celeba/preprocess/metadata_to_json.py``, ``models/utils/language_utils.py``) including
their random-number use, so a LEAF seed gives LEAF's users and splits. Deliberate differences are
listed where they occur (search for "LEAF differs").

JSON schema: ``{"users": [...], "hierarchies": [...] (optional), "num_samples": [...],
"user_data": {user: {"x": [...], "y": [...]}}}``.
"""

from __future__ import annotations

import contextlib
import csv
import gc
import json
import os
import random
import re
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from itertools import repeat
from pathlib import Path

import numpy as np

from fl_bench.data.federated import Examples
from fl_bench.errors import DataMissingError

__all__ = [
    "LeafData",
    "read_leaf_json",
    "write_leaf_json",
    "sample_niid",
    "remove_small_users",
    "split_by_sample",
    "sent140_from_csv",
    "celeba_from_raw",
    "sent140_examples",
    "celeba_examples",
    "femnist_examples",
    "shakespeare_examples",
    "tokenize",
    "SHAKESPEARE_ALPHABET",
    "SHAKESPEARE_SEQ_LEN",
    "SHAKESPEARE_UNKNOWN",
    "SENT140_PAD",
    "SENT140_UNK",
]

_PREPARE_HINT = "prepare the dataset with `python -m fl_bench.data prepare <dataset>`"

# models/utils/language_utils.py ALL_LETTERS: 80 characters, '\n' at 0 and '}' at 79.
SHAKESPEARE_ALPHABET = "\n !\"&'(),-.0123456789:;>?ABCDEFGHIJKLMNOPQRSTUVWXYZ[]abcdefghijklmnopqrstuvwxyz}"
SHAKESPEARE_SEQ_LEN = 80
# LEAF maps a character outside the alphabet with ALL_LETTERS.find(c) == -1; its label one-hot
# then sets vec[-1], i.e. class 79 ('}'). We use 79 for such characters in x and y alike.
SHAKESPEARE_UNKNOWN = len(SHAKESPEARE_ALPHABET) - 1

SENT140_PAD, SENT140_UNK = 0, 1
_SENT140_SPECIALS = ["<pad>", "<unk>"]
# language_utils.split_line: words (letters, digits, underscore, apostrophe; Unicode-aware) and
# the punctuation marks . , ! ? ; as tokens of their own. Case is kept (LEAF does not lower-case).
_TOKEN_PATTERN = r"[\w']+|[.,!?;]"
_TOKEN_RE = re.compile(_TOKEN_PATTERN)
_SEP = "\x00"  # tweet separator for batch tokenisation: never part of a token
_BATCH_TOKEN_RE = re.compile(_TOKEN_PATTERN + "|\x00")
_CHUNK = 100_000  # examples per vectorised chunk (bounds temporary memory)


@contextlib.contextmanager
def _gc_paused():
    """Pause the cyclic garbage collector while building millions of small lists/dicts.

    Building LEAF records allocates many container objects, which makes CPython's collector rescan
    the whole (large, acyclic) heap again and again (a 1.6M-tweet split: 14 s instead of 5 s).
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


# ----------------------------------------------------------------------------- the JSON schema
@dataclass
class LeafData:
    """One LEAF JSON file's content (or several merged).

    ``hierarchies`` is LEAF's optional per-user group (Shakespeare: the play). ``parts`` records how
    many consecutive users came from each source file when several were merged (LEAF writes FEMNIST
    as files of 100 writers): :func:`sample_niid` samples each part separately, as LEAF's sample.py
    does per file.
    """

    users: list[str]
    num_samples: list[int]
    user_data: dict[str, dict]
    hierarchies: list | None = None
    parts: list[int] | None = None

    def __post_init__(self) -> None:
        if len(self.num_samples) != len(self.users):
            raise ValueError(f"LeafData: {len(self.users)} users but {len(self.num_samples)} num_samples")
        if self.hierarchies is not None and len(self.hierarchies) != len(self.users):
            raise ValueError(f"LeafData: {len(self.users)} users but {len(self.hierarchies)} hierarchies")
        if self.parts is not None and sum(self.parts) != len(self.users):
            raise ValueError(f"LeafData: parts {self.parts} do not add up to {len(self.users)} users")

    def __len__(self) -> int:
        return len(self.users)

    def num_examples(self) -> int:
        """The examples of all users together."""
        return sum(len(self.user_data[u]["y"]) for u in self.users)


def _read_one_json(path: Path) -> LeafData:
    try:
        with open(path, "r", encoding="utf-8") as f:
            raw = json.load(f)
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}: not valid JSON ({e.msg} at line {e.lineno} column {e.colno})") from None
    except UnicodeDecodeError as e:
        raise ValueError(f"{path}: not valid JSON (not UTF-8: {e.reason} at byte {e.start})") from None
    if not isinstance(raw, dict):
        raise ValueError(f"{path}: a LEAF JSON file holds an object, found {type(raw).__name__}")
    for key in ("users", "num_samples", "user_data"):
        if key not in raw:
            raise ValueError(f"{path}: missing key {key!r} (a LEAF JSON file has 'users', 'num_samples', 'user_data')")
    users, num_samples, user_data = raw["users"], raw["num_samples"], raw["user_data"]
    hierarchies = raw.get("hierarchies")
    if not isinstance(users, list) or not isinstance(num_samples, list) or not isinstance(user_data, dict):
        raise ValueError(f"{path}: 'users' and 'num_samples' must be lists and 'user_data' an object")
    if len(num_samples) != len(users):
        raise ValueError(f"{path}: {len(users)} 'users' but {len(num_samples)} 'num_samples'")
    if hierarchies is not None and len(hierarchies) != len(users):
        raise ValueError(f"{path}: {len(users)} 'users' but {len(hierarchies)} 'hierarchies'")
    for u in users:
        d = user_data.get(u)
        if not isinstance(d, dict):
            raise ValueError(f"{path}: user {u!r} has no entry in 'user_data'")
        for key in ("x", "y"):
            if key not in d:
                raise ValueError(f"{path}: user_data[{u!r}] is missing key {key!r}")
        if len(d["x"]) != len(d["y"]):
            raise ValueError(f"{path}: user_data[{u!r}] has {len(d['x'])} x but {len(d['y'])} y")
    return LeafData(list(users), [int(n) for n in num_samples], user_data, hierarchies)


def _json_files(path: Path) -> list[Path]:
    path = Path(path)
    if path.is_dir():
        files = sorted((p for p in path.iterdir() if p.suffix == ".json" and p.is_file()), key=lambda p: p.name)
        if not files:
            raise DataMissingError(f"no LEAF .json files in {path}: {_PREPARE_HINT}")
        return files
    if path.is_file():
        return [path]
    raise DataMissingError(f"LEAF data {path} is missing: {_PREPARE_HINT}")


@_gc_paused()
def read_leaf_json(path: Path) -> LeafData:
    """A LEAF JSON file, or every ``*.json`` in a directory merged in file-name order.

    LEAF differs: its readers list a directory with ``os.listdir`` (arbitrary order) and let a user
    repeated in a later file overwrite the earlier one; we sort by name and reject repeats.
    """
    files = _json_files(path)
    parts = [_read_one_json(f) for f in files]
    if len(parts) == 1:
        return parts[0]
    users: list[str] = []
    num_samples: list[int] = []
    user_data: dict[str, dict] = {}
    for f, p in zip(files, parts):
        for u in p.users:
            if u in user_data:
                raise ValueError(f"{f}: user {u!r} also appears in an earlier file of {Path(path)}")
            user_data[u] = p.user_data[u]
        users.extend(p.users)
        num_samples.extend(p.num_samples)
    hierarchies = None
    if all(p.hierarchies is not None for p in parts):
        hierarchies = [h for p in parts for h in p.hierarchies]  # type: ignore[union-attr]
    return LeafData(users, num_samples, user_data, hierarchies, parts=[len(p.users) for p in parts])


def write_leaf_json(data: LeafData, path: Path) -> None:
    """Write ``data`` as one LEAF JSON file (keys in LEAF's order), atomically."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    out: dict[str, object] = {"users": data.users}
    if data.hierarchies is not None:
        out["hierarchies"] = data.hierarchies
    out["num_samples"] = data.num_samples
    out["user_data"] = {u: data.user_data[u] for u in data.users}
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(out, f)
    os.replace(tmp, path)


# ----------------------------------------------------------------------------- LEAF's scripts
def _segments(data: LeafData) -> list[tuple[int, int]]:
    bounds = np.concatenate([[0], np.cumsum(data.parts if data.parts else [len(data.users)])]).tolist()
    return list(zip(bounds[:-1], bounds[1:]))


@_gc_paused()
def sample_niid(data: LeafData, fraction: float, seed: int) -> LeafData:
    """LEAF ``sample.py --niid --fraction F --seed S``.

    Exactly LEAF's procedure and random-number use: ``rng = random.Random(seed)``; per source file
    (``data.parts``; one when unmerged) the target is ``int(fraction * sum(num_samples))``; the
    users (zipped with their hierarchies, if any) are shuffled with ``rng.shuffle`` and taken in
    that order while the running sample count is below the target. The user that would overshoot
    keeps only ``target - count`` samples, chosen as LEAF does it: ``rng.sample(range(k), k)`` with
    k the kept count, i.e. the user's first k samples in a random order. Sampled users keep their
    other keys (e.g. Shakespeare's 'raw') unless truncated; per-user dicts are shared, not copied.
    """
    if not 0 < fraction <= 1:
        raise ValueError(f"sample fraction {fraction} must be in (0, 1]")
    rng = random.Random(seed)
    users: list[str] = []
    num_samples: list[int] = []
    user_data: dict[str, dict] = {}
    hierarchies: list | None = [] if data.hierarchies is not None else None
    parts: list[int] = []
    for lo, hi in _segments(data):
        target = int(fraction * sum(data.num_samples[lo:hi]))
        if data.hierarchies is not None:
            order = list(zip(data.users[lo:hi], data.hierarchies[lo:hi]))
        else:
            order = list(data.users[lo:hi])
        rng.shuffle(order)  # same permutation for a list of users or of (user, hierarchy) pairs
        taken = count = 0
        while taken < target and count < len(order):
            if hierarchies is not None:
                user, hier = order[count]
                hierarchies.append(hier)
            else:
                user = order[count]
            d = data.user_data[user]
            n = len(d["y"])
            if taken + n > target:
                n = target - taken
                picked = rng.sample(range(n), n)
                d = {"x": [d["x"][i] for i in picked], "y": [d["y"][i] for i in picked]}
            users.append(user)
            num_samples.append(n)
            user_data[user] = d
            taken += n
            count += 1
        parts.append(count)
    return LeafData(users, num_samples, user_data, hierarchies, parts if data.parts else None)


@_gc_paused()
def remove_small_users(data: LeafData, min_samples: int) -> LeafData:
    """LEAF ``remove_users.py --min_samples K`` (preprocess.sh ``-k K``).

    As in LEAF's code, a user is KEPT only if its ``num_samples`` entry is strictly greater than K
    (LEAF's README calls K the "minimum number of samples per user", but the script tests
    ``num_samples > K``), so ``-k 10`` keeps users with at least 11 samples.
    """
    keep = [i for i, n in enumerate(data.num_samples) if n > min_samples]
    users = [data.users[i] for i in keep]
    parts = None
    if data.parts:
        owner = np.repeat(np.arange(len(data.parts)), data.parts)
        parts = np.bincount(owner[keep], minlength=len(data.parts)).tolist() if keep else [0] * len(data.parts)
    return LeafData(
        users,
        [data.num_samples[i] for i in keep],
        {u: data.user_data[u] for u in users},
        [data.hierarchies[i] for i in keep] if data.hierarchies is not None else None,
        parts,
    )


@_gc_paused()
def split_by_sample(
    data: LeafData,
    train_fraction: float,
    seed: int,
    sequential: bool = False,
    gap: int = SHAKESPEARE_SEQ_LEN - 1,
) -> tuple[LeafData, LeafData]:
    """LEAF ``split_data.py --by_sample --frac F --seed S`` -> (train, test).

    Per user in order, with ``rng = random.Random(seed)`` shared by all users: users with fewer
    than 2 samples are dropped from both splits; otherwise ``n_train = max(1, int(F * n))`` (1 when
    n == 2). Random mode (LEAF's default): the train samples are ``rng.sample(range(n), n_train)``,
    the test samples the rest, both kept in the user's original order. Sequential mode (LEAF's
    Shakespeare branch): train = the first n_train samples, test = samples from
    ``n_train + gap`` on (LEAF hard-codes gap = 80 - 1 so no test window shares characters with a
    train window); the samples in between are dropped, a user left with no test sample is dropped
    from both splits, and no random numbers are drawn.

    LEAF differs: (1) its Shakespeare test file records ``num_samples = n - n_train``, ignoring the
    gap; we record the real counts. (2) the current split_data.py drops 'hierarchies' (an older one
    copied them unfiltered, misaligned with the kept users); we keep them aligned with the users.
    """
    if not 0 < train_fraction < 1:
        raise ValueError(f"train fraction {train_fraction} must be in (0, 1)")
    if gap < 0:
        raise ValueError(f"gap {gap} must be >= 0")
    rng = random.Random(seed)
    kept: list[int] = []
    train_ud: dict[str, dict] = {}
    test_ud: dict[str, dict] = {}
    for i, u in enumerate(data.users):
        d = data.user_data[u]
        x, y = d["x"], d["y"]
        n = len(y)
        if n < 2:
            continue
        n_train = 1 if n == 2 else max(1, int(train_fraction * n))
        if sequential:
            if n_train + gap >= n:
                continue
            train_ud[u] = {"x": x[:n_train], "y": y[:n_train]}
            test_ud[u] = {"x": x[n_train + gap :], "y": y[n_train + gap :]}
        else:
            in_train = [False] * n
            for j in rng.sample(range(n), n_train):
                in_train[j] = True
            train_ud[u] = {"x": [v for v, t in zip(x, in_train) if t], "y": [v for v, t in zip(y, in_train) if t]}
            test_ud[u] = {"x": [v for v, t in zip(x, in_train) if not t], "y": [v for v, t in zip(y, in_train) if not t]}
        kept.append(i)
    users = [data.users[i] for i in kept]
    hier = [data.hierarchies[i] for i in kept] if data.hierarchies is not None else None
    parts = None
    if data.parts:
        owner = np.repeat(np.arange(len(data.parts)), data.parts)
        parts = np.bincount(owner[kept], minlength=len(data.parts)).tolist() if kept else [0] * len(data.parts)
    train = LeafData(users, [len(train_ud[u]["y"]) for u in users], train_ud, hier, parts)
    test = LeafData(list(users), [len(test_ud[u]["y"]) for u in users], test_ud, list(hier) if hier else hier, parts)
    return train, test


# ----------------------------------------------------------------------------- raw conversions
@_gc_paused()
def sent140_from_csv(csv_path: Path, test_csv_path: Path | None = None) -> LeafData:
    """Sentiment140 CSV(s) -> LEAF's sent140 all_data (data/sent140/preprocess/*.py).

    Rows are ``polarity,id,date,query,user,text`` in latin-1. As in LEAF: one user per Twitter
    account (the user column), users in sorted (code-point) order, each user's tweets in file order;
    x = the row without its polarity plus the source tag, ``[id, date, query, user, text,
    "training"]`` (LEAF's combine_data.py appends "training"/"test"), so the text is ``x[4]``;
    y = 1 if polarity is "4" else 0. LEAF also appends the 498-tweet manual test file
    (testdata.manual.2009.06.14.csv, tagged "test"; its neutral tweets get y = 0): pass it as
    ``test_csv_path`` to get LEAF's 660,120 users and 1,600,498 samples.

    LEAF differs: LEAF writes its intermediate CSV in the locale encoding and reads it back as
    latin-1, which garbles non-ASCII characters on a UTF-8 system; we keep the latin-1 text intact.
    """
    xs: dict[str, list] = {}
    ys: dict[str, list] = {}
    sources = [(Path(csv_path), "training")]
    if test_csv_path is not None:
        sources.append((Path(test_csv_path), "test"))
    for path, tag in sources:
        if not path.is_file():
            raise DataMissingError(f"Sentiment140 file {path} is missing: {_PREPARE_HINT}")
        with open(path, "r", encoding="latin-1", newline="") as f:
            for lineno, row in enumerate(csv.reader(f), 1):
                if not row:
                    continue
                if len(row) != 6:
                    raise ValueError(
                        f"{path}:{lineno}: expected 6 columns (polarity,id,date,query,user,text), got {len(row)}"
                    )
                user = row[4]
                record = row[1:]
                record.append(tag)
                ux = xs.get(user)
                if ux is None:
                    ux = xs[user] = []
                    ys[user] = []
                ux.append(record)
                ys[user].append(1 if row[0] == "4" else 0)
    users = sorted(xs)
    return LeafData(users, [len(ys[u]) for u in users], {u: {"x": xs[u], "y": ys[u]} for u in users})


@_gc_paused()
def celeba_from_raw(
    identity_file: Path, attr_file: Path, attribute: str = "Smiling", min_images: int = 5
) -> LeafData:
    """CelebA's identity_CelebA.txt and list_attr_celeba.txt -> LEAF's celeba all_data
    (data/celeba/preprocess/metadata_to_json.py).

    One user per celebrity id, in order of first appearance in the identity file, keeping only
    celebrities with at least ``min_images`` images (LEAF: 5, giving 9,343 users); x = the image
    file names in identity-file order; y = the attribute (-1/1 in the file) as 0/1.

    LEAF differs: LEAF stores y as floats 0.0/1.0 (``(v + 1) / 2``) and takes y in attribute-file
    order (the same order in the official files); we store ints and look y up per image.
    """
    identity_file, attr_file = Path(identity_file), Path(attr_file)
    for p in (identity_file, attr_file):
        if not p.is_file():
            raise DataMissingError(f"CelebA file {p} is missing: {_PREPARE_HINT}")
    celebs: dict[str, list[str]] = {}
    with open(identity_file, "r", encoding="utf-8") as f:
        for line in f:
            info = line.split()
            if len(info) < 2:
                continue
            celebs.setdefault(info[1], []).append(info[0])
    good = {c: imgs for c, imgs in celebs.items() if len(imgs) >= min_images}
    wanted = {img for imgs in good.values() for img in imgs}

    with open(attr_file, "r", encoding="utf-8") as f:
        f.readline()  # number of images
        names = f.readline().split()
        if attribute not in names:
            raise ValueError(f"{attr_file}: attribute {attribute!r} is not in its header; choose one of {', '.join(names)}")
        col = names.index(attribute) + 1  # + 1: the image name comes first on data lines
        value: dict[str, int] = {}
        for lineno, line in enumerate(f, 3):
            info = line.split()
            if not info or info[0] not in wanted:
                continue
            if len(info) != len(names) + 1 or info[col] not in ("-1", "1"):
                raise ValueError(f"{attr_file}:{lineno}: expected an image name and {len(names)} values of -1/1")
            value[info[0]] = 1 if info[col] == "1" else 0

    user_data = {}
    for c, imgs in good.items():
        missing = [img for img in imgs if img not in value]
        if missing:
            raise ValueError(f"{attr_file}: no attributes for image {missing[0]} (celebrity {c})")
        user_data[c] = {"x": list(imgs), "y": [value[img] for img in imgs]}
    users = list(good)
    return LeafData(users, [len(good[c]) for c in users], user_data)


# ----------------------------------------------------------------------------- records -> arrays
def _user_index(data: LeafData) -> tuple[np.ndarray, list[int]]:
    counts = [len(data.user_data[u]["y"]) for u in data.users]
    return np.repeat(np.arange(len(data.users), dtype=np.int64), counts), counts


def _labels(data: LeafData, what: str, num_classes: int) -> np.ndarray:
    values = [v for u in data.users for v in data.user_data[u]["y"]]
    arr = np.asarray(values, dtype=np.float64) if values else np.zeros(0)
    y = arr.astype(np.int64)
    bad = (y != arr) | (y < 0) | (y >= num_classes)
    if bad.any():
        raise ValueError(f"{what}: label {values[int(np.argmax(bad))]!r} is not an integer in 0..{num_classes - 1}")
    return y


def tokenize(text: str) -> list[str]:
    """LEAF's ``split_line``: ``re.findall(r"[\\w']+|[.,!?;]", text)``, case kept."""
    return _TOKEN_RE.findall(text)


def _tweet_texts(data: LeafData) -> list[str]:
    texts: list[str] = []
    for u in data.users:
        xs = data.user_data[u]["x"]
        if xs and isinstance(xs[0], str):  # bare tweet texts
            texts.extend(xs)
        else:  # LEAF records [id, date, query, user, text, tag]; LEAF's model reads x[4]
            texts.extend([r[4] for r in xs])
    return texts


def _token_chunks(texts: list[str]):
    """(offset, tokens) per chunk of texts; each text's tokens end with the separator token."""
    for lo in range(0, len(texts), _CHUNK):
        chunk = texts[lo : lo + _CHUNK]
        joined = _SEP.join(chunk)
        if joined.count(_SEP) != len(chunk) - 1:  # a text contains the separator itself: blank it
            joined = _SEP.join(t.replace(_SEP, " ") for t in chunk)
        yield lo, _BATCH_TOKEN_RE.findall(joined + _SEP)


def _slots(is_sep: np.ndarray, max_tokens: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For a chunk's token stream: (text index, position) of each kept token, and the keep mask
    (not a separator, among its text's first ``max_tokens`` tokens)."""
    ends = np.flatnonzero(is_sep)  # one separator closes each text
    text = np.cumsum(is_sep) - is_sep
    starts = np.concatenate([[0], ends[:-1] + 1])
    pos = np.arange(len(is_sep)) - starts[text]
    keep = ~is_sep & (pos < max_tokens)
    return text[keep], pos[keep], keep


@_gc_paused()
def sent140_examples(
    data: LeafData, vocab: list[str] | None = None, max_tokens: int = 48
) -> tuple[Examples, list[str]]:
    """Sent140 records -> token ids, and the vocabulary used.

    Tokens as LEAF's ``line_to_indices``/``split_line`` (regex ``[\\w']+|[.,!?;]`` on the tweet text
    ``x[4]``, no lower-casing). Ids: 0 = "<pad>", 1 = "<unk>", then ``vocab[2:]``; without a given
    vocab it is built from ``data``: every token, by descending count, ties in code-point order (so
    ``vocab[:2 + k]`` is the top-k vocabulary). x int32 [N, max_tokens]: the first max_tokens token
    ids, zero-padded. y int64 (0/1); user = index into ``data.users``. Encode a test split with the
    train split's vocab. LEAF differs: it pads with its unknown id (not a separate pad id) and uses
    a GloVe vocabulary; the model layer decides what embedding rows the ids map to.

    One regex pass over chunks of 100k joined tweets and one C-level dict lookup per token.
    """
    if max_tokens < 1:
        raise ValueError(f"max_tokens {max_tokens} must be >= 1")
    texts = _tweet_texts(data)
    x = np.zeros((len(texts), max_tokens), dtype=np.int32)
    if vocab is not None:
        if list(vocab[:2]) != _SENT140_SPECIALS:
            raise ValueError(f"a Sent140 vocabulary starts with {_SENT140_SPECIALS}, got {list(vocab[:2])}")
        lookup = {w: i for i, w in enumerate(vocab)}
        if len(lookup) != len(vocab):
            raise ValueError("the Sent140 vocabulary has repeated words")
        lookup[_SEP] = -1
        for lo, tokens in _token_chunks(texts):
            ids = np.fromiter(map(lookup.get, tokens, repeat(SENT140_UNK)), dtype=np.int64, count=len(tokens))
            rows, cols, keep = _slots(ids < 0, max_tokens)
            x[lo + rows, cols] = ids[keep]
        vocab = list(vocab)
    else:
        # Provisional ids (order of first sight; 0 = the separator, never stored) go into x first,
        # then are renumbered by frequency in place; padding stays 0.
        index = {_SEP: 0}
        counts = np.zeros(1, dtype=np.int64)
        for lo, tokens in _token_chunks(texts):
            for w in dict.fromkeys(tokens):  # the chunk's distinct tokens, in first-sight order
                if w not in index:
                    index[w] = len(index)
            ids = np.fromiter(map(index.__getitem__, tokens), dtype=np.int64, count=len(tokens))
            chunk_counts = np.bincount(ids, minlength=len(index))
            chunk_counts[: len(counts)] += counts
            counts = chunk_counts
            rows, cols, keep = _slots(ids == 0, max_tokens)
            x[lo + rows, cols] = ids[keep]
        words = list(index)[1:]
        freq = counts[1:].tolist()
        order = sorted(range(len(words)), key=lambda i: (-freq[i], words[i]))
        final = np.zeros(len(index), dtype=np.int32)  # provisional id -> vocabulary id; 0 -> pad
        final[np.asarray(order, dtype=np.int64) + 1] = np.arange(2, len(words) + 2, dtype=np.int32)
        vocab = _SENT140_SPECIALS + [words[i] for i in order]
        for lo in range(0, len(x), _CHUNK):
            x[lo : lo + _CHUNK] = final[x[lo : lo + _CHUNK]]
    user, _ = _user_index(data)
    return Examples(x=x, y=_labels(data, "sent140", 2), user=user), vocab


def _center_crop_resize(img, size: int):
    """torchvision ``Resize(size)`` then ``CenterCrop(size)`` on a PIL image (bilinear, with PIL's
    antialiasing): the shorter side becomes ``size``, the longer ``int(size * long / short)``;
    the crop offset is ``int(round((side - size) / 2))``."""
    from PIL import Image

    w, h = img.size
    if w <= h:
        new_w, new_h = size, int(size * h / w)
    else:
        new_w, new_h = int(size * w / h), size
    if (new_w, new_h) != (w, h):
        img = img.resize((new_w, new_h), Image.BILINEAR)
    top, left = int(round((new_h - size) / 2.0)), int(round((new_w - size) / 2.0))
    return img.crop((left, top, left + size, top + size))


def celeba_examples(data: LeafData, image_dir: Path, size: int = 32) -> Examples:
    """CelebA records (x = image file names under ``image_dir``) -> uint8 [N, 3, size, size].

    Each image is opened with PIL, converted to RGB, resized so its shorter side is ``size`` and
    centre-cropped to size x size (FedBuff App. B.1), exactly as torchvision's Resize + CenterCrop.
    Images are decoded by a thread pool (PIL releases the GIL); the result does not depend on it.
    """
    from PIL import Image, UnidentifiedImageError

    if size < 1:
        raise ValueError(f"image size {size} must be >= 1")
    image_dir = Path(image_dir)
    names = [name for u in data.users for name in data.user_data[u]["x"]]
    y = _labels(data, "celeba", 2)
    out = np.empty((len(names), 3, size, size), dtype=np.uint8)

    def load(i: int) -> None:
        path = image_dir / names[i]
        try:
            with Image.open(path) as im:
                img = _center_crop_resize(im.convert("RGB"), size)
        except FileNotFoundError:
            raise DataMissingError(f"CelebA image {path} is missing: {_PREPARE_HINT}") from None
        except (UnidentifiedImageError, OSError) as e:
            raise ValueError(f"{path}: not a readable image ({e})") from None
        out[i] = np.asarray(img, dtype=np.uint8).transpose(2, 0, 1)

    workers = min(16, os.cpu_count() or 1)
    if workers > 1 and len(names) > 64:
        with ThreadPoolExecutor(workers) as pool:
            for _ in pool.map(load, range(len(names)), chunksize=256):
                pass
    else:
        for i in range(len(names)):
            load(i)
    user, _ = _user_index(data)
    return Examples(x=out, y=y, user=user)


@_gc_paused()
def femnist_examples(data: LeafData) -> Examples:
    """FEMNIST records (x = 784 floats in [0, 1], LEAF's ``pixel / 255`` of the 28x28 grey
    thumbnail, row-major) -> uint8 [N, 1, 28, 28] as ``round(v * 255)``; y in 0..61."""
    user, counts = _user_index(data)
    out = np.empty((len(user), 1, 28, 28), dtype=np.uint8)
    o = 0
    for u, n in zip(data.users, counts):
        if n == 0:
            continue
        arr = np.asarray(data.user_data[u]["x"], dtype=np.float64)
        if arr.shape != (n, 784):
            raise ValueError(f"femnist: user {u!r} has x of shape {list(arr.shape)}, expected [{n}, 784]")
        if not (np.isfinite(arr).all() and arr.min() >= 0.0 and arr.max() <= 1.0):
            raise ValueError(f"femnist: user {u!r} has pixel values outside [0, 1]")
        out[o : o + n] = np.rint(arr * 255.0).astype(np.uint8).reshape(n, 1, 28, 28)
        o += n
    return Examples(x=out, y=_labels(data, "femnist", 62), user=user)


_ASCII_TO_SHAKESPEARE = np.full(128, SHAKESPEARE_UNKNOWN, dtype=np.int32)
for _i, _c in enumerate(SHAKESPEARE_ALPHABET):
    _ASCII_TO_SHAKESPEARE[ord(_c)] = _i


def _char_indices(text: str) -> np.ndarray:
    codes = np.frombuffer(text.encode("utf-32-le"), dtype="<u4")
    out = np.full(len(codes), SHAKESPEARE_UNKNOWN, dtype=np.int32)
    ascii_ = codes < 128
    out[ascii_] = _ASCII_TO_SHAKESPEARE[codes[ascii_]]
    return out


@_gc_paused()
def shakespeare_examples(data: LeafData) -> Examples:
    """Shakespeare records (x = 80-character strings, y = the next character) -> x int32 [N, 80],
    y int64, as indices into :data:`SHAKESPEARE_ALPHABET` (LEAF's ``word_to_indices`` /
    ``letter_to_vec``). A character outside the alphabet becomes 79 (:data:`SHAKESPEARE_UNKNOWN`):
    LEAF's ``ALL_LETTERS.find`` gives -1 for it, which its label one-hot turns into class 79 (and
    which, as an index into the 80-row embedding, also means row 79 under Python indexing)."""
    xs = [s for u in data.users for s in data.user_data[u]["x"]]
    ys = [c for u in data.users for c in data.user_data[u]["y"]]
    user, _ = _user_index(data)
    x = np.empty((len(xs), SHAKESPEARE_SEQ_LEN), dtype=np.int32)
    y = np.empty(len(ys), dtype=np.int64)
    for lo in range(0, len(xs), _CHUNK):
        cx, cy = xs[lo : lo + _CHUNK], ys[lo : lo + _CHUNK]
        for what, chunk, length in (("x", cx, SHAKESPEARE_SEQ_LEN), ("y", cy, 1)):
            lens = np.fromiter(map(len, chunk), dtype=np.int64, count=len(chunk))
            if (lens != length).any():
                j = lo + int(np.argmax(lens != length))
                raise ValueError(
                    f"shakespeare: sample {j} (user {data.users[user[j]]!r}) has a {what} of "
                    f"{int(lens[j - lo])} characters, expected {length}"
                )
        x[lo : lo + len(cx)] = _char_indices("".join(cx)).reshape(-1, SHAKESPEARE_SEQ_LEN)
        y[lo : lo + len(cy)] = _char_indices("".join(cy))
    return Examples(x=x, y=y, user=user)
