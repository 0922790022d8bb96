"""Shared by the bench scripts: where results go and how they are written."""

from __future__ import annotations

import json
import os
import platform
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # as simreal sets it; before torch loads

RESULTS = Path(__file__).resolve().parent / "results"


def write_result(name: str, result: dict) -> Path:
    result = {"machine": {"cpus": os.cpu_count(), "platform": platform.platform()}, **result}
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"{name}.json"
    path.write_text(json.dumps(result, indent=2) + "\n")
    return path
