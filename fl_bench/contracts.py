"""The contracts a run's parts are written against, in one module at the bottom of the package: what
crosses the network (:class:`Broadcast`, :class:`Upload`), the roles the event loop drives
(:class:`Server`, :class:`Trainer`, :class:`StepPolicy`) and what a step policy may use of the loop
(:class:`EventLoop`, :class:`TripView`). Each method's docstring is its contract. Every hook a role
may offer is declared here with a default that does nothing, so the loop calls each one on every
implementation instead of asking whether it is there.

The implementations: ``fl_bench.algorithms.base.ServerAlgorithm`` and the algorithms, and
``fl_bench.privacy.PrivateServer`` (DP around any server); ``fl_bench.clients.trainer.ClientTrainer``
and the Lightning trainer; ``fl_bench.engine.protocol`` (``BufferedAsync``, ``Rounds``); the loop
itself, ``fl_bench.engine.simulator.Simulator`` and its ``Trip``. This module imports nothing from
fl_bench.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Optional, Protocol

import torch


# ----------------------------------------------------------------------------- messages
def tensor_bytes(tensors) -> int:
    """Total bytes of ``tensors`` (elements times element size): what they cost on the network."""
    return sum(t.numel() * t.element_size() for t in tensors)


@dataclass
class Broadcast:
    """The server -> client message of one model version: what a trip downloads. The loop keeps one
    per model version that pending trips still need (lazy training), so whatever a client trains
    from lives here, and the bytes a download costs are counted from it."""

    version: int
    params: torch.Tensor  # the flat global model w
    # Extra server state sent with the model and held fixed while the client trains, by name
    # (e.g. FedGBO's optimizer statistics s_t). Empty for FedAvg / FedBuff.
    state: dict[str, torch.Tensor] = field(default_factory=dict)

    @property
    def nbytes(self) -> int:
        """Bytes one download carries: the model and the extra state."""
        return tensor_bytes([self.params, *self.state.values()])

    def clone(self) -> "Broadcast":
        """A snapshot that stays put while the server moves on."""
        return Broadcast(self.version, self.params.clone(), {k: v.clone() for k, v in self.state.items()})


@dataclass
class Upload:
    """The client -> server message of one finished trip."""

    client: int
    version: int  # the model version the client downloaded
    staleness: int  # server steps between that download and the step that consumes this upload
    num_examples: int
    vector: torch.Tensor  # Delta = y_0 - y_Q, or the final model y_Q (``Server.upload``)
    # Extra tensors the algorithm asked for (e.g. Mimelite's full-batch gradient at x_t).
    extras: dict[str, torch.Tensor] = field(default_factory=dict)
    steps: int = 0  # local steps it trained (fewer than its full work under a work deadline); 0: not known


# ----------------------------------------------------------------------------- the server
class Server(ABC):
    """How uploads become server steps (the role of Flower's ``Strategy``): a server algorithm
    (``fl_bench.algorithms.base.ServerAlgorithm``), or DP's trusted aggregator around one
    (``fl_bench.privacy.PrivateServer``). The loop drives every server the same way:

    1. ``broadcast()`` when a trip starts: what the client downloads. The loop keeps the returned
       message (cloned) for as long as a pending trip that downloaded this version needs it, so
       anything the client trains from belongs in it.
    2. ``add(upload)`` for each upload that makes up the next server step, in arrival order. When
       the step comes is the step policy's decision (K buffered uploads, a closed round), not the
       server's. ``upload.staleness`` counts server steps since ``upload.version`` was downloaded;
       ``upload.client`` identifies the client for per-client state.
    3. ``step()`` once those uploads are added: update ``params`` in place and advance ``version``.
    """

    params: torch.Tensor  # the flat global model (the client trainer's layout), stepped in place
    version: int  # server steps taken so far
    # What a client sends: its update Delta = y_0 - y_Q ("delta") or its final model y_Q ("model").
    upload: ClassVar[str] = "delta"
    # When the server steps (fl_bench.engine.protocol: BufferedAsync, every buffer_size uploads, or
    # Rounds, synchronous rounds); the algorithm's config carries that policy's knobs.
    step_policy: ClassVar[type[StepPolicy]]
    # The last step's normalised weight of each upload, in add order, for a server that states one
    # (FedStaleWeight's alpha_j): the loop logs it in trips.csv's ``weight`` (fairness metrics).
    step_weights: list[float] | None = None
    # What each upload carries besides Delta (``Upload.extras``), in the order of an upload row.
    upload_keys: tuple[str, ...] = ()

    @abstractmethod
    def broadcast(self) -> Broadcast:
        """The current model version as clients download it."""

    @abstractmethod
    def upload_nbytes(self) -> int:
        """Bytes one upload carries (Delta and each extra)."""

    @abstractmethod
    def add(self, upload: Upload) -> None:
        """Take one upload of the coming server step. Its tensors are the loop's (reused upload rows):
        they hold until ``step()`` returns; what must outlive the step is copied."""

    @abstractmethod
    def step(self) -> None:
        """Apply the uploads added since the last step (at least one) to ``params`` in place and
        advance ``version`` by one."""

    def private_weight(self, upload: Upload) -> float:
        """Under DP (fl_bench.privacy): this upload's weight in the step, which the trusted
        aggregator applies to the clipped Delta before it sums, divides by K and noises the step.
        It must depend on this upload alone and be at most 1, so that one client moves the step by
        at most L / K, the sensitivity the accountant assumes. Default: 1."""
        return 1.0

    @abstractmethod
    def dp_check(self, mechanism: str) -> None:
        """Raise ConfigError (one line) unless this server's steps can take the private form of
        :meth:`private_weight`; called once, before the run. DP clips and noises Delta and nothing
        else, and the server then sees one aggregate, so a server that keeps per-client state or
        weights uploads by one another cannot."""

    def server_state_nbytes(self) -> int:
        """Memory of the server state kept between steps besides the model and the per-client stores
        (HFL's ring of past models, a server optimizer's moments), for the run summary. Default: 0."""
        return 0

    def client_state_nbytes(self) -> int:
        """Memory of the per-client state the server keeps, for the run summary. Default: 0."""
        return 0


# ----------------------------------------------------------------------------- the trainer
class Trainer(ABC):
    """Local training of client trips (``fl_bench.clients.trainer.ClientTrainer``), and the hooks
    through which a task keeps state of its own beside the server's messages (a LightningModule's
    federated BatchNorm buffers: ``fl_bench.clients.lightning_trainer``). Every hook defaults to
    nothing: a trainer overrides the ones it has."""

    vmap: bool = False  # a batching trainer: the loop hands it every pending trip at once

    @abstractmethod
    def train(self, starts: Sequence[Broadcast], clients: list[int], seeds: list[int], out: Sequence[torch.Tensor],
              steps: Sequence[int] | None = None) -> Any:
        """Train trip i of ``clients[i]`` from ``starts[i]`` (left untouched) with the minibatch order of
        ``seeds[i]`` and write its upload row into ``out[i]``: Delta = y_0 - y_Q, then each of the
        server's ``upload_keys``. ``steps[i]``: the trip stops after that many local steps (partial
        work); None, or not passed (the loop passes it only under partial work): each its full work."""

    def broadcast_state(self) -> dict[str, torch.Tensor]:
        """Tensors a download carries besides the server's broadcast, by name: the loop adds them to
        the Broadcast's ``state`` (and snapshots them with it). Default: none."""
        return {}

    @property
    def extra_download_bytes(self) -> int:
        """Bytes a download carries besides the server's broadcast (what :meth:`broadcast_state` adds,
        in the dtypes it travels in). Default: 0."""
        return 0

    @property
    def extra_upload_bytes(self) -> int:
        """Bytes an upload carries besides the server's ``Upload``. Default: 0."""
        return 0

    def after_server_step(self, seeds: list[int], clients: list[int], weights: list[float] | None) -> None:
        """The server stepped on the uploads of the trips of ``seeds`` (their training seeds) from
        ``clients``, in add order; ``weights``: each upload's share of the step where the server states
        one (``Server.step_weights``), else None. Default: nothing."""

    def state_dict(self) -> dict[str, Any]:
        """The trainer's own state a resumed run needs (the loop's checkpoint keeps it). Default: none."""
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Take the state of :meth:`state_dict` (a resumed run). Default: nothing to take."""


# ----------------------------------------------------------------------------- the step policy
class TripView(Protocol):
    """What a step policy reads of a trip (the loop's record: ``fl_bench.engine.simulator.Trip``)."""

    id: int
    client: int
    version: int  # the model version downloaded
    start: float  # when it started (the server sent its model and its steps)
    end: float  # when it ends (or ended)
    round: int  # the round that started it (-1: asynchronous)
    aborted: bool  # over before uploading
    steps: int  # the local steps it trains (fewer under a work deadline)


class EventLoop(Protocol):
    """What a step policy may use of the event loop (``fl_bench.engine.simulator.Simulator``, which
    calls the policy's hooks): the clock, the buffer of finished trips, and its actions."""

    now: float
    delays: Any  # the clients' delay laws (fl_bench.engine.delays.ClientDelays): mean() is a trip's mean duration
    buffer: list[TripView]  # finished trips whose uploads the next server step consumes, in arrival order
    work: Any  # the work schedule (fl_bench.engine.work.WorkSchedule): each trip's local steps

    def schedule_tick(self, time: float) -> None:
        """Call ``on_tick`` at ``time``."""

    def schedule_deadline(self, time: float, round_id: int) -> None:
        """Call ``on_deadline(round_id)`` at ``time``."""

    def start_trips(self, count: int, round_id: int = -1) -> list[TripView]:
        """Start up to ``count`` trips on the current model (selection picks the clients); the started ones."""

    def wait_for_clients(self) -> None:
        """Call ``on_availability`` at the next availability change (or server step, on a steps clock)."""

    def abort(self, trip: TripView) -> None:
        """End a running trip without its upload (a closed round's straggler)."""

    def count_trips(self) -> None:
        """Trips that are over so far now count (budget, evaluations)."""

    def budget_spent(self) -> bool:
        """Whether the trip, round or time budget is spent."""

    def evaluate_if_due(self, force: bool = False) -> bool:
        """Evaluate each time counted trips cross a multiple of eval_every; True means stop."""

    def server_step(self, trips: list[TripView] | None = None) -> None:
        """Hand the buffer's uploads (or only ``trips`` of them, in that order) to the server and step it."""

    def hold(self, trip: TripView) -> None:
        """Keep the client of a trip that just ended busy (waiting for a server step) until :meth:`release`."""

    def release(self, trips: list[TripView]) -> None:
        """Send the clients :meth:`hold` kept back to the idle clients."""


class StepPolicy(ABC):
    """When trips start and when the server steps: hooks the event loop calls, in virtual-time order.

    A server declares the policy it runs under (``Server.step_policy``); its config carries the
    policy's ``knobs`` (``fl_bench.algorithms.base``: ``AsyncConfig`` for ``BufferedAsync``,
    ``SyncConfig`` for ``Rounds``)."""

    knobs: ClassVar[tuple[str, ...]] = ()  # the algorithm config's attributes ``from_config`` reads
    # the work schedule class (fl_bench.engine.work) whose state it steps on, if it needs one (Compass's groups)
    work_schedule: ClassVar[Optional[type]] = None
    # Each server step closes a round of clients started together on one model version (a cohort, as
    # DP-SGD's privacy amplification by sampling assumes), not a stream of arrivals.
    synchronous: ClassVar[bool] = False

    @classmethod
    @abstractmethod
    def from_config(cls, cfg: Any, concurrency: int, arrival_rate: float | None, takes_all: bool) -> StepPolicy:
        """The policy for an algorithm config (``cfg``), the run's concurrency and arrival rate, and
        whether the selection starts every available client at once (``takes_all``)."""

    @abstractmethod
    def clients_at_once(self) -> int:
        """Clients the policy needs training at the same time (start-up checks)."""

    @abstractmethod
    def begin(self, sim: EventLoop) -> None:
        """Schedule the first trips (time 0)."""

    def on_tick(self, sim: EventLoop) -> None:
        """A start time scheduled with ``sim.schedule_tick`` has come."""

    @abstractmethod
    def on_trip_end(self, sim: EventLoop, trip: TripView) -> None:
        """A trip is over: ``trip.aborted`` says whether it uploaded. It is already logged."""

    def on_deadline(self, sim: EventLoop, round_id: int) -> None:
        """A deadline scheduled with ``sim.schedule_deadline`` has passed."""

    def on_availability(self, sim: EventLoop) -> None:
        """Availability changed while the policy was waiting for clients."""
