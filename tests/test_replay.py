"""Replay: the ring buffer's wrap-around and sampling; n-step returns against a plain loop."""

import pytest
import torch

from simreal.train.replay import NStepWindow, ReplayBuffer


def _rows(start: int, n: int) -> dict[str, torch.Tensor]:
    ids = torch.arange(start, start + n, dtype=torch.float32)
    return {"a": ids[:, None], "b": torch.stack([ids * 10, ids * 100], dim=-1)}


def test_buffer_wraps_around_overwriting_the_oldest_rows():
    buf = ReplayBuffer(5, {"a": 1, "b": 2})
    buf.add(_rows(0, 3))
    assert (buf.size, buf.ptr) == (3, 3)
    buf.add(_rows(3, 4))  # rows 3, 4 at the end, then 5, 6 over rows 0, 1
    assert (buf.size, buf.ptr) == (5, 2)
    assert buf.data[:, 0].tolist() == [5, 6, 2, 3, 4]
    assert buf.data[:, 1:].tolist() == [[50, 500], [60, 600], [20, 200], [30, 300],
                                        [40, 400]]
    buf.add(_rows(7, 12))  # more rows than it holds: the newest five survive
    assert (buf.size, buf.ptr) == (5, 0)
    assert buf.data[:, 0].tolist() == [14, 15, 16, 17, 18]


def test_sampling_draws_only_stored_rows_uniformly_and_keeps_fields_together():
    buf = ReplayBuffer(100, {"a": 1, "b": 2})
    buf.add(_rows(0, 4))
    gen = torch.Generator().manual_seed(0)
    batch = buf.sample(4000, gen)
    ids = batch["a"][:, 0]
    assert set(ids.long().tolist()) == {0, 1, 2, 3}
    counts = torch.bincount(ids.long(), minlength=4).float()
    assert (counts / 4000 - 0.25).abs().max() < 0.03
    assert torch.equal(batch["b"], torch.stack([ids * 10, ids * 100], dim=-1))
    again = buf.sample(4000, torch.Generator().manual_seed(0))
    assert torch.equal(again["a"], batch["a"])  # seeded


def test_buffer_refuses_wrong_fields_and_empty_sampling():
    buf = ReplayBuffer(4, {"a": 1, "b": 2})
    with pytest.raises(ValueError, match="empty"):
        buf.sample(2)
    with pytest.raises(ValueError, match="fields"):
        buf.add({"a": torch.zeros(2, 1)})


def _reference(rewards, terminated, done, next_obs, n, gamma, t, e):
    """n-step transition starting at step t of env e, by the definition, one step at a time."""
    ret, discount = 0.0, 1.0
    for k in range(n):
        ret += discount * rewards[t + k][e].item()
        discount *= gamma
        if done[t + k][e]:
            if terminated[t + k][e]:
                discount = 0.0
            return ret, discount, next_obs[t + k][e]
    return ret, discount, next_obs[t + n - 1][e]


@pytest.mark.parametrize("n", [1, 3, 5])
def test_n_step_returns_match_a_plain_loop(n):
    gen = torch.Generator().manual_seed(n)
    steps, envs, gamma = 40, 6, 0.9
    rewards = torch.randn(steps, envs, generator=gen)
    done = torch.rand(steps, envs, generator=gen) < 0.2
    terminated = done & (torch.rand(steps, envs, generator=gen) < 0.5)  # the rest: time-outs
    obs = torch.randn(steps, envs, 3, generator=gen)
    next_obs = torch.randn(steps, envs, 3, generator=gen)  # final observations where done
    window = NStepWindow(n, gamma)
    checked = 0
    for t in range(steps):
        out = window.add({"policy": obs[t]}, obs[t, :, :2], rewards[t], terminated[t], done[t],
                         {"policy": next_obs[t]})
        if t < n - 1:
            assert out is None
            continue
        start = t - n + 1
        assert torch.equal(out["obs/policy"], obs[start])
        assert torch.equal(out["action"], obs[start, :, :2])
        for e in range(envs):
            ret, discount, boot = _reference(rewards, terminated, done, next_obs, n, gamma,
                                             start, e)
            assert out["reward"][e].item() == pytest.approx(ret, abs=1e-5)
            assert out["discount"][e].item() == pytest.approx(discount, abs=1e-6)
            assert torch.equal(out["next/policy"][e], boot)
            checked += 1
    assert checked == (steps - n + 1) * envs
    assert done.any() and terminated.any() and (done & ~terminated).any()


def _final_step(final_observations: bool):
    """Envs 0 and 2 reach their time limit on the last step; env 1 keeps flying."""
    from simreal.api import make_env

    env = make_env("quadrotor-hover", num_envs=3, seed=0,
                   config={"episode_s": 0.05})
    env.final_observations = final_observations
    env.reset()
    env.episode_length_buf[1] = -100
    for k in range(env.max_episode_length - 1):
        env.step(torch.full((3, 4), 0.1 * k))  # a changing last action
    mass_before = env.mass_scale.clone()
    obs, _, done, extras = env.step(torch.full((3, 4), -0.3))
    return env, obs, done, extras, mass_before


def test_env_gives_the_final_observation_of_done_envs_without_disturbing_the_rest():
    env, obs, done, extras, mass_before = _final_step(True)
    assert done.tolist() == [True, False, True]
    final = extras["final_obs"]
    assert final.batch_size == torch.Size([2])  # done rows, in dones.nonzero() order
    # the privileged mass scale: the finished episode's in the final observation, the new
    # episode's in the returned one
    privileged = env.privileged_terms()
    start = obs["critic"].shape[-1] - sum(v.shape[-1] for v in privileged.values())
    names = list(privileged)
    mass_col = start + sum(privileged[k].shape[-1] for k in names[:names.index("mass_scale")])
    assert torch.allclose(final["critic"][:, mass_col], mass_before[[0, 2]] - 1)
    assert torch.allclose(obs["critic"][[0, 2], mass_col], env.mass_scale[[0, 2]] - 1)
    assert not torch.allclose(mass_before[[0, 2]], env.mass_scale[[0, 2]])
    # building it did not advance the observation histories of the envs that go on
    _, plain_obs, _, plain_extras, _ = _final_step(False)
    assert "final_obs" not in plain_extras
    assert torch.equal(obs["critic"][1], plain_obs["critic"][1])
