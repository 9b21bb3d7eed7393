"""Every ``python -m fl_bench...`` a user can name either runs or stops in one line, and every such command
line the documentation gives (README.md and the site's pages, docs/**/*.md) names a real command with
arguments it accepts.

- :data:`fl_bench.commands.COMMANDS` is exactly the modules with a ``__main__`` block or a ``__main__.py``
  (found in the source, so a new command cannot be left out), and any other module is refused.
- Each ``python -m fl_bench...`` of those documents (fenced blocks, and backticked spans in prose and tables)
  is checked without running anything: a run's overrides compose into a config that passes the schemas'
  checks, as ``python -m fl_bench`` composes it (a multirun at the first value of each sweep, and in a
  slow test at every other value); a sweep file exists and is read whole as ``fl_bench.analysis.reproduce``
  reads it, with its tables and flags; ``fl_bench.data``'s overrides compose; every command's arguments
  parse with its own parser. A command that cannot be checked so is in :data:`NOT_CHECKED`, with the
  reason and the test that runs it.
"""

from __future__ import annotations

import functools
import importlib.util
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from fl_bench.commands import COMMANDS, module_run_by_python, refusal

REPO = Path(__file__).resolve().parents[1]
# The documents whose commands are promises: the README and the site's hand-written pages (the generated
# parts of the site quote the sweep files, whose commands tests/analysis/test_sweep_files.py runs).
DOCUMENTS = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
PACKAGE = REPO / "fl_bench"

# What the documents' shell variables stand for here: a new one must be added (else its command fails).
SHELL_VARIABLES = {"$RANDOM": "12345", "$SCRATCH": "/scratch", "$PWD": str(REPO)}
LAUNCHERS = ("srun",)  # words before `python` that start it elsewhere
SHELL_BLOCKS = ("bash", "sh", "shell", "console")  # the fenced blocks that hold command lines

# Command lines (as the documents give them, joined into one line) that are not checked here, why, and where
# they are run instead.
NOT_CHECKED = {
    "FL_BENCH_PLUGINS=my_fl_extensions PYTHONPATH=path/to/my_plugin python -m fl_bench.analysis.reproduce my_fedgbo.yaml "
    "trimmed_vs_fedavg --jobs 2 --override hydra.searchpath=[file://path/to/my_plugin/conf]":
        "my_fedgbo.yaml and path/to/my_plugin are the reader's own (docs/extending/your-method.md shows them above "
        "the command); "
        "its arguments are parsed here, and tests/analysis/test_plugin_protocol.py::"
        "test_a_plugin_method_runs_under_a_paper_s_protocol_and_gets_its_verdict runs it on a copy of the example plugin",
}


def command_modules() -> set[str]:
    """The modules ``python -m`` can run, from the source: packages with a ``__main__.py`` and modules with
    an ``if __name__ == "__main__":`` block."""
    found = set()
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(REPO).with_suffix("").parts
        if path.name == "__main__.py":
            found.add(".".join(parts[:-1]))
        elif re.search(r"""^if __name__ == ["']__main__["']\s*:""", path.read_text(), re.M):
            found.add(".".join(parts[:-1] if path.name == "__init__.py" else parts))
    return found


def all_modules() -> set[str]:
    return {".".join(p.relative_to(REPO).with_suffix("").parts).removesuffix(".__init__") for p in PACKAGE.rglob("*.py")}


def test_the_commands_are_exactly_the_modules_with_a_main_block():
    assert len(COMMANDS) == len(set(COMMANDS))
    assert set(COMMANDS) == command_modules()


def test_every_other_module_is_refused_in_one_line_naming_the_commands():
    others = {m for m in all_modules() - command_modules() if not m.endswith(".__main__")}
    assert "fl_bench.runs.fairness" in others and "fl_bench.analysis" in others
    for module in others:
        line = refusal(module)
        assert line is not None and "\n" not in line and f"fl_bench: {module} is not a command" in line
        assert all(f"python -m {c}" in line for c in COMMANDS)
    assert all(refusal(c) is None and refusal(f"{c}.__main__") is None for c in COMMANDS)
    assert refusal("pytest") is None and refusal("fl_bench_other") is None  # not ours


