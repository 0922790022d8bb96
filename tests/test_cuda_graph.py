"""The CUDA-graphed off-policy update (train/cuda_graph.py) against the eager one.

Needs a CUDA device (skipped elsewhere; run on a GPU machine, docs/SCALING.md). TD3 without
target-policy noise is deterministic, so the graphed and eager paths must reach the same
weights from the same start and batches; a delayed actor exercises both graphs.
"""

from __future__ import annotations

import pytest
import torch

from simreal.train.sac import SAC, SACConfig
from simreal.train.td3 import TD3, TD3Config

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")

A, C, N, B = 9, 13, 3, 512


def _batches(count: int, device: torch.device) -> list[dict[str, torch.Tensor]]:
    g = torch.Generator().manual_seed(1)

    def r(*shape):
        return torch.randn(*shape, generator=g).to(device)

    return [{"obs/policy": r(B, A), "obs/critic": r(B, C), "action": r(B, N).clamp(-1, 1),
             "reward": r(B, 1), "discount": torch.full((B, 1), 0.97, device=device),
             "next/policy": r(B, A), "next/critic": r(B, C)} for _ in range(count)]


def _td3(graph: bool) -> TD3:
    torch.manual_seed(0)
    cfg = TD3Config(actor_hidden=[32, 32], critic_hidden=[64, 64], policy_noise=0.0,
                    policy_delay=2, cuda_graph=graph)
    return TD3(A, C, N, 16, cfg, torch.device("cuda"))


def test_graphed_td3_matches_eager_updates():
    graphed, eager = _td3(True), _td3(False)
    assert graphed.graphed and not eager.graphed
    batches = _batches(7, torch.device("cuda"))
    for batch in batches:
        stats_g, stats_e = graphed.update(batch), eager.update(batch)
        torch.testing.assert_close(stats_g["loss/critic"], stats_e["loss/critic"],
                                   rtol=1e-4, atol=1e-5)
    for (name, pg), pe in zip(graphed.model.state_dict().items(),
                              eager.model.state_dict().values(), strict=True):
        torch.testing.assert_close(pg, pe, rtol=1e-4, atol=1e-5, msg=name)
    assert set(graphed._graphs.graphs) == {True, False}


def test_graphed_sac_learns_and_rejects_a_new_batch_shape():
    cfg = SACConfig(actor_hidden=[32, 32], critic_hidden=[64, 64])
    agent = SAC(A, C, N, 16, cfg, torch.device("cuda"))
    before = [p.detach().clone() for p in agent.model.parameters()]
    for batch in _batches(5, torch.device("cuda")):
        stats = agent.update(batch)
    assert all(torch.isfinite(v).all() for v in stats.values())
    assert any(not torch.equal(a, p) for a, p in zip(before, agent.model.parameters(),
                                                      strict=True))
    small = {k: v[:8] for k, v in _batches(1, torch.device("cuda"))[0].items()}
    with pytest.raises(ValueError, match="cuda_graph: false"):
        agent.update(small)
