"""The tables of the output reference (docs/reference/outputs.md), generated at build time.

The files of a run directory, the columns of metrics.csv, trips.csv and task_metrics.csv come from the
code's constants (fl_bench.runs.run_dir, run_log, checkpoint, callbacks; fl_bench.engine.trip_log); what
each one means is written here, beside them, and a constant's name without a meaning written here (or a
meaning of a name the code no longer has) stops the build. The keys of summary.json are read from the
source of the functions that write them, each with the comment written beside it.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import sys
from functools import cache
from pathlib import Path

from cells import cell, code, source_comment

REPO = Path(__file__).resolve().parents[2]

METRIC_COLUMNS = {
    "trips": "client trips over so far (the x axis of every curve)",
    "server_step": "server steps (model versions) so far",
    "sim_time": "virtual time of the evaluation (empty for `algorithm=centralized`, which has no clock)",
    "val_accuracy": "the global model's accuracy on the validation split",
    "val_loss": "its mean loss there",
    "bytes_down": "bytes every trip over so far downloaded: the model plus any optimizer statistics (FedGBO Table I)",
    "bytes_up": "bytes they uploaded: Delta plus any extras (FedGBO Table I)",
    "flops": "FLOPs of their local training (FedGBO App. B, eq. 22; Table IV's cost axes)",
}
TRIP_COLUMNS = {
    "trip": "the row's index: trips in the order they ended",
    "client": "the client's id",
    "num_examples": "its training examples",
    "download_version": "the model version it downloaded",
    "start_time": "virtual time it started",
    "end_time": "virtual time it ended (uploaded, failed or was dropped)",
    "staleness": "server steps between its download and the step that used its update",
    "used": "1: its update was uploaded; 0: a dropped or aborted trip (over-selection, a deadline, a failure), nothing uploaded",
    "bytes_down": "bytes it downloaded (the model plus any optimizer statistics)",
    "bytes_up": "bytes it uploaded (Delta plus any extras), 0 for a trip that uploaded nothing",
    "flops": "its local training: steps x C |x| + examples x (forward + backward), counted by "
             "`torch.utils.flop_counter.FlopCounterMode` on one real step (+ n x (forward + backward) for Mimelite's "
             "full-batch gradient; C = 2 for SGD, 5 FedProx, Table VI's constants for the adaptive rules); 0 when it uploaded nothing",
    "weight": "the upload's normalised share of its server step where the algorithm states one "
              "(FedBuff family, FedStaleWeight, HFL, the FedAvg family), else NaN",
}
BEHAVIOUR_COLUMNS = {
    "failed": "0: it was not lost; 1: the device failed; 2: an outage cut it; 3: with "
              "`availability.on_unavailable=drop`, its window closed; 4: the work deadline came before its first step",
    "comm_time": "the part of `end_time - start_time` spent communicating",
    "local_steps": "the local steps an uploaded trip trained (0 for a lost one)",
}
TASK_METRIC_COLUMNS = {
    "trips": "client trips at the evaluation",
    "server_step": "server steps at the evaluation",
    "stage": "`train` (the mean over the steps, or epochs, of the trips trained since the last evaluation) or "
             "`val` (the mean over the validation batches)",
    "name": "what the module logged, as `self.log` named it (`<name>_step` and `<name>_epoch` for a Metric logged both ways)",
    "value": "its value",
}
# Files of a run directory, by the code's names for them (RESULT_FILES, and the others below).
RUN_FILES = {
    "metrics.csv": "one row per evaluation (below); written as the run goes",
    "trips.csv": "one row per client trip that ended (below); written as the run goes",
    "model.pt": "the final model's `state_dict` (completed runs)",
    "model.pt.sha256": "its SHA-256 in `sha256sum` format: `fl_bench.runs.checkpoint.load_verified(\"<run dir>/model.pt\")` "
                       "checks it and loads the state_dict, `sha256sum -c model.pt.sha256` checks it from a shell",
    ".hydra/config.yaml": "the resolved config",
    ".hydra/hydra.yaml": "Hydra's own config of the run",
    ".hydra/overrides.yaml": "the command line's overrides",
    "summary.json": "the run's last file, renamed into place whole (below)",
    "checkpoint.pt": "while the run is unfinished: the whole simulation between two events (model, optimizer and "
                     "algorithm state, per-client stores, event queue, trips in flight, RNG states, logs so far)",
    "checkpoint.pt.sha256": "its SHA-256, verified before the checkpoint is read",
    ".lock": "an `flock` held while a run uses the directory (the kernel drops it when the process dies)",
    ".replaced": "an earlier run of the directory, moved aside while a new one runs there",
    ".diverged": "a run that diverged where a completed run of another config stood, which stays in its place",
    ".pruned": "a tuning trial pruned where a completed run of another config stood, which stays in its place",
    "cli.log": "the run's log: evaluations, checkpoints, resumes, the summary line (the console shows only warnings, "
               "the progress bar and the result line)",
    "task_metrics.csv": "`task=lightning`: what the module's `self.log` sent, at each evaluation (below)",
    "checkpoints/last.ckpt": "`algorithm=centralized`: Lightning's checkpoint at a round's end, which the same command "
                             "resumes from",
    "lightning_logs/": "`algorithm=centralized`: Lightning's CSV logger, `version_N/` per resume",
    "wandb/": "`logger=wandb`: the W&B run's local files (`wandb sync <run dir>/wandb/offline-run-*` uploads an offline one)",
}
# The functions that build summary.json (the callbacks' summary(): keys a run adds where its callback is on);
# a key set later by ``summary["key"] = ...`` or ``summary.update(key=...)`` is found anywhere in these modules.
SUMMARY_WRITERS = {
    "fl_bench.runs.experiment": ("summarise",),
    "fl_bench.runs.centralized": ("CentralizedRun.summary",),
    "fl_bench.runs.run_dir": ("write_summary",),
    "fl_bench.runs.callbacks": ("*.summary",),
    "fl_bench.runs.pruning": ("*.summary",),
    "fl_bench.privacy.accounting": ("spent",),  # (PrivateServer.privacy_summary, the DP callback's summary)
}


def _import(module: str):
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    return importlib.import_module(module)


def _described(names: tuple[str, ...], meanings: dict[str, str], what: str) -> dict[str, str]:
    """``meanings`` in the order of the code's ``names``; RuntimeError where they disagree (the build stops)."""
    if set(names) != set(meanings):
        raise RuntimeError(f"docs/gen/output_reference.py: the {what} in the code are {sorted(names)}, the meanings "
                           f"written for them {sorted(meanings)}: describe each new one, drop each removed one")
    return {name: meanings[name] for name in names}


