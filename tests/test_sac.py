"""SAC: the Bellman target (terminal and time-out rows), the C51 projection, the temperature,
the squashed Gaussian, the fused critic ensemble, and the run/export/resume plumbing."""

import json
import math

import numpy as np
import pytest
import torch

from simreal.api import make_env, train
from simreal.deploy.policy import OnnxPolicy
from simreal.train.export import export_onnx
from simreal.train.offpolicy_modules import (
    CriticEnsemble,
    EnsembleLinear,
    SquashedGaussianActor,
    polyak,
    project_distribution,
)
from simreal.train.replay import NStepWindow
from simreal.train.sac import SAC, SACConfig

CPU = torch.device("cpu")
A_DIM, C_DIM, ACTIONS = 5, 7, 2


def _agent(**overrides) -> SAC:
    torch.manual_seed(0)
    cfg = SACConfig(actor_hidden=[16], critic_hidden=[16, 16], **overrides)
    return SAC(A_DIM, C_DIM, ACTIONS, 4, cfg, CPU)


def _handmade_transitions(gamma: float) -> dict[str, torch.Tensor]:
    """One step of three envs: still running, terminated (crash), cut by the time limit."""
    obs = {"policy": torch.randn(3, A_DIM), "critic": torch.randn(3, C_DIM)}
    after_reset = {"policy": torch.randn(3, A_DIM), "critic": torch.randn(3, C_DIM)}
    final = {"policy": torch.randn(3, A_DIM), "critic": torch.randn(3, C_DIM)}
    done = torch.tensor([False, True, True])
    terminated = torch.tensor([False, True, False])
    # what the runner passes: the final observation for done envs, else the next one
    boot = {g: torch.where(done[:, None], final[g], after_reset[g]) for g in obs}
    window = NStepWindow(1, gamma)
    out = window.add(obs, torch.zeros(3, ACTIONS), torch.tensor([1.0, -10.0, 2.0]), terminated,
                     done, boot)
    assert torch.equal(out["next/critic"][2], final["critic"][2])  # not the post-reset one
    assert torch.equal(out["next/critic"][0], after_reset["critic"][0])
    return out


def test_bellman_target_stops_at_terminations_and_bootstraps_time_outs():
    agent = _agent(gamma=0.9, alpha_init=0.5)
    batch = _handmade_transitions(0.9)
    assert batch["discount"].tolist() == pytest.approx([0.9, 0.0, 0.9])
    m = agent.model
    with torch.no_grad():  # make the two target critics clearly different
        m.critic_target.head.bias[0].fill_(3.0)
        m.critic_target.head.bias[1].fill_(-3.0)
    torch.manual_seed(7)
    target = agent.td_target(batch["next/policy"], batch["next/critic"], batch["reward"],
                             batch["discount"])
    torch.manual_seed(7)  # the same a' ~ pi(s'), by hand
    with torch.no_grad():
        action, log_prob = m.actor.sample(batch["next/policy"])
        q = m.critic_target(batch["next/critic"], action)
        soft_value = torch.minimum(q[0], q[1]) - 0.5 * log_prob
    expected = batch["reward"] + batch["discount"] * soft_value
    assert torch.allclose(target, expected, atol=1e-6)
    assert target[1].item() == pytest.approx(-10.0)  # terminal: the reward alone
    assert torch.equal(torch.minimum(q[0], q[1]), q[1])  # the minimum is the lower critic


