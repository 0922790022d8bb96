"""Data-parallel training on 2 CPU processes over Gloo, on loopback: the networks (and the
observation normalizers) must stay identical on every rank, while each rank steps its own,
differently seeded environments."""

from __future__ import annotations

import datetime
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import torch.multiprocessing as mp

ROOT = Path(__file__).resolve().parent.parent
WORLD = 2
TIMEOUT_S = 150  # per spawned group: every loop below is bounded by it


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _loopback_env(port: int) -> dict[str, str]:
    return {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "GLOO_SOCKET_IFNAME": "lo",
            "OMP_NUM_THREADS": "1"}


def _worker(rank: int, port: int, algo: str, out: str) -> None:
    os.environ.update(_loopback_env(port), RANK=str(rank), WORLD_SIZE=str(WORLD),
                      LOCAL_RANK=str(rank))
    torch.set_num_threads(1)
    import torch.distributed as dist

    from simreal.api import make_env
    from simreal.train import distributed
    from simreal.train.algos import get_algo

    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=TIMEOUT_S))
    try:
        env = make_env("quadrotor-hover", 16, distributed.rank_seed(0))
        spec = get_algo(algo)
        if algo == "ppo":
            cfg = spec.config()(steps_per_env=8, epochs=2, minibatches=2)
            iterations = 3
        else:
            cfg = spec.config()(batch_size=64, steps_per_iteration=4, learning_starts=2,
                                buffer_size=4096, updates_per_step=1.0)
            iterations = 3
        runner = spec.runner()(env, cfg, None, 0, {})
        first_obs = env.get_observations()["policy"].clone()
        model = runner.policy if algo == "ppo" else runner.agent.model
        initial = {k: v.clone() for k, v in model.state_dict().items()}
        stats = runner.learn(iterations * _steps_per_iteration(cfg) * env.num_envs * WORLD,
                             progress=False)
        torch.save({"initial": initial, "final": model.state_dict(), "first_obs": first_obs,
                    "iterations": runner.iteration, "env_steps": runner.env_steps,
                    "stats": stats}, Path(out) / f"rank{rank}.pt")
    finally:
        dist.destroy_process_group()


def _steps_per_iteration(cfg) -> int:
    return getattr(cfg, "steps_per_env", None) or cfg.steps_per_iteration


def _spawn(algo: str, tmp_path: Path) -> list[dict]:
    ctx = mp.spawn(_worker, args=(_free_port(), algo, str(tmp_path)), nprocs=WORLD,
                   join=False)
    deadline = time.monotonic() + TIMEOUT_S
    while not ctx.join(timeout=1.0):
        if time.monotonic() > deadline:
            for p in ctx.processes:
                p.terminate()
            pytest.fail(f"{algo}: {WORLD} Gloo processes did not finish in {TIMEOUT_S} s")
    return [torch.load(tmp_path / f"rank{r}.pt", weights_only=False) for r in range(WORLD)]


@pytest.mark.parametrize("algo", ["ppo", "sac"])
def test_ranks_keep_identical_parameters(algo: str, tmp_path: Path) -> None:
    r0, r1 = _spawn(algo, tmp_path)
    assert r0["iterations"] == r1["iterations"] == 3
    # the step budget counts every rank's steps
    assert r0["env_steps"] == 3 * WORLD * 16 * (8 if algo == "ppo" else 4)
    # each rank simulates its own environments
    assert not torch.equal(r0["first_obs"], r1["first_obs"])
    changed = 0
    for name, value in r0["final"].items():
        assert torch.equal(value, r1["final"][name]), f"{algo}: {name} differs across ranks"
        changed += not torch.equal(value, r0["initial"][name])
    assert changed > len(r0["final"]) // 2, f"{algo}: training changed too little"
    # the normalizers saw both ranks' observations: identical, and moved
    norm = "actor_norm.mean"
    assert torch.equal(r0["final"][norm], r1["final"][norm])
    assert not torch.equal(r0["final"][norm], r0["initial"][norm])


def test_torchrun_cli_rank0_writes_the_run(tmp_path: Path) -> None:
    """`torchrun -m simreal.cli train`: both ranks train, rank 0 alone writes and evaluates."""
    out = tmp_path / "run"
    env = {**os.environ, **_loopback_env(_free_port()), "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(WORLD),
           "--master_addr", "127.0.0.1", "--master_port", env["MASTER_PORT"],
           "-m", "simreal.cli", "train", "quadrotor-hover", "--algo", "ppo", "--envs", "16",
           "--steps", "1000", "--out", str(out), "--eval-episodes", "4", "--no-progress"]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=TIMEOUT_S)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (out / "summary.json").exists() and (out / "policy.onnx").exists()
    import json

    import yaml

    config = yaml.safe_load((out / "config.yaml").read_text())
    assert config["world_size"] == WORLD
    summary = json.loads((out / "summary.json").read_text())
    per_iteration = WORLD * 16 * config["algo_config"]["steps_per_env"]  # both ranks' steps
    assert summary["env_steps"] == summary["iterations"] * per_iteration >= 1000
    ranks = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert any(r.get("rank") == 1 for r in ranks), proc.stdout[-2000:]


def test_step_log_means_per_iteration_on_one_process() -> None:
    from simreal.train.distributed import StepLog, all_reduce_gradients, is_distributed, rank_seed

    assert not is_distributed() and rank_seed(7) == 7
    log = StepLog()
    log.add({"/a": torch.tensor(1.0), "/b": 2.0})
    log.add({"/a": torch.tensor([3.0, 5.0]), "/c": torch.tensor(float("nan"))})
    # a tensor logs its mean; NaN (a mean over no finished episode) is left out
    assert log.means() == {"/a": 2.5, "/b": 2.0}
    assert log.means() == {}
    p = torch.nn.Parameter(torch.ones(3))
    p.grad = torch.full((3,), 2.0)
    all_reduce_gradients([p])  # one process: unchanged
    assert torch.equal(p.grad, torch.full((3,), 2.0))
