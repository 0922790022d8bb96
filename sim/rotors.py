"""A rotor's motor model and thrust map (robot.yaml's `rotor_model`), written once.

The training task (sim/tasks/quadrotor_hover.py, batched torch tensors) and the HIL robot
(hil/robot.py, one numpy vehicle) both step rotors with these functions:

- the motor is a first-order lag on the rotor speed (a fraction of maximum rpm), integrated
  exactly over a step of dt: speed += alpha (command - speed), alpha = 1 - exp(-dt / tau);
- thrust goes with the square of the speed: max_thrust * scale * speed^2 (N), `scale` being
  a thrust-coefficient factor (randomized in training, 1 on the HIL robot).
"""

from __future__ import annotations

import math
from typing import Any

from array_api_compat import array_namespace, is_array_api_obj


def lag_alpha(dt: float, tau: Any) -> Any:
    """The fraction of the remaining way a first-order lag of time constant tau moves in dt."""
    if is_array_api_obj(tau):
        return 1 - array_namespace(tau).exp(-dt / tau)
    return 1.0 - math.exp(-dt / float(tau))


def lag_step(speed: Any, command: Any, alpha: Any) -> Any:
    """Rotor speed after one step of the lag towards `command`."""
    return speed + alpha * (command - speed)


def thrust(speed: Any, max_thrust: float, scale: Any = 1.0) -> Any:
    """Rotor thrust (N) at a speed given as a fraction of maximum rpm."""
    return max_thrust * scale * speed ** 2
