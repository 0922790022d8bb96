"""The calibration YAML: fitted parameters with their uncertainty, and randomization ranges.

```yaml
version: 1
robot: go2
base_hash: 3f0c...          # description_hash of the robot description the fit started from
experiments: [go2-air]      # the logs' experiments
sigmas: 3.0                 # randomization half-width, in standard deviations of the fit
parameters:                 # name -> estimate (calibration/params.py names them)
  FR_hip_joint.strength: {value: 0.93, std: 0.002, nominal: 1.0, unit: ''}
  latency: {value: 0.0101, std: 0.0002, nominal: 0.0, unit: s}
  imu.gyro_bias.x: {value: 0.011, std: 0.0004, nominal: 0.0, unit: rad/s}
randomization:              # name -> [low, high], centred on the fit
  latency: [0.0095, 0.0107]
fit: {...}                  # fit error before and after, per log (informative)
```

Unknown keys are errors; an error names the file and the field. Written atomically.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import Field, model_validator

from simreal.core.config import ConfigError, StrictModel, load_yaml_model

UNITS = {"strength": "", "damping": "N m s/rad", "frictionloss": "N m", "armature": "kg m^2",
         "offset": "rad", "torque_limit": "N m", "latency": "s", "mass": "kg",
         "thrust_coefficient": "N/RPM^2", "torque_coefficient": "N m/RPM^2",
         "motor_time_constant": "s", "gyro_bias": "rad/s", "accel_bias": "m/s^2"}


class CalibrationError(ConfigError):
    """A calibration file or request that cannot be used; the message names file and field."""


_Strict = StrictModel


class Estimate(_Strict):
    value: float
    std: float | None = Field(default=None, ge=0, description="1-sigma; None: not estimated")
    nominal: float = Field(description="the robot description's value before the fit")
    unit: str = ""

    @model_validator(mode="after")
    def _finite(self) -> Estimate:
        if not math.isfinite(self.value):
            raise ValueError(f"value {self.value} is not finite")
        return self


class Calibration(_Strict):
    version: Literal[1] = 1
    robot: str
    base_hash: str = Field(description="description hash of the robot the fit started from")
    experiments: list[str] = []
    sigmas: float = Field(default=3.0, gt=0)
    parameters: dict[str, Estimate]
    randomization: dict[str, tuple[float, float]] = {}
    fit: dict[str, Any] = {}

    @model_validator(mode="after")
    def _ranges(self) -> Calibration:
        for name, (lo, hi) in self.randomization.items():
            if name not in self.parameters:
                raise ValueError(f"randomization.{name}: not a fitted parameter")
            if not lo <= hi:
                raise ValueError(f"randomization.{name}: low {lo} above high {hi}")
        return self

    def value(self, name: str) -> float:
        return self.parameters[name].value


def load_calibration(path: str | Path) -> Calibration:
    return load_yaml_model(path, Calibration, CalibrationError, what="calibration file")


def write_text_atomic(text: str, path: str | Path) -> Path:
    """Write to a temporary file, fsync, rename: a crash leaves the old file or the new."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    return path


def save_calibration(calib: Calibration, path: str | Path) -> Path:
    data = calib.model_dump(mode="json")
    return write_text_atomic(yaml.safe_dump(data, sort_keys=False, width=100), path)