def _table(header: tuple[str, str], rows: dict[str, str]) -> str:
    lines = [f"| {header[0]} | {header[1]} |", "|---|---|"]
    return "\n".join(lines + [f"| {code(name)} | {text} |" for name, text in rows.items()])


def run_files() -> str:
    run_dir, checkpoint = _import("fl_bench.runs.run_dir"), _import("fl_bench.runs.checkpoint")
    callbacks, centralized = _import("fl_bench.runs.callbacks"), _import("fl_bench.runs.centralized")
    names = (*run_dir.RESULT_FILES, run_dir.SUMMARY, checkpoint.CHECKPOINT, checkpoint.CHECKPOINT + ".sha256", run_dir.LOCK,
             run_dir.REPLACED, *run_dir.BESIDE.values(), *sorted(run_dir._HYDRA_ENTRIES), callbacks.TaskMetricsLog(None)._path(_Run()).name,
             f"{centralized.CHECKPOINTS}/last.ckpt", "lightning_logs/", "wandb/")
    return _table(("file", "what it holds"), _described(names, RUN_FILES, "run directory's files"))


class _Run:
    """Enough of a run for a callback to name its file."""

    run_dir = Path(".")


def metric_columns() -> str:
    names = _import("fl_bench.runs.run_log").METRIC_COLUMNS
    return _table(("column", "what it is"), _described(names, METRIC_COLUMNS, "metrics.csv columns"))


