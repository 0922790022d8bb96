"""Data-parallel training over processes with torch.distributed, as torchrun starts them.

    torchrun --nproc_per_node N -m simreal.cli train TASK [--backend mjwarp --device cuda]
    torchrun --nnodes M --nproc_per_node N --rdzv_backend c10d --rdzv_endpoint HOST:PORT \
        -m simreal.cli train TASK ...

Each process (rank) steps its own environments (`--envs` per process) with its own seed,
computes gradients on its own data, and every optimizer step applies the ranks' mean gradient
(one all-reduce of the flattened gradients), so the networks stay identical on every rank.
Observation normalizers are updated with the moments of all ranks' observations (one
all-reduce of 2 x dim numbers per update), so they stay identical too. NCCL carries the
collectives on GPUs, Gloo on CPUs. Rank 0 alone writes TensorBoard, checkpoints, the export and
the evaluation; per-iteration statistics it logs are means over all ranks. The step budget
(`--steps`) counts every rank's steps.

With no torchrun environment (WORLD_SIZE unset or 1) every function here is a no-op or
returns the single-process answer, so the runners call them unconditionally.
"""

from __future__ import annotations

import datetime
import os
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

# rank r's environments are seeded with seed + r * RANK_SEED_STRIDE (rank 0 keeps `seed`)
RANK_SEED_STRIDE = 1_000_003


_suspended = False


def is_distributed() -> bool:
    return (not _suspended and dist.is_available() and dist.is_initialized()
            and dist.get_world_size() > 1)


@contextmanager
def suspended() -> Iterator[None]:
    """One rank's work that must not talk to the others (rank 0's export and evaluation
    build a runner of their own): every function here acts as on a single process."""
    global _suspended
    before, _suspended = _suspended, True
    try:
        yield
    finally:
        _suspended = before


def rank() -> int:
    if dist.is_available() and dist.is_initialized():  # rank 0 stays rank 0 when suspended
        return dist.get_rank()
    return 0


def world_size() -> int:
    return dist.get_world_size() if is_distributed() else 1


def is_main() -> bool:
    return rank() == 0


def launched() -> bool:
    """Whether torchrun (or an equivalent launcher) started this process as one of several."""
    return int(os.environ.get("WORLD_SIZE", "1")) > 1


def init(device: str = "cpu", timeout_s: float = 600.0) -> torch.device:
    """Join the process group torchrun describes (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR,
    MASTER_PORT) if launched so; returns this rank's device: `cuda` becomes cuda:LOCAL_RANK
    (NCCL), anything else stays as given (Gloo)."""
    dev = torch.device(device)
    if not launched():
        return dev
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if dev.type == "cuda":
        dev = torch.device("cuda", local_rank)
        torch.cuda.set_device(dev)
    if not dist.is_initialized():
        backend = "nccl" if dev.type == "cuda" else "gloo"
        kwargs: dict[str, Any] = {"backend": backend,
                                  "timeout": datetime.timedelta(seconds=timeout_s)}
        if dev.type == "cuda":
            kwargs["device_id"] = dev
        dist.init_process_group(**kwargs)
    return dev


def shutdown() -> None:
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def rank_seed(seed: int) -> int:
    """The seed of this rank's environments and sampling."""
    return seed + RANK_SEED_STRIDE * rank()


def broadcast_module(module: nn.Module, src: int = 0) -> None:
    """Every parameter and buffer of `module` as rank `src` has them (after a per-rank init
    or a checkpoint load)."""
    if not is_distributed():
        return
    with torch.no_grad():
        for tensor in module.state_dict(keep_vars=True).values():
            dist.broadcast(tensor.data, src)


def all_reduce_gradients(params: Iterable[nn.Parameter]) -> None:
    """Replace each gradient by its mean over the ranks: one all-reduce of them all, flat.

    Parameters without a gradient are left out; which ones have none is the same on every
    rank, since every rank runs the same update code."""
    if not is_distributed():
        return
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        return
    flat = torch.cat([g.reshape(-1) for g in grads])
    dist.all_reduce(flat)
    flat /= world_size()
    offset = 0
    for g in grads:
        n = g.numel()
        g.copy_(flat[offset:offset + n].view_as(g))
        offset += n