def test_projection_moves_mass_between_neighbouring_atoms():
    atoms = torch.tensor([0.0, 1.0, 2.0, 3.0])
    probs = torch.tensor([[0.0, 0.0, 1.0, 0.0]] * 3)
    rewards = torch.tensor([0.5, 0.5, 10.0])
    discounts = torch.tensor([1.0, 0.0, 1.0])  # row 1 terminal: all mass at r
    out = project_distribution(probs, rewards, discounts, atoms)
    assert out.tolist() == [[0, 0, 0.5, 0.5], [0.5, 0.5, 0, 0], [0, 0, 0, 1.0]]
    gen = torch.Generator().manual_seed(0)
    p = torch.softmax(torch.randn(64, 4, generator=gen), -1)
    r = 0.1 + 0.1 * torch.rand(64, generator=gen)  # with the shift, stays inside [0, 3]
    shift = 0.2 * torch.rand(64, generator=gen) - 0.1
    q = project_distribution(p, r, torch.full((64,), 0.9), atoms, shift)
    assert torch.allclose(q.sum(-1), torch.ones(64))
    # inside the support the projection keeps the mean; outside, mass piles at the ends
    exact = r + 0.9 * ((p * atoms).sum(-1) + shift)
    assert torch.allclose((q * atoms).sum(-1), exact, atol=1e-5)
    clamped = project_distribution(p, r + 5, torch.full((64,), 0.9), atoms)
    assert torch.allclose(clamped[:, -1], torch.ones(64))


def test_distributional_target_projects_the_lower_critic():
    agent = _agent(gamma=0.9, distributional=True, num_atoms=11, v_min=-5.0, v_max=5.0,
                   alpha_init=0.5)
    batch = _handmade_transitions(0.9)
    m, atoms = agent.model, agent.critic_math.atoms
    with torch.no_grad():  # member 0 puts its mass high, member 1 low
        m.critic_target.head.bias[0] += 5 * torch.linspace(-1, 1, 11)
        m.critic_target.head.bias[1] -= 5 * torch.linspace(-1, 1, 11)
    torch.manual_seed(7)
    target = agent.td_target(batch["next/policy"], batch["next/critic"], batch["reward"],
                             batch["discount"])
    torch.manual_seed(7)
    with torch.no_grad():
        action, log_prob = m.actor.sample(batch["next/policy"])
        probs = torch.softmax(m.critic_target(batch["next/critic"], action), -1)
    assert ((probs[1] * atoms).sum(-1) < (probs[0] * atoms).sum(-1)).all()
    expected = project_distribution(probs[1], batch["reward"], batch["discount"], atoms,
                                    -0.5 * log_prob)
    assert target.shape == (3, 11) and torch.allclose(target, expected, atol=1e-6)
    assert torch.allclose(target.sum(-1), torch.ones(3))
    # the terminal row is all mass at r = -10, clamped to v_min
    assert target[1].tolist() == pytest.approx([1.0] + [0.0] * 10)


@pytest.mark.parametrize("target_entropy, direction", [(+5.0, 1), (-20.0, -1)])
def test_temperature_moves_toward_the_target_entropy(target_entropy, direction):
    agent = _agent(target_entropy_per_action=target_entropy, alpha_lr=1e-2)
    gen = torch.Generator().manual_seed(0)
    batch = {"obs/policy": torch.randn(256, A_DIM, generator=gen),
             "obs/critic": torch.randn(256, C_DIM, generator=gen),
             "action": torch.rand(256, ACTIONS, generator=gen) * 2 - 1,
             "reward": torch.randn(256, 1, generator=gen), "discount": torch.full((256, 1), 0.9),
             "next/policy": torch.randn(256, A_DIM, generator=gen),
             "next/critic": torch.randn(256, C_DIM, generator=gen)}
    before = agent.model.log_alpha.item()
    for _ in range(20):
        stats = agent.update(batch)
    after = agent.model.log_alpha.item()
    # entropy above the target lowers the temperature; below it raises it
    assert (stats["entropy"].item() - agent.target_entropy) * direction < 0
    assert (after - before) * direction > 0.1


def test_squashed_gaussian_log_prob_matches_torch_distributions():
    torch.manual_seed(0)
    actor = SquashedGaussianActor(A_DIM, ACTIONS, [16], -5.0, 2.0)
    torch.nn.init.normal_(actor.net[-1].weight, 0, 1.0)
    obs = torch.randn(512, A_DIM) * 3
    torch.manual_seed(1)
    action, log_prob = actor.sample(obs)
    mean, log_std = (x.double() for x in actor(obs))
    tanh = torch.distributions.TanhTransform(cache_size=1)  # its cache spares a lossy atanh
    dist = torch.distributions.TransformedDistribution(
        torch.distributions.Normal(mean, log_std.exp()), [tanh])
    torch.manual_seed(1)
    u = mean + log_std.exp() * torch.randn_like(mean.float()).double()
    expected = dist.log_prob(tanh(u)).sum(-1)
    assert torch.allclose(log_prob.double(), expected, atol=1e-3)
    assert action.abs().max() <= 1.0
    assert log_std.min() >= -5.0 and log_std.max() <= 2.0
    huge = actor(torch.full((4, A_DIM), 1e6))[1]
    assert huge.min() >= -5.0 and huge.max() <= 2.0


