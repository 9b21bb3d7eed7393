"""Client trips per second of pfl-research (Apple's ``pfl``) against fl_bench on pfl's CIFAR-10 benchmark workload.

pfl's published CIFAR-10 benchmark (apple/pfl-research ``benchmarks/image_classification/
configs/baseline.yaml`` with ``benchmarks/image_classification/pytorch/train.py``): FedAvg over
CIFAR-10 split IID into users of 50 images each (50,000 images: 1,000 users), cohort 50, one
local epoch of SGD with batch 10 and local lr 0.1, central SGD with lr 1.0, users weighted
equally, the ``simple_cnn`` of ``benchmarks/model/pytorch/cnn.py`` (fl_bench's ``model=cnn_pfl``,
1,626,442 parameters), 1,500 central iterations. Here the images are generated (random uint8
3x32x32, 10 random labels, no download); content does not change speed.

Three steps, two interpreters (pfl never goes into fl_bench's venv, fl_bench never into pfl's):

    # 1. fl_bench's venv: write a CIFAR-10 stand-in where `prepare` would put the real cache (under
    #    --data-root, default: beside the npz), partition it as a run does (iid, 1,000 clients of 50),
    #    and write the clients' images, the training knobs and a reference local update to one npz
    .venv/bin/python benchmarks/pfl_baseline.py export /tmp/pfl_results/cifar10.npz [hydra overrides]

    # 2. pfl's venv (see benchmarks/pfl-requirements.txt): check one user's local training against
    #    fl_bench's reference, then run pfl's FedAvg on the same users
    benchmarks/.pfl-venv/bin/python benchmarks/pfl_baseline.py run-pfl /tmp/pfl_results/cifar10.npz \\
        --cohort 50 --rounds 11 [--threads 2] [--json out.json]

    # 3. fl_bench's venv: the same workload through fl_bench (sequential, then batched trips)
    .venv/bin/python benchmarks/pfl_baseline.py run-fl-bench /tmp/pfl_results/cifar10.npz \\
        --cohort 50 --rounds 10 --vmap false [--threads 2] [--json out.json]

``run-pfl`` is pfl's own API, set up as its benchmark's train.py does: ``PyTorchModel`` (local
optimizer ``torch.optim.SGD``, central ``torch.optim.SGD(lr=1.0)``), ``SimulatedBackend`` over a
``FederatedDataset.from_slices`` of the users (torch tensors, channels-last float32 images
normalised per channel, as pfl's cifar10 loader keeps them; ``simple_cnn`` starts with a
channels-last -> channels-first permute), a random user sampler, postprocessors
``[WeightByUser(), NoPrivacy(), CentrallyAppliedPrivacyMechanism(NoPrivacy())]``,
``FederatedAveraging`` with ``NNAlgorithmParams(train_cohort_size=cohort, val_cohort_size=0)`` and
``NNTrainHyperParams(local_learning_rate, local_num_epochs=1, local_batch_size=10)``. It leaves out
what only measures: the central-evaluation, metrics-to-disk and best-metric callbacks; and its
per-user evaluation before/after local training (pfl runs it in rounds where
``iteration % evaluation_frequency == 0``) is off after round 1, as fl_bench's evaluation is
(``--evaluation-frequency 10`` puts the benchmark's cadence back). The model starts from
fl_bench's initial model (``check_init`` in the npz). A callback stamps the end of each central
iteration; the steady-state rate is over rounds 2..R, ``cohort * (R - 1) / (t_R - t_1)``
(round 1 warms up and evaluates the users).

``run-fl-bench`` runs ``fl_bench.runs.experiment.run_experiment`` on the exported stand-in as
``benchmarks/throughput.py``'s ``measure`` does (its ``compose_config``, with the npz's overrides
registered as a workload): ``algorithm=fedavg``, ``concurrency`` = cohort, ``max_trips = cohort *
rounds``, ``eval_every = max_trips`` (evaluations only at the start and the end), ``vmap_clients``
as given. ``trips_per_s`` is throughput.py's figure, trips trained / simulate_seconds: the whole
event loop, first round and the two evaluations included. ``steady_trips_per_s`` is comparable
with run-pfl's: the same run cut to one round, in a fresh process, is subtracted, leaving rounds 2..R.

Same local training. ``export`` trains one client (``check_client``) from the initial model with
fl_bench's own ``ClientTrainer`` and stores the minibatch order it used and its Delta = y_0 - y_Q
(sequential path with dropout; sequential and batched paths with dropout off). ``run-pfl``
(``--check-only`` for just this) feeds pfl that client's examples in that order (pfl's
``Dataset.iter`` does not shuffle) and takes the update of pfl's
``FederatedAveraging.simulate_one_user``, i.e. pfl's whole local-training path, after seeding
torch's global generator as export did. Without dropout the updates agree to float rounding
(relative L2 difference ~2e-7, against both fl_bench paths). With dropout they differ: pfl's model
permutes channels-last input, so its activations are channels-last in memory and dropout draws its
mask in memory order, i.e. other elements get other draws; with the permuted input copied to
standard layout (the ``dropout_standard_layout`` line, not pfl's model otherwise) the update is
bit-identical to fl_bench's. fl_bench's batched path draws its dropout masks under vmap, so it is
compared without dropout only.

The npz of ``benchmarks/flower_baseline.py export`` (logistic regression) is accepted by
``run-pfl`` too: a ``torch.nn.Linear`` model, same hyperparameters from the npz, no check.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import types
from pathlib import Path

import numpy as np

USERS, EXAMPLES_PER_USER, TEST_EXAMPLES, NUM_CLASSES = 1000, 50, 1000, 10
IMAGE_SHAPE = (3, 32, 32)
# pfl's benchmarks/image_classification/configs/baseline.yaml, in fl_bench's terms.
DEFAULT_OVERRIDES = (
    "dataset=cifar10", "partition=iid", f"partition.num_clients={USERS}", "model=cnn_pfl", "algorithm=fedavg",
    "algorithm.client_lr=0.1", "algorithm.batch_size=10", "algorithm.local_epochs=1",
    "algorithm.server_optimizer.lr=1.0", "algorithm.weighting=uniform",
)
CHECK_SEED, CHECK_TORCH_SEED = 12345, 2024  # the reference trip's minibatch seed, its dropout seed
WORKLOAD = "pfl_cifar10"  # the name run-fl-bench gives it in throughput.WORKLOADS


# ----------------------------------------------------------------------------- export (fl_bench venv)
def _compose(overrides: list[str]):
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from fl_bench.runs.cli import CONFIG_DIR

    with initialize_config_dir(CONFIG_DIR, version_base="1.3"):
        return OmegaConf.to_object(compose("config", overrides=["progress=false", "eval_every=1000000", *overrides]))


def _with_defaults(overrides: list[str]) -> list[str]:
    given = {o.split("=", 1)[0].lstrip("+~") for o in overrides}
    return [*(o for o in DEFAULT_OVERRIDES if o.split("=", 1)[0] not in given), *overrides]


def export(out: str, overrides: list[str], data_root: str | None) -> None:
    import torch
    from torch import nn

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from stand_in import write_stand_in

    from fl_bench.clients.trainer import ClientTrainer, minibatch_plan
    from fl_bench.contracts import Broadcast
    from fl_bench.runs.experiment import build_experiment

    root = str(Path(data_root or Path(out).resolve().parent / "data").resolve())
    overrides = _with_defaults(overrides)
    cfg = _compose([f"data_root={root}", *overrides])
    alg = cfg.algorithm
    if cfg.dataset.name != "cifar10" or cfg.model.name != "cnn_pfl":
        sys.exit(f"export: pfl's workload is dataset=cifar10 model=cnn_pfl; got {cfg.dataset.name} / {cfg.model.name}")
    if alg.name != "fedavg" or alg.local_steps is not None or alg.prox_mu or alg.lr_norm or cfg.model.weight_decay:
        sys.exit("export: pfl's benchmark is FedAvg with plain epochs of SGD (no local_steps, prox_mu, lr_norm, weight_decay)")
    if cfg.dataset.random_flip or cfg.dataset.crop_size is not None:
        sys.exit("export: pfl's CIFAR-10 benchmark has no augmentation; leave dataset.random_flip / crop_size off")

    rng = np.random.default_rng(0)
    sizes = np.full(USERS, EXAMPLES_PER_USER, dtype=np.int64)  # 50,000 training images, as CIFAR-10's
    write_stand_in(cfg.dataset, sizes, IMAGE_SHAPE, NUM_CLASSES, rng, test_examples=TEST_EXAMPLES)

    exp = build_experiment(cfg, on_eval=lambda *a, **k: None)  # what run_experiment builds: data, model, trainer
    data, trainer, task = exp.data, exp.trainer, exp.task
    if data.transform is None or tuple(data.input_shape) != IMAGE_SHAPE:
        sys.exit(f"export: expected uint8 images {IMAGE_SHAPE} with a batch-time normalisation, got {data.input_shape}")
    init = trainer.flat.clone()  # the run's initial global model (seed cfg.seed)

    # Reference local update of one client (fl_bench's sequential path), with the order it visits.
    client = 0
    plan = minibatch_plan(data.sizes[[client]], [CHECK_SEED], trainer.local)
    order = plan.rows[0][plan.mask[0]].numpy()  # example indices within the client, in step order
    start = Broadcast(0, init.clone())

    def delta(t: ClientTrainer) -> np.ndarray:
        torch.manual_seed(CHECK_TORCH_SEED)
        return t.train([start], [client], [CHECK_SEED])[0].numpy().copy()

    delta_dropout = delta(trainer)
    for m in task.model.modules():
        if isinstance(m, nn.Dropout):
            m.p = 0.0
    delta_nodrop = delta(trainer)
    delta_nodrop_vmap = delta(ClientTrainer(task, data, trainer.local, vmap=True, update=trainer.update))

    Path(out).parent.mkdir(parents=True, exist_ok=True)
    np.savez(
        out,
        x=data.x.numpy(),  # uint8 [N, 3, 32, 32], client after client
        y=data.y.numpy().astype(np.int64),
        sizes=np.asarray(data.sizes, dtype=np.int64),
        offsets=np.asarray(data.offsets, dtype=np.int64),
        mean=np.asarray(data.transform.mean, dtype=np.float32),  # per channel, on the [0, 1] scale
        std=np.asarray(data.transform.std, dtype=np.float32),
        num_classes=np.int64(data.num_classes),
        input_shape=np.asarray(data.input_shape, dtype=np.int64),
        model=np.str_(cfg.model.name),
        lr=np.float64(alg.client_lr),
        server_lr=np.float64(alg.server_optimizer.lr),
        batch_size=np.int64(alg.batch_size),
        local_epochs=np.int64(alg.local_epochs),
        weight_decay=np.float64(cfg.model.weight_decay),
        seed=np.int64(cfg.seed),
        dataset=np.str_(data.name),
        data_root=np.str_(root),
        overrides=np.str_(" ".join(overrides)),
        param_names=np.asarray(trainer.names),
        param_numels=np.asarray([p.numel() for p in trainer.params], dtype=np.int64),
        check_init=init.numpy(),
        check_client=np.int64(client),
        check_order=order.astype(np.int64),
        check_torch_seed=np.int64(CHECK_TORCH_SEED),
        check_delta_dropout=delta_dropout,
        check_delta_nodrop=delta_nodrop,
        check_delta_nodrop_vmap=delta_nodrop_vmap,
    )
    print(f"wrote {out}: stand-in {data.name} under {root}, {data.num_clients} clients of "
          f"{int(data.sizes.min())}..{int(data.sizes.max())} images, {len(data.y)} in all, model {cfg.model.name} "
          f"({init.numel():,} parameters), lr={alg.client_lr}, batch_size={alg.batch_size}, "
          f"local_epochs={alg.local_epochs}, server lr={alg.server_optimizer.lr}  ({' '.join(overrides)})")


# ----------------------------------------------------------------------------- run-pfl (pfl venv)
def pfl_simple_cnn(input_shape: tuple[int, int, int], num_outputs: int, contiguous: bool = False):
    """pfl's ``simple_cnn`` (apple/pfl-research benchmarks/model/pytorch/cnn.py) for channels-last
    input ``(H, W, C)``: permute to channels-first, conv3x3x32 - ReLU - conv3x3x64 - ReLU - maxpool
    2 - dropout 0.25 - flatten - FC128 - ReLU - dropout 0.5 - linear; Glorot-uniform weights; with
    the ``loss`` / ``metrics`` methods pfl's PyTorchModel calls (its benchmarks/model/pytorch/metrics.py).
    ``contiguous``: copy the permuted input to standard layout (not pfl's: only for the dropout check,
    where channels-last activations make dropout draw its mask in another element order)."""
    import torch
    from torch import nn

    class ChannelsFirst(nn.Module):  # pfl's Transpose2D
        def forward(self, x):
            x = x.permute((0, 3, 1, 2))
            return x.contiguous() if contiguous else x

    side = (input_shape[0] - 4) // 2
    model = nn.Sequential(
        ChannelsFirst(),
        nn.Conv2d(input_shape[-1], 32, kernel_size=(3, 3)), nn.ReLU(),
        nn.Conv2d(32, 64, kernel_size=(3, 3)), nn.ReLU(),
        nn.MaxPool2d((2, 2)), nn.Dropout(0.25), nn.Flatten(),
        nn.Linear(side * side * 64, 128), nn.ReLU(), nn.Dropout(0.5),
        nn.Linear(128, num_outputs),
    )
    for m in model.modules():
        if isinstance(m, (nn.Conv2d, nn.Linear)):
            torch.nn.init.xavier_uniform_(m.weight)
    _attach_loss(model, 0.0)
    return model


def _attach_loss(model, weight_decay: float) -> None:
    import torch
    from pfl.metrics import Weighted
    from torch.nn import functional as F

    def loss(self, inputs, targets, eval=False):
        self.eval() if eval else self.train()
        value = F.cross_entropy(self(inputs), targets.long(), reduction="mean")
        if weight_decay:  # fl_bench's (weight_decay / 2) ||w||^2 (flower_baseline's logreg workloads)
            value = value + 0.5 * weight_decay * sum(p.pow(2).sum() for p in self.parameters())
        return value

    @torch.no_grad()
    def metrics(self, inputs, targets, eval=True):
        self.eval() if eval else self.train()
        logits = self(inputs)
        n = len(inputs)
        return {"loss": Weighted(F.cross_entropy(logits, targets.long(), reduction="sum").item(), n),
                "accuracy": Weighted((logits.argmax(-1) == targets).float().sum().item(), n)}

    model.loss = types.MethodType(loss, model)
    model.metrics = types.MethodType(metrics, model)


def _load_workload(path: str) -> dict:
    """The npz as tensors pfl trains on: cnn_pfl images normalised and channels-last (as pfl's
    cifar10 loader keeps them), or flower_baseline's flat logistic-regression features."""
    import torch

    with np.load(path) as z:
        w = {k: z[k] for k in z.files}
    w["cnn"] = "model" in w and str(w["model"]) == "cnn_pfl"
    if w["cnn"]:
        x = torch.from_numpy(w["x"]).float().div_(255.0)  # fl_bench's ImageTransform, in the same float32 ops
        x = (x - torch.from_numpy(w["mean"]).view(1, -1, 1, 1)) / torch.from_numpy(w["std"]).view(1, -1, 1, 1)
        w["x_t"] = x.permute(0, 2, 3, 1).contiguous()  # [N, H, W, C]
    else:
        w["x_t"] = torch.from_numpy(w["x"]).float()
    w["y_t"] = torch.from_numpy(w["y"]).long()
    return w


