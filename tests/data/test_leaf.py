"""LEAF: JSON files, sample/remove/split scripts, raw Sent140/CelebA conversion, record -> arrays.

Expected values marked "LEAF golden" were produced by running a line-by-line transcription of
LEAF's data/utils/sample.py (niid) and split_data.py (--by_sample) on the same input.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest

from fl_bench.data import leaf
from fl_bench.data.leaf import (
    SHAKESPEARE_ALPHABET,
    LeafData,
    celeba_examples,
    celeba_from_raw,
    femnist_examples,
    read_leaf_json,
    remove_small_users,
    sample_niid,
    sent140_examples,
    sent140_from_csv,
    shakespeare_examples,
    split_by_sample,
    write_leaf_json,
)
from fl_bench.errors import DataMissingError


def _toy(sizes, hierarchies=False) -> LeafData:
    users = [f"u{i:02d}" for i in range(len(sizes))]
    ud = {u: {"x": [f"{u}-{j}" for j in range(n)], "y": [j % 3 for j in range(n)]} for u, n in zip(users, sizes)}
    hier = [f"h{i % 3}" for i in range(len(sizes))] if hierarchies else None
    return LeafData(users, list(sizes), ud, hier)


def _xs(data: LeafData) -> dict[str, list]:
    return {u: data.user_data[u]["x"] for u in data.users}


# ----------------------------------------------------------------------------- JSON files
def test_json_round_trip_and_schema(tmp_path):
    data = _toy([2, 3], hierarchies=True)
    path = tmp_path / "sub" / "all_data.json"
    write_leaf_json(data, path)
    raw = json.loads(path.read_text())
    assert list(raw) == ["users", "hierarchies", "num_samples", "user_data"]  # LEAF's key order
    assert raw["user_data"]["u01"] == {"x": ["u01-0", "u01-1", "u01-2"], "y": [0, 1, 2]}
    back = read_leaf_json(path)
    assert back.users == data.users and back.num_samples == [2, 3] and back.hierarchies == ["h0", "h1"]
    assert back.user_data == data.user_data and back.parts is None
    assert not list(tmp_path.rglob("*.tmp"))


def test_json_directory_is_merged_in_name_order(tmp_path):
    a, b = _toy([1, 2]), _toy([4])
    b = LeafData(["w9"], [4], {"w9": b.user_data["u00"]})
    write_leaf_json(b, tmp_path / "all_data_1.json")
    write_leaf_json(a, tmp_path / "all_data_0.json")
    (tmp_path / "notes.txt").write_text("not json")
    merged = read_leaf_json(tmp_path)
    assert merged.users == ["u00", "u01", "w9"] and merged.num_samples == [1, 2, 4]
    assert merged.parts == [2, 1] and merged.user_data["w9"]["x"] == ["u00-0", "u00-1", "u00-2", "u00-3"]
    write_leaf_json(LeafData(["u01"], [1], {"u01": {"x": [0], "y": [0]}}), tmp_path / "all_data_2.json")
    with pytest.raises(ValueError, match=r"all_data_2\.json.*'u01'"):
        read_leaf_json(tmp_path)


def test_json_errors_name_the_file(tmp_path):
    with pytest.raises(DataMissingError, match="nowhere.json"):
        read_leaf_json(tmp_path / "nowhere.json")
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataMissingError, match="no LEAF .json files"):
        read_leaf_json(tmp_path / "empty")
    bad = tmp_path / "bad.json"
    bad.write_text('{"users": [')
    with pytest.raises(ValueError, match=r"bad\.json: not valid JSON"):
        read_leaf_json(bad)
    nokey = tmp_path / "nokey.json"
    nokey.write_text(json.dumps({"users": ["a"], "user_data": {"a": {"x": [1], "y": [0]}}}))
    with pytest.raises(ValueError, match=r"nokey\.json: missing key 'num_samples'"):
        read_leaf_json(nokey)
    noy = tmp_path / "noy.json"
    noy.write_text(json.dumps({"users": ["a"], "num_samples": [1], "user_data": {"a": {"x": [1]}}}))
    with pytest.raises(ValueError, match=r"noy\.json: user_data\['a'\] is missing key 'y'"):
        read_leaf_json(noy)


# ----------------------------------------------------------------------------- sample.py
def test_sample_niid_matches_leaf_golden():
    data = _toy([5, 3, 8, 2, 6, 4, 1, 7])  # 36 samples; target int(0.4 * 36) = 14
    out = sample_niid(data, 0.4, seed=1)
    # LEAF golden: shuffled order u03 u06 u01 u05 u07 ...; u07 is cut to 4 samples, taken as
    # rng.sample(range(4), 4), i.e. its first 4 samples in random order.
    assert out.users == ["u03", "u06", "u01", "u05", "u07"]
    assert out.num_samples == [2, 1, 3, 4, 4]
    assert out.user_data["u07"]["x"] == ["u07-3", "u07-2", "u07-1", "u07-0"]
    assert out.user_data["u07"]["y"] == [0, 2, 1, 0]
    assert out.user_data["u01"] is data.user_data["u01"]  # untruncated users are shared, not copied
    other = sample_niid(data, 0.4, seed=7)
    assert other.users == ["u06", "u07", "u02"] and other.num_samples == [1, 7, 6]  # LEAF golden
    assert data.users == [f"u{i:02d}" for i in range(8)]  # input untouched


def test_sample_niid_reproducible_and_reaches_fraction():
    data = _toy([random.Random(s).randint(1, 40) for s in range(60)], hierarchies=True)
    total = sum(data.num_samples)
    a, b, c = sample_niid(data, 0.15, 42), sample_niid(data, 0.15, 42), sample_niid(data, 0.15, 43)
    assert a.users == b.users and _xs(a) == _xs(b)
    assert a.users != c.users
    for s in (a, c):
        assert sum(s.num_samples) == int(0.15 * total)
        assert s.num_samples == [len(s.user_data[u]["y"]) for u in s.users]
        assert s.hierarchies == [data.hierarchies[data.users.index(u)] for u in s.users]  # still aligned
    full = sample_niid(data, 1.0, 5)
    assert sorted(full.users) == data.users and sum(full.num_samples) == total
    with pytest.raises(ValueError, match="fraction"):
        sample_niid(data, 0.0, 1)


def test_sample_niid_samples_each_source_file_like_leaf():
    # LEAF's sample.py treats each all_data_*.json on its own (target = fraction of that file),
    # with one random generator running across the files.
    first, second = _toy([6, 6, 6, 6]), _toy([10, 1, 9])
    second = LeafData([f"v{i}" for i in range(3)], second.num_samples,
                      {f"v{i}": second.user_data[f"u{i:02d}"] for i in range(3)})
    merged = LeafData(first.users + second.users, first.num_samples + second.num_samples,
                      {**first.user_data, **second.user_data}, parts=[4, 3])
    out = sample_niid(merged, 0.5, seed=3)
    k = out.parts[0]
    assert sum(out.num_samples[:k]) == 12 and sum(out.num_samples[k:]) == 10
    assert all(u.startswith("u") for u in out.users[:k]) and all(u.startswith("v") for u in out.users[k:])
    alone = sample_niid(first, 0.5, seed=3)  # the first file sees the generator's initial state
    assert out.users[:k] == alone.users and _xs(alone) == {u: out.user_data[u]["x"] for u in out.users[:k]}


# ----------------------------------------------------------------------------- remove_users.py
def test_remove_small_users_keeps_strictly_more_than_k():
    data = _toy([3, 10, 11, 9, 12], hierarchies=True)
    out = remove_small_users(data, 10)  # LEAF keeps num_samples > k
    assert out.users == ["u02", "u04"] and out.num_samples == [11, 12] and out.hierarchies == ["h2", "h1"]
    assert set(out.user_data) == {"u02", "u04"}
    assert remove_small_users(data, 0).users == data.users
    parted = LeafData(data.users, data.num_samples, data.user_data, parts=[2, 3])
    assert remove_small_users(parted, 10).parts == [0, 2]


# ----------------------------------------------------------------------------- split_data.py
def test_split_by_sample_matches_leaf_golden():
    data = _toy([5, 3, 8, 2, 6, 4, 1, 7])
    train, test = split_by_sample(data, 0.6, seed=1549775860)
    kept = ["u00", "u01", "u02", "u03", "u04", "u05", "u07"]  # u06 (1 sample) is dropped
    assert train.users == kept and test.users == kept
    assert _xs(train) == {  # LEAF golden
        "u00": ["u00-2", "u00-3", "u00-4"], "u01": ["u01-1"], "u02": ["u02-0", "u02-2", "u02-3", "u02-6"],
        "u03": ["u03-0"], "u04": ["u04-2", "u04-3", "u04-5"], "u05": ["u05-0", "u05-2"],
        "u07": ["u07-0", "u07-1", "u07-3", "u07-6"],
    }
    assert _xs(test) == {
        "u00": ["u00-0", "u00-1"], "u01": ["u01-0", "u01-2"], "u02": ["u02-1", "u02-4", "u02-5", "u02-7"],
        "u03": ["u03-1"], "u04": ["u04-0", "u04-1", "u04-4"], "u05": ["u05-1", "u05-3"],
        "u07": ["u07-2", "u07-4", "u07-5"],
    }
    assert train.user_data["u02"]["y"] == [0, 2, 0, 0] and test.user_data["u02"]["y"] == [1, 1, 2, 1]
    assert train.num_samples == [3, 1, 4, 1, 3, 2, 4] and test.num_samples == [2, 2, 4, 1, 3, 2, 3]


def test_split_by_sample_fractions_and_seeds():
    sizes = [2, 3, 10, 11, 40, 97]
    data = _toy(sizes)
    train, test = split_by_sample(data, 0.8, seed=0)
    # n_train = max(1, int(0.8 n)), and 1 when n == 2: both sides keep at least one sample.
    assert train.num_samples == [1, 2, 8, 8, 32, 77] and test.num_samples == [1, 1, 2, 3, 8, 20]
    for u in data.users:
        tr, te = train.user_data[u]["x"], test.user_data[u]["x"]
        assert sorted(tr + te) == sorted(data.user_data[u]["x"]) and not set(tr) & set(te)
        order = data.user_data[u]["x"]
        assert tr == sorted(tr, key=order.index) and te == sorted(te, key=order.index)  # original order
    again, _ = split_by_sample(data, 0.8, seed=0)
    other, _ = split_by_sample(data, 0.8, seed=1)
    assert _xs(again) == _xs(train) and _xs(other) != _xs(train)


def test_split_by_sample_sequential_is_leafs_shakespeare_split():
    data = _toy([2, 50, 100, 500, 395, 396], hierarchies=True)
    train, test = split_by_sample(data, 0.8, seed=0, sequential=True)
    # n=2: train 1, test would start at 1 + 79 -> no test sample -> user dropped (LEAF);
    # n=50: train 40, test from 119 -> dropped; n=100: train 80, test from 159 -> dropped;
    # n=395: train 316, test from 395 -> dropped; n=396: train 316, test = [395] -> kept.
    assert train.users == ["u03", "u05"] and test.users == ["u03", "u05"] and train.hierarchies == ["h0", "h2"]
    assert test.user_data["u05"]["x"] == ["u05-395"]
    x = data.user_data["u03"]["x"]
    assert train.user_data["u03"]["x"] == x[:400] and test.user_data["u03"]["x"] == x[400 + 79:]
    assert train.num_samples == [400, 316] and test.num_samples == [500 - 400 - 79, 1]
    tr0, te0 = split_by_sample(data, 0.8, seed=0, sequential=True, gap=0)
    assert tr0.users == data.users and te0.user_data["u01"]["x"] == data.user_data["u01"]["x"][40:]
    assert tr0.user_data["u00"]["x"] == ["u00-0"] and te0.user_data["u00"]["x"] == ["u00-1"]
    assert _xs(split_by_sample(data, 0.8, seed=5, sequential=True, gap=0)[0]) == _xs(tr0)  # no randomness


# ----------------------------------------------------------------------------- Sent140
def _write_sent140_csv(path: Path, rows: list[tuple[str, ...]]) -> None:
    lines = []
    for row in rows:
        lines.append(",".join('"' + field.replace('"', '""') + '"' for field in row))
    path.write_bytes(("\r\n".join(lines) + "\r\n").encode("latin-1"))


_DATE = "Mon Apr 06 22:19:45 PDT 2009"
_SENT140_ROWS = [
    ("0", "1467810369", _DATE, "NO_QUERY", "zoe", "I love it, I love it!"),
    ("4", "1467810672", _DATE, "NO_QUERY", "adam", "don't stop... café time"),
    ("4", "1467810917", _DATE, "NO_QUERY", "zoe", "Love love LOVE"),
    ("4", "1467811184", _DATE, "NO_QUERY", "Bob", "ok"),
    ("0", "1467811193", _DATE, "NO_QUERY", "adam", "i Love it; ok?"),
]


def test_sent140_from_csv_groups_users_like_leaf(tmp_path):
    csv_path = tmp_path / "training.1600000.processed.noemoticon.csv"
    _write_sent140_csv(csv_path, _SENT140_ROWS)
    assert b"caf\xe9" in csv_path.read_bytes()  # latin-1 on disk
    test_path = tmp_path / "testdata.manual.2009.06.14.csv"
    _write_sent140_csv(test_path, [("2", "3", _DATE, "kindle2", "adam", 'He said "hi", then left')])

    data = sent140_from_csv(csv_path)
    assert data.users == ["Bob", "adam", "zoe"]  # sorted by code point, as LEAF's sorted()
    assert data.num_samples == [1, 2, 2]
    assert data.user_data["adam"]["x"][0] == ["1467810672", _DATE, "NO_QUERY", "adam", "don't stop... café time", "training"]
    assert [r[4] for r in data.user_data["zoe"]["x"]] == ["I love it, I love it!", "Love love LOVE"]  # file order
    assert data.user_data["zoe"]["y"] == [0, 1] and data.user_data["adam"]["y"] == [1, 0]

    both = sent140_from_csv(csv_path, test_path)
    assert both.num_samples == [1, 3, 2]
    assert both.user_data["adam"]["x"][2][4:] == ['He said "hi", then left', "test"]
    assert both.user_data["adam"]["y"] == [1, 0, 0]  # neutral (2) is not 4 -> 0

    with pytest.raises(DataMissingError, match="training.1600000"):
        sent140_from_csv(tmp_path / "training.1600000.processed.noemoticon.csv.missing")
    bad = tmp_path / "bad.csv"
    bad.write_bytes(b'"0","1","d","q","u"\r\n')
    with pytest.raises(ValueError, match=r"bad\.csv:1: expected 6 columns"):
        sent140_from_csv(bad)


def test_sent140_tokens_and_vocab_hand_checked(tmp_path):
    csv_path = tmp_path / "train.csv"
    _write_sent140_csv(csv_path, _SENT140_ROWS)
    data = sent140_from_csv(csv_path)
    ex, vocab = sent140_examples(data, max_tokens=6)
    # Tokens (regex [\w']+|[.,!?;], case kept): counts 3: . it love; 2: I Love ok; 1: the rest.
    assert vocab == ["<pad>", "<unk>", ".", "it", "love", "I", "Love", "ok",
                     "!", ",", ";", "?", "LOVE", "café", "don't", "i", "stop", "time"]
    assert ex.x.dtype == np.int32 and ex.x.shape == (5, 6)
    assert ex.x.tolist() == [
        [7, 0, 0, 0, 0, 0],  # Bob: ok
        [14, 16, 2, 2, 2, 13],  # adam: don't stop . . . café [time cut at 6 tokens]
        [15, 6, 3, 10, 7, 11],  # adam: i Love it ; ok ?
        [5, 4, 3, 9, 5, 4],  # zoe: I love it , I love [it ! cut]
        [6, 4, 12, 0, 0, 0],  # zoe: Love love LOVE
    ]
    assert ex.y.tolist() == [1, 1, 0, 0, 1] and ex.user.tolist() == [0, 1, 1, 2, 2]

    test = LeafData(["t"], [2], {"t": {"x": [["9", _DATE, "NO_QUERY", "t", "love you LOVE!!"],
                                           ["9", _DATE, "NO_QUERY", "t", ""]], "y": [1, 0]}})
    tex, tvocab = sent140_examples(test, vocab, max_tokens=6)
    assert tvocab == vocab and tex.x.tolist() == [[4, 1, 12, 8, 8, 0], [0] * 6]
    with pytest.raises(ValueError, match="<pad>"):
        sent140_examples(test, ["a", "b"])


def test_sent140_chunked_tokenisation_matches_per_tweet(monkeypatch):
    rng = random.Random(0)
    words = ["a", "b", "it's", "x_y", "Zz", "é", "!", ".", ",", "?", ";", " ", "  ", "-", "#", "\x00"]
    texts = ["".join(rng.choice(words) for _ in range(rng.randint(0, 30))) for _ in range(500)]
    data = LeafData(["u", "v"], [250, 250], {"u": {"x": texts[:250], "y": [0] * 250},
                                             "v": {"x": texts[250:], "y": [1] * 250}})
    monkeypatch.setattr(leaf, "_CHUNK", 37)  # many chunk boundaries
    ex, vocab = sent140_examples(data, max_tokens=12)
    index = {w: i for i, w in enumerate(vocab)}
    for row, text in zip(ex.x, texts):
        ids = [index[t] for t in leaf.tokenize(text.replace("\x00", " "))][:12]
        assert row.tolist() == ids + [0] * (12 - len(ids))
    assert ex.user.tolist() == [0] * 250 + [1] * 250


# ----------------------------------------------------------------------------- CelebA
_ATTRS = ("5_o_Clock_Shadow Arched_Eyebrows Attractive Bags_Under_Eyes Bald Bangs Big_Lips Big_Nose "
          "Black_Hair Blond_Hair Blurry Brown_Hair Bushy_Eyebrows Chubby Double_Chin Eyeglasses Goatee "
          "Gray_Hair Heavy_Makeup High_Cheekbones Male Mouth_Slightly_Open Mustache Narrow_Eyes No_Beard "
          "Oval_Face Pale_Skin Pointy_Nose Receding_Hairline Rosy_Cheeks Sideburns Smiling Straight_Hair "
          "Wavy_Hair Wearing_Earrings Wearing_Hat Wearing_Lipstick Wearing_Necklace Wearing_Necktie Young").split()


def _write_celeba_meta(tmp_path: Path) -> tuple[Path, Path, dict[str, tuple[int, int]]]:
    # image -> celebrity; interleaved so first appearance decides user order: 2937, 2880 (8692 has 4 < 5).
    celebs = ["2937", "2880", "8692", "2937", "2880", "8692", "2937", "2880", "8692", "2937", "2880",
              "8692", "2937", "2880", "2937"]
    images = [f"{i + 1:06d}.jpg" for i in range(len(celebs))]
    identity = tmp_path / "identity_CelebA.txt"
    identity.write_text("".join(f"{img} {c}\n" for img, c in zip(images, celebs)))
    rng = np.random.default_rng(0)
    truth = {}
    lines = [f"{len(images)}", " ".join(_ATTRS) + " "]
    for img in images:
        vals = rng.choice([-1, 1], len(_ATTRS))
        truth[img] = (int(vals[_ATTRS.index("Smiling")] == 1), int(vals[_ATTRS.index("Male")] == 1))
        lines.append(img + " " + " ".join(f"{v:2d}" for v in vals))
    attrs = tmp_path / "list_attr_celeba.txt"
    attrs.write_text("\n".join(lines) + "\n")
    return identity, attrs, truth


def test_celeba_from_raw_like_leaf(tmp_path):
    identity, attrs, truth = _write_celeba_meta(tmp_path)
    data = celeba_from_raw(identity, attrs)
    assert data.users == ["2937", "2880"] and data.num_samples == [6, 5]
    assert data.user_data["2937"]["x"] == ["000001.jpg", "000004.jpg", "000007.jpg", "000010.jpg", "000013.jpg", "000015.jpg"]
    for u in data.users:
        assert data.user_data[u]["y"] == [truth[img][0] for img in data.user_data[u]["x"]]
    male = celeba_from_raw(identity, attrs, attribute="Male")
    assert male.user_data["2880"]["y"] == [truth[img][1] for img in male.user_data["2880"]["x"]]
    assert celeba_from_raw(identity, attrs, min_images=4).users == ["2937", "2880", "8692"]
    with pytest.raises(ValueError, match="'Smiley' is not in its header"):
        celeba_from_raw(identity, attrs, attribute="Smiley")
    with pytest.raises(DataMissingError, match="identity_missing.txt"):
        celeba_from_raw(tmp_path / "identity_missing.txt", attrs)


def _banded(w: int, h: int) -> np.ndarray:
    """Black 10-row bands top and bottom; in between, red columns 0-9 and blue columns 10+."""
    img = np.zeros((h, w, 3), np.uint8)
    img[10 : h - 10, :10] = (255, 0, 0)
    img[10 : h - 10, 10:] = (0, 0, 255)
    return img


def test_celeba_examples_resize_shorter_side_then_center_crop(tmp_path):
    from PIL import Image

    Image.fromarray(_banded(40, 80)).save(tmp_path / "tall.png")
    Image.fromarray(np.full((20, 30, 3), (10, 200, 30), np.uint8)).save(tmp_path / "wide.png")
    data = LeafData(["a", "b"], [1, 1], {"a": {"x": ["tall.png"], "y": [1.0]}, "b": {"x": ["wide.png"], "y": [0.0]}})
    ex = celeba_examples(data, tmp_path, size=8)
    assert ex.x.shape == (2, 3, 8, 8) and ex.x.dtype == np.uint8
    assert ex.y.tolist() == [1, 0] and ex.user.tolist() == [0, 1]  # LEAF's float labels accepted
    tall = ex.x[0].transpose(1, 2, 0)
    # 40x80 -> 8x16 (shorter side 8), then rows 4..11: no black band survives; red stays in
    # column 0 only. A squashed 8x8 resize would keep the bands, a crop without resize no red.
    assert (tall[:, 0] == (255, 0, 0)).all() and (tall[:, 3:] == (0, 0, 255)).all()
    assert (ex.x[1].transpose(1, 2, 0) == (10, 200, 30)).all()


def test_celeba_examples_do_not_depend_on_the_thread_pool(tmp_path):
    from PIL import Image

    from fl_bench.data.leaf import _center_crop_resize

    rng = np.random.default_rng(1)
    names, shapes = [], [(218, 178), (30, 50), (45, 45), (33, 47)] + [(20 + i % 7, 16 + i % 5) for i in range(70)]
    for i, (h, w) in enumerate(shapes):  # > 64 images: the thread pool path
        name = f"{i:06d}.jpg"
        Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)).save(tmp_path / name, quality=90)
        names.append(name)
    data = LeafData(["c1", "c2"], [4, 70], {"c1": {"x": names[:4], "y": [1, 0, 1, 1]},
                                            "c2": {"x": names[4:], "y": [0] * 70}})
    ex = celeba_examples(data, tmp_path, size=16)
    for i, name in enumerate(names):  # one image at a time, in this thread
        with Image.open(tmp_path / name) as im:
            expected = np.asarray(_center_crop_resize(im.convert("RGB"), 16)).transpose(2, 0, 1)
        np.testing.assert_array_equal(ex.x[i], expected, err_msg=name)
    assert ex.user.tolist() == [0] * 4 + [1] * 70


def test_celeba_examples_missing_image(tmp_path):
    data = LeafData(["a"], [1], {"a": {"x": ["000042.jpg"], "y": [1]}})
    with pytest.raises(DataMissingError, match="000042.jpg"):
        celeba_examples(data, tmp_path)


# ----------------------------------------------------------------------------- FEMNIST
def test_femnist_examples():
    rng = np.random.default_rng(2)
    pixels = rng.integers(0, 256, (3, 784))
    vec = (pixels / 255).tolist()  # LEAF: np.asarray(gray).flatten() / 255, as JSON floats
    data = LeafData(["f0", "f1"], [2, 1], {"f0": {"x": vec[:2], "y": [0, 61]}, "f1": {"x": vec[2:], "y": [36]}})
    ex = femnist_examples(data)
    assert ex.x.shape == (3, 1, 28, 28) and ex.x.dtype == np.uint8
    np.testing.assert_array_equal(ex.x.reshape(3, 784), pixels)
    assert ex.x[2, 0, 3, 5] == pixels[2, 3 * 28 + 5]  # row-major 28x28
    assert ex.y.tolist() == [0, 61, 36] and ex.user.tolist() == [0, 0, 1]
    # Values written with fewer digits still round to the nearest level: round(v * 255).
    near = LeafData(["f"], [1], {"f": {"x": [[0.2039, 0.99999, 0.0000001, 0.5] + [0.0] * 780], "y": [3]}})
    assert femnist_examples(near).x[0, 0, 0, :4].tolist() == [52, 255, 0, 128]  # 51.99, 254.99, 0, 127.5
    bad = LeafData(["f"], [1], {"f": {"x": [[0.5] * 783], "y": [1]}})
    with pytest.raises(ValueError, match="784"):
        femnist_examples(bad)
    with pytest.raises(ValueError, match="0..61"):
        femnist_examples(LeafData(["f"], [1], {"f": {"x": vec[:1], "y": [62]}}))


# ----------------------------------------------------------------------------- Shakespeare
def test_shakespeare_alphabet_is_leafs():
    assert len(SHAKESPEARE_ALPHABET) == 80 and len(set(SHAKESPEARE_ALPHABET)) == 80
    expect = {"\n": 0, " ": 1, "!": 2, "0": 11, "9": 20, ":": 21, "?": 24, "A": 25, "Z": 50, "[": 51,
              "]": 52, "a": 53, "z": 78, "}": 79}
    assert {c: SHAKESPEARE_ALPHABET.index(c) for c in expect} == expect


def test_shakespeare_examples():
    line = " " * 66 + "To be, or not|ab"  # 82 chars; '|' is not in LEAF's alphabet
    xs = [line[i : i + 80] for i in range(2)]
    ys = [line[i + 80] for i in range(2)]  # 'a', 'b'
    data = LeafData(["PLAY_HAMLET"], [2], {"PLAY_HAMLET": {"x": xs, "y": ys}}, ["PLAY"])
    data2 = LeafData(["P", "Q"], [2, 1], {"P": {"x": xs, "y": ys}, "Q": {"x": ["é" + "}" * 79], "y": ["|"]}})
    ex = shakespeare_examples(data2)
    assert ex.x.shape == (3, 80) and ex.x.dtype == np.int32 and ex.y.dtype == np.int64
    assert ex.y.tolist() == [53, 54, 79]  # 'a', 'b', and '|' -> 79 (LEAF's one-hot of find() == -1)
    #                              T   o      b   e   ,      o   r      n   o   t   |
    assert ex.x[0].tolist() == [1] * 66 + [44, 67, 1, 54, 57, 8, 1, 67, 70, 1, 66, 67, 72, 79]
    assert ex.x[1].tolist() == [1] * 65 + [44, 67, 1, 54, 57, 8, 1, 67, 70, 1, 66, 67, 72, 79, 53]
    assert ex.x[2].tolist() == [79] * 80  # non-ASCII 'é' -> 79 as well, then '}' x 79
    assert ex.user.tolist() == [0, 0, 1]
    assert shakespeare_examples(data).x.tolist() == ex.x[:2].tolist()
    short = LeafData(["P"], [1], {"P": {"x": ["abc"], "y": ["d"]}})
    with pytest.raises(ValueError, match="3 characters, expected 80"):
        shakespeare_examples(short)
