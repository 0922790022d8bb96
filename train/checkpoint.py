"""Checkpoints: written atomically (temp file, fsync, rename), read with clear errors."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

import torch


class CheckpointError(RuntimeError):
    pass


def save_atomic(obj: Any, path: Path) -> None:
    """A crash mid-write leaves the previous file intact, never a torn one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            torch.save(obj, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def save_checkpoint(state: dict[str, Any], run_dir: Path, iteration: int) -> Path:
    """`state` as RUN_DIR/checkpoints/model_<iteration>.pt and as latest.pt (what --resume
    reads), each written atomically; the numbered file's path."""
    path = run_dir / "checkpoints" / f"model_{iteration:06d}.pt"
    save_atomic(state, path)
    save_atomic(state, run_dir / "checkpoints" / "latest.pt")
    return path


def write_text_atomic(text: str, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def load(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"{path}: no such checkpoint")
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=False)
    except Exception as exc:  # torch raises several types for a damaged file
        raise CheckpointError(f"{path}: corrupt or unreadable checkpoint ({exc})") from None
    missing = {"task", "algo", "model", "config", "env_steps", "iteration"} - set(ckpt)
    if missing:
        raise CheckpointError(f"{path}: not a simreal checkpoint (missing {sorted(missing)})")
    return ckpt


def latest_in(run_dir: str | Path) -> Path:
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise CheckpointError(f"{run_dir}: no such run directory")
    path = run_dir / "checkpoints" / "latest.pt"
    if not path.is_file():
        raise CheckpointError(f"{run_dir}: has no checkpoints/latest.pt to resume from")
    return path
