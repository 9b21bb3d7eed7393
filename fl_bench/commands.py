"""The modules ``python -m`` runs, and the one-line refusal of every other ``python -m fl_bench.<module>``.

A command is a module with an ``if __name__ == "__main__":`` block or a package with a ``__main__.py``
(tests/test_commands.py checks :data:`COMMANDS` against the source, so a new one cannot be left out).
Any other module of the package, named after ``-m``, would be imported and exit 0 having done nothing
(``python -m fl_bench.runs.fairness``, once in the README, did). Python imports the package
``fl_bench`` before it runs the module ``-m`` names, while ``sys.argv[0]`` is still ``"-m"`` (the
documentation of ``-m``), so ``fl_bench/__init__.py`` calls :func:`refuse_non_command` then. Nothing
but ``sys`` is imported here: every ``import fl_bench`` passes through it.
"""

from __future__ import annotations

import sys

COMMANDS = (
    "fl_bench",  # one run (Hydra): fl_bench/__main__.py
    "fl_bench.data",  # prepare a dataset: fl_bench/data/__main__.py
    "fl_bench.traces",  # summarise or generate a trace: fl_bench/traces/__main__.py
    "fl_bench.analysis.reproduce",
    "fl_bench.analysis.report",
    "fl_bench.analysis.fairness",
    "fl_bench.analysis.guards",
    "fl_bench.analysis.scoreboard",
    "fl_bench.analysis.example1",
)


def module_run_by_python() -> str | None:
    """The module ``python -m`` is about to run, while Python imports its parent packages (``sys.argv[0]``
    is ``"-m"`` then); None in any other process or once the module has been found."""
    argv, original = getattr(sys, "argv", None), getattr(sys, "orig_argv", None)
    if not argv or argv[0] != "-m" or not original or len(original) <= len(argv):
        return None
    # orig_argv: the interpreter, its options, "-m" MODULE (or "-mMODULE", "-BmMODULE"), then sys.argv[1:]
    named = original[len(original) - len(argv)]
    if named.startswith("-"):
        return named[named.index("m") + 1:] if "m" in named else None
    return named


def refusal(module: str) -> str | None:
    """The one line that refuses ``python -m MODULE`` (None where it is a command, or not fl_bench's)."""
    module = module.removesuffix(".__main__")
    if module in COMMANDS or not (module == "fl_bench" or module.startswith("fl_bench.")):
        return None
    alike = [c for c in COMMANDS if c.rsplit(".", 1)[-1] == module.rsplit(".", 1)[-1]]
    hint = f" (did you mean python -m {alike[0]}?)" if alike else ""
    return (f"fl_bench: {module} is not a command{hint}; the commands are: "
            + ", ".join(f"python -m {c}" for c in COMMANDS))


def refuse_non_command() -> None:
    """Exit 2 with :func:`refusal`'s line on stderr when ``python -m`` names a module of fl_bench that is no
    command (argparse's status for a command line it cannot run)."""
    module = module_run_by_python()
    line = refusal(module) if module else None
    if line:
        print(line, file=sys.stderr)
        raise SystemExit(2)
