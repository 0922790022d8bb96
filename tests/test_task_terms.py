"""Tasks composed of named terms: reward weights and observation noise per name in the task
config, per-term reward logs, and the legged velocity task on a second quadruped."""

from pathlib import Path

import pytest
import torch

from simreal.api import make_env
from simreal.core.config import ConfigError
from simreal.sim import registry

QUAD8 = Path(__file__).resolve().parent / "assets" / "robots" / "quad8"
GO2_QUIET = {"randomization": {"enabled": False},
             "init": {"joint_noise": 0.0, "base_speed": 0.0}}


def _run(env, steps: int, actions: torch.Tensor | None = None):
    env.reset()
    out = []
    for _ in range(steps):
        a = torch.zeros(env.num_envs, env.num_actions) if actions is None else actions
        out.append(env.step(a))
    return out


def test_reward_terms_are_logged_per_episode_in_extras():
    env = make_env("quadrotor-hover", 4, 0, config={"episode_s": 0.2})
    logs = [extras["log"] for *_, extras in _run(env, 25)]
    ended = [log for log in logs if "/episode/return" in log]
    assert ended, "no episode ended"
    for name in env.cfg.rewards:
        assert f"/reward/{name}" in ended[0], name
    # an episode's terms per second add up to its return per second (no crash, no clip here)
    log = ended[0]
    if log["/episode/crash_rate"] == 0.0:
        total = sum(float(log[f"/reward/{n}"]) for n in env.cfg.rewards)
        assert total * env.cfg.episode_s == pytest.approx(log["/episode/return"], rel=1e-4)


def test_go2_logs_its_legged_gym_terms():
    env = make_env("go2-flat", 2, 0, config={**GO2_QUIET, "episode_s": 0.1})
    logs = [extras["log"] for *_, extras in _run(env, 6)]
    keys = set().union(*logs)
    assert {"/reward/tracking_lin_vel", "/reward/feet_air_time", "/reward/joint_limits"} <= keys


def test_a_zero_weight_removes_its_term():
    weights = {name: 0.0 for name in make_env("arm-reach", 1, 0).cfg.rewards}
    only = make_env("arm-reach", 4, 3, config={"episode_s": 0.1,
                                               "rewards": {**weights, "pos_linear": -2.0}})
    only.reset()
    for _ in range(3):
        _, reward, _, extras = only.step(torch.zeros(4, only.num_actions))
        err = only.step_metrics()["position_error"]
        torch.testing.assert_close(reward, -2.0 * err)
    none = make_env("arm-reach", 4, 3, config={"rewards": weights})
    steps = _run(none, 3, torch.rand(4, none.num_actions) * 2 - 1)
    assert all(torch.equal(r, torch.zeros(4)) for _, r, _, _ in steps)
    logs = [extras["log"] for *_, extras in _run(only, 6)]
    ended = [log for log in logs if "/episode/return" in log]
    assert ended and "/reward/pos_linear" in ended[0] and "/reward/pos_fine" not in ended[0]


def test_a_config_sets_some_weights_and_keeps_the_others():
    env = make_env("go2-flat", 1, 0, config={"rewards": {"feet_air_time": 1.0}})
    assert env.cfg.rewards["feet_air_time"] == 1.0
    assert env.cfg.rewards["tracking_lin_vel"] == 1.5 and len(env.cfg.rewards) == 12


@pytest.mark.parametrize("task, config, named", [
    ("go2-flat", {"rewards": {"tracking_lin_vl": 1.0}}, "tracking_lin_vl"),
    ("quadrotor-hover", {"rewards": {"alive": 0.5, "hovering": 1.0}}, "hovering"),
    ("arm-reach", {"noise": {"joint_position": 0.1}}, "joint_position"),
    ("arm-reach", {"noise": {"joint_pos": -0.1}}, "noise.joint_pos"),
])
def test_unknown_reward_or_noise_names_are_errors_naming_them(task, config, named):
    with pytest.raises(ConfigError, match=named):
        make_env(task, 1, 0, config=config)


def test_an_old_reward_mapping_says_where_its_keys_went():
    with pytest.raises(ConfigError) as err:
        make_env("quadrotor-hover", 1, 0,
                 config={"reward": {"alive": 0.5, "position_scale": 0.3}})
    assert "reward.alive is now rewards.alive" in str(err.value)
    assert "reward.position_scale is now reward_params.position_scale" in str(err.value)


