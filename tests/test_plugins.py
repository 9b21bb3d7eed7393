"""Components from a package outside fl_bench (tests/example_plugin): every kind, registered by its
own ``@schema`` classes, loaded from FL_BENCH_PLUGINS or an entry point, with the same typo and
range checks as the built-in ones."""

from __future__ import annotations

import dataclasses
import math
import sys
import warnings
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
import torch
from hydra.errors import ConfigCompositionException

from fl_bench.algorithms.base import AsyncConfig, StalenessScaled
from fl_bench.algorithms.buffered import FedBuffConfig
from fl_bench.algorithms.weightings import ExampleWeightingConfig
from fl_bench.errors import ConfigError
from fl_bench.schema import build, load_plugins, plugin_modules, schema

PLUGIN = Path(__file__).parent / "example_plugin"
SEARCHPATH = f"hydra.searchpath=[file://{PLUGIN / 'conf'}]"
ALL_EIGHT = ("dataset=blobs", "partition=label_shards", "model=tanh_mlp", "algorithm=trimmed_fedavg", "delay=lognormal",
             "speed=by_size", "availability=alternating", "selection=fastest")


@pytest.fixture
def plugin(monkeypatch):
    monkeypatch.syspath_prepend(str(PLUGIN))
    monkeypatch.setenv("FL_BENCH_PLUGINS", "my_fl_extensions")
    load_plugins()


