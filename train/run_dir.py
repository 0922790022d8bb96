"""A run directory that two writers, a signal or a full disk cannot corrupt.

- `RunLock`: an exclusive `flock` on RUN_DIR/.lock for the life of the training process, with
  the holder's pid inside; a second writer is refused naming it. The kernel drops the lock
  when the holder dies, so a crashed run never leaves a stale lock behind.
- `StopOnSignal`: SIGINT and SIGTERM ask the runner to stop at the end of the current
  iteration; it then writes its checkpoint and the caller exits 130 or 143. A second signal
  stops at once (the last periodic checkpoint is intact: every write is atomic).
- `RunDirError`: an OS error on the run directory (read-only, permission, disk full) as one
  line naming the path.
"""

from __future__ import annotations

import errno
import fcntl
import os
import signal
import sys
import threading
from pathlib import Path
from types import FrameType
from typing import Any

# errors of writing to the run directory, answered with one line instead of a traceback
WRITE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM})


class RunDirError(OSError):
    """The run directory cannot be written; the message names the path and the reason."""

    def __init__(self, message: str, exit_code: int = 2):
        super().__init__(message)
        self.exit_code = exit_code  # 2: bad input (read-only, permission); 1: disk full


class RunLockedError(RunDirError):
    pass


class Interrupted(Exception):
    """Training stopped on a signal after writing its checkpoint; `exit_code` is 128 + N."""

    def __init__(self, signum: int, checkpoint: Path | None):
        name = signal.Signals(signum).name
        where = f"; checkpoint {checkpoint}" if checkpoint is not None else ""
        super().__init__(f"stopped by {name}{where}")
        self.signum, self.checkpoint = signum, checkpoint
        self.exit_code = 128 + signum


def os_error(exc: OSError, path: Path | str) -> RunDirError:
    """One line for an OS error on `path`: a full disk is a failure of the run (exit 1), a
    read-only or forbidden directory is bad input (exit 2)."""
    where = exc.filename or path
    reason = exc.strerror or str(exc)
    full = exc.errno in (errno.ENOSPC, errno.EDQUOT)
    return RunDirError(f"{where}: {reason}", exit_code=1 if full else 2)


def check_writable(run_dir: Path) -> None:
    """Fail before training when RUN_DIR (or the folder it would be made in) is not writable."""
    probe = run_dir
    while not probe.exists():
        probe = probe.parent
    if not probe.is_dir():
        raise RunDirError(f"{probe}: not a directory")
    if not os.access(probe, os.W_OK | os.X_OK):
        raise RunDirError(f"{probe}: not writable (read-only or permission denied)")


class RunLock:
    """An exclusive lock on a run directory; `release()` (or process exit) frees it."""

    def __init__(self, run_dir: Path):
        self.path = run_dir / ".lock"
        self._fd: int | None = None

    def acquire(self) -> RunLock:
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise os_error(exc, self.path) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise RunLockedError(f"{self.path.parent}: another simreal process (pid {holder}) "
                                 "is writing this run; wait for it or choose another --out"
                                 ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd = fd
        return self

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the descriptor drops the flock
            self._fd = None

    def __enter__(self) -> RunLock:
        return self.acquire()

    def __exit__(self, *exc: Any) -> None:
        self.release()


class StopOnSignal:
    """While active, SIGINT/SIGTERM set `requested` (the runner stops after the iteration);
    a second signal raises KeyboardInterrupt at once. Only in the main thread."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self._old: dict[int, Any] = {}

    @property
    def requested(self) -> bool:
        return self.signum is not None

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.signum is not None:
            raise KeyboardInterrupt
        self.signum = signum
        print(f"\nsimreal: {signal.Signals(signum).name}: stopping after this iteration and "
              "writing a checkpoint (again to stop at once)", file=sys.stderr, flush=True)

    def __enter__(self) -> StopOnSignal:
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._old[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc: Any) -> None:
        for sig, old in self._old.items():
            signal.signal(sig, old)
        self._old.clear()