def test_noise_per_signal_changes_the_actor_observation_not_the_critic():
    zero = {"angular_velocity": 0.0, "orientation": 0.0, "joint_pos": 0.0, "joint_vel": 0.0}
    quiet = make_env("go2-flat", 3, 1, config={**GO2_QUIET, "noise": zero})
    noisy = make_env("go2-flat", 3, 1, config={**GO2_QUIET,
                                                "noise": {**zero, "joint_vel": 1.0}})
    for _ in range(2):
        a, b = quiet.reset(), noisy.reset()
        torch.testing.assert_close(a["critic"], b["critic"], rtol=0, atol=0)
        dim = a["policy"].shape[1]
        torch.testing.assert_close(a["policy"], a["critic"][:, :dim])  # noise-free: equal
        changed = (a["policy"] != b["policy"]).any(0).nonzero().flatten().tolist()
        # joint_vel: after angular velocity, gravity, command (3 each) and joint_pos_rel (12)
        assert changed == list(range(21, 33))
        quiet.step(torch.zeros(3, 12)), noisy.step(torch.zeros(3, 12))


@pytest.fixture
def quad8_task(monkeypatch):
    """A registry entry for the second quadruped: its robot folder and the legged task."""
    monkeypatch.setitem(registry.BUILTIN_TASKS, "quad8-flat",
                        f"simreal.sim.tasks.legged:LeggedVelocity@{QUAD8}")
    monkeypatch.setitem(registry.BUILTIN_TASKS, "quad8-rough",
                        f"simreal.sim.tasks.legged_rough:LeggedRough@{QUAD8}")
    return "quad8-flat"


QUAD8_CONFIG = {"init": {"height": 0.26}, "reward_params": {"base_height_target": 0.23}}


def test_the_velocity_task_runs_a_second_quadruped_from_its_description(quad8_task):
    env = make_env(quad8_task, 4, 0, config=QUAD8_CONFIG)
    assert env.name == "quad8-flat" and env.robot.name == "quad8"
    assert env.num_actions == 8 and env.num_feet == 4
    c = env.contract()
    assert c.task == "quad8-flat" and c.actuators == env.robot.actuator_names
    assert c.obs_dim == 9 + 3 * 8  # gyro, gravity, command; joint pos, vel, last action
    assert c.action.offset == [0.8, -1.5] * 4
    # its robot.yaml names no foot geoms, so leg odometry cannot model its legs: the default
    # command feedback trims the yaw rate alone, and asking for speed feedback is refused
    assert c.command_feedback is not None and c.command_feedback.axes == ["wz"]
    with pytest.raises(ValueError, match="needs its 'geom'.*--command-feedback wz"):
        make_env(quad8_task, 1, 0, config={**QUAD8_CONFIG,
                                           "command_feedback": {"axes": ["vx", "wz"]}})
    obs = env.reset()
    assert obs["policy"].shape == (4, 33)
    assert obs["critic"].shape[1] == 33 + env.privileged().shape[1]
    assert env.privileged_terms()["foot_height_scan"].shape == (4, 4 * 5)
    g = torch.Generator().manual_seed(0)
    for _ in range(30):
        obs, reward, done, extras = env.step(torch.rand(4, 8, generator=g) * 2 - 1)
        assert torch.isfinite(obs["policy"]).all() and torch.isfinite(reward).all()
    # it stands on its four feet after the drop from the spawn height
    standing = make_env(quad8_task, 2, 0, config={**QUAD8_CONFIG, **GO2_QUIET})
    _run(standing, 25)
    s = standing._read()
    assert (s["foot_force"] > 1.0).all()
    assert 0.18 < float(s["position"][:, 2].min()) and float(s["position"][:, 2].max()) < 0.28


def test_the_rough_task_runs_a_second_quadruped_too(quad8_task):
    env = make_env("quad8-rough", 2, 0,
                   config={**QUAD8_CONFIG, "terrain": {"rows": 2, "cols": 2,
                                                         "curriculum": {"max_init_level": 1}}})
    env.reset()
    for _ in range(5):
        obs, reward, _, _ = env.step(torch.zeros(2, 8))
    assert obs["policy"].shape == (2, 33) and torch.isfinite(reward).all()


def test_a_registry_binding_is_one_class_per_name():
    from simreal.sim.registry import get_task

    assert get_task("go2-flat") is get_task("go2-flat")
    assert get_task("go2-flat").name == "go2-flat"
    assert get_task("go2-rough").robot_name == "go2"