def test_ensemble_layer_equals_independent_linear_layers():
    torch.manual_seed(0)
    layer = EnsembleLinear(3, 4, 5)
    x = torch.randn(10, 4)
    out = layer(x)
    for i in range(3):
        expected = x @ layer.weight[i] + layer.bias[i]
        assert torch.allclose(out[i], expected, atol=1e-6)
    per_member = torch.randn(3, 10, 4)
    assert torch.allclose(layer(per_member)[1], per_member[1] @ layer.weight[1] + layer.bias[1],
                          atol=1e-6)
    critic = CriticEnsemble(4, 2, [8], members=2)
    q = critic(torch.randn(6, 4), torch.randn(6, 2))
    assert q.shape == (2, 6) and not torch.allclose(q[0], q[1])  # independent members
    action = torch.randn(6, 2, requires_grad=True)
    critic(torch.randn(6, 4), action, detach=True).sum().backward()
    assert action.grad is not None and action.grad.abs().sum() > 0
    assert all(p.grad is None for p in critic.parameters())  # the actor's loss spares them


def test_polyak_moves_the_target_a_fraction_tau():
    torch.manual_seed(0)
    source, target = torch.nn.Linear(3, 3), torch.nn.Linear(3, 3)
    before = target.weight.detach().clone()
    polyak(target, source, 0.25)
    assert torch.allclose(target.weight, 0.75 * before + 0.25 * source.weight)


def test_exported_actor_is_the_deterministic_squashed_mean(tmp_path):
    env = make_env("quadrotor-hover", num_envs=4, seed=0)
    from simreal.train.sac import SACRunner

    runner = SACRunner(env, SACConfig(actor_hidden=[16], critic_hidden=[16]), None, 0, {})
    m = runner.agent.model
    torch.nn.init.normal_(m.actor.net[-1].weight, 0, 0.5)
    m.actor_norm.update(torch.randn(100, runner.actor_dim) * 2 + 1)
    obs = torch.randn(64, runner.actor_dim) * 2
    with torch.no_grad():
        expected = torch.tanh(m.actor(m.actor_norm(obs))[0])
        actor = runner.exportable_actor()
        assert torch.equal(actor(obs), actor(obs))  # deterministic
        assert torch.allclose(actor(obs), expected)
    path = export_onnx(actor, env.contract(), tmp_path / "p.onnx")
    assert np.abs(OnnxPolicy(path)(obs.numpy()) - expected.numpy()).max() < 1e-5


def test_train_sac_writes_a_run_that_exports_evaluates_and_resumes(tmp_path):
    steps = 16 * 20 * 3
    summary = train("quadrotor-hover", algo="sac", envs=16, steps=steps, seed=1,
                    out=tmp_path / "run", eval_episodes=4, progress=False)
    assert summary["algo"] == "sac" and summary["env_steps"] == steps
    assert (tmp_path / "run" / "policy.onnx").is_file()
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["algo"] == "sac"
    ckpt = torch.load(tmp_path / "run" / "checkpoints" / "latest.pt", weights_only=False)
    assert {"task", "algo", "model", "config", "env_steps", "iteration"} <= set(ckpt)
    assert ckpt["config"]["algo_config"]["n_step"] >= 1
    resumed = train("quadrotor-hover", steps=2 * steps, out=tmp_path / "run",
                    resume=tmp_path / "run", eval_episodes=4, progress=False)
    assert resumed["env_steps"] == 2 * steps and resumed["algo"] == "sac"
    assert math.isfinite(resumed["mean_return"])
