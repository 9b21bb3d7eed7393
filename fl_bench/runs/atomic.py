"""Files written whole or not at all: to a temporary name beside the file, flushed to disk, then
renamed over it, so that a kill, a full disk or a file-size limit at any point leaves the earlier file
(or none) in place, never half of the new one."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, BinaryIO, Callable


def write_partial(path: Path, write: Callable[[BinaryIO], Any]) -> Path:
    """``write(file)`` to a temporary file beside ``path``, flushed to disk; returns it, for the caller
    to rename over ``path`` (a failed write removes it)."""
    partial = path.with_name(f".{path.name}.{os.getpid()}.partial")
    try:
        with open(partial, "wb") as file:
            write(file)
            file.flush()
            os.fsync(file.fileno())
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    return partial


def replace_text(path: Path, text: str) -> None:
    """``path`` holds ``text``, whole, or is as it was."""
    os.replace(write_partial(Path(path), lambda file: file.write(text.encode())), path)