def _pfl_model(w: dict, with_init: bool = True, contiguous: bool = False):
    import torch

    if w["cnn"]:
        c, h, wd = (int(v) for v in w["input_shape"])
        module = pfl_simple_cnn((h, wd, c), int(w["num_classes"]), contiguous)
    else:
        module = torch.nn.Sequential(torch.nn.Linear(w["x_t"].shape[1], int(w["num_classes"])))
        _attach_loss(module, float(w.get("weight_decay", 0.0)))
    if with_init and "check_init" in w:  # fl_bench's initial model, same parameter order and shapes
        params = list(module.parameters())
        if [p.numel() for p in params] != list(w["param_numels"]):
            sys.exit(f"run-pfl: pfl's model has parameters {[p.numel() for p in params]}, "
                     f"fl_bench's {list(w['param_numels'])}")
        flat = torch.from_numpy(w["check_init"])
        with torch.no_grad():
            for p, part in zip(params, flat.split([p.numel() for p in params])):
                p.copy_(part.view_as(p))
    return module


def _train_params(w: dict):
    from pfl.hyperparam import NNEvalHyperParams, NNTrainHyperParams

    return (NNTrainHyperParams(local_learning_rate=float(w["lr"]), local_num_epochs=int(w["local_epochs"]),
                               local_batch_size=int(w["batch_size"])),
            NNEvalHyperParams(local_batch_size=10000))  # baseline.yaml's central_eval_batch_size


