"""Component schemas: how a component declares its config, and how a config becomes the object.

A component (an algorithm, delay law, speed model, availability pattern, selection policy, model,
dataset, partition, server optimizer, DP mechanism) is a class or function with its config
dataclass beside it, in its own module. ``@schema(group, name, target)`` makes that class a
dataclass whose ``name`` is ``name`` and whose ``_target_`` names ``target``, and stores it in
Hydra's ConfigStore as ``schema/<group>/<name>``. A YAML option starts from it (``defaults: -
/schema/<group>@_here_: <name>``), so a misspelt key or a wrongly typed value fails when Hydra
composes the config (a key added with ``+``/``++`` when :func:`check_keys` reads the composed config);
``__post_init__`` checks value ranges (with :func:`require` and :func:`choice`) when the composed config
becomes objects, before any work starts.

A package outside ``fl_bench`` adds components the same way: its modules use ``@schema`` and are
imported before Hydra composes, which :func:`load_plugins` does for the modules named by the
``fl_bench.plugins`` entry point group (an installed package) and by the ``FL_BENCH_PLUGINS``
environment variable (comma-separated modules; anything importable); a plugin whose ``@schema`` names a group
no config reads (``algoritm``: :func:`config_groups`) is refused, not ignored. A plugin package's own YAML
options, in a ``conf/`` directory inside the package (package data: ``conf/<group>/<option>.yaml``),
are on every command's config search path without ``hydra.searchpath`` (:func:`plugin_conf_dirs`, read by
the Hydra search path plugin ``hydra_plugins/fl_bench_plugins``).
"""

from __future__ import annotations

import difflib
import importlib
import importlib.util
import inspect
import os
import re
import sys
import warnings
from dataclasses import dataclass, fields, is_dataclass
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any, Callable, TypeVar

from hydra.core.config_store import ConfigStore
from omegaconf import DictConfig, OmegaConf

from fl_bench.errors import ConfigError

T = TypeVar("T", bound=type)

# group -> option name -> schema dataclass, in registration order (built-in options first)
SCHEMAS: dict[str, dict[str, type]] = {}
PLUGINS_ENTRY_POINTS = "fl_bench.plugins"
PLUGINS_VARIABLE = "FL_BENCH_PLUGINS"
CONF_DIR = Path(__file__).resolve().parents[1] / "conf"  # fl_bench's own options (fl_bench.runs.cli's config_path)
# (group, name, class) of each registration while load_plugins imports a plugin module (None: not importing one)
_registering: list[tuple[str, str, type]] | None = None


def require(ok: bool, key: str, value: Any, allowed: str) -> None:
    """Refuse a config value with one line naming the key, the value and what is allowed."""
    if not ok:
        raise ConfigError(f"{key}={value!r} is not allowed: {allowed}")


def choice(key: str, value: str, choices: tuple[str, ...]) -> None:
    """Refuse a value that is not one of ``choices``."""
    require(value in choices, key, value, "choose one of " + ", ".join(choices))


def import_path(obj: Callable | str) -> str:
    """The import path Hydra's ``_target_`` convention uses for a class or function."""
    return obj if isinstance(obj, str) else f"{obj.__module__}.{obj.__qualname__}"


def schema(group: str, name: str, target: Callable | str | None = None) -> Callable[[T], T]:
    """Class decorator (in place of ``@dataclass``) for the config of option ``name`` of ``group``:
    sets the defaults of ``name`` and, given a target, of ``_target_`` (the class or function that
    :func:`build` calls with the config), makes the class a dataclass and registers it. One option
    name per group: registering a second class under a taken name is refused."""

    def register(cls: T) -> T:
        fields = {"name": name} if target is None else {"name": name, "_target_": import_path(target)}
        # Assigned, not updated: a fresh __annotations__ is what dataclass reads on every Python version.
        cls.__annotations__ = {**{key: "str" for key in fields}, **inspect.get_annotations(cls)}
        for key, value in fields.items():
            setattr(cls, key, value)
        cls = dataclass(cls)
        options = SCHEMAS.setdefault(group, {})
        taken = options.get(name)
        if taken is not None and import_path(taken) != import_path(cls):
            raise ConfigError(f"{group} option {name!r} is registered twice: by {import_path(taken)} and "
                              f"{import_path(cls)} (choose another name)")
        if taken is None and _registering is not None:
            _registering.append((group, name, cls))
        options[name] = cls
        ConfigStore.instance().store(group=f"schema/{group}", name=name, node=cls)
        return cls

    return register


