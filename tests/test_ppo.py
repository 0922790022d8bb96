import numpy as np
import pytest
import torch

from simreal.train.modules import EmpiricalNormalization
from simreal.train.storage import gae


def test_gae_against_a_hand_computed_case():
    # one env, three steps, the episode ends after step 1; gamma 0.5, lambda 0.5
    rewards = torch.tensor([[1.0], [2.0], [3.0]])
    values = torch.tensor([[0.5], [1.0], [2.0]])
    dones = torch.tensor([[False], [True], [False]])
    last = torch.tensor([4.0])
    adv, ret = gae(rewards, values, dones, last, gamma=0.5, lam=0.5)
    # delta2 = 3 + 0.5*4 - 2 = 3;            A2 = 3
    # delta1 = 2 + 0 - 1 = 1 (done);         A1 = 1
    # delta0 = 1 + 0.5*1 - 0.5 = 1;          A0 = 1 + 0.25*1 = 1.25
    assert adv.flatten().tolist() == pytest.approx([1.25, 1.0, 3.0])
    assert ret.flatten().tolist() == pytest.approx([1.75, 2.0, 5.0])


def test_normalizer_tracks_mean_and_variance_over_batches():
    rng = np.random.default_rng(0)
    data = rng.normal(3.0, 2.0, size=(1000, 4)).astype(np.float32)
    norm = EmpiricalNormalization(4)
    for chunk in np.split(data, 10):
        norm.update(torch.from_numpy(chunk))
    assert norm.mean.numpy() == pytest.approx(data.mean(0), abs=1e-4)
    assert norm.var.numpy() == pytest.approx(data.var(0), rel=1e-3)
    z = norm(torch.from_numpy(data)).numpy()
    assert abs(z.mean()) < 0.01 and abs(z.std() - 1) < 0.01