def check_local_training(w: dict) -> dict:
    """pfl's update of the reference client against fl_bench's, with dropout (same torch seed) and without."""
    import torch
    from pfl.algorithm import FederatedAveraging, NNAlgorithmParams
    from pfl.common_types import Population
    from pfl.context import CentralContext
    from pfl.data.dataset import Dataset
    from pfl.model.pytorch import PyTorchModel
    from torch import nn

    client = int(w["check_client"])
    lo, hi = int(w["offsets"][client]), int(w["offsets"][client + 1])
    order = torch.from_numpy(w["check_order"])
    user = Dataset(raw_data=[w["x_t"][lo:hi][order], w["y_t"][lo:hi][order]], user_id=client)
    train_params, eval_params = _train_params(w)
    context = CentralContext(
        current_central_iteration=0, do_evaluation=False, cohort_size=1, population=Population.TRAIN,
        algorithm_params=NNAlgorithmParams(central_num_iterations=1, evaluation_frequency=1, train_cohort_size=1,
                                           val_cohort_size=0),
        model_train_params=train_params, model_eval_params=eval_params, seed=0)

    def pfl_delta(dropout: bool, contiguous: bool = False) -> np.ndarray:
        module = _pfl_model(w, contiguous=contiguous)
        if not dropout:
            for m in module.modules():
                if isinstance(m, nn.Dropout):
                    m.p = 0.0
        model = PyTorchModel(model=module, local_optimizer_create=torch.optim.SGD,
                             central_optimizer=torch.optim.SGD(module.parameters(), 1.0))
        torch.manual_seed(int(w["check_torch_seed"]))
        stats, _ = FederatedAveraging().simulate_one_user(model, user, context)
        names = list(model.variable_map)
        # pfl's statistic is y_Q - y_0; fl_bench's Delta is y_0 - y_Q
        return -torch.cat([stats[n].reshape(-1) for n in names]).numpy()

    def compare(mine: np.ndarray, ref: np.ndarray) -> dict:
        return {"max_abs_diff": float(np.abs(mine - ref).max()),
                "rel_l2_diff": float(np.linalg.norm(mine - ref) / np.linalg.norm(ref)),
                "ref_norm": float(np.linalg.norm(ref))}

    with_dropout, without = pfl_delta(True), pfl_delta(False)
    result = {
        "client": client,
        "dropout_vs_fl_bench_sequential": compare(with_dropout, w["check_delta_dropout"]),
        "dropout_standard_layout_vs_fl_bench_sequential": compare(pfl_delta(True, True), w["check_delta_dropout"]),
        "no_dropout_vs_fl_bench_sequential": compare(without, w["check_delta_nodrop"]),
        "no_dropout_vs_fl_bench_batched": compare(without, w["check_delta_nodrop_vmap"]),
    }
    for key, r in result.items():
        if key == "client":
            continue
        print(f"check client {client}, {key}: max |diff| {r['max_abs_diff']:.3g}, "
              f"relative L2 {r['rel_l2_diff']:.3g} (|Delta| = {r['ref_norm']:.4g})", flush=True)
    return result


