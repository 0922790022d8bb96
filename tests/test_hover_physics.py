"""quadrotor-hover's randomization acts: mass and inertia on both backends, and the link's
latency, command loss and observation age (sim/delays.py) as the task draws them."""

from __future__ import annotations

import importlib.util
import math

import pytest
import torch

from simreal.api import make_env
from simreal.core.spatial import GRAVITY
from simreal.sim.delays import CommandLink, SensorHistory

BACKENDS = ["mujoco"] + (["mjwarp"] if importlib.util.find_spec("mujoco_warp") else [])

# every randomization fixed at its neutral value unless a test sets it
NEUTRAL = {"randomization": {"mass": [1, 1], "inertia": [1, 1], "thrust_coefficient": [1, 1],
                             "motor_time_constant": [1, 1], "disturbance_force": 0.0},
           "init": {"speed": 0.0, "tilt_deg": 0.0, "angular_rate": 0.0}}


def _env(backend: str, n: int = 2, link: dict | None = None, **randomization):
    cfg = {**NEUTRAL, "randomization": {**NEUTRAL["randomization"], **randomization},
           "link": link or {}}
    env = make_env("quadrotor-hover", n, 0, cfg, backend=backend, device="cpu")
    env.reset()
    return env


@pytest.mark.parametrize("backend", BACKENDS)
def test_mass_scale_resists_thrust(backend: str) -> None:
    """At the nominal hover command a body 1.25x as heavy sinks at g (1 - 1/1.25): its mass
    resists the thrust as well as weighing (without set_const MuJoCo's C engine gave g/4)."""
    env = _env(backend, mass=[1.25, 1.25])
    steps = 10  # 0.1 s; the rotors start at hover speed, so thrust is the nominal hover's
    for _ in range(steps):
        env.step(torch.zeros(env.num_envs, 4))
    t = steps * env.dt
    accel = env.backend.qvel[:, 2].double() / t  # from rest
    # the hover command's thrust lifts robot.yaml's mass; the model's total mass is the
    # scaled base plus whatever other bodies the MJCF has
    thrust = env.robot.spec.mass * GRAVITY
    total = float(env.body_mass[0].sum())
    expected = thrust / total - GRAVITY
    assert expected < -0.15 * GRAVITY  # far from the g / 4 a weight-only scale would give
    assert torch.allclose(accel, torch.full_like(accel, expected), rtol=0.01), (accel, expected)


@pytest.mark.parametrize("backend", BACKENDS)
def test_inertia_scale_slows_the_spin_up(backend: str) -> None:
    """The same differential thrust spins a body with 1.5x the inertia up 1.5x more slowly."""
    rates = []
    for scale in (1.0, 1.5):
        env = _env(backend, inertia=[scale, scale])
        act = torch.tensor([[0.05, 0.0, 0.0, 0.0]]).expand(env.num_envs, 4)  # one rotor up
        for _ in range(5):
            env.step(act)
        rates.append(torch.linalg.vector_norm(env.backend.qvel[:, 3:].double(), dim=-1))
    ratio = rates[0] / rates[1]
    assert bool((rates[0] > 1e-3).all()), rates
    assert torch.allclose(ratio, torch.full_like(ratio, 1.5), rtol=0.03), ratio


def test_latency_delays_the_command_by_whole_physics_steps() -> None:
    link = CommandLink(num_envs=3, dim=1, decimation=2, max_latency_steps=4)
    link.latency[:] = torch.tensor([0, 1, 3])
    link.reset(torch.arange(3), torch.zeros(3, 1))
    g = torch.Generator().manual_seed(0)
    seen = []
    for period in range(4):
        link.send(torch.full((3, 1), float(period + 1)), g)
        seen += [link.at(j)[:, 0].tolist() for j in range(2)]
    by_env = list(zip(*seen, strict=True))
    # the command of period p is sent at physics step 2p and acts from step 2p + latency
    assert list(by_env[0]) == [1, 1, 2, 2, 3, 3, 4, 4]
    assert list(by_env[1]) == [0, 1, 1, 2, 2, 3, 3, 4]
    assert list(by_env[2]) == [0, 0, 0, 1, 1, 2, 2, 3]


def test_a_lost_command_holds_the_last_one_received() -> None:
    link = CommandLink(num_envs=2000, dim=1, decimation=2, max_latency_steps=0)
    link.loss[:] = 0.3
    link.reset(torch.arange(2000), torch.zeros(2000, 1))
    g = torch.Generator().manual_seed(1)
    lost_count = 0
    for period in range(1, 6):
        lost = link.send(torch.full((2000, 1), float(period)), g)
        held = link.at(0)[:, 0]
        assert bool((held[~lost] == period).all())
        assert bool((held[lost] < period).all())
        lost_count += int(lost.sum())
    rate = lost_count / (5 * 2000)
    assert abs(rate - 0.3) < 5 * math.sqrt(0.21 / 10_000), rate


