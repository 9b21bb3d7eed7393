"""FedLaAvg Example 1 (Yan et al. 2020, Sec. 3.1): closed-form trajectories, and both algorithms run on
the engine against them.

Two clients hold 1-D data with means mu_1, mu_2 (balanced, p_i = 1/2); client 1 is available for the
first P rounds of every period of 2P, client 2 for the next P; each round the one available client
takes one exact gradient step of lr eta from the round's model x (gradient x - mu_i).

FedAvg (Thm. 1, App. A): in client i's turn x - mu_i shrinks by (1 - eta) per round, so with
q = (1 - eta)^P the model at the end of period k is
    X_k = X* + q^(2k) (X_0 - X*),   X* = (mu_2 + q mu_1) / (1 + q)     (App. A, eq. 25)
and it oscillates between mu_1 + q (X* - mu_1) and X*: biased unless q -> 1 (eta P -> 0).
FedLaAvg (Thm. 2): x_t = x_{t-1} - eta (g_1 + g_2) / 2 with g_j the client's latest gradient; in
client i's turn the other's g_j = c is fixed, so x - a shrinks by r = 1 - eta / 2 per round with
a = mu_i - c, and g_i becomes the gradient at the turn's last model, a + r^(P-1) (x_start - a) - mu_i.
Its fixed point is (mu_1 + mu_2) / 2 with g_1 = -g_2 = (mu_2 - mu_1) / 2.

``python -m fl_bench.analysis.example1`` runs both on the engine (experiment=fedlaavg_example1) and writes
results/fedlaavg_example1.png: the simulated models over the closed forms.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np


def fedavg_trajectory(mu1: float, mu2: float, eta: float, period: int, x0: float, rounds: int) -> np.ndarray:
    """x_1 .. x_rounds of FedAvg, from the end-of-period closed form (App. A, eq. 25)."""
    q = (1 - eta) ** period
    limit = (mu2 + q * mu1) / (1 + q)  # Thm. 1's biased point
    out = np.empty(rounds)
    for t in range(1, rounds + 1):
        k, j = divmod(t - 1, 2 * period)  # period k, round j + 1 of it
        start = limit + q ** (2 * k) * (x0 - limit)  # X_k
        if j < period:  # client 1's turn
            out[t - 1] = mu1 + (1 - eta) ** (j + 1) * (start - mu1)
        else:  # client 2's turn, from the end of client 1's
            middle = mu1 + q * (start - mu1)
            out[t - 1] = mu2 + (1 - eta) ** (j - period + 1) * (middle - mu2)
    return out


def fedavg_limit(mu1: float, mu2: float, eta: float, period: int) -> float:
    """X*, FedAvg's end-of-period point (Thm. 1; App. A, eq. 25): (mu_2 + q mu_1) / (1 + q) with
    q = (1 - eta)^P."""
    q = (1 - eta) ** period
    return (mu2 + q * mu1) / (1 + q)


def fedlaavg_trajectory(mu1: float, mu2: float, eta: float, period: int, x0: float, rounds: int) -> np.ndarray:
    """x_1 .. x_rounds of FedLaAvg: geometric within each turn (Thm. 2's analysis), turn by turn."""
    r = 1 - eta / 2
    latest = {0: 0.0, 1: 0.0}  # g_i: zero before the first participation
    means = (mu1, mu2)
    out, x, t = np.empty(rounds), x0, 0
    while t < rounds:
        i = (t // period) % 2  # whose turn
        a = means[i] - latest[1 - i]
        steps = np.arange(1, min(period, rounds - t) + 1)
        out[t : t + len(steps)] = a + r**steps * (x - a)
        latest[i] = a + r ** (period - 1) * (x - a) - means[i]  # gradient at the turn's last model
        x = a + r**period * (x - a)
        t += period
    return out


def simulate(algorithm: str, rounds: int, overrides: tuple[str, ...] = ()) -> np.ndarray:
    """The model after each round of ``algorithm`` on the engine (experiment=fedlaavg_example1)."""
    from hydra import compose, initialize_config_dir

    from fl_bench.runs.cli import CONFIG_DIR
    from fl_bench.runs.config import to_config
    from fl_bench.runs.experiment import build_experiment

    # FedAvg: uniform among the available, its server step the plain average
    extra = ["selection=uniform", "algorithm.server_optimizer.lr=1.0"] if algorithm == "fedavg" else []
    with initialize_config_dir(CONFIG_DIR, version_base="1.3"):
        cfg = to_config(compose("config", overrides=[
            "experiment=fedlaavg_example1", f"algorithm={algorithm}", *extra, f"max_trips={rounds}", "progress=false",
            *overrides]))
    models: list[float] = []
    exp = build_experiment(cfg, lambda p: models.append(exp.server.params.item()) and False)
    exp.simulator.run()
    return np.array(models[1:])  # after rounds 1..rounds (the first evaluation is x_0)


def build_parser() -> argparse.ArgumentParser:
    """This command's arguments (tests/test_commands.py parses the documented command lines with it)."""
    parser = argparse.ArgumentParser(prog="python -m fl_bench.analysis.example1", description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--out", type=Path, default=Path("results"))
    return parser


def main(argv: list[str] | None = None) -> None:
    """Run both algorithms on the engine, print each one's largest gap to its closed form and write
    ``<out>/fedlaavg_example1.png``."""
    parser = build_parser()
    args = parser.parse_args(argv)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    mu1, mu2, eta, period = 0.0, 1.0, 0.1, 5  # conf/experiment/fedlaavg_example1.yaml
    t = np.arange(1, args.rounds + 1)
    fig, ax = plt.subplots(figsize=(7, 4))
    for name, closed in (("fedavg", fedavg_trajectory), ("fedlaavg", fedlaavg_trajectory)):
        simulated = simulate(name, args.rounds)
        ax.plot(t, simulated, label=f"{name} (engine)", lw=2, alpha=0.6)
        ax.plot(t, closed(mu1, mu2, eta, period, 0.0, args.rounds), "k:", lw=1)
        print(f"{name}: max |engine - closed form| = {np.abs(simulated - closed(mu1, mu2, eta, period, 0.0, args.rounds)).max():.2e}")
    ax.axhline((mu1 + mu2) / 2, color="g", lw=0.8, label="optimum (mu1 + mu2) / 2")
    ax.axhline(fedavg_limit(mu1, mu2, eta, period), color="r", lw=0.8, label="Thm. 1: FedAvg's end-of-period limit")
    ax.set(xlabel="round", ylabel="model x", title=f"FedLaAvg Example 1: mu = ({mu1:g}, {mu2:g}), eta = {eta:g}, P = {period} "
           "(dotted: closed forms)")
    ax.legend(fontsize=8)
    args.out.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(args.out / "fedlaavg_example1.png", dpi=120)
    print(f"wrote {args.out / 'fedlaavg_example1.png'}")


if __name__ == "__main__":
    main()