def run_pfl(args: argparse.Namespace) -> None:
    began = time.perf_counter()
    import pfl
    import torch
    from pfl.aggregate.simulate import SimulatedBackend
    from pfl.aggregate.weighting import WeightByUser
    from pfl.algorithm import FederatedAveraging, NNAlgorithmParams
    from pfl.callback.base import TrainingProcessCallback
    from pfl.data.federated_dataset import FederatedDataset
    from pfl.data.sampling import get_user_sampler
    from pfl.metrics import Metrics
    from pfl.model.pytorch import PyTorchModel
    from pfl.privacy import CentrallyAppliedPrivacyMechanism, NoPrivacy

    torch.set_num_threads(args.threads)
    import_s = time.perf_counter() - began
    w = _load_workload(args.workload)
    offsets = w["offsets"]
    num_users = len(offsets) - 1
    if not 1 <= args.cohort <= num_users:
        sys.exit(f"--cohort must be in 1..{num_users}")
    check = None
    if w["cnn"] and "check_init" in w and not args.no_check:
        check = check_local_training(w)
        if args.check_only:
            if args.json:
                Path(args.json).write_text(json.dumps({"check": check}, indent=2) + "\n")
            return

    seed = int(w["seed"])
    torch.manual_seed(seed)
    np.random.seed(seed)
    x, y = w["x_t"], w["y_t"]
    users = {u: [x[offsets[u]:offsets[u + 1]], y[offsets[u]:offsets[u + 1]]] for u in range(num_users)}
    federated = FederatedDataset.from_slices(users, get_user_sampler("random", list(range(num_users))))
    module = _pfl_model(w)
    model = PyTorchModel(model=module, local_optimizer_create=torch.optim.SGD,
                         central_optimizer=torch.optim.SGD([p for p in module.parameters() if p.requires_grad],
                                                           float(w.get("server_lr", 1.0))))
    backend = SimulatedBackend(training_data=federated, val_data=federated,
                               postprocessors=[WeightByUser(), NoPrivacy(), CentrallyAppliedPrivacyMechanism(NoPrivacy())])
    train_params, eval_params = _train_params(w)
    algorithm_params = NNAlgorithmParams(central_num_iterations=args.rounds,
                                         evaluation_frequency=args.evaluation_frequency or args.rounds + 1,
                                         train_cohort_size=args.cohort, val_cohort_size=0)
    stamps: list[float] = []

    class Stamp(TrainingProcessCallback):
        def on_train_begin(self, *, model):
            stamps.append(time.perf_counter())
            return Metrics()

        def after_central_iteration(self, aggregate_metrics, model, *, central_iteration):
            stamps.append(time.perf_counter())
            return False, Metrics()

    t0 = time.perf_counter()
    FederatedAveraging().run(algorithm_params=algorithm_params, backend=backend, model=model,
                             model_train_params=train_params, model_eval_params=eval_params, callbacks=[Stamp()])
    total_s = time.perf_counter() - t0
    if len(stamps) != args.rounds + 1:
        sys.exit(f"pfl ran {len(stamps) - 1} of {args.rounds} rounds")
    ends, round_s = np.asarray(stamps[1:]), np.diff(np.asarray(stamps))
    if args.rounds >= 2:
        steady_s, steady_trips = float(ends[-1] - ends[0]), args.cohort * (args.rounds - 1)
    else:
        steady_s, steady_trips = float(round_s[0]), args.cohort
    tps = steady_trips / steady_s
    res = {
        "framework": "pfl",
        "pfl_version": getattr(pfl, "__version__", None) or _version("pfl"),
        "torch_version": torch.__version__,
        "numpy_version": np.__version__,
        "workload": str(w.get("dataset")),
        "model": str(w["model"]) if "model" in w else "logreg",
        "num_users": num_users,
        "examples": int(w["sizes"].sum()),
        "lr": float(w["lr"]),
        "server_lr": float(w.get("server_lr", 1.0)),
        "batch_size": int(w["batch_size"]),
        "local_epochs": int(w["local_epochs"]),
        "cohort": args.cohort,
        "rounds": args.rounds,
        "threads": torch.get_num_threads(),
        "evaluation_frequency": algorithm_params.evaluation_frequency,
        "trips_per_s": tps,
        "steady_trips": steady_trips,
        "steady_s": steady_s,
        "median_round_s": float(np.median(round_s[1:])) if args.rounds >= 2 else float(round_s[0]),
        "first_round_s": float(round_s[0]),
        "total_s": total_s,
        "total_trips_per_s": args.cohort * args.rounds / total_s,
        "import_s": import_s,
        "round_s": [float(r) for r in round_s],
        "check": check,
    }
    print(f"pfl {res['pfl_version']} (torch {res['torch_version']}, {res['threads']} threads): {res['model']} "
          f"cohort={args.cohort} rounds={args.rounds} | {tps:8.2f} trips/s steady (rounds 2..{args.rounds}, "
          f"median round {res['median_round_s']:.3f}s) | first round {res['first_round_s']:.2f}s | total "
          f"{total_s:.2f}s ({res['total_trips_per_s']:.2f} trips/s)", flush=True)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(res, indent=2) + "\n")