@pytest.mark.parametrize("orig_argv, argv, module", [
    (["python", "-m", "fl_bench.runs.fairness", "x", "-m"], ["-m", "x", "-m"], "fl_bench.runs.fairness"),
    (["python", "-B", "-X", "importtime", "-mfl_bench.runs", "a"], ["-m", "a"], "fl_bench.runs"),
    (["python", "-Bmfl_bench.runs"], ["-m"], "fl_bench.runs"),
    (["python", "script.py", "-m", "fl_bench.runs"], ["script.py", "-m", "fl_bench.runs"], None),  # a script's arguments
    (["python", "-m", "fl_bench.runs.fairness"], ["/path/fl_bench/runs/fairness.py"], None),  # found: running
])
def test_the_module_python_runs_is_read_from_its_original_command_line(monkeypatch, orig_argv, argv, module):
    monkeypatch.setattr(sys, "orig_argv", orig_argv)
    monkeypatch.setattr(sys, "argv", argv)
    assert module_run_by_python() == module


def _python_m(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", *args], cwd=REPO, capture_output=True, text=True, timeout=300)


def test_a_module_that_is_no_command_stops_in_one_line_with_status_2():
    done = _python_m("fl_bench.runs.fairness", "x", "--name", "y")
    assert done.returncode == 2 and done.stdout == ""
    (line,) = done.stderr.splitlines()
    assert line.startswith("fl_bench: fl_bench.runs.fairness is not a command (did you mean python -m "
                           "fl_bench.analysis.fairness?); the commands are: python -m fl_bench, python -m fl_bench.data")


@pytest.mark.parametrize("module", ["fl_bench.traces",  # (numpy and pandas: under a second)
                                    pytest.param("fl_bench.analysis.fairness", marks=pytest.mark.slow)])  # (torch: 3-5 s)
def test_a_command_still_runs(module):
    done = _python_m(module, "--help")
    assert done.returncode == 0 and done.stdout.startswith(f"usage: python -m {module}") and not done.stderr


# ------------------------------------------------------------------------------ the documents' commands

@dataclass(frozen=True)
class Command:
    path: str  # the document, relative to the repository
    line: int  # where it starts there
    text: str  # as given, continuation lines joined
    env: tuple[tuple[str, str], ...]  # VAR=value words before it
    module: str
    args: tuple[str, ...]
    kind: str  # command (run it as given) | synopsis (placeholders: <dirs>, NAME, [--flag]) | mention (the bare name)

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.text}"


_SPAN = re.compile(r"`([^`]+)`")
_PLACEHOLDER = re.compile(r"<[^>]*>|\[--|\b[A-Z]{3,}(?:/[A-Z]+)?\b")


def _commands_in(text: str, line: int, kind: str, path: str = "<test>") -> list[Command]:
    """The ``python -m fl_bench...`` commands of one shell line (``&&``, ``;`` and ``|`` separate commands)."""
    for variable, value in SHELL_VARIABLES.items():
        text = text.replace(variable, value)
    assert "$" not in text, f"{path}:{line}: a shell variable this test does not know (add it to SHELL_VARIABLES)"
    if kind == "synopsis":  # placeholders are no shell words: only the module and its --flags are read
        words = text.split()
        return [Command(path, line, text, (), words[2], tuple(words[3:]), kind)] if words[:2] == ["python", "-m"] else []
    lexer = shlex.shlex(text, posix=True, punctuation_chars="&;|")
    lexer.whitespace_split, lexer.commenters = True, ""
    words, found = list(lexer), []
    segments, segment = [], []
    for word in words + ["&&"]:
        if set(word) <= set("&;|"):
            segments.append(segment)
            segment = []
        else:
            segment.append(word)
    for segment in segments:
        env = []
        while segment and re.match(r"^[A-Za-z_]\w*=", segment[0]):
            env.append(tuple(segment.pop(0).split("=", 1)))
        if segment and segment[0] in LAUNCHERS:
            segment.pop(0)
        if segment[:2] == ["python", "-m"] and len(segment) > 2 and re.match(r"fl_bench(\.|$)", segment[2]):
            bare = len(segment) == 3 and kind == "prose"
            found.append(Command(path, line, text, tuple(env), segment[2], tuple(segment[3:]), "mention" if bare else "command"))
    return found


def documented_commands() -> list[Command]:
    """Every ``python -m fl_bench...`` of the documents: the lines of their shell blocks (a trailing backslash
    continues one) and their backticked spans outside fenced blocks, in prose (a span may wrap) and in tables.
    (Other blocks are YAML and Python: :func:`test_every_module_the_documents_name_is_a_command`.)"""
    return [command for document in DOCUMENTS for command in _commands_of(document)]


