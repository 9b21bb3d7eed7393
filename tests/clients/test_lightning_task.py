"""task=lightning (fl_bench.clients.lightning_task): a user's LightningModule trains client trips
through its own training_step, optimizer, scheduler and hooks; its self.log reaches
task_metrics.csv; it is evaluated by its validation_step; the algorithm's client knobs apply around it."""

from __future__ import annotations

import warnings
from pathlib import Path

import pandas as pd
import pytest
import torch

from fl_bench.contracts import Broadcast
from fl_bench.runs.experiment import build_experiment, run_experiment
from tests.conftest import compose_run_config
from tests.helpers.runs import killed_and_resumed

PLUGIN = Path(__file__).resolve().parents[1] / "example_plugin"
MODULES = "my_fl_extensions.lightning_modules"
DIGITS = ("dataset=digits", "model=mlp", "max_trips=40", "eval_every=20", "concurrency=10", "accelerator=cpu")


@pytest.fixture(autouse=True)
def user_package(monkeypatch):
    monkeypatch.syspath_prepend(str(PLUGIN))


def lightning(module: str, *overrides: str) -> tuple[str, ...]:
    return ("task=lightning", f"task.module._target_={MODULES}.{module}", *DIGITS, *overrides)


def built(*overrides: str):
    cfg = compose_run_config(*overrides)
    return build_experiment(cfg, on_eval=lambda progress: False)


def trip_deltas(exp, clients=(0, 1, 2), seeds=(11, 12, 13)):
    start = exp.server.broadcast()
    return exp.trainer.train([start] * len(clients), list(clients), list(seeds))


def recorded(exp, names, clients=(0, 0), seeds=(1, 2)):
    """What trips appended to the module's lists ``names``, trip after trip: what a trip changes of the module's
    attributes is undone after it (a client keeps nothing between trips), so each trip's list is read as it left it."""
    module, seen = exp.task.module, {name: [] for name in names}
    for client, seed in zip(clients, seeds):
        lists = {name: getattr(module, name) for name in names}
        trip_deltas(exp, (client,), (seed,))
        for name in names:
            seen[name] += lists[name]
            assert getattr(module, name) == []  # (as before the trip)
    return seen


@pytest.mark.parametrize("knobs", [
    (),
    ("algorithm.lr_norm=true", "algorithm.batch_size=16"),  # a short last batch: lr * n / B
    ("algorithm=fedprox", "algorithm.prox_mu=0.5"),  # the proximal term added to the module's loss
    ("algorithm.lr_decay=0.5", "algorithm.local_epochs=2"),  # lr * decay^t, two local epochs
])
def test_a_module_that_wraps_the_network_trains_as_the_builtin_task(knobs):
    """WrappedNetwork: fl_bench's own network, cross-entropy and SGD at the same lr. Its trips (the
    module's training_step and its optimizer, with LR-norm, FedProx and the lr schedule applied around
    them) give the built-in trainer's Deltas."""
    common = (*DIGITS, "algorithm.client_lr=0.2", "vmap_clients=false", *knobs)
    builtin = built(*common)
    wrapped = built("task=lightning", f"task.module._target_={MODULES}.WrappedNetwork", "+task.module.lr=0.2", *common)
    assert wrapped.trainer.own_optimizer
    for exp in (builtin, wrapped):
        exp.server.version = 3  # the lr schedule's t
    assert torch.equal(builtin.server.params, wrapped.server.params)  # the same initial model
    expected, got = trip_deltas(builtin), trip_deltas(wrapped)
    assert expected.abs().sum() > 0
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6)


def test_under_an_algorithm_whose_server_reads_the_client_rule_trips_step_with_that_rule():
    """FedGBO's clients step with U(eta, g, s) at client_lr: a module's trips do the same on its
    gradients (its configure_optimizers is not used), so they equal the built-in task's."""
    common = (*DIGITS, "algorithm=fedgbo", "algorithm.client_lr=0.05", "vmap_clients=false")
    builtin = built(*common)
    wrapped = built("task=lightning", f"task.module._target_={MODULES}.WrappedNetwork", "+task.module.lr=9.0", *common)
    assert not wrapped.trainer.own_optimizer
    assert "the algorithm's rule" in wrapped.describe()[1]
    state = {k: torch.rand_like(v) + 0.5 for k, v in builtin.server.broadcast().state.items()}
    assert state  # the global statistics s the rule reads
    start = Broadcast(0, builtin.server.params, state)
    expected = builtin.trainer.train([start] * 2, [0, 1], [5, 6])
    got = wrapped.trainer.train([start] * 2, [0, 1], [5, 6])
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6)