def _version(package: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(package)
    except PackageNotFoundError:
        return None


# ----------------------------------------------------------------------------- run-fl-bench (fl_bench venv)
def run_fl_bench(args: argparse.Namespace) -> None:
    import subprocess

    import torch

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import throughput
    from stand_in import rss_mb

    from fl_bench.runs.experiment import run_experiment

    with np.load(args.workload) as z:
        root, overrides = str(z["data_root"]), str(z["overrides"]).split()
    throughput.WORKLOADS[WORKLOAD] = overrides  # throughput.compose_config reads a workload's overrides here
    trips = args.cohort * args.rounds
    cell_overrides = [f"concurrency={args.cohort}", f"max_trips={trips}", f"max_rounds={args.rounds}",
                      f"eval_every={trips}", f"vmap_clients={args.vmap}", f"threads={args.threads}", *args.overrides]
    path = "batched" if args.vmap == "true" else "sequential"
    began = time.perf_counter()
    # throughput.measure's cell, keeping the run's summary: trips trained per second of simulation
    cfg = throughput.compose_config(WORKLOAD, root, cell_overrides)
    torch.set_num_threads(cfg.threads or torch.get_num_threads())
    with tempfile.TemporaryDirectory() as run_dir:
        summary = run_experiment(cfg, Path(run_dir))
    sim_s, trained = float(summary["simulate_seconds"]), int(summary["trips_trained"])
    res = {
        "framework": "fl_bench",
        "path": path,
        "torch_version": torch.__version__,
        "threads": torch.get_num_threads(),
        "device": summary["device"],
        "cohort": args.cohort,
        "rounds": args.rounds,
        "server_steps": summary["server_steps"],
        "overrides": overrides + cell_overrides,
        "trips_trained": trained,
        "simulate_seconds": sim_s,
        "trips_per_s": trained / sim_s,  # benchmarks/throughput.py's figure
        "wall_seconds": float(summary["wall_seconds"]),
        "peak_rss_mb": rss_mb("VmHWM"),
    }
    steady = ""
    if args.rounds >= 2 and not args.no_steady:
        # The same run cut to one round, in a fresh process (cold, as this one was): the difference
        # is rounds 2..R without the start-up, the first round and the two evaluations, as run-pfl counts.
        with tempfile.TemporaryDirectory() as tmp:
            one = Path(tmp) / "one.json"
            cmd = [sys.executable, __file__, "run-fl-bench", args.workload, *args.overrides, "--cohort", str(args.cohort),
                   "--rounds", "1", "--vmap", args.vmap, "--threads", str(args.threads), "--no-steady", "--json", str(one)]
            subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
            first = json.loads(one.read_text())
        res["one_round_simulate_seconds"] = first["simulate_seconds"]
        res["steady_trips"] = trained - first["trips_trained"]
        res["steady_s"] = sim_s - first["simulate_seconds"]
        res["steady_trips_per_s"] = res["steady_trips"] / res["steady_s"]
        steady = f" | {res['steady_trips_per_s']:8.2f} trips/s steady (rounds 2..{args.rounds}, less a 1-round run)"
    res["total_s"] = time.perf_counter() - began
    print(f"fl_bench {path} (torch {res['torch_version']}, {res['threads']} threads, {res['device']}): "
          f"cohort={args.cohort} rounds={args.rounds} | {res['trips_per_s']:8.2f} trips/s (trips trained / "
          f"simulate_seconds){steady} | peak RSS {res['peak_rss_mb']:.0f} MB | {res['total_s']:.1f}s in all", flush=True)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(res, indent=2) + "\n")


