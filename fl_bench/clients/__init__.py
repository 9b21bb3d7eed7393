"""The client side: what a client does on a trip and where it runs.

- ``local_update``: the client's knobs (``ClientConfig``, part of every algorithm's config) and its
  local step rule (``LocalUpdate``: SGD with FedProx's term; FedGBO's family subclass it).
- ``trainer``: ``ClientTrainer`` trains a batch of trips, one after the other or together.
- ``batched``: the kernels of the batched step (bmm chains, written-out gradients, CUDA graphs).
- ``task``: the loss and evaluation around a model (``task=builtin``); for ``task=lightning``,
  ``lightning_task``: a user's LightningModule as the task, ``lightning_trainer``: the trainer of its
  trips (its optimizer or the algorithm's rule, its hooks, its buffers), ``lightning_metrics``: what
  its ``self.log`` records.
- ``hardware``: Lightning Fabric's accelerator, devices, processes and precision, and the batching and
  CUDA-graph choices of ``auto``.
- ``distributed``: one run across processes: each trains its share of a batch of trips.
- ``costs``: the FLOPs of a trip's local training (FedGBO App. B).

Depends on the contracts, ``fl_bench.data``, ``fl_bench.models`` and the shared base; not on the engine's loop or
the algorithms.
"""
