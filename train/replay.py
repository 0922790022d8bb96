"""Replay for off-policy learning: an n-step window over the vector env, and a ring buffer.

Both work on whole batches of environments with tensor operations: no Python work per
transition. The n-step return is formed once, when a transition enters the buffer, so a
sampled batch is ready to use (observation, action, return, discount, bootstrap observation).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

RELABEL_FIELDS = ("terms", "step_discount", "step_terminated")


class ReplayBuffer:
    """A ring buffer of named float fields, preallocated on `device` as one packed tensor.

    A row holds every field side by side, so sampling a batch is one gather; `sample` returns
    views of the gathered rows, one per field.
    """

    def __init__(self, capacity: int, fields: dict[str, int], device: torch.device | str = "cpu",
                 dtype: torch.dtype = torch.float32):
        if capacity <= 0:
            raise ValueError(f"replay capacity must be positive, got {capacity}")
        self.capacity = capacity
        self.fields = dict(fields)
        self.slices: dict[str, slice] = {}
        start = 0
        for name, dim in self.fields.items():
            self.slices[name] = slice(start, start + dim)
            start += dim
        self.data = torch.zeros(capacity, start, device=device, dtype=dtype)
        self.ptr = 0  # next row to write
        self.size = 0

    def add(self, batch: dict[str, torch.Tensor]) -> None:
        """Append rows (every field, same leading size); the oldest rows are overwritten."""
        if set(batch) != set(self.fields):
            raise ValueError(f"replay fields {sorted(batch)} != {sorted(self.fields)}")
        rows = torch.cat([batch[name].reshape(batch[name].shape[0], -1).to(self.data.dtype)
                          for name in self.fields], dim=-1)
        n = rows.shape[0]
        if n >= self.capacity:  # only the newest `capacity` rows survive
            rows, n = rows[-self.capacity:], self.capacity
            self.data.copy_(rows)
            self.ptr, self.size = 0, self.capacity
            return
        first = min(n, self.capacity - self.ptr)
        self.data[self.ptr:self.ptr + first] = rows[:first]
        if first < n:  # wrap around to the start
            self.data[:n - first] = rows[first:]
        self.ptr = (self.ptr + n) % self.capacity
        self.size = min(self.size + n, self.capacity)

    def sample(self, batch_size: int, generator: torch.Generator | None = None
               ) -> dict[str, torch.Tensor]:
        """`batch_size` rows drawn uniformly with replacement from the stored ones."""
        if self.size == 0:
            raise ValueError("cannot sample from an empty replay buffer")
        idx = torch.randint(self.size, (batch_size,), generator=generator,
                            device=self.data.device)
        rows = self.data[idx]
        return {name: rows[:, sl] for name, sl in self.slices.items()}


class NStepWindow:
    """Turns one-step vector-env transitions into n-step transitions, for all envs at once.

    `add` takes the step's observation (dict of groups), action, reward, `terminated`,
    `done` (terminated or cut by the time limit) and the bootstrap observation: the
    observation the step led to, which for a done env must be its final observation, not the
    post-reset one (see `OffPolicyRunner`). Once n steps are held, each call returns the
    transition that started n-1 steps earlier:

        return   = sum_{k<m} gamma^k r_k
        discount = gamma^m, or 0 if step m-1 was a termination
        next_obs = the bootstrap observation of step m-1

    where m <= n is the number of steps up to and including the first done in the window:
    a return stops at the end of its episode, and is bootstrapped there unless the episode
    terminated (a time-out bootstraps).

    Given each step's reward `terms` (N, T), a transition also keeps what recomputing its
    return under other weights needs: "terms" (the n steps' terms, oldest first, n*T),
    "step_discount" (gamma^k, 0 past the episode's end) and "step_terminated" (n each).
    """

    def __init__(self, n: int, gamma: float):
        if n < 1:
            raise ValueError(f"n_step must be >= 1, got {n}")
        self.n, self.gamma = n, gamma
        self.count = 0
        self._buf: dict[str, torch.Tensor] = {}

    def add(self, obs: dict[str, torch.Tensor], action: torch.Tensor, reward: torch.Tensor,
            terminated: torch.Tensor, done: torch.Tensor, next_obs: dict[str, torch.Tensor],
            terms: torch.Tensor | None = None) -> dict[str, torch.Tensor] | None:
        step = {"action": action, "reward": reward, "terminated": terminated.to(reward.dtype),
                "done": done.to(reward.dtype)}
        if terms is not None:
            step["terms"] = terms.to(reward.dtype)
        for group, value in obs.items():
            step[f"obs/{group}"] = value
            step[f"next/{group}"] = next_obs[group]
        if not self._buf:
            self._buf = {k: torch.zeros(self.n, *v.shape, dtype=v.dtype, device=v.device)
                         for k, v in step.items()}
        row = self.count % self.n
        for key, value in step.items():
            self._buf[key][row] = value
        self.count += 1
        if self.count < self.n:
            return None
        return self._emit()

    def _emit(self) -> dict[str, torch.Tensor]:
        n, buf = self.n, self._buf
        order = [(self.count + k) % n for k in range(n)]  # ring rows, oldest first
        rewards = buf["reward"][order]  # (n, N)
        dones = buf["done"][order]
        # alive[k]: no episode end before step k of the window
        alive = torch.cumprod(torch.cat([torch.ones_like(dones[:1]), 1 - dones[:-1]]), dim=0)
        powers = self.gamma ** torch.arange(n, dtype=rewards.dtype, device=rewards.device)
        ret = (powers[:, None] * alive * rewards).sum(0)
        m = alive.sum(0).long()  # steps in the return, 1..n
        last = torch.tensor(order, device=m.device)[m - 1]  # ring row of step m-1, per env
        env = torch.arange(m.shape[0], device=m.device)
        discount = self.gamma ** m.to(rewards.dtype) * (1 - buf["terminated"][last, env])
        first = order[0]
        out = {"action": buf["action"][first], "reward": ret, "discount": discount}
        if "terms" in buf:  # (n, N, T) -> (N, n*T), oldest step first
            out["terms"] = buf["terms"][order].transpose(0, 1).reshape(rewards.shape[1], -1)
            out["step_discount"] = (powers[:, None] * alive).T
            out["step_terminated"] = buf["terminated"][order].T
        for key in buf:
            if key.startswith("obs/"):
                group = key[4:]
                out[key] = buf[key][first]
                out[f"next/{group}"] = buf[f"next/{group}"][last, env]
        return out


def relabelled(batch: dict[str, torch.Tensor], n_step: int, reward_scale: float,
               reward_from_terms: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
               ) -> dict[str, torch.Tensor]:
    """`batch` (sampled from a buffer that kept NStepWindow's term fields) with each n-step
    return recomputed from its steps' terms by `reward_from_terms(terms, terminated)` (the
    env's current weights), times `reward_scale`; the term fields are left out."""
    terms = batch["terms"].reshape(batch["terms"].shape[0], n_step, -1)
    rewards = reward_from_terms(terms, batch["step_terminated"] > 0.5)  # (B, n)
    out = {k: v for k, v in batch.items() if k not in RELABEL_FIELDS}
    out["reward"] = (batch["step_discount"] * rewards).sum(-1, keepdim=True) * reward_scale
    return out
