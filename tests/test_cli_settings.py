"""The CLI's settings: key=value overrides, numbers like 3e5, help on every flag, JSON that
parses, and stdout kept for the result."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

import pytest

from simreal.cli import _positive, build_parser, main, parse_overrides
from simreal.core.jsonout import json_text


def test_overrides_nest_and_read_yaml_values():
    task, algo = parse_overrides(["task.episode_s=10", "task.reward.alive=0.5",
                                  "algo.batch_size=4096", "algo.learning_rate=3e-4",
                                  "task.commands.lin_vel_x=[-0.5, 0.5]", "algo.steps=3e5"])
    assert task == {"episode_s": 10, "reward": {"alive": 0.5},
                    "commands": {"lin_vel_x": [-0.5, 0.5]}}
    assert algo == {"batch_size": 4096, "learning_rate": 3e-4, "steps": 300000}
    for bad in ("episode_s=10", "task.=1", "robot.x=1", "task.a..b=1"):
        with pytest.raises(ValueError, match="write task.<setting>=<value>"):
            parse_overrides([bad])


@pytest.mark.parametrize(("override", "named"), [
    ("task.episode_s=.nan", "episode_s"),
    ("task.episode_s=-3", "episode_s"),
    ("task.no_such_setting=1", "no_such_setting"),
    ("algo.learning_rate=.inf", "learning_rate"),
])
def test_bad_overrides_are_refused_naming_the_field(tmp_path, capsys, override, named):
    run = tmp_path / "run"
    assert main(["train", "quadrotor-hover", override, "--algo", "ppo", "--out", str(run)]) == 2
    err = capsys.readouterr().err
    assert named in err and "Traceback" not in err
    assert not run.exists()  # nothing half-made


def test_a_bad_task_config_file_is_named_with_its_field(tmp_path, capsys):
    cfg = tmp_path / "bad.yaml"
    cfg.write_text("episode_s: .nan\n")
    assert main(["train", "quadrotor-hover", "--task-config", str(cfg), "--out",
                 str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert "bad.yaml: episode_s:" in err and "nan" in err
    assert not (tmp_path / "run").exists()


def test_task_config_file_and_overrides_reach_the_run(tmp_path, capsys):
    cfg = tmp_path / "task.yaml"
    cfg.write_text("episode_s: 2.0\n")
    run = tmp_path / "run"
    assert main(["train", "quadrotor-hover", "--task-config", str(cfg), "algo.epochs=1",
                 "--algo", "ppo", "--envs", "8", "--steps", "100", "--out", str(run),
                 "--eval-episodes", "2", "--no-progress"]) == 0
    out = capsys.readouterr()
    summary = json.loads(out.out.strip().splitlines()[-1])
    config = (run / "config.yaml").read_text()
    assert "episode_s: 2.0" in config and "epochs: 1" in config
    assert "rounded up to" in out.err and summary["env_steps"] > 100


def test_numbers_like_3e5_are_counts():
    assert _positive("3e5") == 300_000 and _positive("1_000") == 1000
    for bad in ("0", "-1", "2.5", "lots", "nan"):
        with pytest.raises(argparse.ArgumentTypeError):
            _positive(bad)


def test_every_flag_has_help_and_eval_matches_training_episodes():
    parser = build_parser()
    missing = []
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for name, cmd in sub.choices.items():
        for action in cmd._actions:
            if not isinstance(action, argparse._HelpAction) and not action.help:
                missing.append(f"{name} {action.dest}")
    assert not missing, missing
    assert sub.choices["eval"].get_default("episodes") == 1000
    assert sub.choices["train"].get_default("eval_episodes") == 1000


def test_json_output_carries_null_and_says_why():
    text = json_text({"mean_return": float("nan"), "m": {"x": [1.0, float("inf")]}})
    data = json.loads(text)  # strict JSON: no NaN tokens
    assert "NaN" not in text and data["mean_return"] is None and data["m"]["x"] == [1.0, None]
    assert data["non_finite"] == {"mean_return": "nan", "m.x[1]": "inf"}
    assert json.loads(json_text({"a": 1})) == {"a": 1}


def test_third_party_output_goes_to_stderr_and_stdout_keeps_the_result():
    code = ("import os, sys\n"
            "from simreal.cli import _stdout_to_stderr\n"
            "with _stdout_to_stderr() as out:\n"
            "    os.write(1, b'C-level noise\\n')\n"
            "    print('python noise')\n"
            "    print('RESULT', file=out)\n"
            "print('after')\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "RESULT\nafter\n"
    assert "C-level noise" in proc.stderr and "python noise" in proc.stderr


@pytest.mark.parametrize("argv", [["--help"], ["tasks"], ["robots"]])
def test_listing_commands_load_neither_torch_nor_mujoco(argv):
    # speed itself is measured by bench/cli_startup.py; this guards what makes it slow
    code = ("import sys\nfrom simreal.cli import main\n"
            "try:\n    main(sys.argv[1:])\nexcept SystemExit:\n    pass\n"
            "print('HEAVY', [m for m in ('torch', 'mujoco', 'warp') if m in sys.modules])")
    proc = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "HEAVY []"
    if argv == ["tasks"]:
        assert "go2-flat" in proc.stdout and "robot=go2" in proc.stdout


@pytest.mark.parametrize("argv", [["train", "quadrotor-hover", "--device", "gpu"],
                                  ["deploy", "x.onnx", "--robot", "go2", "--domain-id", "999"],
                                  ["train", "quadrotor-hover", "--steps", "2.5"]])
def test_bad_devices_domains_and_counts_are_parser_errors(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "error: argument" in err and "Traceback" not in err
