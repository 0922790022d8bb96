"""TD3: target policy smoothing, delayed actor updates, per-environment exploration noise."""

import pytest
import torch

from simreal.api import train
from simreal.train.td3 import TD3, TD3Config

CPU = torch.device("cpu")
A_DIM, C_DIM, ACTIONS, ENVS = 5, 7, 3, 64


def _agent(**overrides) -> TD3:
    torch.manual_seed(0)
    cfg = TD3Config(actor_hidden=[16], critic_hidden=[16], **overrides)
    return TD3(A_DIM, C_DIM, ACTIONS, ENVS, cfg, CPU)


def _batch(n: int = 128) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(1)
    return {"obs/policy": torch.randn(n, A_DIM, generator=gen),
            "obs/critic": torch.randn(n, C_DIM, generator=gen),
            "action": torch.rand(n, ACTIONS, generator=gen) * 2 - 1,
            "reward": torch.randn(n, 1, generator=gen),
            "discount": (torch.rand(n, 1, generator=gen) > 0.2) * 0.9,
            "next/policy": torch.randn(n, A_DIM, generator=gen),
            "next/critic": torch.randn(n, C_DIM, generator=gen)}


def test_target_smoothing_noise_is_clipped():
    agent = _agent(policy_noise=10.0, noise_clip=0.1)
    obs = torch.randn(4096, A_DIM)
    clean = agent.model.actor_target(obs)
    noisy = agent.target_action(obs)
    delta = (noisy - clean).abs()
    assert delta.max() <= 0.1 + 1e-6 and delta.mean() > 0.09  # huge noise, clipped to 0.1
    assert noisy.abs().max() <= 1.0


def test_bellman_target_uses_the_smoothed_minimum_and_stops_at_terminations():
    agent = _agent(policy_noise=0.0)
    b = _batch()
    with torch.no_grad():
        agent.model.critic_target.head.bias[0].fill_(4.0)
    target = agent.td_target(b["next/policy"], b["next/critic"], b["reward"][:, 0],
                             b["discount"][:, 0])
    with torch.no_grad():
        q = agent.model.critic_target(b["next/critic"], agent.model.actor_target(b["next/policy"]))
    expected = b["reward"][:, 0] + b["discount"][:, 0] * q.min(0).values
    assert torch.allclose(target, expected, atol=1e-6)
    terminal = b["discount"][:, 0] == 0
    assert terminal.any() and torch.equal(target[terminal], b["reward"][terminal, 0])


def test_actor_and_its_target_update_only_every_policy_delay_critic_updates():
    agent = _agent(policy_delay=3)
    m, batch = agent.model, _batch()
    changed_actor, changed_target, changed_critic = [], [], []
    for _ in range(7):
        actor = [p.clone() for p in m.actor.parameters()]
        target = [p.clone() for p in m.actor_target.parameters()]
        critic = [p.clone() for p in m.critic.parameters()]
        agent.update(batch)
        changed_actor.append(any(not torch.equal(a, p) for a, p in zip(
            actor, m.actor.parameters(), strict=True)))
        changed_target.append(any(not torch.equal(a, p) for a, p in zip(
            target, m.actor_target.parameters(), strict=True)))
        changed_critic.append(any(not torch.equal(a, p) for a, p in zip(
            critic, m.critic.parameters(), strict=True)))
    assert changed_actor == [True, False, False, True, False, False, True]
    assert changed_target == changed_actor
    assert all(changed_critic)


def test_exploration_noise_scale_is_per_environment_and_renewed_at_reset():
    agent = _agent(exploration_std_min=0.05, exploration_std_max=0.5)
    std = agent.noise_std[:, 0].clone()
    assert std.min() >= 0.05 and std.max() <= 0.5 and std.std() > 0.05  # varied across envs
    done = torch.zeros(ENVS, dtype=torch.bool)
    done[:5] = True
    agent.episodes_ended(done)
    assert torch.equal(agent.noise_std[5:, 0], std[5:])
    assert not torch.equal(agent.noise_std[:5, 0], std[:5])
    # the acting noise follows each env's scale
    obs = torch.zeros(ENVS, A_DIM)
    torch.manual_seed(3)
    spread = torch.stack([agent.act(obs) for _ in range(200)]).std(0).mean(-1)
    corr = torch.corrcoef(torch.stack([spread, agent.noise_std[:, 0]]))[0, 1]
    assert corr > 0.95


def test_config_refuses_inverted_noise_range():
    with pytest.raises(ValueError, match="exploration_std_min"):
        TD3Config(exploration_std_min=0.5, exploration_std_max=0.1)


def test_train_td3_runs_end_to_end(tmp_path):
    summary = train("quadrotor-hover", algo="td3", envs=16, steps=16 * 20 * 2, seed=0,
                    out=tmp_path / "run", eval_episodes=4, progress=False)
    assert summary["algo"] == "td3" and (tmp_path / "run" / "policy.onnx").is_file()
