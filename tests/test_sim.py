"""The batched environment: protocol, seeded determinism, individual resets, rsl_rl's runner."""

import torch
from tensordict import TensorDict

from simreal.api import make_env


def _rollout(seed: int, steps: int = 30):
    env = make_env("quadrotor-hover", num_envs=16, seed=seed)
    gen = torch.Generator().manual_seed(123)
    obs = env.get_observations()
    out = [obs["policy"].clone()]
    for _ in range(steps):
        obs, rew, done, extras = env.step(torch.rand(16, 4, generator=gen) * 2 - 1)
        out.append(torch.cat([obs["policy"], obs["critic"], rew[:, None]], dim=-1))
    return torch.cat([o.flatten() for o in out])


def test_same_seed_same_trajectory_other_seed_differs():
    a, b, c = _rollout(7), _rollout(7), _rollout(8)
    assert torch.equal(a, b)
    assert not torch.allclose(a, c)


def test_vecenv_protocol_shapes_and_extras():
    env = make_env("quadrotor-hover", num_envs=8, seed=0)
    obs = env.get_observations()
    assert isinstance(obs, TensorDict) and set(obs.keys()) == {"policy", "critic"}
    assert obs["policy"].shape == (8, env.contract().obs_dim)
    assert obs["critic"].shape[-1] > obs["policy"].shape[-1]  # privileged state added
    obs, rew, done, extras = env.step(torch.zeros(8, env.num_actions))
    assert rew.shape == (8,) and done.dtype == torch.bool
    assert extras["time_outs"].shape == (8,) and isinstance(extras["log"], dict)
    assert env.episode_length_buf.tolist() == [1] * 8


def test_time_out_is_flagged_and_resets_only_that_env():
    env = make_env("quadrotor-hover", num_envs=4, seed=0, config={"episode_s": 0.05})
    env.reset()
    env.episode_length_buf[1] = -100  # env 1 is far from its time limit
    before = env.backend.qpos[1].clone()
    for _ in range(env.max_episode_length - 1):
        env.step(torch.zeros(4, 4))
    _, _, done, extras = env.step(torch.zeros(4, 4))
    assert extras["time_outs"].tolist() == [True, False, True, True]
    assert done.tolist() == [True, False, True, True]
    assert env.episode_length_buf.tolist() == [0, -100 + env.max_episode_length, 0, 0]
    assert not torch.equal(env.backend.qpos[1], before)  # it kept flying, not reset


def test_initial_states_cover_the_specified_ranges():
    env = make_env("quadrotor-hover", num_envs=2000, seed=1)
    env.reset()
    s = env.signals()
    err = torch.linalg.vector_norm(s["position"] - s["target_position"], dim=-1)
    speed = torch.linalg.vector_norm(s["linear_velocity"], dim=-1)
    q = s["orientation"]
    tilt = torch.rad2deg(torch.arccos((1 - 2 * (q[:, 1] ** 2 + q[:, 2] ** 2)).clamp(-1, 1)))
    assert err.max() <= 1.0 + 1e-6 and err.max() > 0.95
    assert speed.max() <= 1.0 + 1e-6 and speed.max() > 0.95
    assert tilt.max() <= 45.0 + 1e-3 and tilt.max() > 44.0
    masses = env.body_mass[:, env.base]
    assert 0.9 * 0.027 - 1e-9 <= masses.min() and masses.max() <= 1.1 * 0.027 + 1e-9
    assert masses.std() > 0  # randomized per env


def test_rsl_rl_on_policy_runner_trains_on_our_env(tmp_path):
    """rsl_rl's own runner, unmodified, drives our VecEnv for a few iterations."""
    from rsl_rl.runners import OnPolicyRunner

    env = make_env("quadrotor-hover", num_envs=32, seed=0)
    mlp = {"class_name": "rsl_rl.models.MLPModel", "hidden_dims": [32, 32],
           "activation": "elu", "obs_normalization": True}
    cfg = {
        "num_steps_per_env": 8, "save_interval": 100, "obs_groups": {"actor": ["policy"],
                                                                     "critic": ["critic"]},
        "algorithm": {"class_name": "rsl_rl.algorithms.PPO"},
        "actor": {**mlp, "distribution_cfg": {
            "class_name": "rsl_rl.modules.distribution.GaussianDistribution",
            "init_std": 0.5}},
        "critic": mlp,
        "logger": "tensorboard",
    }
    runner = OnPolicyRunner(env, cfg, log_dir=str(tmp_path), device="cpu")
    runner.learn(num_learning_iterations=3)
    assert runner.current_learning_iteration == 2
    assert env.episode_length_buf.max() > 0

