"""The command line end to end, and its refusals of bad input (which change nothing)."""

import json
import subprocess
import sys

import pytest
import torch

from simreal.cli import main
from tests.conftest import STEPS_PER_ITERATION


def test_tasks_and_robots_list(capsys):
    assert main(["tasks"]) == 0
    assert "quadrotor-hover" in capsys.readouterr().out
    assert main(["robots"]) == 0
    assert "crazyflie" in capsys.readouterr().out


def test_unknown_task_lists_the_known_ones(capsys, tmp_path):
    assert main(["train", "no-such-task", "--out", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert "unknown task 'no-such-task'" in err
    assert "known tasks:" in err and "quadrotor-hover" in err
    assert not (tmp_path / "r").exists()


def test_run_dir_holds_everything_the_issue_names(trained_run):
    for name in ("config.yaml", "policy.onnx", "summary.json", "checkpoints/latest.pt"):
        assert (trained_run / name).is_file(), name
    summary = json.loads((trained_run / "summary.json").read_text())
    for key in ("task", "algo", "seed", "env_steps", "wall_s", "success_rate", "mean_return",
                "policy"):
        assert key in summary
    assert summary["task"] == "quadrotor-hover" and summary["seed"] == 3
    assert summary["env_steps"] == 2 * STEPS_PER_ITERATION
    assert list((trained_run).glob("events.out.tfevents.*"))  # TensorBoard


def test_eval_prints_one_json_object_last(trained_run):
    out = subprocess.run(
        [sys.executable, "-m", "simreal.cli", "eval", str(trained_run / "policy.onnx"),
         "--task", "quadrotor-hover", "--episodes", "6", "--seed", "1", "--json"],
        capture_output=True, text=True, check=True, timeout=300).stdout
    result = json.loads(out.strip().splitlines()[-1])
    assert result["episodes"] == 6
    assert 0.0 <= result["success_rate"] <= 1.0
    assert result["position_error_p95"] >= result["position_error_mean"] * 0.5


def test_export_reproduces_the_run_policy(trained_run, tmp_path):
    import numpy as np

    from simreal.deploy.policy import OnnxPolicy

    out = tmp_path / "again.onnx"
    assert main(["export", str(trained_run / "checkpoints" / "latest.pt"), "--out",
                 str(out)]) == 0
    a, b = OnnxPolicy(out), OnnxPolicy(trained_run / "policy.onnx")
    obs = np.random.default_rng(0).normal(size=(10, a.contract.obs_dim)).astype(np.float32)
    # the same graph on the same runtime: equal up to float32 rounding
    np.testing.assert_allclose(a(obs), b(obs), rtol=1e-6, atol=1e-6)
    assert a.contract == b.contract


def test_eval_refuses_a_policy_of_another_task(trained_run, capsys):
    assert main(["eval", str(trained_run / "policy.onnx"), "--task", "arm-reach"]) == 2
    err = capsys.readouterr().err
    assert "'quadrotor-hover'" in err and "'arm-reach'" in err


def test_resume_missing_run_says_so(tmp_path, capsys):
    assert main(["train", "quadrotor-hover", "--resume", str(tmp_path / "nope")]) == 2
    assert "no such run directory" in capsys.readouterr().err


def test_resume_corrupt_run_overwrites_nothing(tmp_path, capsys):
    ckpt = tmp_path / "run" / "checkpoints" / "latest.pt"
    ckpt.parent.mkdir(parents=True)
    ckpt.write_bytes(b"not a checkpoint")
    assert main(["train", "quadrotor-hover", "--resume", str(tmp_path / "run")]) == 2
    assert "corrupt or unreadable checkpoint" in capsys.readouterr().err
    assert ckpt.read_bytes() == b"not a checkpoint"
    assert sorted(p.name for p in (tmp_path / "run").rglob("*")) == ["checkpoints", "latest.pt"]


def test_checkpoint_of_another_task_is_refused_naming_both(trained_run, tmp_path, capsys):
    ckpt = torch.load(trained_run / "checkpoints" / "latest.pt", weights_only=False)
    ckpt["task"] = "go2-flat"
    run = tmp_path / "other"
    (run / "checkpoints").mkdir(parents=True)
    torch.save(ckpt, run / "checkpoints" / "latest.pt")
    assert main(["train", "quadrotor-hover", "--resume", str(run)]) == 2
    err = capsys.readouterr().err
    assert "'go2-flat'" in err and "'quadrotor-hover'" in err
    assert not (run / "config.yaml").exists()


def test_training_into_an_existing_run_is_refused(trained_run, capsys):
    before = (trained_run / "summary.json").read_text()
    assert main(["train", "quadrotor-hover", "--out", str(trained_run)]) == 2
    assert "already holds a run" in capsys.readouterr().err
    assert (trained_run / "summary.json").read_text() == before


def test_resume_continues_from_the_checkpoint(trained_run, tmp_path):
    import shutil

    run = tmp_path / "resumed"
    shutil.copytree(trained_run, run)
    from simreal.api import train

    summary = train("quadrotor-hover", steps=3 * STEPS_PER_ITERATION, resume=run,
                    eval_episodes=4, progress=False)
    assert summary["env_steps"] == 3 * STEPS_PER_ITERATION  # one more iteration, not three
    assert summary["iterations"] == 3


@pytest.mark.parametrize("argv", [["train", "quadrotor-hover", "--envs", "0"],
                                  ["eval", "x.onnx", "--episodes", "-3"]])
def test_bad_numbers_are_refused_by_the_parser(argv):
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