def trip_columns() -> str:
    log = _import("fl_bench.engine.trip_log").TripLog
    rows = _described(("trip", *log.COLUMNS), TRIP_COLUMNS, "trips.csv columns")
    behaviour = _described(log.BEHAVIOUR_COLUMNS, BEHAVIOUR_COLUMNS, "trips.csv columns of behaviour=unreliable")
    return (_table(("column", "what it is"), rows) + "\n\nWith `behaviour=unreliable` (absent otherwise, so that a run "
            "without behaviours writes the same trips.csv as before; `local_steps` alone is there too under a work schedule "
            "that sets each trip's steps, `algorithm/work_schedule=compass`):\n\n" + _table(("column", "what it is"), behaviour))


def task_metric_columns() -> str:
    names = _import("fl_bench.runs.callbacks").TaskMetricsLog.COLUMNS
    return _table(("column", "what it is"), _described(names, TASK_METRIC_COLUMNS, "task_metrics.csv columns"))


# ------------------------------------------------------------------------------------------ summary.json

def summary_keys() -> dict[str, tuple[str, str]]:
    """Every key the code writes into summary.json: key -> (where: the function, the comment beside it)."""
    found: dict[str, tuple[str, str]] = {}
    for module, writers in SUMMARY_WRITERS.items():
        source = inspect.getsource(_import(module))
        tree, lines = ast.parse(source), source.splitlines()
        functions = sorted(_functions(tree), key=lambda item: not any(_matches(item[0], w) for w in writers))
        for qualname, function in functions:  # the writers first: their keys in the order they write them
            writer = any(_matches(qualname, pattern) for pattern in writers)
            for key, comment in _keys_written(function, writer, tree, lines, module):
                where = found.get(key, (f"{module.removeprefix('fl_bench.')}.{qualname}", ""))[0]  # its first writer
                found[key] = (where, found.get(key, ("", ""))[1] or comment)
    return found


def _matches(qualname: str, pattern: str) -> bool:
    """``Class.method`` against ``*.method`` (a method of any class), or the exact name."""
    return qualname.count(".") == 1 and qualname.endswith(pattern[1:]) if pattern.startswith("*.") else qualname == pattern


def _functions(tree: ast.Module):
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            yield node.name, node
        elif isinstance(node, ast.ClassDef):
            yield from ((f"{node.name}.{n.name}", n) for n in node.body if isinstance(n, ast.FunctionDef))


def _keys_written(function: ast.FunctionDef, writer: bool, tree: ast.Module, lines: list[str], module: str):
    """(key, comment) that ``function`` writes into a summary: a writer's dict literals' string keys (and the keys
    of a dict spread into one: ``**timing``, ``**describe_numerics()``); in any function, ``summary["key"] = ...``
    and the keywords of ``summary.update(...)``."""
    parents = {child: node for node in ast.walk(function) for child in ast.iter_child_nodes(node)}
    for node in ast.walk(function):
        if writer and isinstance(node, ast.Dict) and _bound_or_returned(node, parents):
            for key, value in zip(node.keys, node.values):
                if key is not None:
                    yield key.value, source_comment(lines, key.lineno, value.end_lineno)
                elif getattr(value, "id", None) != "summary":  # (not the summary being extended: write_summary)
                    comment = source_comment(lines, value.lineno, value.end_lineno)
                    yield from ((k, comment) for k in _spread(value, function, tree, module))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "update" \
                and getattr(node.func.value, "id", None) == "summary":
            yield from ((kw.arg, source_comment(lines, node.lineno, node.end_lineno)) for kw in node.keywords if kw.arg)
        elif isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Subscript) \
                and getattr(node.targets[0].value, "id", None) == "summary" and isinstance(node.targets[0].slice, ast.Constant):
            yield node.targets[0].slice.value, source_comment(lines, node.lineno, node.end_lineno)