def _commands_of(document: Path) -> list[Command]:
    path = document.relative_to(REPO).as_posix()
    lines = document.read_text().splitlines()
    commands, fence, prose = [], None, []  # fence: the open block's language; prose: the lines outside, others blank
    i = 0
    while i < len(lines):
        text, start = lines[i], i + 1
        prose.append("" if fence is not None or text.lstrip().startswith("```") else text)
        if text.lstrip().startswith("```"):
            fence = text.strip().removeprefix("```") if fence is None else None
        elif fence in SHELL_BLOCKS:
            text = re.sub(r"(^|\s)#.*$", "", text)  # a comment
            while text.rstrip().endswith("\\") and i + 1 < len(lines):
                i += 1
                prose.append("")
                text = text.rstrip()[:-1].rstrip() + " " + re.sub(r"(^|\s)#.*$", "", lines[i]).strip()
            commands += _commands_in(text.strip(), start, "command", path)
        i += 1
    text = "\n".join(prose)
    for paragraph in re.finditer(r"(?:[^\n]+\n?)+", text):  # backticks pair within a paragraph
        for span in _SPAN.finditer(paragraph.group()):
            code = " ".join(span.group(1).split())
            if "python -m fl_bench" in code:
                line = text.count("\n", 0, paragraph.start() + span.start()) + 1
                commands += _commands_in(code, line, "synopsis" if _PLACEHOLDER.search(code) else "prose", path)
    return commands


DOCUMENTED = documented_commands()


def test_every_module_the_documents_name_is_a_command():
    named = {name for document in DOCUMENTS for name in re.findall(r"python -m (fl_bench[\w.]*)", document.read_text())}
    assert "fl_bench.analysis.fairness" in named and named - set(COMMANDS) == set()


def test_the_documented_commands_are_found():
    found = {(c.module, c.kind) for c in DOCUMENTED}
    assert len(DOCUMENTED) > 60 and {m for m, _ in found} <= set(COMMANDS)  # (each one: below)
    assert {c.path for c in DOCUMENTED} >= {"README.md", "docs/getting-started.md", "docs/guides/running.md"}
    for expected in [("fl_bench", "command"), ("fl_bench.data", "command"), ("fl_bench.traces", "command"),
                     ("fl_bench.analysis.reproduce", "command"), ("fl_bench.analysis.report", "command"),
                     ("fl_bench.analysis.fairness", "command"), ("fl_bench.analysis.guards", "command"),
                     ("fl_bench.analysis.report", "synopsis"), ("fl_bench.analysis.fairness", "mention")]:
        assert expected in found
    # the table of papers' commands, a command over two lines, one after `&&`, one after srun
    texts = [c.text for c in DOCUMENTED]
    assert sum("| " not in t and "sweeps/hfl_smoke.yaml --jobs 2" in t for t in texts) >= 2
    assert any(c.module == "fl_bench" and "availability.time_scale=0.001" in c.args for c in DOCUMENTED)
    assert any(c.module == "fl_bench" and c.args == () and "pip install" in c.text and c.path == "README.md" for c in DOCUMENTED)
    assert any(c.text.startswith("srun ") for c in DOCUMENTED)
    # nothing is left out unsaid: each command NOT_CHECKED names is still in the documents
    assert set(NOT_CHECKED) <= set(texts)


# A run (``python -m fl_bench OVERRIDES``) is composed: all of them in one test, under one Hydra
# initialisation (a composition takes 0.1-0.2 s on 2 cores); every other command is a test of its own.
RUNS = [c for c in DOCUMENTED if c.module == "fl_bench" and c.kind == "command"]
OTHERS = [c for c in DOCUMENTED if c not in RUNS]


@pytest.mark.slow  # 58 Hydra compositions, about 20 s beside other jobs
def test_each_documented_run_composes_into_a_config_that_passes_its_checks(monkeypatch):
    problems = check_runs(RUNS, monkeypatch)
    assert not problems, "documented commands that would not run:\n" + "\n".join(problems)


@pytest.mark.slow  # 17 compositions more
def test_each_value_of_each_documented_sweep_composes_too(monkeypatch):
    sweeps = [c for c in RUNS if {"-m", "--multirun"} & set(c.args)]
    assert len(sweeps) >= 5
    problems = check_runs(sweeps, monkeypatch, every_value=True)
    assert not problems, "documented sweeps with a value that would not run:\n" + "\n".join(problems)


@pytest.mark.parametrize("command", OTHERS, ids=lambda c: f"{c.path}:L{c.line}-{c.module}")
def test_each_documented_command_is_a_command_with_arguments_it_takes(command, monkeypatch):
    check(command, monkeypatch)


COMPOSES = pytest.mark.slow  # (a composition, 0.2 s: the quick loop keeps the cases that only parse)