def unknown_key(key: str, node: DictConfig) -> ConfigError:
    """The one line for a key (dotted, from the config's root) that ``node``'s schema (a dataclass) lacks: the
    nearest real key and all of them. Hydra's plain ``key=value`` and :func:`check_keys` (``+``/``++``) both say it."""
    parent, _, name = key.rpartition(".")
    allowed = [f.name for f in fields(OmegaConf.get_type(node))]
    option = node.get("name") if "name" in allowed else None  # a group's option (@schema): dataset=mnist
    where = (f"{parent}={option}" if option else parent) if parent else "the run config"
    close = difflib.get_close_matches(name, allowed, n=1)
    hint = f": did you mean {close[0]}?" if close else ""
    knobs = [key for key in allowed if key != "_target_"]  # (the code an option runs: set by the option)
    return ConfigError(f"{key} is not a key of {where}{hint} (its keys: {', '.join(knobs)})")


def check_keys(cfg: DictConfig, path: str = "") -> None:
    """ConfigError (:func:`unknown_key`) for the first key of a composed config that its schema lacks. Struct mode
    refuses ``key=value`` for such a key, but Hydra's ``+key=value`` and ``++key=value`` add it anyway (open_dict),
    and ``OmegaConf.to_object`` would set it as an attribute that nothing reads: a typo would run silently.
    A dict-typed field (``task.module``, ``dataset.datamodule``: constructor arguments, which the constructor
    checks) is free-form; ``hydra.*`` is Hydra's, not in the job's config."""
    schema = OmegaConf.get_type(cfg)
    if schema is None:  # an Optional field at null, or ??? (to_object says so)
        return
    known = {f.name for f in fields(schema)} if is_dataclass(schema) else None
    for key, value in cfg.items_ex(resolve=False):  # (unresolved: an interpolation is read at run time)
        if known is not None and key not in known:
            raise unknown_key(f"{path}{key}", cfg)
        if isinstance(value, DictConfig):
            check_keys(value, f"{path}{key}.")


def build(cfg: Any, *args: Any, **kwargs: Any) -> Any:
    """The one way objects are built from config: call what the config's ``_target_`` names
    (Hydra's convention; a class or a function, by import path) with the config first."""
    from hydra.utils import get_object

    return get_object(cfg._target_)(cfg, *args, **kwargs)


def _from_environment() -> list[str]:
    return [module.strip() for module in os.environ.get(PLUGINS_VARIABLE, "").split(",") if module.strip()]


def plugin_modules() -> list[str]:
    """The modules that register components from outside fl_bench: entry points first, then the
    environment variable's, in order, without repeats."""
    named = [point.module for point in entry_points(group=PLUGINS_ENTRY_POINTS)] + _from_environment()
    return list(dict.fromkeys(named))


def plugin_conf_dirs() -> list[Path]:
    """The ``conf/`` directory inside each plugin module's top-level package, where it has one, in the order
    of :func:`plugin_modules` (found without importing the module: a module that cannot be imported is
    :func:`load_plugins`' one line, not the search path's)."""
    found = []
    for module in plugin_modules():
        try:
            spec = importlib.util.find_spec(module.split(".")[0])
        except (ImportError, ValueError):
            continue
        for location in (spec.submodule_search_locations or []) if spec is not None else []:
            conf = Path(location) / "conf"
            if conf.is_dir() and conf not in found:
                found.append(conf)
    return found


def _quiet_pkg_searchpath_warnings() -> None:
    """Hydra warns that ``hydra.searchpath=[pkg://PLUGIN/conf]`` "is not available" when that directory holds
    no ``__init__.py`` (its test of a pkg:// path), yet reads its YAML: for a plugin's ``conf/``, which is on
    the search path anyway (:func:`plugin_conf_dirs`), that warning is false."""
    for conf in plugin_conf_dirs():
        package = re.escape(conf.parent.name)
        warnings.filterwarnings("ignore", message=rf"provider=hydra\.searchpath in [\w-]+, path=(pkg://)?{package}[./]conf/? "
                                                  rf"is not available\.", category=UserWarning)


