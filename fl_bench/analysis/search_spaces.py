"""The search spaces the tuner searches: ``conf/hparams_search/<space>.yaml`` (or a plugin's own, on
``hydra.searchpath``), each key's sweep parsed by Hydra's override grammar, the objects the sweeper
itself reads. A protocol checks that a space holds the paper's values and its nested special case
(fl_bench.analysis.protocol), the tuning reads what it searches (fl_bench.analysis.tuning), and the edge
guard asks where a tuned value lies in its range (fl_bench.analysis.guards)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Sequence

from omegaconf import OmegaConf

SPACES = Path(__file__).resolve().parents[2] / "conf" / "hparams_search"


def search_space_text(space: str, spaces: Path | Sequence[Path] = SPACES) -> dict[str, str]:
    """The sweeper's ``params`` of ``space`` as written (``<dir>/<space>.yaml`` in the first of
    ``spaces`` that has it: conf/hparams_search, then a plugin's own on ``hydra.searchpath``)."""
    directories = [spaces] if isinstance(spaces, Path) else list(spaces)
    path = next((d / f"{space}.yaml" for d in directories if (d / f"{space}.yaml").is_file()), None)
    if path is None:
        raise FileNotFoundError(f"search space {space!r}: no {space}.yaml in {', '.join(map(str, directories))}")
    return {key: str(value) for key, value in OmegaConf.load(path).hydra.sweeper.params.items()}


def search_space(space: str, spaces: Path | Sequence[Path] = SPACES) -> dict[str, Any]:
    """The sweeper's ``params`` of ``space``, each parsed by Hydra's override grammar (the
    ChoiceSweep / IntervalSweep / RangeSweep objects the sweeper itself reads)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parser = OverridesParser.create()
    return {key: parser.parse_override(f"{key}={value}").value() for key, value in search_space_text(space, spaces).items()}


def contains(sweep: Any, value: Any) -> bool:
    """Whether a search space's sweep (or fixed value) can take ``value``: a protocol checks that a
    space holds the paper's values and its nested special case (momentum 0, mu = 0)."""
    from hydra.core.override_parser.types import ChoiceSweep, IntervalSweep, RangeSweep

    def same(a: Any, b: Any) -> bool:
        numbers = all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in (a, b))
        return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12) if numbers else a == b

    if isinstance(sweep, IntervalSweep):
        return isinstance(value, (int, float)) and sweep.start * (1 - 1e-9) <= value <= sweep.end * (1 + 1e-9)
    if isinstance(sweep, ChoiceSweep):
        return any(same(choice, value) for choice in sweep.list)
    if isinstance(sweep, RangeSweep):
        return any(same(choice, value) for choice in range(int(sweep.start), int(sweep.stop), int(sweep.step)))
    return same(sweep, value)


def numeric_range(sweep: Any) -> tuple[float, float, bool, bool] | None:
    """(low, high, log scale, discrete) of a numeric sweep; None for a non-numeric one."""
    from hydra.core.override_parser.types import ChoiceSweep, IntervalSweep, RangeSweep

    if isinstance(sweep, IntervalSweep):
        return float(sweep.start), float(sweep.end), "log" in sweep.tags, False
    if isinstance(sweep, RangeSweep):
        return float(sweep.start), float(sweep.stop - sweep.step), False, True
    if isinstance(sweep, ChoiceSweep):
        values = [v for v in sweep.list if isinstance(v, (int, float)) and not isinstance(v, bool)]
        if len(values) == len(sweep.list) and len(values) > 1:
            positive = [v for v in values if v > 0]  # (a 0 beside a log grid is its nested special case)
            log = len(positive) > 1 and max(positive) / min(positive) >= 100
            return float(min(values)), float(max(values)), log, True
    return None