@pytest.mark.parametrize("text, kind, why", [
    pytest.param("python -m fl_bench algorithm=fedbuff algorithm.buffer_sise=3", "command", "buffer_sise",
                 marks=COMPOSES),  # a misspelt key
    pytest.param("python -m fl_bench concurrency=0", "command", "concurrency=0 is not allowed", marks=COMPOSES),
    pytest.param("python -m fl_bench -m experiment=fedbuff_smok seed=0,1", "command", "unknown experiment 'fedbuff_smok'",
                 marks=COMPOSES),
    pytest.param("python -m fl_bench.analysis.reproduce sweeps/fedbuff_smoke.yaml fedbuff_table9_smoke", "command",
                 "unknown table fedbuff_table9_smoke", marks=COMPOSES),
    ("python -m fl_bench.analysis.reproduce sweeps/fedbuf_smoke.yaml", "command", "does not exist"),
    pytest.param("python -m fl_bench.analysis.reproduce sweeps/hfl_smoke.yaml --every-arm", "command",
                 "--every-arm is a smoke check", marks=COMPOSES),
    pytest.param("python -m fl_bench.analysis.reproduce sweeps/hfl_smoke.yaml --launcher slurm --override "
                 "hydra.launcher.partitionn=cpu", "command", "--launcher slurm has no key 'partitionn'", marks=COMPOSES),
    ("python -m fl_bench.analysis.fairness multirun/x --nmae y", "command", "do not parse"),
    ("python -m fl_bench.traces generate w.pkl --format fedscale_capacity --online 0.3", "command", "--online 0.3 is not allowed"),
    pytest.param("python -m fl_bench.data prepare sent140 dataset.fracton=0.1", "command", "fracton", marks=COMPOSES),
    ("python -m fl_bench.runs.fairness multirun/x --name y", "command", "fl_bench.runs.fairness is not a command"),
    ("python -m fl_bench.analysis.report <dirs> --nmae NAME", "synopsis", "--nmae is no option"),
    ("python -m fl_bench.analysis.report <dirs> --measure trips|round", "synopsis", "--measure takes"),
])
def test_a_broken_command_is_caught(text, kind, why, monkeypatch):
    from fl_bench.runs.cli import one_line

    (command,) = _commands_in(text, 0, kind)
    with pytest.raises(BaseException) as caught:  # (pytest.fail's is no Exception)
        check(command, monkeypatch)
    message = str(caught.value) if isinstance(caught.value, (AssertionError, pytest.fail.Exception)) else one_line(caught.value)
    assert why in message


@pytest.mark.slow
def test_a_sweep_s_every_value_is_composed():
    (command,) = _commands_in("python -m fl_bench -m seed=0,1 algorithm=fedbuff,fedavgx", 0, "command")
    with pytest.MonkeyPatch.context() as monkeypatch:
        assert check_runs([command], monkeypatch) == []  # its first point runs
        (problem,) = check_runs([command], monkeypatch, every_value=True)
    assert "fedavgx" in problem


def check(command: Command, monkeypatch) -> None:
    """Fail (an exception naming the problem) where ``command`` would not run as given."""
    assert command.module in COMMANDS, f"{command}: {refusal(command.module)}"
    if command.kind == "mention":
        return
    if command.module == "fl_bench":
        problems = check_runs([command], monkeypatch)
        assert not problems, "\n".join(problems)
        return
    parser = _parser(command.module)
    if command.kind == "synopsis":
        _check_synopsis(command, parser)
        return
    args = _parse(command, parser)
    if command.text in NOT_CHECKED:
        return
    monkeypatch.chdir(REPO)  # the documented commands run from the repository
    _environment(command, monkeypatch)
    if command.module == "fl_bench.analysis.reproduce":  # reads the sweep file whole and checks its flags
        from fl_bench.analysis.reproduce import Reproduction

        # (tests/analysis/test_reproduce.py::test_every_paper_s_sweep_file_states_a_protocol_that_passes_its_checks
        # composes every sweep file's special cases, 1-3 s a file: not again here)
        monkeypatch.setattr(Reproduction, "_check_special_cases", lambda self: None)
        reproduction = _reproduction(args.spec, args.smoke, args.runs_dir, args.jobs, tuple(args.override),
                                     args.every_arm, args.in_process, args.launcher)  # (its launcher and settings checked)
        reproduction.tables(args.tables)  # an unknown table is refused
    elif command.module == "fl_bench.data":
        from fl_bench.data.__main__ import run_config

        run_config(args.dataset, args.overrides)
    elif command.module == "fl_bench.traces":
        from fl_bench.traces.__main__ import check_options

        check_options(args)


