"""quadrotor-track: the references (core/trajectories.py, the task's splines), the task's
moving target, its contract, and the HIL scenario's reference."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from simreal.api import make_env
from simreal.core.trajectories import figure_eight
from simreal.hil.config import HilConfigError, load_scenario, reference_at, validate
from simreal.hil.config import Scenario as HilScenario
from simreal.sim.tasks.quadrotor_track import catmull_rom


def _fig(t, xp_array):
    w = 2 * math.pi / 5.0
    return figure_eight(xp_array(t), 1.0, 0.5, w, 0.3, 0.7)


def test_figure_eight_is_the_same_in_numpy_and_torch_and_its_velocity_is_its_derivative():
    t = np.linspace(0.0, 5.0, 501)
    pos_np, vel_np = _fig(t, np.asarray)
    pos_t, vel_t = _fig(t, lambda a: torch.tensor(a, dtype=torch.float64))
    np.testing.assert_allclose(pos_t.numpy(), pos_np, rtol=0, atol=1e-12)
    np.testing.assert_allclose(vel_t.numpy(), vel_np, rtol=0, atol=1e-12)
    h = 1e-5
    ahead, _ = _fig(t + h, np.asarray)
    behind, _ = _fig(t - h, np.asarray)
    np.testing.assert_allclose((ahead - behind) / (2 * h), vel_np, atol=1e-6)
    # unturned: 1 m wide, 0.5 m tall, in the plane
    flat, _ = figure_eight(t, 1.0, 0.5, 2 * math.pi / 5.0, 0.0, 0.0)
    assert flat[:, 0].max() == pytest.approx(0.5, abs=1e-4)
    assert flat[:, 1].min() == pytest.approx(-0.25, abs=1e-4)
    assert np.all(flat[:, 2] == 0)


def test_catmull_rom_passes_its_waypoints_with_its_derivative_as_velocity():
    g = torch.Generator().manual_seed(0)
    points = torch.randn(3, 8, 3, generator=g, dtype=torch.float64)
    interval = torch.tensor([1.0, 1.5, 2.5], dtype=torch.float64)
    for k in range(4):
        pos, _ = catmull_rom(points, interval, k * interval)
        torch.testing.assert_close(pos, points[:, k + 1])
    t = torch.full((3,), 1.3, dtype=torch.float64)
    h = 1e-6
    ahead, _ = catmull_rom(points, interval, t + h)
    behind, _ = catmull_rom(points, interval, t - h)
    _, vel = catmull_rom(points, interval, t)
    torch.testing.assert_close((ahead - behind) / (2 * h), vel, rtol=1e-5, atol=1e-6)


def test_the_target_moves_along_each_envs_reference_and_the_actor_sees_its_velocity():
    env = make_env("quadrotor-track", 6, 0, {"reference": {"random_paths": 0.5,
                                                          "heading": True}})
    env.reset()
    for k in range(1, 26):
        obs, *_ = env.step(torch.zeros(6, 4))
        if env.episode_length_buf.min() < k:
            pytest.fail("an env ended its episode within 0.25 s")
    t = torch.full((6,), 25 * env.dt)
    size = env.size
    offset, velocity = figure_eight(t, size[:, 0], size[:, 1], env.omega, env.phase, env.yaw)
    path_pos, path_vel = catmull_rom(env.waypoints, env.interval, t)
    on = env.on_path[:, None]
    torch.testing.assert_close(env.target, torch.where(on, path_pos, env.center + offset))
    torch.testing.assert_close(env.target_velocity, torch.where(on, path_vel, velocity))
    assert env.on_path.any() and not env.on_path.all()
    # the actor's second term is the reference velocity (scale 0.5, no noise on it)
    torch.testing.assert_close(obs["policy"][:, 3:6], 0.5 * env.target_velocity)


def test_the_contract_does_not_depend_on_the_training_only_reference():
    train = make_env("quadrotor-track", 1, 0, {"reference": {"random_paths": 0.5,
                                                             "scale": [0.5, 1.2]}})
    evaluation = make_env("quadrotor-track", 1, 0)
    assert train.contract().commands == evaluation.contract().commands
    names = [t.name for t in evaluation.contract().observations]
    assert names[:2] == ["position_error", "target_velocity"]


def test_the_hil_track_scenario_gives_its_reference_from_its_start():
    sc = load_scenario("tests/assets/hil/track.yaml")
    t = np.array([0.0, 3.99, 4.0, 5.25, 9.0])
    pos, vel = reference_at(sc, t)
    assert np.all(np.isnan(pos[:2])) and np.all(np.isnan(vel[:2]))
    np.testing.assert_allclose(pos[2], [0.0, 0.0, 1.0], atol=1e-12)
    np.testing.assert_allclose(pos[3], [0.5, 0.0, 1.0], atol=1e-12)  # a quarter lap
    np.testing.assert_allclose(vel[2], [0.5 * 2 * math.pi / 5, 0.5 * 2 * math.pi / 5, 0.0])


def test_a_figure_eight_command_takes_one_kind_only():
    with pytest.raises(HilConfigError, match="exactly one of"):
        validate({"duration_s": 5, "commands": [
            {"at_s": 0, "position": [0, 0, 1], "figure_eight": {"period_s": 5}}]},
            HilScenario, "track.yaml")
    with pytest.raises(HilConfigError, match="period_s"):
        validate({"duration_s": 5, "commands": [{"at_s": 0, "figure_eight": {"period_s": 0}}]},
                 HilScenario, "track.yaml")


def test_hil_refuses_a_reference_the_policy_cannot_take(tmp_path):
    from simreal.hil.harness import prepare
    from simreal.robots.registry import get_robot

    robot = get_robot("crazyflie")
    with pytest.raises(ValueError, match=r"commands\[1\]\.figure_eight: the policy takes no "
                                         "target_velocity"):
        prepare(robot, "tests/assets/hover_crazyflie.onnx", "tests/assets/hil/track.yaml",
                out=tmp_path / "a")
    wide = tmp_path / "wide.yaml"
    wide.write_text("duration_s: 6\ncommands:\n  - {at_s: 0, figure_eight: "
                    "{center: [0, 0, 1], size: [3.0, 0.5]}}\n")
    with pytest.raises(ValueError, match=r"figure_eight: outside the range the policy was "
                                         r"trained on \(target_position: \[0\] -1.5"):
        prepare(robot, "tests/assets/track_crazyflie.onnx", wide, out=tmp_path / "b")