def optimizer_params(optimizer: torch.optim.Optimizer) -> list[nn.Parameter]:
    return [p for group in optimizer.param_groups for p in group["params"]]


def mean(x: torch.Tensor) -> torch.Tensor:
    """The mean of `x` over the ranks (a new tensor; `x` itself when not distributed)."""
    if not is_distributed():
        return x
    out = x.detach().clone()
    dist.all_reduce(out)
    return out / world_size()


def moments(n: int, batch_mean: torch.Tensor, batch_var: torch.Tensor
            ) -> tuple[int, torch.Tensor, torch.Tensor]:
    """(count, mean, variance) of the union of every rank's batch of `n` rows (all ranks have
    the same n: the same number of environments). A normalizer's `reduce` hook."""
    if not is_distributed():
        return n, batch_mean, batch_var
    packed = torch.cat([batch_mean, batch_var + batch_mean.square()])
    dist.all_reduce(packed)
    packed /= world_size()
    dim = batch_mean.shape[0]
    m, sq = packed[:dim], packed[dim:]
    return n * world_size(), m, (sq - m.square()).clamp(min=0)


def sync_normalizers(module: nn.Module) -> None:
    """Make every running normalizer in `module` update with all ranks' observations."""
    if not is_distributed():
        return
    for sub in module.modules():
        if hasattr(sub, "reduce"):
            sub.reduce = moments


def any_rank(flag: bool) -> bool:
    """True on every rank when `flag` is true on any (e.g. a callback asking to stop)."""
    if not is_distributed():
        return flag
    t = torch.tensor([1.0 if flag else 0.0], device=_collective_device())
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return bool(t.item() > 0)


def _collective_device() -> torch.device:
    if dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


class StepLog:
    """Per-step log values (tensors stay on their device: no host sync per step), reduced to
    per-iteration means with one transfer; across ranks when distributed (NaN entries, such
    as a mean over no finished episode, are left out of a mean)."""

    def __init__(self) -> None:
        self._values: dict[str, list[Any]] = {}

    def add(self, log: dict[str, Any]) -> None:
        for key, value in log.items():
            if isinstance(value, torch.Tensor):  # rsl_rl's protocol: a tensor logs its mean
                value = value.detach().float().mean()
            self._values.setdefault(key, []).append(value)

    def means(self) -> dict[str, float]:
        """{key: mean} over the values added since the last call, then cleared."""
        values, self._values = self._values, {}
        keys = sorted(values)
        if is_distributed():  # ranks may have seen different keys this iteration
            gathered: list[list[str] | None] = [None] * world_size()
            dist.all_gather_object(gathered, keys)
            keys = sorted({k for ks in gathered for k in (ks or [])})
        if not keys:
            return {}
        if is_distributed():
            device = _collective_device()
        else:
            device = next((v.device for vs in values.values() for v in vs
                           if isinstance(v, torch.Tensor)), torch.device("cpu"))
        sums, counts = [], []
        for key in keys:
            items = values.get(key, [])
            parts = [torch.stack([v for v in items if isinstance(v, torch.Tensor)]).to(
                device, torch.float64)] if any(isinstance(v, torch.Tensor) for v in items) else []
            floats = [float(v) for v in items if not isinstance(v, torch.Tensor)]
            if floats:
                parts.append(torch.tensor(floats, dtype=torch.float64, device=device))
            t = torch.cat(parts) if parts else torch.zeros(0, dtype=torch.float64,
                                                           device=device)
            finite = torch.isfinite(t)
            sums.append(torch.where(finite, t, 0.0).sum())
            counts.append(finite.sum().to(torch.float64))
        packed = torch.stack([torch.stack(sums), torch.stack(counts)])
        if is_distributed():
            dist.all_reduce(packed)
        packed = packed.cpu()  # the one host transfer of the iteration's log
        return {key: float(packed[0, i] / packed[1, i]) for i, key in enumerate(keys)
                if packed[1, i] > 0}