def _environment(command: Command, monkeypatch) -> None:
    """The command's VAR=value words: PYTHONPATH's entries (relative to the repository) on sys.path."""
    for key, value in command.env:
        if key == "PYTHONPATH":
            for entry in value.split(":"):
                monkeypatch.syspath_prepend(str(REPO / entry))
        else:
            monkeypatch.setenv(key, value)


@functools.lru_cache(maxsize=None)
def _reproduction(*args):
    """``Reproduction(*args)``, once for the documented commands that repeat it."""
    from fl_bench.analysis.reproduce import Reproduction

    return Reproduction(*args)


def _parser(module: str):
    """The command's argparse parser."""
    package = importlib.util.find_spec(module).submodule_search_locations is not None
    return importlib.import_module(f"{module}.__main__" if package else module).build_parser()


def _parse(command: Command, parser):
    try:
        return parser.parse_args(list(command.args))
    except SystemExit:  # argparse printed why
        pytest.fail(f"{command}: its arguments do not parse (above)")


def _check_synopsis(command: Command, parser) -> None:
    """A usage line with placeholders: each --flag it names is one of the command's, with the values it lists."""
    options = {o: a for a in parser._actions for o in a.option_strings}
    for flag, values in re.findall(r"(--[\w-]+)(?: ([\w|]+\|[\w|]+))?", command.text):
        assert flag in options, f"{command}: {flag} is no option of {command.module}"
        if values:
            assert set(values.split("|")) <= set(options[flag].choices), f"{command}: {flag} takes {options[flag].choices}"


def _points(overrides: list[str], every_value: bool) -> list[list[str]]:
    """A multirun's points (Hydra's override parser): every sweep at its first value; with ``every_value``,
    each other value of each sweep too, the rest at their first."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    values = [[f"{o.get_key_element()}={v}" for v in o.sweep_string_iterator()] if o.is_sweep_override()
              else [o.input_line] for o in OverridesParser.create().parse_overrides(overrides)]
    first = [v[0] for v in values]
    others = [[*first[:i], value, *first[i + 1:]] for i, vs in enumerate(values) for value in vs[1:]]
    return others if every_value else [first]


def check_runs(commands: list[Command], monkeypatch, every_value: bool = False) -> list[str]:
    """What stops each ``python -m fl_bench OVERRIDES`` before its run starts, one line each (none: it would
    run): composed and checked as fl_bench.runs.cli does it (its plugins, its optional groups, then the
    schemas' checks); a multirun at its first point (``every_value``: at the others)."""
    from hydra import compose, initialize_config_dir
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import OmegaConf, open_dict, read_write

    from fl_bench.runs.cli import CONFIG_DIR, _check_optional_groups, one_line
    from fl_bench.runs.config import register_configs, to_config
    from fl_bench.runs.help import HELP_FLAGS, asks_for_help, help_text

    problems = []
    for command in [c for c in commands if set(c.args) & set(HELP_FLAGS)]:  # --help [overrides]: the help they compose
        if not (asks_for_help(list(command.args)) and help_text(CONFIG_DIR, "config", [a for a in command.args if a[0] != "-"])):
            problems.append(f"{command}: no help of fl_bench's from --help and overrides alone")
    commands = [c for c in commands if not set(c.args) & set(HELP_FLAGS)]
    before = HydraConfig.instance().cfg
    try:
        with initialize_config_dir(CONFIG_DIR, version_base="1.3"):
            for command in commands:
                if command.text in NOT_CHECKED:
                    continue
                flags = [a for a in command.args if a.startswith("-")]
                overrides = [a for a in command.args if not a.startswith("-")]
                assert set(flags) <= {"-m", "--multirun"}, f"{command}: {flags} (this test knows -m and --multirun)"
                with monkeypatch.context() as patch:
                    _environment(command, patch)
                    try:
                        if command.env:
                            register_configs()  # FL_BENCH_PLUGINS' components
                        for point in _points(overrides, every_value) if flags else [overrides]:
                            cfg = compose("config", overrides=point, return_hydra_config=True)
                            HydraConfig.instance().set_config(cfg)
                            _check_optional_groups()
                            if flags and cfg.hydra.sweeper.get("params"):  # an Optuna search: the keys it searches
                                missing = [k for k in cfg.hydra.sweeper.params if OmegaConf.select(cfg, k) is None]
                                assert not missing, f"it searches {missing}, which this config does not have"
                            with read_write(cfg), open_dict(cfg):
                                del cfg["hydra"]
                            to_config(cfg)
                    except Exception as error:
                        problems.append(f"{command}: {error if isinstance(error, AssertionError) else one_line(error)}")
    finally:
        HydraConfig.instance().cfg = before
    return problems