def test_the_scheduler_steps_per_step_and_each_trip_starts_a_fresh_optimizer():
    """StepLR(gamma=0.5) with interval "step": the lr halves at every step of a trip and starts again
    at the module's lr on the next trip (a client has no optimizer state from earlier trips)."""
    exp = built(*lightning("DigitsClassifier", "+task.module.lr=0.4", "+task.module.gamma=0.5",
                           "algorithm.batch_size=64", "algorithm.lr_norm=false"))  # LR-norm would scale a short batch
    module = exp.task.module
    steps = int(-(-exp.data.sizes[0] // 64))
    seen = recorded(exp, ("seen_lrs", "hooks"))
    per_trip = [0.4 * 0.5 ** k for k in range(steps)]
    assert seen["seen_lrs"] == pytest.approx(per_trip * 2)
    # the step FLOPs are counted on a copy of the module: its hooks are the two trips' alone
    assert seen["hooks"] == ["train_start", "epoch_start", "epoch_end", "train_end"] * 2
    assert module.hooks == []


def test_a_run_logs_what_the_module_logs_without_warnings_and_scores_it_by_its_validation_step(tmp_path):
    """A whole FedAvg run: training_step's self.log values reach task_metrics.csv (the mean over the
    steps since the last evaluation), validation_step's val_loss / val_acc are metrics.csv's
    val_loss / val_accuracy, and no warning is raised (self.log goes through Fabric)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        summary = run_experiment(compose_run_config(*lightning("DigitsClassifier", "algorithm=fedavg")), tmp_path / "run")
    metrics = pd.read_csv(tmp_path / "run" / "metrics.csv")
    logged = pd.read_csv(tmp_path / "run" / "task_metrics.csv")
    assert summary["status"] == "completed" and len(metrics) == 3
    assert set(logged.name) == {"train_loss", "train_acc", "val_loss", "val_acc"}
    val = logged[logged.stage == "val"].pivot(index="trips", columns="name", values="value")
    assert val["val_acc"].tolist() == pytest.approx(metrics.set_index("trips")["val_accuracy"].tolist())
    assert val["val_loss"].tolist() == pytest.approx(metrics.set_index("trips")["val_loss"].tolist())
    train = logged[logged.stage == "train"]
    assert set(train.trips) == {20, 40} and train.value.notna().all()  # trips trained before each evaluation
    assert (tmp_path / "run" / "model.pt").exists() and summary["final_val_accuracy_by_class"] == []


def test_dict_batches_adam_an_epoch_scheduler_and_fl_benchs_own_evaluation(tmp_path):
    """A module reading {"image", "label"} batches (task.batch_keys), Adam with an epoch-interval
    scheduler in Lightning's ([optimizers], [schedulers]) form (two local epochs, so that it acts within
    a trip), no validation_step: the run scores its logits with cross-entropy and accuracy and reports
    accuracy per class."""
    summary = run_experiment(compose_run_config(*lightning("DictBatchClassifier", "task.batch_keys=[image,label]",
                                                           "algorithm=fedbuff", "algorithm.local_epochs=2")),
                             tmp_path / "run")
    assert summary["status"] == "completed" and 0.1 < summary["final_val_accuracy"] <= 1
    assert len(summary["final_val_accuracy_by_class"]) == 10
    logged = pd.read_csv(tmp_path / "run" / "task_metrics.csv")
    assert set(logged.name) == {"loss", "batch_size"} and set(logged.stage) == {"train"}


@pytest.mark.slow
@pytest.mark.parametrize("buffers", ["federated", "local"])
def test_a_resumed_lightning_run_ends_identical_to_an_uninterrupted_one(tmp_path, buffers):
    """Killed after its checkpoint (server step 2) and resumed: metrics.csv, task_metrics.csv (with the
    training sums of the trips since the last evaluation kept in the checkpoint) and the model are
    those of an uninterrupted run; the BatchNorm buffers (global, or each client's) are in the checkpoint."""
    overrides = lightning("DocsClassifier", "algorithm=fedbuff", "algorithm.buffer_size=5", "max_trips=60",
                          "eval_every=25", "checkpoint_every=3", f"task.buffers={buffers}")
    whole = tmp_path / "whole"
    run_experiment(compose_run_config(*overrides), whole)
    cut = tmp_path / "cut"
    killed_and_resumed(overrides, cut, after_version=6)  # resumes from the checkpoint
    for name in ("metrics.csv", "task_metrics.csv", "trips.csv"):
        pd.testing.assert_frame_equal(pd.read_csv(cut / name), pd.read_csv(whole / name))
    assert torch.equal(*(torch.cat([t.flatten() for t in torch.load(d / "model.pt").values()]) for d in (cut, whole)))


@pytest.mark.parametrize("overrides, message", [
    (lightning("DigitsClassifier", "cuda_graphs=true"), r"^cuda_graphs=true is not allowed with task=lightning"),
    (lightning("NotALightningModule"), r"NotALightningModule is not a LightningModule class"),
    (lightning("Missing"), r"^task.module._target_=my_fl_extensions.lightning_modules.Missing cannot be imported"),
    (("task=lightning", *DIGITS), r"^task.module._target_=None is not allowed: name your LightningModule"),
    (lightning("DigitsClassifier", "task.batch_keys=[x]"), r"^task.batch_keys=\['x'\] is not allowed"),
    (lightning("DigitsClassifier", "precision=16-mixed"), r"precision=16-mixed"),
    (lightning("WrappedNetwork", "task.accuracy_key=acc"),
     r"^task.accuracy_key=acc names a logged metric, but WrappedNetwork is evaluated by its logits"),
    (lightning("WrappedNetwork", "algorithm=fedgbo", "precision=bf16-mixed", "precision=16-mixed"), r"precision=16-mixed"),
])
def test_what_cannot_work_is_refused_in_one_line(overrides, message):
    from fl_bench.errors import ConfigError

    with pytest.raises(ConfigError, match=message) as error:
        built(*overrides)
    assert "\n" not in str(error.value)


def test_torchmetrics_objects_are_logged_with_the_trainers_semantics():
    """A Metric logged on_epoch is computed over the whole epoch (validation: every batch, weighted by
    what each holds, not the mean of batch values) and reset; on_step and on_epoch both give
    <name>_step and <name>_epoch; a training epoch's Metric is computed once, at its end; what
    Lightning would not average is refused in one line."""
    from torchmetrics.classification import MulticlassAccuracy

    from fl_bench.clients.lightning_metrics import TaskMetrics
    from fl_bench.errors import ConfigError

    metrics, accuracy = TaskMetrics(), MulticlassAccuracy(3, average="micro")
    metrics.stage = "val"
    for preds, target in ((torch.tensor([0, 1, 2, 0]), torch.tensor([0, 1, 2, 0])),  # 4 of 4 right
                          (torch.tensor([1]), torch.tensor([0]))):  # 0 of 1
        metrics.batch_size = len(target)
        accuracy.update(preds, target)
        metrics.record("val_acc", accuracy, None, None, "mean", None)
    assert metrics.take_validation() == {"val_acc": pytest.approx(4 / 5)}  # not (1 + 0) / 2
    assert accuracy.update_count == 0  # reset for the next evaluation

    metrics.stage, metrics.trip = "train", 7
    for epoch in range(2):
        for right in (True, False):
            preds = torch.tensor([0, 1]) if right else torch.tensor([1, 0])
            accuracy(preds, torch.tensor([0, 1]))  # forward: the batch value is the step's
            metrics.record("train_acc", accuracy, True, True, "mean", None)
            metrics.record("loss", torch.tensor(2.0 if right else 4.0), None, None, "mean", None)
        metrics.end_epoch()
    assert metrics.take_training() == {"train_acc_step": 0.5, "train_acc_epoch": 0.5, "loss": 3.0}
    with pytest.raises(ConfigError, match=r"^self.log\('loss', ..., reduce_fx='max'\): fl_bench averages"):
        metrics.record("loss", 1.0, None, None, "max", None)
    with pytest.raises(ConfigError, match=r"^self.log\('x', ...\) got a tensor of shape \[3\]: log a number"):
        metrics.record("x", torch.ones(3), None, None, "mean", None)


@pytest.mark.slow  # two runs of 300 trips
@pytest.mark.parametrize("algorithm", ["fedbuff", "fedavg"])
def test_a_module_written_as_the_docs_write_it_trains_federated_and_learns(tmp_path, algorithm, caplog):
    """DocsClassifier (torchmetrics objects in self.log, a MetricCollection in self.log_dict, the
    validation loss returned rather than logged, BatchNorm): no warning, its metrics in
    task_metrics.csv, the returned loss used and said so, above 50% on digits."""
    caplog.set_level("INFO", logger="fl_bench.runs.experiment")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        summary = run_experiment(compose_run_config(*lightning("DocsClassifier", f"algorithm={algorithm}", "max_trips=300",
                                                               "eval_every=150", "concurrency=100")), tmp_path / "run")
    assert summary["final_val_accuracy"] > 0.5
    logged = pd.read_csv(tmp_path / "run" / "task_metrics.csv")
    assert set(logged.name) == {"train_acc_step", "train_acc_epoch", "train_loss", "val_acc", "val_f1"}
    metrics = pd.read_csv(tmp_path / "run" / "metrics.csv").set_index("trips")
    val = logged[logged.stage == "val"].pivot(index="trips", columns="name", values="value")
    assert val["val_acc"].tolist() == pytest.approx(metrics["val_accuracy"].tolist())
    assert "validation loss: what validation_step returns (it logs no val_loss)" in caplog.messages[1]


def test_federated_buffers_are_the_weighted_mean_of_the_trips_and_the_global_model_is_evaluated_with_them(tmp_path):
    """task.buffers=federated: trips start from the downloaded version's buffers; after a step the
    global buffers are the examples-weighted mean of the consumed trips' final buffers (hand-computed
    here); evaluation and model.pt use them. reset (every trip from the initial buffers, evaluation
    with the last trip's) gives another run; local keeps each client's own."""
    from fl_bench.clients.lightning_task import flat_buffers

    exp = built(*lightning("DocsClassifier", "algorithm=fedavg"))
    trainer, module = exp.trainer, exp.task.module
    initial = trainer.global_buffers.clone()
    norms = [m for m in module.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    # as built: the FLOP count's training step (before the run's device is chosen) ran on a copy
    assert norms and all(int(m.num_batches_tracked) == 0 and not m.running_mean.any() for m in norms)
    start = exp.simulator._broadcast()
    assert torch.equal(start.state["buffers"], initial)  # the download carries them
    trainer.train([start] * 3, [0, 1, 2], [11, 12, 13])
    finals = [trainer._trip_buffers[seed].clone() for seed in (11, 12, 13)]
    assert all(not torch.equal(final, initial) for final in finals)  # each trip moved its statistics
    sizes = [float(exp.data.sizes[c]) for c in (0, 1, 2)]
    by_hand = sum(n * f for n, f in zip(sizes, finals)) / sum(sizes)
    trainer.after_server_step([11, 12, 13], [0, 1, 2], None)
    assert torch.allclose(trainer.global_buffers, by_hand, rtol=0, atol=1e-12) and not trainer._trip_buffers
    exp.task.evaluate(exp.data.x_val, exp.data.y_val)
    evaluated = flat_buffers(module)
    counters = torch.tensor([not b.is_floating_point() for b in module.buffers() for _ in range(b.numel())])
    assert torch.allclose(evaluated[~counters], by_hand[~counters]) and torch.equal(evaluated[counters], by_hand[counters].round())

    summaries = {rule: run_experiment(compose_run_config(*lightning("DocsClassifier", "algorithm=fedavg",
                                                                    f"task.buffers={rule}", "concurrency=20")),
                                      tmp_path / rule) for rule in ("federated", "reset")}
    assert summaries["federated"]["final_val_loss"] != summaries["reset"]["final_val_loss"]
    saved = torch.load(tmp_path / "federated" / "model.pt")
    assert saved["net.2.running_mean"].abs().sum() > 0  # the global statistics, saved with the model

    local = built(*lightning("DocsClassifier", "algorithm=fedavg", "task.buffers=local"))
    tracked = []
    for seed in (21, 22):  # the same client twice: the second trip goes on from the first's statistics
        local.trainer.train([local.simulator._broadcast()], [0], [seed])
        local.trainer.after_server_step([seed], [0], None)
        tracked.append(local.trainer.client_buffers[0][counters].item())
    assert tracked[0] > 0 and tracked[1] == 2 * tracked[0]  # batches counted over both trips
    assert "buffers" not in local.simulator._broadcast().state  # nothing of a client's own is sent


@pytest.mark.parametrize("algorithm", ["fedbuff", "fedavg"])
def test_a_batchnorm_module_as_the_docs_write_it_learns_on_the_default_partition(tmp_path, algorithm, caplog):
    """BatchNormClassifier (Lightning's docs' Linear, BatchNorm1d, ReLU, Dropout, Linear, with no guard for a
    batch of one) on digits' default partition, where clients of 33 and 65 examples end an epoch with a batch
    of one: task.drop_last=null leaves out the short last batches of a BatchNorm module, says so, and it learns."""
    caplog.set_level("INFO", logger="fl_bench.runs.experiment")
    summary = run_experiment(compose_run_config("task=lightning", f"task.module._target_={MODULES}.BatchNormClassifier",
                                                "dataset=digits", f"algorithm={algorithm}", "max_trips=300",
                                                "eval_every=150", "accelerator=cpu"), tmp_path / "run")
    assert summary["status"] == "completed" and summary["final_val_accuracy"] > 0.5  # (chance: 0.1)
    assert any("short last batch is left out (the model has BatchNorm layers" in m for m in caplog.messages[:4])


def test_drop_last_leaves_out_each_epoch_s_short_last_batch_and_keeps_a_small_client_whole():
    """task.drop_last=true: every minibatch of a trip is a full one, except a client with fewer examples
    than the batch size, which trains on them all; steps and FLOPs count the trips' own batches.
    false (the default for a module without BatchNorm) keeps the short batches."""
    from fl_bench.clients.trainer import minibatch_plan

    common = ("algorithm.batch_size=16", "algorithm.local_epochs=2")
    for flag in ("true", "false"):
        exp = built(*lightning("WrappedNetwork", f"task.drop_last={flag}", *common))
        sizes, local = exp.data.sizes, exp.trainer.local
        clients = list(range(exp.data.num_clients))
        plan = minibatch_plan(sizes[clients], [7 + c for c in clients], local)
        counts = plan.mask.sum(-1)
        for c in clients:
            n, got = int(sizes[c]), counts[c, : plan.steps[c]].tolist()
            expected = ([16] * (n // 16) if n >= 16 else [n]) if flag == "true" else [16] * (n // 16) + [n % 16] * (n % 16 > 0)
            assert got == expected * 2, (c, n)
            seen = plan.rows[c][plan.mask[c]].reshape(-1)
            if flag == "false":  # every example in every epoch
                assert sorted(seen.tolist()) == sorted(list(range(n)) * 2)
        assert exp.simulator.steps_by_client.tolist() == plan.steps.tolist()
    assert (sizes % 16 > 0).any() and (sizes < 16).any()  # (both kinds of client are there)


def test_a_module_s_lr_scheduler_acts_within_a_trip_and_starts_afresh_with_every_trip(caplog):
    """StepLR(step_size=1, gamma=0.5) with interval epoch: over two local epochs the second epoch's steps
    take half the lr of the first; with interval step the lr halves at every step through both epochs; the
    next trip starts again at the module's lr, and the run's first lines say so."""
    for interval in ("epoch", "step"):
        exp = built(*lightning("EpochStepLR", "+task.module.lr=0.4", f"+task.module.interval={interval}",
                               "algorithm.local_epochs=2", "algorithm.batch_size=8", "task.drop_last=true"))
        module = exp.task.module
        per_epoch = int(exp.data.sizes[0]) // 8
        seen = recorded(exp, ("seen_lrs",))["seen_lrs"]
        if interval == "epoch":
            trip = [0.4] * per_epoch + [0.2] * per_epoch
        else:
            trip = [0.4 * 0.5 ** k for k in range(2 * per_epoch)]
        assert per_epoch >= 2 and seen == pytest.approx(trip * 2) and module.seen_lrs == []
        assert f"its lr scheduler StepLR (per {interval}) acting within each trip and starting afresh with every trip" \
            in exp.describe()[1]


def test_federated_buffers_are_counted_in_their_own_dtypes_both_ways():
    """A BatchNorm1d(32)'s buffers: running mean and variance (float32) and its batch counter (int64), 32 * 4 * 2 + 8
    bytes, down with the model and up with the update; none with task.buffers=local (nothing is sent)."""
    for rule, extra in (("federated", 32 * 4 * 2 + 8), ("local", 0)):
        exp = built(*lightning("DocsClassifier", "algorithm=fedavg", f"task.buffers={rule}"))
        server, simulator = exp.server, exp.simulator
        assert simulator.bytes_down - server.broadcast().nbytes == extra
        assert simulator.bytes_up - server.upload_nbytes() == extra


def test_a_datamodule_s_batch_size_is_stated_and_its_drop_last_honoured():
    """The DataModule's DataLoader(batch_size=64) is not what clients step on (algorithm.batch_size is): the
    run's first lines say so; its drop_last=True is the clients' too."""
    data = ("dataset=datamodule", "dataset.datamodule._target_=my_fl_extensions.datamodules.BlobsDataModule",
            "partition.num_clients=20", "task=lightning", f"task.module._target_={MODULES}.WrappedNetwork",
            "model=mlp", "concurrency=10", "accelerator=cpu")
    exp = built(*data, "+dataset.datamodule.batch_size=64", "+dataset.datamodule.drop_last=true")
    assert exp.trainer.local.drop_last and exp.trainer.local.batch_size == 32
    lines = exp.describe()
    assert any("train_dataloader()'s batch_size=64 is not used: clients step on minibatches of algorithm.batch_size=32"
               in line for line in lines)
    assert any("short last batch is left out (the DataModule's train_dataloader() sets drop_last=True)" in line
               for line in lines)
    same = built(*data, "algorithm.batch_size=64", "+dataset.datamodule.batch_size=64")
    assert not same.trainer.local.drop_last and not any("batch_size" in line for line in same.describe())


def test_a_dataset_that_augments_in_getitem_is_read_afresh_for_every_batch_under_the_trip_s_seed():
    """NoisyBlobsDataModule's training items draw noise on every read: a trip's batches are read from the
    Dataset then, not from the stored first read, so the same example differs between trips (and from the
    stored copy) while a trip repeated with its seed reads the same; the run's first lines say so."""
    exp = built("task=lightning", f"task.module._target_={MODULES}.RecordsInputs", "dataset=datamodule",
                "dataset.datamodule._target_=my_fl_extensions.datamodules.NoisyBlobsDataModule", "partition=iid",
                "partition.num_clients=20", "algorithm.batch_size=64", "concurrency=5", "accelerator=cpu")
    module, stored = exp.task.module, exp.data.client(3)[0]
    assert len(stored) <= 64  # one batch: every example of client 3

    def reads(seed):
        seen = module.seen  # (the trip's list: what a trip changes of the module's attributes is undone after it)
        exp.trainer.train([exp.server.broadcast()], [3], [seed])
        (batch,) = seen
        nearest = torch.cdist(batch, stored).argmin(1)  # which example each row is (noise 0.1, blobs apart)
        assert sorted(nearest.tolist()) == list(range(len(stored)))
        return batch[nearest.argsort()]

    first, second, again = reads(1), reads(2), reads(1)
    assert not torch.equal(first, stored) and not torch.equal(first, second)  # drawn per read
    assert (first - stored).abs().max() < 1 and torch.equal(first, again)  # its noise, from the trip's seed
    assert any("training inputs read afresh from the dataset for every batch" in line for line in exp.describe())


def test_a_trip_draws_from_its_seed_and_leaves_the_host_generators_as_they_were():
    """DrawsEverywhere draws from torch's, numpy's and Python's generators (and dropout) in every step:
    trips trained in one batch give what each gives alone, and the host's three generators are where
    they were (they are saved once per batch of trips and restored after it)."""
    import random

    import numpy as np

    exp = built(*lightning("DrawsEverywhere", "algorithm.local_epochs=2"))
    start = exp.server.broadcast()
    random.seed(5), np.random.seed(5), torch.manual_seed(5)
    host = random.getstate(), np.random.get_state()[1].copy(), torch.get_rng_state()
    together = exp.trainer.train([start] * 3, [0, 1, 2], [11, 12, 13])
    assert random.getstate() == host[0] and np.array_equal(np.random.get_state()[1], host[1])
    assert torch.equal(torch.get_rng_state(), host[2])
    alone = [exp.trainer.train([start], [client], [seed])[0] for client, seed in ((2, 13), (0, 11), (1, 12))]
    assert torch.equal(together, torch.stack([alone[1], alone[2], alone[0]]))
    assert not torch.equal(together[0], exp.trainer.train([start], [0], [14])[0])  # (it draws: another seed differs)
