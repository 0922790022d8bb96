"""`simreal play`: headless rendering of a policy's episodes to a video."""

import json

import av
import numpy as np
import pytest

from simreal.cli import main
from simreal.deploy.contract import ContractError
from simreal.play import FrameRenderer, Player, play
from simreal.sim.registry import task_names

WIDTH, HEIGHT = 320, 240
PANEL = 320


@pytest.fixture(autouse=True)
def _headless(monkeypatch):
    """As on CI: no display, whatever the developer's session has."""
    monkeypatch.delenv("DISPLAY", raising=False)
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)


@pytest.fixture(scope="module")
def go2_policy(tmp_path_factory):
    """An (untrained: one PPO iteration) go2-flat policy, where the task is registered."""
    if "go2-flat" not in task_names():
        pytest.skip("go2-flat is not registered")
    from simreal.api import train

    out = tmp_path_factory.mktemp("go2") / "run"
    summary = train("go2-flat", algo="ppo", envs=8, steps=8, seed=0, out=out, eval_episodes=1,
                    progress=False)
    return summary["policy"]


@pytest.fixture(params=["quadrotor-hover", "go2-flat"])
def policy(request, trained_run):
    if request.param == "quadrotor-hover":
        return trained_run / "policy.onnx"
    return request.getfixturevalue("go2_policy")


def _decode(path) -> np.ndarray:
    with av.open(str(path)) as container:
        return np.stack([f.to_ndarray(format="rgb24") for f in container.decode(video=0)])


def test_video_frames_are_not_blank(policy, tmp_path):
    out = tmp_path / "play.mp4"
    result = play(policy, video=out, episodes=2, seed=1, width=WIDTH, height=HEIGHT,
                  max_steps=40, progress=False)
    frames = _decode(out)
    assert result["frames"] == len(frames) >= 8
    assert frames.shape[1:] == (HEIGHT, WIDTH + PANEL, 3)  # picture and text panel
    picture, panel = frames[:, :, :WIDTH].astype(float), frames[:, :, WIDTH:].astype(float)
    assert picture.std(axis=(1, 2, 3)).min() > 10  # ground, robot, sky: not one colour
    assert (panel > 200).mean(axis=(1, 2, 3)).min() > 0.005  # light text on a dark panel
    assert not list(tmp_path.glob(".*.part"))  # the temporary file was renamed


def test_frame_rate_is_a_whole_number_of_control_steps(trained_run, tmp_path):
    result = play(trained_run / "policy.onnx", video=tmp_path / "h.mp4", width=WIDTH,
                  height=HEIGHT, max_steps=9, progress=False)
    assert result["fps"] == pytest.approx(100 / 3, abs=1e-3)  # 100 Hz control, every third
    assert result["frames"] == 3


def test_the_robot_moves_between_frames(policy):
    player = Player(policy, seed=2)
    frames = FrameRenderer(player, WIDTH, HEIGHT)
    shots, states = [], []
    try:
        for view in player.episodes(1, max_steps=30):
            if view.step in (1, 30):
                shots.append(frames.render(view)[:, :WIDTH].astype(int))
                states.append(player.data.qpos.copy())
    finally:
        frames.close()
    assert len(shots) == 2, "the episode ended before 30 steps"
    assert np.linalg.norm(states[1] - states[0]) > 0.05  # the simulation the picture mirrors
    changed = (np.abs(shots[1] - shots[0]).max(axis=-1) > 40).sum()
    assert changed > 10  # pixels where the robot was and now is


def test_play_refuses_another_task_and_bad_video_names(trained_run, tmp_path):
    policy = trained_run / "policy.onnx"
    with pytest.raises(ContractError, match="trained for task 'quadrotor-hover'"):
        play(policy, "go2-flat", video=tmp_path / "x.mp4", progress=False)
    with pytest.raises(ValueError, match="unknown video type '.gif'"):
        play(policy, video=tmp_path / "x.gif", max_steps=2, progress=False)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        play(policy, video=tmp_path / "no" / "x.mp4", max_steps=2, progress=False)
    assert list(tmp_path.iterdir()) == []


def test_cli_play_writes_the_video(trained_run, tmp_path, capsys):
    out = tmp_path / "cli.mp4"
    code = main(["play", str(trained_run / "policy.onnx"), "--task", "quadrotor-hover",
                 "--video", str(out), "--episodes", "1", "--seed", "3"])
    assert code == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["video"] == str(out) and result["episodes"] == 1
    assert len(_decode(out)) == result["frames"] > 0
    assert main(["play", str(trained_run / "policy.onnx"), "--video", str(tmp_path / "a.gif")]
                ) == 2
    assert "unknown video type" in capsys.readouterr().err
