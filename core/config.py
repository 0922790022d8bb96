"""Configuration is data: YAML validated into typed models, errors that name file and field.

Every configuration model derives from `StrictModel` (or `FrozenModel`): unknown keys are
errors and so are NaN and infinities (a NaN gain or duration is a typo or a broken tool, never
a setting). `load_yaml_model(path, Model)` is the one YAML loader: robot.yaml, calibration
files, HIL scenarios and faults, node and task configurations all go through it, so a bad
value reads `<file>: <field.path[i]>: <problem>` everywhere.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError

M = TypeVar("M", bound=BaseModel)


class ConfigError(ValueError):
    """A configuration that cannot be read or does not validate; the message names the file
    (or source) and the field."""


class StrictModel(BaseModel):
    """Unknown keys and non-finite numbers are errors."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class FrozenModel(StrictModel):
    """A `StrictModel` whose instances are immutable (descriptions and contracts)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, frozen=True)


def field_path(loc: tuple[Any, ...], tags: frozenset[str] = frozenset()) -> str:
    """`rotors[1].actuator` from pydantic's error location. A union member's tag (what
    pydantic names a union's branch: `function-after[...]`, or in a discriminated union the
    discriminator's value, given in `tags`) is left out: the path is what a user can find."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif isinstance(part, str) and ("[" in part or "(" in part or part in tags):
            continue
        else:
            out += f".{part}" if out else str(part)
    return out


def describe(exc: ValidationError, where: str, tags: frozenset[str] = frozenset()) -> str:
    """One line per problem: `<where>: <field>: <message> (got <value>)`."""
    lines = []
    for e in exc.errors():
        loc = field_path(e["loc"], tags) or "(top level)"
        got = ""
        if "input" in e and not isinstance(e["input"], Mapping | list) and e["type"] not in (
                "missing", "extra_forbidden"):
            got = f" (got {e['input']!r})"
        lines.append(f"{loc}: {e['msg']}{got}")
    return f"{where}: " + "; ".join(lines)


def validate_model(raw: Any, model: type[M], where: str,
                   error: type[Exception] = ConfigError, tags: frozenset[str] = frozenset()) -> M:
    """`model` from plain data; a validation failure raises `error` naming `where`."""
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        raise error(describe(exc, where, tags)) from None


def read_yaml_mapping(path: str | Path, error: type[Exception] = ConfigError,
                      what: str = "file", expected: str = "expected a mapping at the top level",
                      ) -> dict[str, Any]:
    """A YAML file's top-level mapping (an empty file is an empty mapping); `expected` says
    what the file must hold when it is not a mapping."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such {what}")
    try:
        raw = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise error(f"{path}: not valid YAML: {exc}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise error(f"{path}: cannot read: {exc}") from None
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise error(f"{path}: {expected}")
    return raw


def load_yaml_model(path: str | Path, model: type[M], error: type[Exception] = ConfigError,
                    what: str = "file", tags: frozenset[str] = frozenset()) -> M:
    """Read `path` as YAML and validate it into `model`; errors name the file and the field
    (`error` is the caller's ConfigError subclass, `what` names the file's kind when it is
    missing, `tags` are discriminator values to leave out of field paths)."""
    return validate_model(read_yaml_mapping(path, error, what), model, str(path), error, tags)
