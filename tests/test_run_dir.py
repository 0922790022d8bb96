"""Run folders that cannot be corrupted: one writer, checkpoints on SIGINT/SIGTERM, resume
from the newest intact checkpoint, one-line errors for unwritable folders."""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
import time

import pytest
import torch

from simreal.cli import main
from simreal.train.checkpoint import CheckpointError, newest_intact, save_checkpoint
from simreal.train.run_dir import RunDirError, RunLock, RunLockedError, check_writable, os_error
from tests.conftest import STEPS_PER_ITERATION

STATE = {"task": "quadrotor-hover", "algo": "ppo", "model": {}, "config": {}}


def test_a_second_writer_is_refused_naming_the_holder(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    with RunLock(run):
        with pytest.raises(RunLockedError, match=rf"pid {os.getpid()}"):
            RunLock(run).acquire()
        assert main(["train", "quadrotor-hover", "--out", str(run), "--steps", "64",
                     "--envs", "8", "--no-progress"]) == 2
        assert f"(pid {os.getpid()}) is writing this run" in capsys.readouterr().err
    assert not (run / "config.yaml").exists()
    RunLock(run).acquire().release()  # released: free again


def test_unwritable_places_are_one_line_errors(tmp_path, capsys):
    afile = tmp_path / "afile"
    afile.write_text("x")
    with pytest.raises(RunDirError, match="afile: not a directory"):
        check_writable(afile / "run")
    assert main(["train", "quadrotor-hover", "--out", str(afile / "run")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "afile: not a directory" in err
    full = os_error(OSError(errno.ENOSPC, "No space left on device", "/r/x.pt"), "/r")
    assert str(full) == "/r/x.pt: No space left on device" and full.exit_code == 1
    ro = os_error(OSError(errno.EROFS, "Read-only file system"), "/r")
    assert str(ro) == "/r: Read-only file system" and ro.exit_code == 2


def test_resume_takes_the_newest_intact_checkpoint(tmp_path, monkeypatch):
    run = tmp_path / "run"
    for it in (1, 2):
        save_checkpoint({**STATE, "iteration": it, "env_steps": 100 * it}, run, it)
    assert newest_intact(run)[1]["iteration"] == 2
    # a full disk while writing latest.pt after model_3.pt: latest.pt is one behind
    real_save, calls = torch.save, []

    def failing_save(obj, f, *a, **k):  # model_3.pt is written, then latest.pt fails
        calls.append(1)
        if len(calls) == 2:
            f.write(b"partial")
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_save(obj, f, *a, **k)

    monkeypatch.setattr(torch, "save", failing_save)
    with pytest.raises(OSError):
        save_checkpoint({**STATE, "iteration": 3, "env_steps": 300}, run, 3)
    monkeypatch.undo()
    assert not list((run / "checkpoints").glob(".*.tmp"))  # nothing half-written
    with pytest.warns(UserWarning, match="older than model_000003.pt"):
        path, ckpt = newest_intact(run)
    assert path.name == "model_000003.pt" and ckpt["env_steps"] == 300
    # latest.pt corrupt and the newest numbered one too: the one before it
    (run / "checkpoints" / "latest.pt").write_bytes(b"torn")
    (run / "checkpoints" / "model_000003.pt").write_bytes(b"torn")
    with pytest.warns(UserWarning, match="corrupt"):
        assert newest_intact(run)[1]["iteration"] == 2
    for p in (run / "checkpoints").glob("*.pt"):
        p.write_bytes(b"torn")
    with pytest.raises(CheckpointError, match="no intact checkpoint"):
        newest_intact(run)


def test_resume_reads_the_task_and_refuses_a_total_already_reached(trained_run, tmp_path,
                                                                   capsys):
    import shutil

    run = tmp_path / "resumed"
    shutil.copytree(trained_run, run)
    before = (run / "summary.json").read_text()
    done = 2 * STEPS_PER_ITERATION
    for argv in (["train", "--resume", str(run), "--steps", str(done)],
                 ["train", "--resume", str(run)]):  # the run's own budget is reached too
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert f"has trained {done} env steps" in err and "--steps is the run's total" in err
    assert main(["train", "--resume", str(run), "task.episode_s=3"]) == 2
    assert "keeps its own task and algorithm settings" in capsys.readouterr().err
    assert (run / "summary.json").read_text() == before
    # no task named: the run's own, one more iteration
    assert main(["train", "--resume", str(run), "--steps", str(done + 1), "--eval-episodes",
                 "4", "--no-progress"]) == 0
    out = capsys.readouterr()
    assert f"rounded up to {3 * STEPS_PER_ITERATION}" in out.err
    assert f'"env_steps": {3 * STEPS_PER_ITERATION}' in out.out


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_writes_a_checkpoint_and_exits_128_plus_its_number(tmp_path, sig):
    run = tmp_path / "run"
    proc = subprocess.Popen(
        [sys.executable, "-m", "simreal.cli", "train", "quadrotor-hover", "--algo", "ppo",
         "--envs", "16", "--steps", "1e8", "--out", str(run), "--no-progress"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 240
        while not (run / "config.yaml").exists() and proc.poll() is None:
            assert time.monotonic() < deadline, "training did not start"
            time.sleep(0.2)
        time.sleep(1.0)  # into the training loop
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=240)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 128 + sig, err[-2000:]
    assert f"stopped by {signal.Signals(sig).name}" in err
    assert f"run directory {run}" in err
    assert out == ""  # no result on a stop, and nothing else on stdout
    ckpt = torch.load(run / "checkpoints" / "latest.pt", weights_only=False)
    assert ckpt["env_steps"] > 0 and not (run / "policy.onnx").exists()
    assert not (run / "summary.json").exists()


def test_a_full_disk_inside_torch_save_is_an_os_error(tmp_path, monkeypatch):
    from simreal.train.checkpoint import save_atomic

    def full(obj, f, *a, **k):  # as torch's zip writer reports ENOSPC
        try:
            raise OSError(errno.ENOSPC, "No space left on device")
        except OSError:
            raise RuntimeError("[enforce fail at inline_container.cc] unexpected pos") from None

    monkeypatch.setattr(torch, "save", full)
    with pytest.raises(OSError) as exc:
        save_atomic({}, tmp_path / "x.pt")
    assert exc.value.errno == errno.ENOSPC
    assert list(tmp_path.iterdir()) == []  # no temporary file left
