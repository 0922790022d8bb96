"""Cost of one SAC update: sample-gradients per second for each task's network shapes.

Times `SAC.update` on a random batch with a task's observation and action sizes (read from a
one-env instance of the task) and the task's own off-policy network widths (its
`train_defaults`, else the algorithm's): wall and process CPU time per update after warm-up,
and `sample_grads_per_s` = batch / update time. Beside it, in the same run, the reference
path `looped`: the same losses with one nn.Sequential per critic called in a Python loop and
torch's default (non-fused) Adam, the way SAC is usually written (CleanRL's habit); the ratio
says what the batched ensemble and the fused step buy on this machine. On a GPU (`--device
cuda`) the product's path `batched` replays each update as a CUDA graph (train/cuda_graph.py)
and the row `eager` is the same path launched op by op; timings synchronize the device.
`--compile` adds torch.compile's first-call cost and its steady rate.

    python bench/offpolicy_update.py [--tasks quadrotor-hover go2-flat arm-reach]
        [--batches 256 1024 4096] [--updates 30] [--device cpu|cuda] [--compile]
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

import _common

TASKS = ("quadrotor-hover", "go2-flat", "arm-reach")


def task_shapes(task: str) -> dict[str, Any]:
    """Actor/critic observation sizes, action count and the task's SAC widths."""
    from simreal.api import make_env
    from simreal.sim.registry import get_task

    env = make_env(task, 1, 0)
    obs = env.reset()
    defaults = getattr(get_task(task), "train_defaults", {}) or {}
    sac = (defaults.get("sac") or {}).get("config", {})
    return {"task": task, "actor_dim": obs["policy"].shape[-1],
            "critic_dim": obs["critic"].shape[-1], "actions": env.num_actions,
            "actor_hidden": sac.get("actor_hidden"), "critic_hidden": sac.get("critic_hidden")}


def _batch(shapes: dict[str, Any], batch: int, device: Any) -> dict[str, Any]:
    import torch

    a, c, n = shapes["actor_dim"], shapes["critic_dim"], shapes["actions"]
    data = {"obs/policy": torch.randn(batch, a), "obs/critic": torch.randn(batch, c),
            "action": torch.rand(batch, n) * 2 - 1, "reward": torch.randn(batch, 1),
            "discount": torch.full((batch, 1), 0.97), "next/policy": torch.randn(batch, a),
            "next/critic": torch.randn(batch, c)}
    return {k: v.to(device) for k, v in data.items()}


def _looped_sac(agent: Any) -> None:
    """Replace the agent's critic ensemble by per-critic nn.Sequential modules called in a
    loop, and its fused Adam by torch's default Adam (the reference path)."""
    import copy

    import torch
    from torch import nn

    class Looped(nn.Module):
        def __init__(self, ensemble: nn.Module):
            super().__init__()
            members = ensemble.layers[0].weight.shape[0]
            self.nets = nn.ModuleList()
            for i in range(members):
                layers: list[nn.Module] = []
                for layer in ensemble.layers:
                    lin = nn.Linear(*layer.weight.shape[1:])
                    with torch.no_grad():
                        lin.weight.copy_(layer.weight[i].T)
                        lin.bias.copy_(layer.bias[i, 0])
                    layers += [lin, nn.LayerNorm(lin.out_features, elementwise_affine=False),
                               nn.ReLU()]
                head = nn.Linear(*ensemble.head.weight.shape[1:])
                self.nets.append(nn.Sequential(*layers, head))
            self.out = ensemble.out

        def forward(self, obs, act, detach: bool = False):
            x = torch.cat([obs, act], dim=-1)
            outs = []
            for net in self.nets:
                if detach:  # the actor's loss: no gradient into the critic's weights
                    y = x
                    for m in net:
                        y = (torch.nn.functional.linear(y, m.weight.detach(), m.bias.detach())
                             if isinstance(m, nn.Linear) else m(y))
                    outs.append(y)
                else:
                    outs.append(net(x))
            out = torch.stack(outs)
            return out.squeeze(-1) if self.out == 1 else out

    m = agent.model
    device = next(m.parameters()).device
    m.critic = Looped(m.critic).to(device)
    m.critic_target = copy.deepcopy(m.critic).requires_grad_(False)
    agent.optimizer = torch.optim.Adam([
        {"params": list(m.actor.parameters()), "lr": agent.cfg.actor_lr},
        {"params": list(m.critic.parameters()), "lr": agent.cfg.critic_lr},
        {"params": [m.log_alpha], "lr": agent.cfg.alpha_lr}])


def measure(shapes: dict[str, Any], batch: int, path: str, updates: int,
            device: str = "cpu") -> dict[str, Any]:
    """One row: `path` is `batched` (the product's), `eager` (batched without CUDA graphs),
    `looped` (the reference) or `compiled`."""
    import torch

    from simreal.train.offpolicy import keep_freed_memory
    from simreal.train.sac import SAC, SACConfig

    keep_freed_memory()
    torch.manual_seed(0)
    dev = torch.device(device)
    widths = {k: shapes[k] for k in ("actor_hidden", "critic_hidden") if shapes[k]}
    cfg = SACConfig(**widths, compile=path == "compiled", cuda_graph=path == "batched")
    agent = SAC(shapes["actor_dim"], shapes["critic_dim"], shapes["actions"], 256, cfg, dev)
    if path == "looped":
        _looped_sac(agent)
    data = _batch(shapes, batch, dev)

    def sync() -> None:
        if dev.type == "cuda":
            torch.cuda.synchronize()

    start = time.perf_counter()
    for _ in range(3):  # warm-up (and, compiled, the compilation)
        agent.update(data)
    sync()
    warmup_s = time.perf_counter() - start
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(updates):
        agent.update(data)
    sync()
    update_s = (time.perf_counter() - wall) / updates
    return {"task": shapes["task"], "batch": batch, "path": path, "device": device,
            "critic_hidden": list(cfg.critic_hidden), "actor_hidden": list(cfg.actor_hidden),
            "update_ms": round(update_s * 1e3, 3),
            "update_cpu_ms": round((time.process_time() - cpu) / updates * 1e3, 2),
            "sample_grads_per_s": round(batch / update_s), "warmup_s": round(warmup_s, 1)}


def run(tasks: list[str], batches: list[int], updates: int, device: str, compile_: bool,
        emit=print) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for task in tasks:
        shapes = task_shapes(task)
        for batch in batches:
            paths = (["batched"] + (["eager"] if device.startswith("cuda") else [])
                     + ["looped"] + (["compiled"] if compile_ else []))
            by_path = {p: measure(shapes, batch, p, updates, device) for p in paths}
            base = by_path["looped"]["sample_grads_per_s"]
            for row in by_path.values():
                row["vs_looped"] = round(row["sample_grads_per_s"] / base, 2)
                rows.append(row)
                emit(json.dumps(row))
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--tasks", nargs="+", default=list(TASKS))
    p.add_argument("--batches", type=int, nargs="+", default=[256, 1024, 4096])
    p.add_argument("--updates", type=int, default=30)
    p.add_argument("--device", default="cpu")
    p.add_argument("--compile", action="store_true", help="also time torch.compile (slow)")
    args = p.parse_args()
    rows = run(args.tasks, args.batches, args.updates, args.device, args.compile,
               emit=lambda s: print(s, flush=True))
    name = "offpolicy_update" if args.device == "cpu" else f"offpolicy_update_{args.device}"
    print(f"wrote {_common.write_result(name, {'rows': rows})}")


if __name__ == "__main__":
    main()