def config_groups() -> list[str]:
    """The groups a ``@schema`` class can be registered under, where an option's YAML reads it
    (``/schema/<group>``): the directories of fl_bench's ``conf/`` (a nested one by its own name:
    ``algorithm/server_optimizer`` is ``server_optimizer``; not Hydra's own), the groups fl_bench's own modules
    register, and the directories of each plugin's ``conf/`` (a plugin's own group, with its options there)."""
    groups = {group for group, options in SCHEMAS.items()
              if any(cls.__module__.split(".")[0] == "fl_bench" for cls in options.values())}
    for conf in [CONF_DIR, *plugin_conf_dirs()]:
        for directory in conf.rglob("*") if conf.is_dir() else ():
            if directory.is_dir() and directory.relative_to(conf).parts[0] != "hydra":
                groups.add(directory.name)
    return sorted(groups)


def _unregister(registered: list[tuple[str, str, type]]) -> None:
    """Undo ``registered``'s registrations: SCHEMAS' and the ConfigStore's."""
    repo = ConfigStore.instance().repo.get("schema", {})
    for group, name, _ in registered:
        SCHEMAS.get(group, {}).pop(name, None)
        if not SCHEMAS.get(group, True):
            del SCHEMAS[group]
        repo.get(group, {}).pop(f"{name}.yaml", None)
        if group in repo and not repo[group]:
            del repo[group]


def _check_groups(module: str, source: str, registered: list[tuple[str, str, type]], imported: list[str]) -> None:
    """ConfigError for the first of ``registered`` (what importing plugin ``module`` registered) whose group no
    config reads: no option of it could ever be chosen, so the plugin would be ignored without a word. What the
    plugin's own package registered and imported (of ``imported``) is undone, so that it is refused again when
    loaded again (in the same process: a test's)."""
    groups = config_groups() if registered else []
    for group, _, cls in registered:
        if group in groups:
            continue
        top = module.split(".")[0]
        own = {name for name in imported if name == top or name.startswith(top + ".")}
        _unregister([entry for entry in registered if entry[2].__module__ in own or entry[0] not in groups])
        for name in own:
            del sys.modules[name]
        close = difflib.get_close_matches(group, groups, n=1)
        hint = f": did you mean {close[0]}?" if close else ""
        raise ConfigError(f"plugin module {module!r} (from {source}) registers {cls.__qualname__} under group {group!r}, "
                          f"which is not a config group{hint} (the groups: {', '.join(groups)}; a group of the "
                          f"plugin's own needs its options in conf/<group>/ inside its package)")


def load_plugins() -> None:
    """Import every plugin module (their ``@schema`` classes register themselves): :func:`load_modules`, each named
    by where it came from."""
    from_environment = set(_from_environment())
    load_modules({module: PLUGINS_VARIABLE if module in from_environment else f"entry point group {PLUGINS_ENTRY_POINTS}"
                  for module in plugin_modules()})
    _quiet_pkg_searchpath_warnings()


def load_modules(modules: dict[str, str]) -> None:
    """Import each module (module -> where it was named), whose ``@schema`` classes register themselves: the one
    way components are registered, fl_bench's own (fl_bench.runs.config) and a plugin's. ConfigError naming the
    module and the first line of its error for one that cannot be imported, whatever it raised, or for one that
    registers a schema under a group that is not a config group (:func:`config_groups`: a misspelt group)."""
    global _registering
    for module, source in modules.items():
        if module.startswith("."):  # (import_module would ask for a package to resolve it against)
            raise ConfigError(f"plugin module {module!r} (from {source}) is not allowed: give its full dotted name "
                              f"(my_package.module): a relative name has no package to start from")
        before, _registering = set(sys.modules), []
        try:
            importlib.import_module(module)
        except ImportError as err:
            raise ConfigError(f"plugin module {module!r} (from {source}) cannot be imported: {err}") from None
        except SystemExit as err:  # a script's sys.exit() run on import would end the command as if it had run
            raise ConfigError(f"plugin module {module!r} (from {source}) cannot be imported: it called "
                              f"sys.exit({err.code!r}) while being imported") from None
        except Exception as err:  # its own code failed (a SyntaxError, a dataclass's mutable default, ...)
            first = str(err).strip().splitlines()
            raise ConfigError(f"plugin module {module!r} (from {source}) cannot be imported: "
                              f"{': '.join([type(err).__name__, *first[:1]])}") from None
        finally:
            registered, _registering = _registering, None
        _check_groups(module, source, registered, [name for name in sys.modules if name not in before])
