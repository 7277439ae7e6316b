"""The calibration activations flowing through the build, layer by layer:
where the activations entering layer i come from (memory, the work dir, or a
forward-only replay from the nearest saved layer), how they advance past a
layer (the unquantized layer's output, or the quantized one's with
`hessians: propagate`), and their pruning (`keep: last`)."""

from __future__ import annotations

from collections.abc import Callable

import torch


class ActivationStream:
    def __init__(self, wd, dist, runner, n_samples: int, fingerprints: dict[int, str],
                 embeddings: Callable[[], torch.Tensor], layer_for_forward: Callable,
                 keep: str):
        """`embeddings()`: all samples' embedded tokens; `layer_for_forward(i)`:
        layer i as a module to run (folded; dequantized when propagating)."""
        self.wd, self.dist, self.runner = wd, dist, runner
        self.n_samples, self.fp, self.keep = n_samples, fingerprints, keep
        self._embeddings, self._layer_for_forward = embeddings, layer_for_forward
        self.x: torch.Tensor | None = None  # activations entering the next layer
        self.x_layer = -1  # those activations come after this layer (-1: embeddings)

    def before(self, i: int) -> torch.Tensor:
        """This rank's activations entering layer i."""
        if self.x is not None and self.x_layer == i - 1:
            return self.x
        j = i - 1
        x = None
        while j >= 0:
            x = self.wd.load_acts(j, self.fp[j])
            if x is not None:
                break
            j -= 1
        if x is None:
            x = self._embeddings()
        x = self.dist.mine(x)
        for k in range(j + 1, i):  # replay forward-only through layers without saved acts
            x = self.runner.run(k, self._layer_for_forward(k), x)
            self.save(k, x)
        self.x, self.x_layer = x, i - 1
        return x

    def save(self, i: int, x: torch.Tensor) -> None:
        self.wd.save_acts(i, self.fp[i], self.dist.gather_samples(x, self.n_samples))

    def advance(self, i: int, y: torch.Tensor) -> None:
        """y: the activations after layer i."""
        self.save(i, y)
        if self.keep == "last":
            self.wd.prune_acts(before=i)
        self.x, self.x_layer = y, i
