"""``python -m fl_bench --help``: fl_bench's own help, Hydra's way (the ``hydra/help`` group's
conf/hydra/help/fl_bench.yaml, chosen in conf/config.yaml's defaults), its lists generated when it prints.

Hydra's ``$APP_CONFIG_GROUPS`` lists every group that is not ``hydra/``: the ``schema/*`` groups too, which
only type the options (fl_bench.runs.config) and are nothing a user chooses, and Hydra has no way to leave a
group out. So the template asks this module, through the OmegaConf resolver ``fl_bench.help``:
``${fl_bench.help:groups}`` the groups a user chooses from, with their options, read from Hydra's config
loader (a new option file or plugin shows up by itself), in the order of conf/config.yaml's defaults, each
with the option this command line composes; ``${fl_bench.help:commands}`` the other commands
(fl_bench.commands.COMMANDS), each with the first line of its module's docstring, read without importing
it (the analysis commands import torch); ``${fl_bench.help:root}`` the repository, where the docs are.
``--hydra-help`` stays Hydra's.

Hydra's ``--help`` computes every ``$`` list of its template language whether the template uses them or
not, about 90 copies of the config repository (8.5 s here); so ``python -m fl_bench --help [overrides]``
prints the same template from one compose (:func:`help_text`, 0.4 s), and Hydra's own ``--help`` runs
where anything else is on the command line (``--config-dir`` ...), or the template chosen uses ``$`` names.
"""

from __future__ import annotations

import ast
import re
import string
import sys
import textwrap
from pathlib import Path

from omegaconf import OmegaConf

RESOLVER = "fl_bench.help"
INTERNAL = ("hydra", "schema")  # top-level groups that are Hydra's or only type options: not in the help
WIDTH = 100
PACKAGE = Path(__file__).resolve().parents[1]  # fl_bench/


def register_help_resolver() -> None:
    """Make ``${fl_bench.help:<section>}`` resolvable (the help template's lists). Safe to call again."""
    OmegaConf.register_new_resolver(RESOLVER, section, replace=True)


def section(name: str) -> str:
    """The help's section ``name``: empty unless help is asked for (Hydra resolves the help template at every
    composition, twice a run, and its lists cost about 0.05 s each time: most of a quick run's composing)."""
    sections = {"groups": config_groups, "commands": other_commands, "root": lambda: str(PACKAGE.parent)}
    if name not in sections:
        raise ValueError(f"${{{RESOLVER}:{name}}}: no such section of the help (choose one of {', '.join(sections)})")
    wanted = _composing_help or any(flag in sys.argv[1:] for flag in HELP_FLAGS)  # (ours, or Hydra's --help)
    return sections[name]() if wanted else ""


def user_groups(repository) -> dict[str, list[str]]:
    """Every config group (nested ones as ``parent/child``) that holds options, less :data:`INTERNAL`'s: its
    options, sorted."""
    from hydra.core.object_type import ObjectType

    found, pending = {}, [g for g in repository.get_group_options("", ObjectType.GROUP) if g not in INTERNAL]
    while pending:
        group = pending.pop(0)
        options = repository.get_group_options(group, ObjectType.CONFIG)
        if options:
            found[group] = sorted(options)
        pending += [f"{group}/{child}" for child in repository.get_group_options(group, ObjectType.GROUP)]
    return found


def config_groups() -> str:
    """``group [the option in use]: option, option, ...`` for every group a user chooses from, wrapped."""
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.hydra_config import HydraConfig

    if not GlobalHydra.instance().is_initialized():
        return ""
    loader = GlobalHydra.instance().config_loader()
    # The loader's repository itself: its get_group_options copies the whole repository on every call
    # (0.1 s here, each; Hydra's $APP_CONFIG_GROUPS makes about 90 such calls)
    repository = getattr(loader, "repository", None) or loader
    choices = dict(HydraConfig.get().runtime.choices) if HydraConfig.initialized() else {}
    # Hydra records the choices last default first: reversed, conf/config.yaml's order (what is trained, then how)
    order = [g for g in reversed(list(choices)) if "@" not in g]
    def place(group: str) -> tuple[int, str]:  # a nested group (algorithm/server_optimizer) after its parent
        top = group.split("/")[0]
        return (order.index(top) if top in order else len(order), group)

    options = user_groups(repository)
    lines = []
    for group in sorted(options, key=place):
        chosen = choices.get(group)
        head = f"{group} [{chosen}]: " if chosen else f"{group}: "
        lines.append(textwrap.fill(", ".join(options[group]), WIDTH, initial_indent="  " + head, subsequent_indent=" " * 6,
                                   break_long_words=False, break_on_hyphens=False))
    return "\n".join(lines)


def summary(module: str) -> str:
    """What ``python -m MODULE`` does in a few words: its module's docstring's first sentence, cut at its
    first colon, without a leading usage line (````python -m ...````:) or a module it names in parentheses."""
    parts = module.split(".")[1:]
    path = PACKAGE.joinpath(*parts, "__main__.py")
    if not path.exists():
        path = PACKAGE.joinpath(*parts[:-1], parts[-1] + ".py") if parts else PACKAGE / "__main__.py"
    text = ast.get_docstring(ast.parse(path.read_text())) or ""
    first = " ".join(text.split("\n\n")[0].split())
    first = re.sub(r"^``[^`]*``:\s*", "", first)  # a usage line before what it does
    first = re.split(r"\.\s+(?=[A-Z])|:\s", first, maxsplit=1)[0]  # (not at "Fig. 2" or "et al. 2020")
    first = re.sub(r"\s*\(fl_bench\.[\w.]+\)", "", first).replace("``", "")  # a module it refers to
    first = first.rstrip(".:")
    return first[:1].upper() + first[1:]


def other_commands() -> str:
    """``python -m MODULE   what it does`` for each command but the run itself."""
    from fl_bench.commands import COMMANDS

    others = [c for c in COMMANDS if c != "fl_bench"]
    width = max(len(f"python -m {c}") for c in others) + 2
    return "\n".join(f"  {f'python -m {c}':<{width}}{summary(c)}" for c in others)


HELP_FLAGS = ("--help", "-h")
_composing_help = False  # help_text is composing the help: its sections are printed


def asks_for_help(arguments: list[str]) -> bool:
    """Whether the command line is ``--help`` (or ``-h``) and overrides only: what :func:`help_text` prints."""
    flags = [a for a in arguments if a.startswith("-")]
    return bool(flags) and set(flags) <= set(HELP_FLAGS)


def help_text(config_dir: str, config_name: str, overrides: list[str]) -> str | None:
    """The help these overrides' config chooses (``hydra.help.template``, its lists resolved), as Hydra's
    ``--help`` prints it; None where the template uses Hydra's ``$`` names (Hydra's own ``--help`` then)."""
    from hydra import compose, initialize_config_dir
    from hydra.core.hydra_config import HydraConfig

    global _composing_help
    before, _composing_help = HydraConfig.instance().cfg, True
    try:
        with initialize_config_dir(config_dir, job_name="fl_bench", version_base="1.3"):
            cfg = compose(config_name, overrides=overrides, return_hydra_config=True)
            HydraConfig.instance().set_config(cfg)  # (as Hydra's --help: the template's ${hydra:...} read it)
            text = cfg.hydra.help.template
    finally:
        HydraConfig.instance().cfg, _composing_help = before, False
    return None if string.Template(text).get_identifiers() else text
