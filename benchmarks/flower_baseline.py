"""Client trips per second of Flower's simulation engine on fl_bench's workload.

Two steps, two interpreters (Flower and its Ray never go into fl_bench's venv):

    # 1. fl_bench's venv: write the clients' training data and the local-training knobs to one npz
    .venv/bin/python benchmarks/flower_baseline.py export /tmp/flower_results/workload.npz [hydra overrides]
    #    (default overrides: model=logreg algorithm=fedavg)

    # 2. Flower's venv (see benchmarks/flower-requirements.txt): run FedAvg on it, N rounds of a cohort
    benchmarks/.flower-venv/bin/python benchmarks/flower_baseline.py run /tmp/flower_results/workload.npz \
        --cohort 100 --rounds 30 [--actors 2] [--threads 1] [--json out.json]

``run`` never imports fl_bench. It is Flower's own message API: a ``ServerApp`` running
``flwr.serverapp.strategy.FedAvg`` (``fraction_train = cohort / num_clients``,
``min_train_nodes = cohort``, ``fraction_evaluate = 0``) and a ``ClientApp`` whose train
function does what fl_bench's client does: load the global model (a linear layer, i.e.
multinomial logistic regression), ``local_epochs`` epochs of shuffled minibatch SGD with the
exported ``batch_size`` and ``lr`` on cross-entropy, and reply with the updated parameters and
its number of examples. One virtual SuperNode per fl_bench client, run by
``flwr.simulation.run_simulation`` on the Ray backend with ``--actors`` ClientApp actors
(client_resources num_cpus = CPUs / actors), each with ``--threads`` torch threads.

Timing: the strategy's ``evaluate_fn`` hook (called before round 1 and after every round, in
the ServerApp) stamps the end of each round. The steady-state rate is over rounds 2..R,
``cohort * (R - 1) / (t_R - t_1)``: round 1 also waits for Ray to start, the actors to spawn
and each actor to load the data. Start-up is the time from calling ``run_simulation`` to the
end of round 1, less one steady-state round.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

DEFAULT_OVERRIDES = ("model=logreg", "algorithm=fedavg")


# ----------------------------------------------------------------------------- export (fl_bench venv)
def export(out: str, overrides: list[str]) -> None:
    import torch
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from fl_bench.data import build_dataset
    from fl_bench.runs.cli import CONFIG_DIR

    given = {o.split("=", 1)[0].lstrip("+~") for o in overrides}
    defaults = [o for o in DEFAULT_OVERRIDES if o.split("=", 1)[0] not in given]
    overrides = [*defaults, *overrides]
    with initialize_config_dir(CONFIG_DIR, version_base="1.3"):
        cfg = OmegaConf.to_object(compose("config", overrides=["progress=false", "eval_every=1000000", *overrides]))
    alg = cfg.algorithm
    if cfg.model.name != "logreg":
        sys.exit(f"export: the Flower client trains a linear model; got model={cfg.model.name}")
    if alg.local_steps is not None or alg.prox_mu or alg.lr_norm:
        sys.exit("export: the Flower client does plain epochs of SGD; local_steps, prox_mu and "
                 "lr_norm are not reproduced")
    data = build_dataset(cfg.dataset, cfg.partition)
    if data.transform is not None:
        sys.exit(f"export: dataset {data.name} has a batch-time transform, which the Flower client does not apply")

    xs, ys = [], []
    for i in range(data.num_clients):
        x, y = data.client(i)
        xs.append(x.reshape(len(y), -1).to(torch.float32).numpy())
        ys.append(y.numpy())
    x = np.concatenate(xs)
    y = np.concatenate(ys).astype(np.int64)
    sizes = np.asarray(data.sizes, dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    assert offsets[-1] == len(y)
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    np.savez(
        out,
        x=x, y=y, sizes=sizes, offsets=offsets,
        num_classes=np.int64(data.num_classes),
        input_shape=np.asarray(data.input_shape, dtype=np.int64),
        lr=np.float64(alg.client_lr),
        batch_size=np.int64(alg.batch_size),
        local_epochs=np.int64(alg.local_epochs),
        weight_decay=np.float64(cfg.model.weight_decay),
        seed=np.int64(cfg.seed),
        dataset=np.str_(data.name),
        overrides=np.str_(" ".join(overrides)),
    )
    print(f"wrote {out}: dataset={data.name}, {data.num_clients} clients, {len(y)} examples, "
          f"{x.shape[1]} features, {data.num_classes} classes, lr={alg.client_lr}, "
          f"batch_size={alg.batch_size}, local_epochs={alg.local_epochs}  ({' '.join(overrides)})")


# ----------------------------------------------------------------------------- run (Flower venv)
# Everything below runs in the Flower venv; the ClientApp's functions also run inside the Ray
# actors, which import this file as the module ``flower_baseline`` (Flower puts the driver's
# sys.path on the actors' PYTHONPATH), so _WORKLOADS is a per-actor cache: each actor reads the
# npz and sets its torch threads once, on its first message.
_WORKLOADS: dict[str, dict] = {}


def _workload(path: str, threads: int) -> dict:
    w = _WORKLOADS.get(path)
    if w is None:
        import torch

        torch.set_num_threads(threads)
        with np.load(path) as z:
            w = {
                "x": torch.from_numpy(z["x"]),
                "y": torch.from_numpy(z["y"]),
                "offsets": z["offsets"],
                "lr": float(z["lr"]),
                "batch_size": int(z["batch_size"]),
                "local_epochs": int(z["local_epochs"]),
                "weight_decay": float(z["weight_decay"]),
                "seed": int(z["seed"]),
                "model": torch.nn.Linear(z["x"].shape[1], int(z["num_classes"])),
            }
        _WORKLOADS[path] = w
    return w


def client_train(msg, context):
    """The ClientApp's train function: fl_bench's local training of one client."""
    import torch
    from flwr.app import ArrayRecord, Message, MetricRecord, RecordDict

    config = msg.content["config"]
    w = _workload(str(config["workload"]), int(config["threads"]))
    client = int(context.node_config["partition-id"])
    lo, hi = int(w["offsets"][client]), int(w["offsets"][client + 1])
    x, y = w["x"][lo:hi], w["y"][lo:hi]
    n, bsz = hi - lo, w["batch_size"]

    model = w["model"]
    model.load_state_dict(msg.content["arrays"].to_torch_state_dict())
    opt = torch.optim.SGD(model.parameters(), lr=w["lr"])
    gen = torch.Generator().manual_seed(w["seed"] * 1_000_003 + int(config["server-round"]) * 10_007 + client)
    for _ in range(w["local_epochs"]):
        perm = torch.randperm(n, generator=gen)
        for s in range(0, n, bsz):
            idx = perm[s : s + bsz]
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(x[idx]), y[idx])
            if w["weight_decay"]:
                loss = loss + 0.5 * w["weight_decay"] * sum(p.pow(2).sum() for p in model.parameters())
            loss.backward()
            opt.step()
    reply = RecordDict({"arrays": ArrayRecord(model.state_dict()), "metrics": MetricRecord({"num-examples": n})})
    return Message(content=reply, reply_to=msg)


def make_client_app():
    from flwr.clientapp import ClientApp

    app = ClientApp()
    app.train()(client_train)
    return app


def make_server_app(workload: str, num_clients: int, in_features: int, num_classes: int, seed: int,
                    cohort: int, rounds: int, threads: int, stamps: list[float]):
    import torch
    from flwr.app import ArrayRecord, ConfigRecord
    from flwr.serverapp import ServerApp
    from flwr.serverapp.strategy import FedAvg

    app = ServerApp()

    @app.main()
    def main(grid, context) -> None:
        torch.manual_seed(seed)
        model = torch.nn.Linear(in_features, num_classes)
        strategy = FedAvg(
            fraction_train=cohort / num_clients,
            fraction_evaluate=0.0,
            min_train_nodes=cohort,
            min_available_nodes=cohort,
        )

        def stamp(server_round, arrays):  # called before round 1 and after each round
            stamps.append(time.perf_counter())
            return None

        strategy.start(
            grid=grid,
            initial_arrays=ArrayRecord(model.state_dict()),
            num_rounds=rounds,
            train_config=ConfigRecord({"workload": workload, "threads": threads}),
            evaluate_fn=stamp,
        )

    return app


def run(args: argparse.Namespace) -> None:
    # Flower's telemetry and Ray's usage stats would try to phone home; this machine has no route.
    os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    began = time.perf_counter()
    import flwr
    import ray
    import torch
    from flwr.simulation import run_simulation

    # The ClientApp must come from the importable module, not __main__, so that Ray pickles its
    # functions by reference and the actors keep one module (and one data cache) each.
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import flower_baseline as mod

    import_s = time.perf_counter() - began
    workload = str(Path(args.workload).resolve())
    with np.load(workload) as z:
        sizes = z["sizes"]
        in_features, num_classes = int(z["x"].shape[1]), int(z["num_classes"])
        seed, lr, bsz, epochs = int(z["seed"]), float(z["lr"]), int(z["batch_size"]), int(z["local_epochs"])
        dataset = str(z["dataset"])
    num_clients = len(sizes)
    if not 1 <= args.cohort <= num_clients:
        sys.exit(f"--cohort must be in 1..{num_clients}")
    cpus = args.cpus or os.cpu_count()
    torch.set_num_threads(args.threads)  # the driver (ServerApp, aggregation) too

    stamps: list[float] = []
    server_app = mod.make_server_app(workload, num_clients, in_features, num_classes, seed,
                                     args.cohort, args.rounds, args.threads, stamps)
    client_app = mod.make_client_app()
    backend_config = {
        "init_args": {"num_cpus": cpus, "include_dashboard": False},
        "client_resources": {"num_cpus": cpus / args.actors, "num_gpus": 0.0},
    }
    t0 = time.perf_counter()
    run_simulation(server_app=server_app, client_app=client_app, num_supernodes=num_clients,
                   backend_config=backend_config, verbose_logging=args.verbose)
    t_end = time.perf_counter()

    if len(stamps) != args.rounds + 1:
        sys.exit(f"simulation ended after {len(stamps) - 1} of {args.rounds} rounds (see the log above)")
    ends = np.asarray(stamps[1:])  # end of round r = ends[r - 1]
    round_s = np.diff(np.asarray(stamps))  # round r's wall time (round 1 from the ServerApp's start)
    if args.rounds >= 2:
        steady_s = float(ends[-1] - ends[0])
        steady_trips = args.cohort * (args.rounds - 1)
        steady_round = float(np.median(round_s[1:]))
    else:  # one round: no steady state; count it whole
        steady_s, steady_trips, steady_round = float(ends[0] - stamps[0]), args.cohort, 0.0
    tps = steady_trips / steady_s
    first_round_end_s = float(ends[0] - t0)
    startup_s = first_round_end_s - steady_round
    total_s = t_end - t0
    res = {
        "framework": "flower",
        "flwr_version": flwr.__version__,
        "ray_version": ray.__version__,
        "torch_version": torch.__version__,
        "numpy_version": np.__version__,
        "dataset": dataset,
        "num_clients": num_clients,
        "examples": int(sizes.sum()),
        "in_features": in_features,
        "num_classes": num_classes,
        "lr": lr,
        "batch_size": bsz,
        "local_epochs": epochs,
        "cohort": args.cohort,
        "rounds": args.rounds,
        "actors": args.actors,
        "threads": args.threads,
        "ray_cpus": cpus,
        "client_num_cpus": cpus / args.actors,
        "trips_per_s": tps,
        "steady_trips": steady_trips,
        "steady_s": steady_s,
        "median_round_s": steady_round,
        "first_round_end_s": first_round_end_s,
        "startup_s": startup_s,
        "shutdown_s": float(t_end - ends[-1]),
        "total_s": total_s,
        "total_trips_per_s": args.cohort * args.rounds / total_s,
        "import_s": import_s,
        "round_s": [float(r) for r in round_s],
    }
    print(f"flower {res['flwr_version']} (ray {res['ray_version']}, torch {res['torch_version']}): "
          f"cohort={args.cohort} rounds={args.rounds} actors={args.actors} threads={args.threads} | "
          f"{tps:8.1f} trips/s steady (rounds 2..{args.rounds}, median round {steady_round:.3f}s) | "
          f"start-up {startup_s:.2f}s | total {total_s:.2f}s ({res['total_trips_per_s']:.1f} trips/s incl. start-up)",
          flush=True)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(res, indent=2) + "\n")


def main(argv: list[str]) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    e = sub.add_parser("export", help="(fl_bench venv) write the workload npz")
    e.add_argument("out")
    e.add_argument("overrides", nargs="*", help=f"hydra overrides (default: {' '.join(DEFAULT_OVERRIDES)})")
    r = sub.add_parser("run", help="(Flower venv) run FedAvg on the workload with Flower's simulation engine")
    r.add_argument("workload")
    r.add_argument("--cohort", type=int, default=100)
    r.add_argument("--rounds", type=int, default=30)
    r.add_argument("--actors", type=int, default=2, help="ClientApp actors running at once (default 2)")
    r.add_argument("--threads", type=int, default=1, help="torch threads per actor (default 1)")
    r.add_argument("--cpus", type=int, default=None, help="CPUs Ray may use (default: all)")
    r.add_argument("--json", default=None, help="write the numbers here")
    r.add_argument("--verbose", action="store_true", help="Flower's DEBUG log, with timestamps")
    args = p.parse_args(argv)
    if args.cmd == "export":
        export(args.out, args.overrides)
    else:
        run(args)


if __name__ == "__main__":
    main(sys.argv[1:])