def test_a_loss_burst_holds_one_command_for_whole_periods() -> None:
    """Bursts of 3-5 periods: each holds the command received before it throughout, and
    bursts start at about the given per-period rate."""
    n = 2000
    link = CommandLink(num_envs=n, dim=1, decimation=2, max_latency_steps=0)
    link.burst_periods, link.burst_start[:] = (3, 5), 0.02
    link.reset(torch.arange(n), torch.zeros(n, 1))
    g = torch.Generator().manual_seed(2)
    lost = torch.stack([link.send(torch.full((n, 1), float(p)), g) for p in range(1, 61)])
    held = lost.int()
    starts = (held[1:] > held[:-1]).sum() + held[0].sum()
    # run lengths of the bursts that ended inside the window: 3-5 periods, or longer where
    # one began at once after another
    lengths = []
    for env in range(200):
        run = 0
        for x in held[:, env].tolist():
            if x:
                run += 1
            elif run:
                lengths.append(run)
                run = 0
    assert min(lengths) >= 3 and {3, 4, 5} <= set(lengths)
    # starts per free period, about 0.02 (5 sigma)
    free = int((~lost).sum())
    rate = int(starts) / free
    assert abs(rate - 0.02) < 5 * math.sqrt(0.02 * 0.98 / free), rate
    # a burst holds the last received command: the one before it began
    link2 = CommandLink(num_envs=1, dim=1, decimation=2, max_latency_steps=0)
    link2.burst_periods, link2.burst_start[:] = (4, 4), 1.0
    link2.reset(torch.arange(1), torch.full((1, 1), 9.0))
    seen = [link2.send(torch.full((1, 1), float(p)), g).item() for p in range(1, 10)]
    assert all(seen)  # at rate 1 a new burst starts as soon as one ends
    assert link2.at(0).item() == 9.0


def test_hover_bursts_follow_the_link_config() -> None:
    env = _env("mujoco", n=2, link={"loss_burst": [0.05, 0.25], "loss_burst_rate": 0.5})
    assert env.link.burst_periods == (5, 25)  # at the crazyflie's 100 Hz
    assert torch.allclose(env.link.burst_start, torch.full((2,), 0.005))
    assert _env("mujoco", n=1).link.burst_periods == (0, 0)


def test_the_actor_sees_the_state_as_old_as_the_observation_age() -> None:
    """With an observation age of 4 physics steps (2 control periods at the crazyflie's 2
    physics steps per period) the actor's position is the critic's of two periods before."""
    env = _env("mujoco", n=2, link={"observation_age": [0.02, 0.02]})
    env.cfg.noise = {}  # exact readings: the comparison is of ages alone
    assert env.history is not None and int(env.history.age[0]) == 4
    g = torch.Generator().manual_seed(0)
    true_positions = []
    for _ in range(6):
        env.step((torch.rand(2, 4, generator=g) * 2 - 1) * 0.3)
        true_positions.append(env.signals()["position"].clone())
    aged = env.noisy_signals()["position"]
    assert torch.allclose(aged, true_positions[-3], atol=1e-6)
    assert not torch.allclose(aged, true_positions[-1], atol=1e-4)


def test_sensor_history_fill_and_push() -> None:
    h = SensorHistory(num_envs=2, width=1, max_age_steps=3)
    h.fill(torch.arange(2), torch.tensor([[5.0], [7.0]]))
    h.age[:] = torch.tensor([0, 3])
    assert h.aged()[:, 0].tolist() == [5.0, 7.0]
    h.push(torch.tensor([[[1.0], [2.0]], [[3.0], [4.0]]]))  # 2 steps per env
    assert h.aged()[:, 0].tolist() == [2.0, 7.0]  # env 1: 3 steps back is its fill value


@pytest.mark.parametrize("link,message", [
    ({"latency": [0.03, 0.01]}, "latency must be \\(low, high\\)"),
    ({"command_loss": [0.0, 1.0]}, "command_loss must stay below 1"),
    ({"observation_age": [-0.01, 0.0]}, "observation_age must be"),
])
def test_a_bad_link_range_is_refused_naming_the_field(link, message) -> None:
    from simreal.core.config import ConfigError

    with pytest.raises(ConfigError, match=message):
        make_env("quadrotor-hover", 1, 0, {"link": link})
