"""The `mjwarp` backend (MuJoCo Warp) on Warp's CPU device: the same task code as on the
`mujoco` backend, checked against it step for step, and a short PPO run.

The first test to build a model compiles MuJoCo Warp's kernels for it (tens of seconds per
model on 2 cores); Warp caches them in $WARP_CACHE_PATH (tests/conftest.py: .cache/warp in
the checkout), so the rest of a run, and later runs, load them.

Tolerances: MuJoCo Warp computes in float32, MuJoCo's C engine in float64. Largest
differences over the run (measured on this machine; the assertion messages print them):
- quadrotor-hover (no contacts), 8 envs, 100 control steps (1 s) of random actions: qpos
  2.3e-6, qvel 1.2e-5; asserted below 1e-4 and 1e-3 (and rewards below 1e-4);
- go2-flat (12 joints, ground contacts, PD actuators with per-env gains, latency, friction,
  restitution, softness, trunk and link masses and CoMs, joint damping, frictionloss,
  armature, observation age), 4 envs, 25 control steps (0.5 s): qpos 1.2e-6, qvel 2.8e-5,
  rewards 2.7e-8 (with set_const recomputing MuJoCo Warp's inverse weights too: 7e-3 and
  0.27 without); asserted below 1e-3, 2e-2 and 1e-3, with identical terminations. Contacts
  amplify float32 rounding: by 100 steps (2 s) the go2 states are 2.5e-2 apart, as two float64
  runs with perturbed inputs would be.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

pytest.importorskip("mujoco_warp")

from simreal.api import make_env  # noqa: E402
from simreal.sim.backend import BackendError  # noqa: E402
from simreal.sim.backends import make_backend  # noqa: E402

ROBOTS = Path(__file__).resolve().parent.parent / "robots"


def _max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return (a.double() - b.double()).abs().max().item()


# both tasks call set_const after writing per-env masses, so every randomization is on
PARITY_CONFIG: dict[str, dict] = {"quadrotor-hover": {}, "go2-flat": {}}


def _run_both(task: str, n: int, steps: int, scale: float, seed: int = 3):
    """Both backends, same seed, same actions; the per-step differences."""
    ref = make_env(task, n, seed, PARITY_CONFIG[task])
    warp = make_env(task, n, seed, PARITY_CONFIG[task], backend="mjwarp", device="cpu")
    ref.reset()
    warp.reset()
    assert warp.backend.qpos.dtype == torch.float32 and warp.device == torch.device("cpu")
    g = torch.Generator().manual_seed(0)
    worst = {"qpos": 0.0, "qvel": 0.0, "sensors": 0.0, "reward": 0.0}
    for _ in range(steps):
        act = (torch.rand(n, ref.num_actions, generator=g) * 2 - 1) * scale
        _, r_ref, d_ref, _ = ref.step(act)
        _, r_warp, d_warp, _ = warp.step(act)
        assert torch.equal(d_ref, d_warp), "the backends disagree on which episodes ended"
        for key, a, b in (("qpos", ref.backend.qpos, warp.backend.qpos),
                          ("qvel", ref.backend.qvel, warp.backend.qvel),
                          ("sensors", ref.backend.sensordata, warp.backend.sensordata),
                          ("reward", r_ref, r_warp)):
            worst[key] = max(worst[key], _max_diff(a, b))
    return ref, warp, worst


def test_hover_parity_with_the_mujoco_backend() -> None:
    _, _, worst = _run_both("quadrotor-hover", 8, 100, 0.3)
    assert worst["qpos"] < 1e-4 and worst["qvel"] < 1e-3 and worst["reward"] < 1e-4, worst


def test_masses_and_inertias_per_env() -> None:
    """Per-env masses and inertias in MuJoCo Warp's batched fields act as in MuJoCo's C
    engine once its derived constants are recomputed (set_const; a no-op on mjwarp)."""
    mjcf = ROBOTS / "crazyflie" / "crazyflie.xml"
    states = []
    for name in ("mujoco", "mjwarp"):
        b = make_backend(name, mjcf, 3, "cpu")
        base = b.body_id("base")
        b.model_field("body_mass")[:, base] *= torch.tensor([1.0, 1.3, 0.8], dtype=b.qpos.dtype)
        b.model_field("body_inertia")[:, base] *= torch.tensor(
            [[1.0], [0.7], [1.5]], dtype=b.qpos.dtype)
        b.set_const(torch.arange(3))
        b.ctrl[:] = torch.tensor([0.07, 0.06, 0.07, 0.08], dtype=b.ctrl.dtype)  # N: a torque
        b.qvel[:, 3:] = torch.tensor([1.0, -2.0, 0.5], dtype=b.qvel.dtype)
        b.step(20)
        states.append(torch.cat([b.qpos, b.qvel], -1).double())
    assert _max_diff(*states) < 1e-3, _max_diff(*states)  # measured 6.5e-5 (float32)
    # and they differ per env (masses and inertias took effect)
    assert (states[1][0] - states[1][1]).abs().max() > 1e-3


def test_go2_flat_parity_with_the_mujoco_backend() -> None:
    _, warp, worst = _run_both("go2-flat", 4, 25, 0.5)
    assert worst["qpos"] < 1e-3 and worst["qvel"] < 2e-2 and worst["reward"] < 1e-3, worst
    assert not warp.backend.overflow().any(), "contact buffers overflowed"


def test_go2_randomized_fields_act_on_mjwarp() -> None:
    """Every field the legged task randomizes (joint damping, frictionloss, armature; link and
    trunk masses, inertias and CoMs; contact friction, softness, restitution; motor strength,
    kp, kd, latency) changes the dynamics on MuJoCo Warp too: one env per field, the same
    initial state and targets as the nominal env (tests/test_go2_physics.py, which checks the
    same on the mujoco backend; go2-flat's parity test above runs them all randomized)."""
    from tests.test_go2_physics import FIELDS, MARGIN, field_effects

    effects = field_effects("mjwarp", steps=20)
    assert effects["control"] < 1e-6, effects
    for field in FIELDS:
        assert effects[field] > MARGIN, (field, effects)


def test_model_fields_vary_per_env_and_forward_keeps_the_others_sensors() -> None:
    mjcf = ROBOTS / "crazyflie" / "crazyflie.xml"
    b = make_backend("mjwarp", mjcf, 3, "cpu")
    base = b.body_id("base")
    mass = b.model_field("body_mass")
    assert mass.shape == (3, b.model.nbody)
    mass[:, base] = torch.tensor([0.02, 0.03, 0.04])
    b.xfrc_applied[:, base, 2] = 0.5  # N up: acceleration 0.5/m - g differs per env
    b.step(10)
    vz = b.qvel[:, 2]
    assert vz[0] > vz[1] > vz[2], vz
    with pytest.raises(BackendError, match="body_parentid"):
        b.model_field("body_parentid")
    before = b.sensordata.clone()
    b.qpos[1, 2] += 1.0
    b.forward(torch.tensor([1]))
    assert torch.equal(b.sensordata[[0, 2]], before[[0, 2]])
    z = b.sensor_slice("position")
    assert b.sensordata[1, z][2] == pytest.approx(float(b.qpos[1, 2]), abs=1e-5)
    b.reset(torch.tensor([2]))
    assert torch.equal(b.qvel[2], torch.zeros(6)) and b.qpos[2, 2] == pytest.approx(1.0)
    assert b.qvel[0].abs().sum() > 0  # untouched


def test_backend_and_device_errors() -> None:
    with pytest.raises(BackendError, match="unknown backend"):
        make_env("quadrotor-hover", 2, backend="physx")
    with pytest.raises(BackendError, match="CPU only"):
        make_env("quadrotor-hover", 2, backend="mujoco", device="cuda")
    with pytest.raises(BackendError, match="CUDA"):
        make_env("quadrotor-hover", 2, backend="mjwarp", device="cuda")


def test_ppo_trains_on_mjwarp(tmp_path: Path) -> None:
    """A few PPO iterations with the simulator on MuJoCo Warp, through the CLI's API."""
    from simreal.api import train

    out = tmp_path / "run"
    per_iteration = 16 * 8
    summary = train("quadrotor-hover", algo="ppo", envs=16, steps=3 * per_iteration, seed=0,
                    out=out, eval_episodes=4, progress=False, backend="mjwarp", device="cpu",
                    algo_config={"steps_per_env": 8})
    assert summary["iterations"] == 3 and summary["env_steps"] == 3 * per_iteration
    assert (out / "policy.onnx").exists()
    saved = json.loads((out / "summary.json").read_text())
    assert saved["eval_episodes"] == 4
    import yaml

    config = yaml.safe_load((out / "config.yaml").read_text())
    assert config["backend"] == "mjwarp" and config["device"] == "cpu"


def test_captured_graphs_replay_what_eager_launches_do() -> None:
    """graph=True (the default on CUDA) records step, reset and forward once and replays
    them; Warp records CPU graphs too, so the same path runs here: it must match the eager
    one bit for bit, see per-call inputs (controls, reset masks) written in place, and
    recapture after a model field is expanded."""
    from simreal.sim.backend_mjwarp import MjWarpBackend

    mjcf = ROBOTS / "crazyflie" / "crazyflie.xml"
    eager = MjWarpBackend(mjcf, 4, "cpu", graph=False)
    graph = MjWarpBackend(mjcf, 4, "cpu", graph=True)

    def script(b: MjWarpBackend) -> torch.Tensor:
        b.qvel[:, 3:] = torch.tensor([1.0, -2.0, 0.5])
        for k in range(3):
            b.ctrl[:] = 0.06 + 0.01 * k
            b.step(2)
        b.reset(torch.tensor([1]))
        b.qpos[1, 2] = 1.5
        b.forward(torch.tensor([1]))
        b.reset(torch.tensor([3]))  # another mask, same captured graph
        b.forward(torch.tensor([3]))
        b.model_field("body_mass")[:, b.body_id("base")] *= torch.tensor([1.0, 1.1, 1.2, 1.3])
        b.step(2)  # captured again: the expanded field is a new array
        return torch.cat([b.qpos, b.qvel, b.sensordata], -1)

    assert torch.equal(script(eager), script(graph))
    assert set(graph._graphs) == {("step", 2)}  # forward and reset dropped with the old field
