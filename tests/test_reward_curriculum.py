"""A reward curriculum (weights that move from `start` to the task's over training) and the
off-policy replay that relabels its stored returns at the current weights."""

import pytest
import torch

from simreal.api import evaluation_config, make_env, train
from simreal.core.config import ConfigError
from simreal.train.replay import NStepWindow, relabelled

# costs off at the start, the task's weights after 1000 transitions
START = {"velocity": 0.0, "angular_velocity": 0.0, "tilt": 0.0, "action_rate": 0.0,
         "position": 4.0}
CURRICULUM = {"reward_curriculum": {"start": START, "steps": 1000}}


def test_a_curriculum_must_name_the_tasks_terms():
    with pytest.raises(ConfigError, match="reward_curriculum.start: unknown reward term 'spin'"):
        make_env("quadrotor-hover", 2, 0,
                 config={"reward_curriculum": {"start": {"spin": 0.0}, "steps": 10}})
    with pytest.raises(ConfigError, match="steps"):
        make_env("quadrotor-hover", 2, 0, config={"reward_curriculum": {"start": {}, "steps": 0}})


def test_evaluation_drops_the_curriculum():
    trained = {"episode_s": 4.0, **CURRICULUM}
    assert evaluation_config("quadrotor-hover", trained) == {"episode_s": 4.0}


def test_the_weights_move_linearly_from_start_to_the_tasks():
    env = make_env("quadrotor-hover", 2, 0, config={
        "reward_curriculum": {"start": START, "steps": 1000, "hold": 200}})
    end = env.cfg.rewards
    names = env.reward_term_names
    assert env.has_reward_curriculum and set(names) == set(end)

    def weight(name: str) -> float:
        return float(env.reward_weights[names.index(name)])

    assert env.set_training_progress(100) == {"reward": 0.0}  # held at the start
    assert weight("tilt") == 0.0 and weight("position") == 4.0 and weight("crash") == end["crash"]
    assert env.set_training_progress(700)["reward"] == pytest.approx(0.5)
    assert weight("tilt") == pytest.approx(end["tilt"] / 2)
    assert weight("position") == pytest.approx((4.0 + end["position"]) / 2)
    assert env.set_training_progress(5000) == {"reward": 1.0}
    assert weight("action_rate") == pytest.approx(end["action_rate"])
    plain = make_env("quadrotor-hover", 2, 0)
    assert not plain.has_reward_curriculum and plain.set_training_progress(0) == {}


def _paired_rollout(steps: int = 120, envs: int = 12):
    """The same seeded hover envs and random actions twice: one under the curriculum's start
    weights keeping its reward terms, one with the task's weights. Random rotor commands crash
    some envs and the short episodes cut others, so both kinds of episode end are in it."""
    config = {"episode_s": 0.3, "init": {"tilt_deg": 80.0}}
    curriculum = make_env("quadrotor-hover", envs, 3, config={**config, **CURRICULUM})
    plain = make_env("quadrotor-hover", envs, 3, config=config)
    curriculum.keep_reward_terms = True
    curriculum.reset(), plain.reset()
    gen = torch.Generator().manual_seed(0)
    out = []
    for _ in range(steps):
        actions = torch.rand(envs, curriculum.num_actions, generator=gen) * 2 - 1
        _, r_c, done_c, ex_c = curriculum.step(actions)
        _, r_p, done_p, ex_p = plain.step(actions)
        assert torch.equal(done_c, done_p)  # the weights do not touch the physics
        terminated = done_c & ~ex_c["time_outs"]
        out.append((r_c, r_p, ex_c["reward_terms"], terminated, done_c, ex_c["time_outs"]))
    return curriculum, out


def test_rewards_recomputed_from_kept_terms_match_each_weighting():
    env, steps = _paired_rollout()
    terminated = torch.stack([s[3] for s in steps])
    assert terminated.any(), "no crash in the rollout"
    assert torch.stack([s[5] for s in steps]).any(), "no time-out in the rollout"
    for r_start, _, terms, term, _, _ in steps:
        torch.testing.assert_close(env.reward_from_terms(terms, term), r_start)
    env.set_training_progress(10**6)  # the task's own weights
    for _, r_task, terms, term, _, _ in steps:
        torch.testing.assert_close(env.reward_from_terms(terms, term), r_task)
    crash_steps = [(r, t) for _, r, _, t, _, _ in steps if t.any()]
    assert all(torch.equal(r[t], torch.full_like(r[t], env.cfg.rewards["crash"]))
               for r, t in crash_steps)


def test_relabelled_n_step_returns_match_the_returns_of_the_new_weights():
    env, steps = _paired_rollout()
    obs = {"policy": torch.zeros(12, 1)}
    kept, plain = NStepWindow(3, 0.9), NStepWindow(3, 0.9)
    pairs = []
    for r_start, r_task, terms, term, done, _ in steps:
        a = kept.add(obs, torch.zeros(12, 1), r_start * 0.1, term, done, obs, terms)
        b = plain.add(obs, torch.zeros(12, 1), r_task * 0.1, term, done, obs)
        if a is not None:
            pairs.append((a, b))
    env.set_training_progress(0)
    # at the weights they were collected with, the returns are the stored ones
    for a, _ in pairs:
        again = relabelled(a, 3, 0.1, env.reward_from_terms)
        torch.testing.assert_close(again["reward"].squeeze(-1), a["reward"])
        assert "terms" not in again and torch.equal(again["discount"], a["discount"])
    env.set_training_progress(10**6)
    moved = 0
    for a, b in pairs:
        new = relabelled(a, 3, 0.1, env.reward_from_terms)["reward"].squeeze(-1)
        torch.testing.assert_close(new, b["reward"])
        moved += int((new - a["reward"]).abs().max() > 1e-3)
    assert moved > len(pairs) // 2  # the relabelling changed the returns


@pytest.mark.parametrize("algo", ["sac", "ppo"])
def test_training_follows_the_curriculum(tmp_path, algo):
    config = {"steps_per_iteration": 5} if algo == "sac" else {"steps_per_env": 5}
    summary = train("quadrotor-hover", algo=algo, envs=8, steps=400, seed=0, out=tmp_path / algo,
                    eval_episodes=2, progress=False, algo_config=config,
                    task_config={"reward_curriculum": {"start": START, "steps": 600}})
    assert summary["env_steps"] == 400
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    events = EventAccumulator(str(tmp_path / algo)).Reload()
    progress = [e.value for e in events.Scalars("curriculum/reward")]
    # set at the start of each 40-step iteration: 0, 40/600, ..., 360/600
    assert progress == pytest.approx([40 * i / 600 for i in range(10)])


def test_per_second_weights_scale_both_ends():
    # go2's weights are per second of simulated time: start and end are both times the period
    env = make_env("go2-flat", 1, 0, config={
        "reward_curriculum": {"start": {"feet_air_time": 0.0, "collision": -5.0}, "steps": 10}})
    names = env.reward_term_names
    i, j = names.index("feet_air_time"), names.index("collision")
    assert float(env.reward_weights[i]) == 0.0
    assert float(env.reward_weights[j]) == pytest.approx(-5.0 * env.dt)
    env.set_training_progress(10)
    assert float(env.reward_weights[i]) == pytest.approx(env.cfg.rewards["feet_air_time"] * env.dt)
    assert float(env.reward_weights[j]) == pytest.approx(env.cfg.rewards["collision"] * env.dt)
