"""What a robot's links do to time: commands that arrive late or not at all, readings that age.

Both work in physics steps, batched over envs, with per-env amounts drawn by the task:

- `CommandLink`: the command the robot's driver holds at each physics step. A control period's
  command is lost with a per-env probability (the driver keeps the last one it received, as
  a robot does on a lost message), and what is received takes effect `latency` physics steps
  after the policy sent it (a zero-order hold on the received commands). Optionally, losses
  also come in bursts of whole periods (a link that goes silent for a while: the robot holds
  one command throughout, as the deploy node holds its last one until its watchdog trips).
- `SensorHistory`: the last physics steps' sensor readings, so the actor can be given a state
  older than the one the critic and the rewards see (the estimator's and the link's age).
"""

from __future__ import annotations

import torch


class CommandLink:
    """Delays and drops (num_envs, dim) commands sent once per control period of `decimation`
    physics steps; `at(j)` is the command in force at physics step j of the current period."""

    def __init__(self, num_envs: int, dim: int, decimation: int, max_latency_steps: int,
                 device: torch.device | str = "cpu"):
        self.decimation = decimation
        # periods the oldest command in force can be back: ceil(max latency / decimation)
        depth = -(-max_latency_steps // decimation) + 1
        self.received = torch.zeros(depth, num_envs, dim, device=device)
        self.head = 0
        self.latency = torch.zeros(num_envs, dtype=torch.long, device=device)  # physics steps
        self.loss = torch.zeros(num_envs, device=device)  # per-period probability
        self.max_latency_steps = max_latency_steps
        self._env = torch.arange(num_envs, device=device)
        # bursts: a per-period probability that one starts, and its length in whole periods,
        # uniform in burst_periods (inclusive); (0, 0): none, and no random draws for them
        self.burst_start = torch.zeros(num_envs, device=device)
        self.burst_periods = (0, 0)
        self.burst_left = torch.zeros(num_envs, dtype=torch.long, device=device)

    def reset(self, ids: torch.Tensor, command: torch.Tensor) -> None:
        """Envs `ids` start holding `command` (num_ids, dim) in every slot."""
        self.received[:, ids] = command.to(self.received.dtype)
        self.burst_left[ids] = 0

    def send(self, command: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        """One control period's commands; returns which were lost (num_envs,) bool."""
        lost = torch.rand(command.shape[0], generator=generator,
                          device=command.device) < self.loss
        if self.burst_periods[1] > 0:
            lost |= self._in_burst(generator)
        last = self.received[self.head]
        self.head = (self.head + 1) % self.received.shape[0]
        self.received[self.head] = torch.where(lost[:, None], last, command)
        return lost

    def _in_burst(self, generator: torch.Generator) -> torch.Tensor:
        """Which envs lose this period's command to a burst (starting one where drawn)."""
        n, device = self.burst_left.shape[0], self.burst_left.device
        start = (self.burst_left == 0) & (
            torch.rand(n, generator=generator, device=device) < self.burst_start)
        low, high = self.burst_periods
        length = torch.randint(low, high + 1, (n,), generator=generator, device=device)
        self.burst_left = torch.where(start, length, self.burst_left)
        lost = self.burst_left > 0
        self.burst_left = (self.burst_left - 1).clamp(min=0)
        return lost

    def at(self, substep: int) -> torch.Tensor:
        """(num_envs, dim): the newest received command sent at least `latency` steps before
        physics step `substep` of this period (the current period's was sent at step 0)."""
        back = torch.clamp(self.latency - substep, min=0)
        periods = torch.div(back + self.decimation - 1, self.decimation, rounding_mode="floor")
        slot = (self.head - periods) % self.received.shape[0]
        return self.received[slot, self._env]


class SensorHistory:
    """A ring of the last `max_age_steps + 1` physics steps' sensordata rows (float32)."""

    def __init__(self, num_envs: int, width: int, max_age_steps: int,
                 device: torch.device | str = "cpu"):
        self.ring = torch.zeros(max_age_steps + 1, num_envs, width, device=device)
        self.head = 0
        self.age = torch.zeros(num_envs, dtype=torch.long, device=device)  # physics steps
        self._env = torch.arange(num_envs, device=device)

    @property
    def max_age_steps(self) -> int:
        return self.ring.shape[0] - 1

    def fill(self, ids: torch.Tensor, reading: torch.Tensor) -> None:
        """Envs `ids` (after a reset) have always read `reading` (num_ids, width)."""
        self.ring[:, ids] = reading.to(self.ring.dtype)

    def push(self, readings: torch.Tensor) -> None:
        """Append (num_envs, k, width) readings of k consecutive physics steps."""
        k = readings.shape[1]
        slots = (self.head + 1 + torch.arange(k, device=readings.device)) % self.ring.shape[0]
        self.ring[slots] = readings.transpose(0, 1).to(self.ring.dtype)
        self.head = (self.head + k) % self.ring.shape[0]

    def aged(self) -> torch.Tensor:
        """(num_envs, width): each env's reading `age` physics steps old."""
        return self.ring[(self.head - self.age) % self.ring.shape[0], self._env]
