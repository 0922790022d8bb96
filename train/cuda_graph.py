"""An off-policy update replayed as a CUDA graph: one launch instead of hundreds.

A SAC or TD3 update of small networks is a few hundred kernels of microseconds each; on a GPU
the host's launches, not the arithmetic, set its cost (measured on an H200: ~7 ms per update
from batch 1024 to 16384, docs/SCALING.md). Captured once, the whole update (losses, backward,
fused Adam step, target averaging) replays with one call.

What capture needs, and how the agent provides it: the batch is copied into static input
tensors before each replay; every tensor the update reads or writes keeps its storage (the
normalizers update in place, Adam is `capturable`, gradients are allocated inside the capture
and overwritten by each replay); randomness comes from the default CUDA generator, which
graphs advance per replay. One graph per value of the actor flag (critic-only updates of a
delayed actor are another graph).

Warm-up: capture must follow a few eager runs on a side stream (cuBLAS workspaces, autograd's
buffers). Those runs would be real updates of the first batch, so the model and optimizer
state are snapshotted before and restored in place after (optimizer state the warm-up
created is zeroed, as a fresh Adam's is): the first replay is the first update, as in the
eager path.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

Body = Callable[[dict[str, torch.Tensor], bool], dict[str, torch.Tensor]]

WARMUP = 3


def _state_tensors(model: torch.nn.Module, optimizer: torch.optim.Optimizer
                   ) -> list[torch.Tensor]:
    tensors = [t for t in model.state_dict(keep_vars=True).values()
               if isinstance(t, torch.Tensor)]
    for state in optimizer.state.values():
        tensors += [t for t in state.values() if isinstance(t, torch.Tensor)]
    return tensors


class GraphedUpdate:
    """Replays `body(batch, update_actor)` as CUDA graphs captured at the first call of each
    flag. `body` must neither allocate outside the capture what it reads later, nor sync."""

    def __init__(self, body: Body, model: torch.nn.Module, optimizer: torch.optim.Optimizer):
        self.body, self.model, self.optimizer = body, model, optimizer
        self.static: dict[str, torch.Tensor] | None = None
        self.graphs: dict[bool, tuple[torch.cuda.CUDAGraph, dict[str, torch.Tensor]]] = {}
        self.pool = None

    def __call__(self, batch: dict[str, torch.Tensor], update_actor: bool
                 ) -> dict[str, torch.Tensor]:
        if self.static is None:
            self.static = {k: v.detach().clone() for k, v in batch.items()}
        else:
            for key, value in batch.items():
                static = self.static[key]
                if value.shape != static.shape:
                    raise ValueError(f"CUDA-graphed update: batch[{key!r}] has shape "
                                     f"{tuple(value.shape)}, the captured one "
                                     f"{tuple(static.shape)} (set cuda_graph: false for "
                                     f"batches that change shape)")
                static.copy_(value)
        if update_actor not in self.graphs:
            self.graphs[update_actor] = self._capture(update_actor)
        graph, out = self.graphs[update_actor]
        graph.replay()
        return out

    def _capture(self, update_actor: bool):
        assert self.static is not None
        before = _state_tensors(self.model, self.optimizer)
        snapshot = [(t, t.detach().clone()) for t in before]
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(WARMUP):
                self.body(self.static, update_actor)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self.pool):
            out = self.body(self.static, update_actor)
        self.pool = graph.pool()
        with torch.no_grad():  # undo the warm-up's updates, in place (the graph holds them)
            for tensor, saved in snapshot:
                tensor.copy_(saved)
            known = {id(t) for t in before}
            for tensor in _state_tensors(self.model, self.optimizer):
                if id(tensor) not in known:  # Adam's moments and step, made by the warm-up
                    tensor.zero_()
        return graph, out