def test_a_package_outside_fl_bench_adds_every_kind_of_component(plugin, run_config):
    # sigma ~ 0: every draw is exp(mu) = 1, so a trip lasts exactly its client's speed factor n_i / mean n
    summary, metrics, trips = run_config(SEARCHPATH, *ALL_EIGHT, "delay.sigma=1e-9", "availability.period=5",
                                         "concurrency=4", "max_trips=200", "eval_every=40")
    assert summary["algorithm"] == "trimmed_fedavg" and summary["dataset"] == "blobs" and summary["server_steps"] == 50
    assert metrics.val_accuracy.iloc[-1] > metrics.val_accuracy.iloc[0]
    # partition: 20 label shards growing linearly to 3x the first (2,000 blobs examples)
    weights = np.linspace(1, 3, 20)
    sizes = pd.Series(np.floor(weights / weights.sum() * 2000).astype(int))
    sizes.iloc[-1] += 2000 - sizes.sum()
    assert (trips.num_examples == sizes[trips.client].to_numpy()).all()
    # model: 5 -> 16 (tanh) -> 4 classes, 4-byte floats
    assert (trips.bytes_down == 4 * (5 * 16 + 16 + 16 * 4 + 4)).all()
    # delay x speed: duration = exp(0) * n_i / mean n
    mean_size = 2000 / 20
    assert np.allclose(trips.end_time - trips.start_time, trips.num_examples / mean_size, rtol=1e-6)
    # availability: a trip starts only in its client's half of the period (even: [0, 5), odd: [5, 10))
    assert ((trips.start_time // 5).astype(int) % 2 == trips.client % 2).all()
    # selection: each round takes the fastest (smallest) clients of those available then
    for start, round_trips in trips.groupby("start_time"):
        available = sizes[sizes.index % 2 == int(start // 5) % 2]
        chosen = round_trips.client.tolist()
        assert len(chosen) == 4 and available[chosen].max() <= available.drop(chosen).min()


def test_the_plugin_algorithm_trims_each_coordinate_by_hand(plugin):
    from my_fl_extensions.components import TrimmedFedAvg

    server = TrimmedFedAvg(SimpleNamespace(trim_fraction=0.25), torch.zeros(2), num_clients=4)
    for delta in ([1.0, -4.0], [2.0, 0.0], [3.0, 1.0], [10.0, 2.0]):
        server.add(SimpleNamespace(vector=torch.tensor(delta)))
    server.step()
    # trim 1 of 4 each side: coordinate 0 keeps 2, 3 -> 2.5; coordinate 1 keeps 0, 1 -> 0.5
    assert server.params.tolist() == [-2.5, -0.5] and server.version == 1


def test_a_plugin_server_optimizer_steps_a_built_in_algorithm_from_the_command_line_by_hand(plugin, compose_config):
    """FedBuff with the plugin's FedYogi step (composed as ``algorithm/server_optimizer=yogi``): two steps of
    one upload Delta = 1 (K = 1, s = 1: Dbar = 1) by hand."""
    from fl_bench.contracts import Upload

    cfg = compose_config(SEARCHPATH, "algorithm=fedbuff", "algorithm/server_optimizer=yogi", "algorithm.buffer_size=1",
                         "algorithm.server_optimizer.lr=0.5").algorithm
    assert type(cfg.server_optimizer).__name__ == "YogiServerOptimizerConfig"
    server = build(cfg, torch.zeros(1), 4)
    w, m, v = 0.0, 0.0, 1e-6
    for _ in range(2):
        server.add(Upload(0, server.version, 0, 1, torch.ones(1), steps=1))
        server.step()
        m, v = 0.9 * m + 0.1, v + 0.01  # g = 1 > v: v grows by (1 - b2) g^2
        w -= 0.5 * m / (math.sqrt(v) + 1e-3)
        assert server.params.item() == pytest.approx(w, rel=1e-6)
    with pytest.raises(ConfigError, match=r"algorithm.server_optimizer.initial_v=1e-08 is not allowed: must be >= tau\^2"):
        compose_config(SEARCHPATH, "algorithm=fedbuff", "algorithm/server_optimizer=yogi", "algorithm.server_optimizer.initial_v=1e-8")


def test_a_plugin_weighting_and_staleness_function_weigh_a_built_in_algorithm_s_uploads_by_hand(plugin, compose_config,
                                                                                                  run_config):
    """FedBuff with the plugin's sqrt(n) weights and Xie et al.'s hinge s(tau) (a = 10, b = 4), chosen as
    ``algorithm/weighting=sqrt_examples algorithm/staleness=hinge``: one step of K = 2 uploads Delta = 1, a fresh one
    of n = 4 (w = 2, s = 1) and one of n = 16 six steps stale (w = 4, s = 1 / (10 (6 - 4) + 1) = 1/21); App. B.2's
    sum: Dbar = (2 + 4/21) / (2 + 4), and w = -0.5 Dbar. A run with them differs from FedBuff's own weights."""
    from fl_bench.contracts import Upload

    chosen = (SEARCHPATH, "algorithm=fedbuff", "algorithm/weighting=sqrt_examples", "algorithm/staleness=hinge")
    cfg = compose_config(*chosen, "algorithm.buffer_size=2", "algorithm.server_optimizer.lr=0.5").algorithm
    server = build(cfg, torch.zeros(1), 4)
    server.add(Upload(0, 0, 0, 4, torch.ones(1), steps=1))
    server.add(Upload(1, 0, 6, 16, torch.ones(1), steps=1))
    server.step()
    assert server.params.item() == pytest.approx(-0.5 * (2 + 4 / 21) / 6)
    run = ("max_trips=200", "eval_every=100", "concurrency=20")
    _, plugin_weighted, _ = run_config(*chosen, *run, name="plugin")
    _, own, _ = run_config(SEARCHPATH, "algorithm=fedbuff", *run, name="own")
    assert not plugin_weighted.val_loss.equals(own.val_loss)
    with pytest.raises(ConfigError, match="algorithm.staleness.a=-1.0 is not allowed: must be >= 0"):
        compose_config(*chosen, "algorithm.staleness.a=-1")


def test_a_plugin_work_schedule_sets_each_trips_steps_for_a_built_in_algorithm_from_the_command_line(plugin, run_config):
    """FedAvg under the plugin's time-boxed schedule (``algorithm/work_schedule=time_boxed``): every trip's full work
    is 4 steps in 1 time unit (delay constant), so a client's first trip trains 4 steps, and each later one
    floor(0.3 / 0.25) = 1 step, which takes a quarter of the unit."""
    summary, _, trips = run_config(SEARCHPATH, "algorithm=fedavg", "algorithm/work_schedule=time_boxed",
                                   "algorithm.work_schedule.budget=0.3", "algorithm.local_steps=4", "delay=constant",
                                   "concurrency=10", "dataset.num_clients=12", "max_trips=60", "eval_every=30")
    assert summary["status"] == "completed"
    first = ~trips.duplicated("client")
    assert (trips.local_steps[first] == 4).all() and (trips.local_steps[~first] == 1).all() and (~first).sum() >= 40
    assert np.allclose(trips.end_time - trips.start_time, trips.local_steps / 4)
    with pytest.raises(ConfigError, match="algorithm.work_schedule.budget=0.0 is not allowed: must be > 0"):
        run_config(SEARCHPATH, "algorithm=fedavg", "algorithm/work_schedule=time_boxed", "algorithm.work_schedule.budget=0")


def test_plugin_knobs_are_checked_like_built_in_ones(plugin, compose_config):
    cfg = compose_config(SEARCHPATH, *ALL_EIGHT, "algorithm.trim_fraction=0.3", "partition.size_ratio=2")
    assert cfg.algorithm.trim_fraction == 0.3 and cfg.partition.size_ratio == 2.0
    assert cfg.algorithm._target_ == "my_fl_extensions.components.TrimmedFedAvg"
    with pytest.raises(ConfigCompositionException, match="trim_fractoin"):
        compose_config(SEARCHPATH, "algorithm=trimmed_fedavg", "algorithm.trim_fractoin=0.3")
    with pytest.raises(ConfigCompositionException, match="trim_fraction"):  # typed: a float
        compose_config(SEARCHPATH, "algorithm=trimmed_fedavg", "algorithm.trim_fraction=lots")
    with pytest.raises(ConfigError, match=r"algorithm.trim_fraction=0.6 is not allowed: must be in \[0, 0.5\)"):
        compose_config(SEARCHPATH, "algorithm=trimmed_fedavg", "algorithm.trim_fraction=0.6")
    with pytest.raises(ConfigError, match="availability.period=0.0 is not allowed"):
        compose_config(SEARCHPATH, "availability=alternating", "availability.period=0")


def test_plugin_modules_come_from_entry_points_then_the_environment(tmp_path, monkeypatch):
    info = tmp_path / "my_fl_extensions-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: my-fl-extensions\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[fl_bench.plugins]\nmine = my_fl_extensions.components\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("FL_BENCH_PLUGINS", " other_pkg , my_fl_extensions.components")
    assert plugin_modules() == ["my_fl_extensions.components", "other_pkg"]
    monkeypatch.setenv("FL_BENCH_PLUGINS", "no_such_package_here")
    monkeypatch.syspath_prepend(str(PLUGIN))
    with pytest.raises(ConfigError, match="plugin module 'no_such_package_here' .from FL_BENCH_PLUGINS. cannot be imported"):
        load_plugins()


def test_an_option_name_is_registered_once():
    with pytest.raises(ConfigError, match="delay option 'uniform' is registered twice"):
        @schema("delay", "uniform", "somewhere.Else")
        class Another:
            pass


def test_a_schema_registered_under_no_config_group_is_refused_naming_the_nearest_and_each_load_refuses_it(
        tmp_path, monkeypatch):
    from hydra.core.config_store import ConfigStore

    from fl_bench.schema import SCHEMAS

    monkeypatch.syspath_prepend(str(PLUGIN))
    monkeypatch.setenv("FL_BENCH_PLUGINS", "broken.misspelt_group")
    for _ in range(2):  # refused and undone: loaded again in this process, it is refused again, not taken
        with pytest.raises(ConfigError, match=r"^plugin module 'broken.misspelt_group' \(from FL_BENCH_PLUGINS\) "
                                              r"registers MisspeltGroupConfig under group 'algoritm', which is not a "
                                              r"config group: did you mean algorithm\? \(the groups: algorithm, "
                                              r"availability, .*server_optimizer, speed, staleness, task, weighting, work_schedule;"):
            load_plugins()
        assert "algoritm" not in SCHEMAS
    # a group of the plugin's own, with its options in its package's conf/<group>/, is a config group
    site = tmp_path / "site"
    (site / "own_group" / "conf" / "aggregator").mkdir(parents=True)
    (site / "own_group" / "__init__.py").write_text(
        "from fl_bench.schema import schema\n\n\n@schema('aggregator', 'own_mean')\nclass OwnMeanConfig:\n    k: int = 1\n")
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setenv("FL_BENCH_PLUGINS", "own_group")
    monkeypatch.setitem(SCHEMAS, "aggregator", {})  # (this test's registrations, gone after it)
    monkeypatch.setitem(ConfigStore.instance().repo["schema"], "aggregator", {})
    monkeypatch.setitem(sys.modules, "own_group", None)  # (the module imported below: removed after the test)
    del sys.modules["own_group"]
    load_plugins()
    assert "own_mean" in SCHEMAS["aggregator"]


def test_a_plugin_config_has_the_server_knobs_of_the_mixins_it_lists_and_no_other():
    """A config holds what its code reads: the protocol's knobs, and the server knobs of the mixins listed before it
    (fl_bench.algorithms.base); one it lacks is not a key, so it cannot be set and ignored."""

    @dataclasses.dataclass
    class StalenessOnlyConfig(StalenessScaled, AsyncConfig):
        pass

    keys = {spec.name for spec in dataclasses.fields(StalenessOnlyConfig)}
    assert {"staleness", "buffer_size"} <= keys and not keys & {"weighting", "reduction", "server_optimizer"}
    with pytest.raises(ConfigError, match=r"algorithm.reduction='max' is not allowed"):
        FedBuffConfig(reduction="max")  # a mixin's check runs in the config's one __post_init__ chain
    assert FedBuffConfig(weighting=ExampleWeightingConfig(), reduction="mean").weighting.name == "examples"


TAIL_MODULE = """
import math

from fl_bench.engine.delays import Delay, DelayConfig
from fl_bench.schema import schema


class LogNormalTail(Delay):
    def __init__(self, cfg):
        self.sigma = cfg.sigma

    def sample(self, rng, num_examples):
        return float(rng.lognormal(0.0, self.sigma))

    def mean(self, num_examples):
        return math.exp(self.sigma**2 / 2) * (num_examples * 0 + 1)


@schema("delay", "lognormal_tail", LogNormalTail)
class LogNormalTailConfig(DelayConfig):
    sigma: float = 1.0
"""


def test_an_installed_plugin_s_own_options_need_no_searchpath(tmp_path, monkeypatch, compose_config):
    """A package installed with an entry point and its YAML options as package data (tail_plugin/conf/): its
    options compose by name with no hydra.searchpath, and naming its conf/ as pkg:// (no __init__.py there)
    warns of nothing."""
    from fl_bench.analysis.protocol import plugin_spaces

    site = tmp_path / "site"
    (site / "tail_plugin" / "conf" / "delay").mkdir(parents=True)
    (site / "tail_plugin" / "conf" / "hparams_search").mkdir()
    (site / "tail_plugin" / "__init__.py").write_text(TAIL_MODULE)
    (site / "tail_plugin" / "conf" / "delay" / "lognormal_tail.yaml").write_text(
        "defaults:\n  - /schema/delay@_here_: lognormal_tail\n  - _self_\nsigma: 2.0\n")
    info = site / "tail_plugin-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: tail-plugin\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[fl_bench.plugins]\ntail = tail_plugin\n")
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.delenv("FL_BENCH_PLUGINS", raising=False)
    load_plugins()
    with warnings.catch_warnings(record=True) as shown:
        warnings.simplefilter("always")
        load_plugins()  # as every command does before it composes
        assert compose_config("delay=lognormal_tail").delay.sigma == 2.0  # the package's YAML, not the schema's 1.0
        assert compose_config("hydra.searchpath=[pkg://tail_plugin/conf]", "delay=lognormal_tail").delay.sigma == 2.0
    assert not [str(w.message) for w in shown]  # Hydra's "provider=..., path=tail_plugin.conf is not available" among them
    assert site / "tail_plugin" / "conf" / "hparams_search" in plugin_spaces([])  # its search spaces, for reproduce
