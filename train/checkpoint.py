"""Checkpoints: written atomically (temp file, fsync, rename), read with clear errors."""

from __future__ import annotations

import os
import sys
import tempfile
import warnings
from pathlib import Path
from typing import Any

import torch
from tqdm import tqdm


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
    except BaseException as exc:
        Path(tmp).unlink(missing_ok=True)
        # torch's zip writer turns a full disk into a RuntimeError whose cause is the OSError:
        # raise that, so that the caller can name the path and the reason in one line
        if isinstance(exc, RuntimeError) and isinstance(exc.__context__, OSError):
            raise exc.__context__ from None
        raise


def save_checkpoint(state: dict[str, Any], run_dir: Path, iteration: int) -> Path:
    """`state` as RUN_DIR/checkpoints/model_<iteration>.pt and as latest.pt (what --resume
    reads), each written atomically; the numbered file's path."""
    path = run_dir / "checkpoints" / f"model_{iteration:06d}.pt"
    save_atomic(state, path)
    save_atomic(state, run_dir / "checkpoints" / "latest.pt")
    # on stderr, above any progress bar: where the run stands and how to continue it
    tqdm.write(f"simreal: checkpoint {path} ({state.get('env_steps', 0)} env steps)",
               file=sys.stderr)
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
    """The checkpoint to resume RUN_DIR from (see `newest_intact`)."""
    return newest_intact(run_dir)[0]


def newest_intact(run_dir: str | Path) -> tuple[Path, dict[str, Any]]:
    """(path, checkpoint): the newest checkpoint of RUN_DIR that loads. latest.pt normally;
    a numbered model_N.pt when latest.pt is missing, corrupt, or older (a write of latest.pt
    that failed, e.g. on a full disk, after model_N.pt was complete)."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise CheckpointError(f"{run_dir}: no such run directory")
    folder = run_dir / "checkpoints"
    latest: tuple[Path, dict[str, Any]] | None = None
    problem = "missing"
    if (folder / "latest.pt").is_file():
        try:
            latest = (folder / "latest.pt", load(folder / "latest.pt"))
        except CheckpointError as exc:
            problem = str(exc)
    for path in sorted(folder.glob("model_*.pt"), reverse=True):
        if latest is not None and _number(path) <= latest[1]["iteration"]:
            break
        try:
            ckpt = load(path)
        except CheckpointError:
            continue  # a damaged numbered file: try the one before it
        why = problem if latest is None else f"older than {path.name}"
        warnings.warn(f"{folder / 'latest.pt'}: {why}; resuming from {path}", stacklevel=2)
        return path, ckpt
    if latest is None:
        raise CheckpointError(f"{run_dir}: has no intact checkpoint to resume from "
                              f"(checkpoints/latest.pt: {problem})")
    return latest


def _number(path: Path) -> int:
    try:
        return int(path.stem.split("_")[-1])
    except ValueError:
        return -1