def main(argv: list[str]) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    e = sub.add_parser("export", help="(fl_bench venv) write the stand-in data and the workload npz")
    e.add_argument("out")
    e.add_argument("overrides", nargs="*", help=f"hydra overrides (default: {' '.join(DEFAULT_OVERRIDES)})")
    e.add_argument("--data-root", default=None, help="where the stand-in cache goes (default: OUT's folder/data)")
    r = sub.add_parser("run-pfl", help="(pfl venv) check one user's local training, then run pfl's FedAvg")
    r.add_argument("workload")
    r.add_argument("--cohort", type=int, default=50)
    r.add_argument("--rounds", type=int, default=11)
    r.add_argument("--threads", type=int, default=2, help="torch threads (default 2)")
    r.add_argument("--evaluation-frequency", type=int, default=None,
                   help="pfl's per-user evaluation every N rounds (baseline.yaml: 10; default: round 1 only)")
    r.add_argument("--check-only", action="store_true", help="only compare one user's local update with fl_bench's")
    r.add_argument("--no-check", action="store_true", help="skip that comparison")
    r.add_argument("--json", default=None, help="write the numbers here")
    f = sub.add_parser("run-fl-bench", help="(fl_bench venv) the same workload through fl_bench's run_experiment")
    f.add_argument("workload", help="the npz that export wrote (its data_root and overrides are used)")
    f.add_argument("--cohort", type=int, default=50)
    f.add_argument("--rounds", type=int, default=10)
    f.add_argument("--vmap", choices=["true", "false"], default="false", help="vmap_clients (batched trips)")
    f.add_argument("--threads", type=int, default=2, help="torch threads (default 2)")
    f.add_argument("--json", default=None, help="write the numbers here")
    f.add_argument("--no-steady", action="store_true",
                   help="skip the 1-round run that gives the steady-state rate (rounds 2..R)")
    f.add_argument("overrides", nargs="*", help="more hydra overrides for the run")
    args = p.parse_args(argv)
    if args.cmd == "export":
        export(args.out, args.overrides, args.data_root)
    elif args.cmd == "run-pfl":
        run_pfl(args)
    else:
        run_fl_bench(args)


if __name__ == "__main__":
    main(sys.argv[1:])
