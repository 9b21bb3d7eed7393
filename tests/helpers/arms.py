"""A table's arms as a sweep file gives them (fl_bench.analysis.sweep_file.ArmSpec), built from their fields,
for tests of the verdict, the pages and the scoreboard without a sweep file."""

from __future__ import annotations

from omegaconf import OmegaConf

from fl_bench.analysis.sweep_file import ArmSpec


def as_arms(arms: dict[str, dict]) -> dict[str, ArmSpec]:
    """``{label: {vs: ..., paper: ...}}`` as typed arms (each its own study, by default its label)."""
    return {label: OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(ArmSpec), {"study": label, **fields}))
            for label, fields in arms.items()}