def _bound_or_returned(node: ast.Dict, parents: dict[ast.AST, ast.AST]) -> bool:
    """A dict literal that is returned or bound to a name (``summary = {...}``, ``logged = {...} if ... else {}``),
    not one passed to a call (a mapping the summary's values are computed from)."""
    parent = parents.get(node)
    while isinstance(parent, ast.IfExp):
        parent = parents.get(parent)
    return isinstance(parent, (ast.Return, ast.Assign))


def _spread(value: ast.expr, function: ast.FunctionDef, tree: ast.Module, module: str) -> list[str]:
    """The keys of ``**value``: a name bound to a dict in the function or else the module (``timing =
    dict(...)``), an attribute bound to one in the package (``**sim.failures``: ``self.failures = {...}``), or a
    function's returned dict (``**describe_numerics()``, followed through its import)."""
    if isinstance(value, ast.Call) and isinstance(value.func, ast.Name):
        return _returned_keys(*_resolve(value.func.id, tree))
    target = value.id if isinstance(value, ast.Name) else value.attr if isinstance(value, ast.Attribute) else None
    if target is not None:
        trees = [function, tree] if isinstance(value, ast.Name) else [_tree(path) for path in sorted((REPO / "fl_bench").rglob("*.py"))]
        for candidate in trees:
            for node in ast.walk(candidate):
                if isinstance(node, ast.Assign) and any(_binds(t, target, isinstance(value, ast.Name)) for t in node.targets):
                    keys = _literal_keys(node.value)
                    if keys:
                        return keys
    raise RuntimeError(f"docs/gen/output_reference.py: cannot tell the keys of **{ast.unparse(value)} in {module}'s summary")


def _binds(target: ast.expr, name: str, plain: bool) -> bool:
    if plain:
        return isinstance(target, ast.Name) and target.id == name
    return isinstance(target, ast.Attribute) and target.attr == name and getattr(target.value, "id", None) == "self"


def _literal_keys(node: ast.expr) -> list[str]:
    """The string keys of a dict literal, ``dict(k=...)``, or either branch of ``A if c else B``."""
    if isinstance(node, ast.IfExp):
        return _literal_keys(node.body) + _literal_keys(node.orelse)
    if isinstance(node, ast.Dict):
        return [k.value for k in node.keys if isinstance(k, ast.Constant)]
    if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "dict":
        return [kw.arg for kw in node.keywords if kw.arg]
    return []


@cache
def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text())


def _resolve(name: str, tree: ast.Module) -> tuple[ast.Module, str]:
    """The module tree and function name that ``name`` calls: this module's own, or an imported one."""
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module:
            for alias in node.names:
                if (alias.asname or alias.name) == name:
                    return ast.parse(inspect.getsource(_import(node.module))), alias.name
    return tree, name


def _returned_keys(tree: ast.Module, name: str) -> list[str]:
    function = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name)
    return [k for n in ast.walk(function) if isinstance(n, ast.Return) and n.value is not None for k in _literal_keys(n.value)]


def summary_table() -> str:
    lines = ["| key | written by | what it is |", "|---|---|---|"]
    for key, (where, comment) in summary_keys().items():
        lines.append(f"| {code(key)} | {code(where)} | {cell(comment)} |")
    return "\n".join(lines)


def sections() -> dict[str, str]:
    """The generated parts of docs/reference/outputs.md, by the name of their marker there."""
    return {"run files": run_files(), "metrics.csv": metric_columns(), "trips.csv": trip_columns(),
            "task_metrics.csv": task_metric_columns(), "summary.json": summary_table()}
