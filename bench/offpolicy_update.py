"""Cost of one SAC update on this machine: batch size, critic width, bfloat16, torch.compile.

Times `SAC.update` on a random batch with quadrotor-hover's observation sizes (wall and process
CPU time per update, after warm-up; torch.compile's first-call time reported beside). These
figures chose the off-policy defaults (docs/ARCHITECTURE.md).

    python bench/offpolicy_update.py [--batches 1024 4096] [--widths 64 128 256] [--updates 30]
"""

from __future__ import annotations

import argparse
import json
import time

import _common


def measure(batch: int, width: int, amp: bool, compile_: bool, updates: int) -> dict:
    import torch

    from simreal.train.offpolicy import keep_freed_memory
    from simreal.train.sac import SAC, SACConfig

    keep_freed_memory()
    torch.manual_seed(0)
    cfg = SACConfig(actor_hidden=[64, 64], critic_hidden=[width, width], amp=amp,
                    compile=compile_)
    agent = SAC(22, 37, 4, 256, cfg, torch.device("cpu"))
    data = {"obs/policy": torch.randn(batch, 22), "obs/critic": torch.randn(batch, 37),
            "action": torch.rand(batch, 4) * 2 - 1, "reward": torch.randn(batch, 1),
            "discount": torch.full((batch, 1), 0.97), "next/policy": torch.randn(batch, 22),
            "next/critic": torch.randn(batch, 37)}
    start = time.perf_counter()
    for _ in range(3):  # warm-up (and compilation of both actor/critic-only variants)
        agent.update(data)
    first_s = time.perf_counter() - start
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(updates):
        agent.update(data)
    return {"batch": batch, "critic_width": width, "amp": amp, "compile": compile_,
            "update_ms": round((time.perf_counter() - wall) / updates * 1e3, 2),
            "update_cpu_ms": round((time.process_time() - cpu) / updates * 1e3, 2),
            "warmup_s": round(first_s, 1)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--batches", type=int, nargs="+", default=[1024, 4096])
    p.add_argument("--widths", type=int, nargs="+", default=[64, 128, 256])
    p.add_argument("--updates", type=int, default=30)
    p.add_argument("--compile", action="store_true", help="also time torch.compile (slow)")
    args = p.parse_args()
    rows = []
    for batch in args.batches:
        for width in args.widths:
            for amp in (False, True):
                rows.append(measure(batch, width, amp, False, args.updates))
                print(json.dumps(rows[-1]), flush=True)
    if args.compile:
        rows.append(measure(args.batches[0], 128, False, True, args.updates))
        print(json.dumps(rows[-1]), flush=True)
    print(f"wrote {_common.write_result('offpolicy_update', {'rows': rows})}")


if __name__ == "__main__":
    main()
