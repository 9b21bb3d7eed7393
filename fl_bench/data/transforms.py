"""Batch-time image preprocessing: images stay uint8 in memory (4x smaller than float) and are
scaled, augmented and normalised per batch, on whatever device the batch is on."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class ImageTransform:
    """Batch-time image preprocessing: uint8 to [0, 1], a crop of ``crop_size`` (random in
    training, centred in evaluation), a random horizontal flip in training, then per-channel
    normalisation by ``mean`` / ``std``."""

    mean: tuple[float, ...]  # per channel, on the [0, 1] scale
    std: tuple[float, ...]
    random_flip: bool = False  # training only: horizontal flip with p = 0.5, per image
    crop_size: int | None = None  # training: random crop; evaluation: centre crop

    def __call__(self, x: torch.Tensor, train: bool, generator: torch.Generator | None = None) -> torch.Tensor:
        x = x.float().div_(255.0) if x.dtype == torch.uint8 else x.float()
        if self.crop_size is not None:
            x = self._random_crop(x, generator) if train else self._centre_crop(x)
        if self.random_flip and train:
            flip = torch.rand(len(x), generator=generator) < 0.5
            x = torch.where(flip.to(x.device).view(-1, 1, 1, 1), x.flip(-1), x)
        mean, std = self._stats
        return (x - mean.to(x.device)) / std.to(x.device)

    def __post_init__(self) -> None:
        # Built once, not per batch (frozen dataclass: set through object.__setattr__).
        stats = tuple(torch.tensor(v).view(1, -1, 1, 1) for v in (self.mean, self.std))
        object.__setattr__(self, "_stats", stats)

    def output_shape(self, input_shape: tuple[int, ...]) -> tuple[int, ...]:
        """The [C, H, W] shape of an output for an input of ``input_shape`` (after any crop)."""
        if self.crop_size is None:
            return input_shape
        return (input_shape[0], self.crop_size, self.crop_size)

    def _centre_crop(self, x: torch.Tensor) -> torch.Tensor:
        c, (h, w) = self.crop_size, x.shape[-2:]
        top, left = (h - c) // 2, (w - c) // 2
        return x[..., top : top + c, left : left + c]

    def _random_crop(self, x: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
        """An independent crop offset per image, gathered with one advanced index."""
        c, (b, h, w) = self.crop_size, (len(x), *x.shape[-2:])
        top = torch.randint(0, h - c + 1, (b,), generator=generator).to(x.device)
        left = torch.randint(0, w - c + 1, (b,), generator=generator).to(x.device)
        steps = torch.arange(c, device=x.device)
        rows = (top[:, None] + steps)[:, None, :, None]  # [b, 1, c, 1]
        cols = (left[:, None] + steps)[:, None, None, :]  # [b, 1, 1, c]
        batch = torch.arange(b, device=x.device)[:, None, None, None]
        chan = torch.arange(x.shape[1], device=x.device)[None, :, None, None]
        return x[batch, chan, rows, cols]
