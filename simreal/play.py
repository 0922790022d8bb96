"""`simreal play`: watch an ONNX policy drive its task in the simulator.

The policy runs exactly as in `simreal eval` (deploy's PolicyRunner on the simulator's noisy
signals, one environment). Where a display exists and no video is asked for, MuJoCo's
interactive viewer shows it in real time; otherwise each frame is rendered offscreen (MuJoCo's
Renderer on EGL, or OSMesa with MUJOCO_GL=osmesa) and written to a video, with a panel beside
the picture giving the task's commands (or target), the base's measured velocity and the
task's step metrics (the position error for quadrotor-hover).
"""

from __future__ import annotations

import importlib
import os
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

HEADLESS_GL = ("egl", "osmesa")
VIDEO_FPS = 30  # about; a whole number of control steps per frame
VIDEO_FORMATS = {".mp4": "mp4", ".mkv": "matroska", ".mov": "mov"}
GL_HINT = ("offscreen rendering needs EGL (Debian: apt-get install libegl1 libopengl0 "
           "libgl1-mesa-dri) or OSMesa (apt-get install libosmesa6, then MUJOCO_GL=osmesa)")


class PlayError(RuntimeError):
    """Rendering or video output cannot work here; the message says what to install."""


def has_display() -> bool:
    return sys.platform == "darwin" or bool(os.environ.get("DISPLAY")
                                            or os.environ.get("WAYLAND_DISPLAY"))


def use_headless_gl() -> str:
    """Point MuJoCo's Renderer at a headless OpenGL context: MUJOCO_GL if it names one (egl,
    osmesa), else EGL.

    MuJoCo picks its context class from MUJOCO_GL when it is first imported, and the CLI
    imports it before it knows the command; so where a windowed one (GLFW, which needs a
    display) was picked, the headless class replaces it in the module the Renderer reads.
    """
    backend = os.environ.get("MUJOCO_GL", "").strip().lower()
    if backend not in HEADLESS_GL:
        backend = "egl"
    os.environ["MUJOCO_GL"] = backend
    from mujoco.rendering.classic import gl_context

    try:
        context_cls = importlib.import_module(f"mujoco.{backend}").GLContext
    except (ImportError, OSError, AttributeError) as exc:
        raise PlayError(f"MUJOCO_GL={backend}: {exc}; {GL_HINT}") from None
    gl_context.GLContext = context_cls
    return backend


@dataclass
class StepView:
    """What one control step shows: the state to draw and the text beside it."""

    episode: int
    step: int
    done: bool
    lines: list[str]
    target: np.ndarray | None  # a point to mark (the hover target), world frame


class Player:
    """One environment driven by the ONNX policy through the deploy runtime, with an MjData
    mirroring it for drawing."""

    def __init__(self, policy: str | Path, task: str | None = None, seed: int = 0):
        import mujoco

        from simreal.api import contract_task_config, make_env
        from simreal.deploy.contract import ContractError
        from simreal.deploy.policy import OnnxPolicy
        from simreal.deploy.runner import PolicyRunner

        self.policy = OnnxPolicy(policy)
        contract = self.policy.contract
        if task is not None and task != contract.task:
            raise ContractError(f"{policy}: policy was trained for task {contract.task!r}, "
                                f"not {task!r}")
        self.task = contract.task
        self.env = make_env(self.task, 1, seed, contract_task_config(contract, None))
        backend = getattr(self.env, "backend", None)
        if backend is None or not hasattr(backend, "batch"):
            raise PlayError(f"task {self.task!r} has no MuJoCo backend to draw")
        self.batch = backend.batch
        self.runner = PolicyRunner(self.policy, self.env.robot, batch=1)
        self.model = self.batch.get_model(0)
        self.data = mujoco.MjData(self.model)
        self.base = _floating_base(self.model)
        self.return_ = 0.0

    @property
    def dt(self) -> float:
        return self.env.dt

    def sync(self) -> None:
        """Copy the simulation's state into `data` and compute its kinematics."""
        import mujoco

        self.batch.get_data(0, self.data)
        mujoco.mj_forward(self.model, self.data)

    def episodes(self, count: int, max_steps: int | None = None) -> Iterator[StepView]:
        """Run `count` episodes as `simreal eval` does; yield after every control step with
        `data` showing the new state (the reset state after a step that ended an episode)."""
        import torch

        horizon = self.env.max_episode_length
        if max_steps is not None:
            horizon = min(horizon, max_steps)
        for ep in range(count):
            self.env.reset()
            self.runner.reset()
            self.model = self.batch.get_model(0, self.model)  # this episode's parameters
            self.return_ = 0.0
            for t in range(horizon):
                signals = {k: v.numpy() for k, v in self.env.noisy_signals().items()
                           if k != "last_action"}
                action, _ = self.runner.act(signals)
                _, reward, done, _ = self.env.step(torch.from_numpy(action))
                self.return_ += float(reward[0])
                self.sync()
                ended = bool(done[0])
                yield StepView(ep, t + 1, ended, self._lines(ep, count, t + 1), self._target())
                if ended:
                    break

    def _target(self) -> np.ndarray | None:
        target = self.env.signals().get("target_position")
        return None if target is None else target[0].numpy().astype(np.float64)

    def _lines(self, ep: int, count: int, step: int) -> list[str]:
        lines = [self.task, f"episode {ep + 1}/{count}   t {step * self.dt:6.2f} s"]
        for key, value in sorted(self.env.signals().items()):
            if "command" in key or key.startswith("target"):
                lines.append(f"{key}: {_vec(value[0])}")
        if self.base is not None:
            rot = self.data.xmat[self.base].reshape(3, 3)
            adr = self.model.jnt_dofadr[self.model.body_jntadr[self.base]]
            v_body = rot.T @ self.data.qvel[adr:adr + 3]
            yaw_rate = (rot @ self.data.qvel[adr + 3:adr + 6])[2]
            lines.append(f"measured v (base): {_vec(v_body)} m/s")
            lines.append(f"measured yaw rate: {yaw_rate:+.2f} rad/s")
        for key, value in self.env.step_metrics().items():
            lines.append(f"{key}: {_vec(value[0])}")
        lines.append(f"return: {self.return_:.2f}")
        return lines


def _vec(value: Any) -> str:
    arr = np.atleast_1d(np.asarray(value, dtype=np.float64))
    if arr.size == 1:
        return f"{arr[0]:+.3f}"
    return "[" + " ".join(f"{v:+.2f}" for v in arr) + "]"


def _floating_base(model) -> int | None:
    """The body of the model's first free joint, if any."""
    import mujoco

    for j in range(model.njnt):
        if int(model.jnt_type[j]) == int(mujoco.mjtJoint.mjJNT_FREE):
            return int(model.jnt_bodyid[j])
    return None


# --- offscreen video -------------------------------------------------------------------------

class FrameRenderer:
    """Offscreen pictures of a Player's state with a text panel on the right."""

    def __init__(self, player: Player, width: int = 640, height: int = 480, panel: int = 320):
        import mujoco

        use_headless_gl()
        self.player = player
        try:
            self.renderer = mujoco.Renderer(player.model, height, width)
        except Exception as exc:  # PyOpenGL and MuJoCo raise several types here
            raise PlayError(f"cannot open an offscreen OpenGL context "
                            f"(MUJOCO_GL={os.environ.get('MUJOCO_GL')}): {exc}; {GL_HINT}"
                            ) from None
        self.panel = panel
        self.camera = mujoco.MjvCamera()
        self.camera.type = mujoco.mjtCamera.mjCAMERA_FREE
        self.camera.azimuth, self.camera.elevation = 135.0, -25.0
        player.sync()
        self.robot_size = _robot_size(player.model, player.data, player.base)
        # a walking robot fills a third of the picture; a small flyer's 2 m box stays in view
        self.distance = (max(6.0 * self.robot_size, 1.0), max(6.0 * self.robot_size, 3.0))
        self.has_ground = _has_ground(player.model)
        self.trail: list[np.ndarray] = []  # recent base positions, drawn as dots
        self.episode = -1
        from PIL import ImageFont

        self.font = ImageFont.load_default(size=max(12, height // 32))

    def render(self, view: StepView) -> np.ndarray:
        """(height, width + panel, 3) uint8."""
        p = self.player
        # a fixed point to look at when there is one (the hover target: the robot visibly
        # moves to it), else the robot itself (a walking robot leaves any fixed view)
        if view.target is not None:
            lookat = view.target
        elif p.base is not None:
            lookat = p.data.xpos[p.base]
        else:
            lookat = np.zeros(3)
        self.camera.lookat[:] = lookat
        self.camera.distance = d = self.distance[view.target is not None]
        if view.episode != self.episode:
            self.trail.clear()
            self.episode = view.episode
        if p.base is not None:
            self.trail = [*self.trail[-99:], p.data.xpos[p.base].copy()]
        if p.model.nlight == 0:
            # brighter than MuJoCo's default head light, which alone leaves a floor seen at a
            # low angle nearly black (a model with lights of its own is left as it is); the
            # model is the player's copy, made afresh each episode
            p.model.vis.headlight.ambient[:] = 0.35
            p.model.vis.headlight.diffuse[:] = 0.65
        self.renderer.update_scene(p.data, self.camera)
        scene = self.renderer.scene
        if not self.has_ground:
            _add_ground(scene, lookat, 4 * self.camera.distance)
        if view.target is not None:
            _add_marker(scene, view.target, 0.015 * d, (0.1, 0.9, 0.2, 0.7))
        for point in self.trail[:-1]:
            _add_marker(scene, point, 0.004 * d, (1.0, 0.6, 0.1, 1.0))
        image = self.renderer.render()
        return np.concatenate([image, self._panel(view.lines, image.shape[0])], axis=1)

    def _panel(self, lines: list[str], height: int) -> np.ndarray:
        from PIL import Image, ImageDraw

        img = Image.new("RGB", (self.panel, height), (24, 24, 28))
        draw = ImageDraw.Draw(img)
        y = 8
        for line in lines:
            draw.text((8, y), line, fill=(235, 235, 235), font=self.font)
            y += int(self.font.size * 1.4)
        return np.asarray(img)

    def close(self) -> None:
        self.renderer.close()


def _robot_size(model, data, base: int | None) -> float:
    """Radius of the robot around its base: its geoms' bounding spheres (not the world's)."""
    centre = data.xpos[base] if base is not None else np.zeros(3)
    sizes = [np.linalg.norm(data.geom_xpos[g] - centre) + model.geom_rbound[g]
             for g in range(model.ngeom) if model.geom_bodyid[g] != 0]
    return float(max(sizes, default=0.5))


def _has_ground(model) -> bool:
    import mujoco

    ground = {int(mujoco.mjtGeom.mjGEOM_PLANE), int(mujoco.mjtGeom.mjGEOM_HFIELD)}
    return any(int(model.geom_bodyid[g]) == 0 and int(model.geom_type[g]) in ground
               for g in range(model.ngeom))


def _add_marker(scene, pos: np.ndarray, radius: float, rgba: tuple) -> None:
    import mujoco

    if scene.ngeom >= scene.maxgeom:
        return
    mujoco.mjv_initGeom(scene.geoms[scene.ngeom], mujoco.mjtGeom.mjGEOM_SPHERE,
                        np.array([radius, 0, 0]), pos, np.eye(3).ravel(),
                        np.array(rgba, dtype=np.float32))
    scene.ngeom += 1


def _add_ground(scene, lookat: np.ndarray, half: float) -> None:
    """A drawn-only floor under a model without one, for a sense of height and motion."""
    import mujoco

    if scene.ngeom >= scene.maxgeom:
        return
    mujoco.mjv_initGeom(scene.geoms[scene.ngeom], mujoco.mjtGeom.mjGEOM_PLANE,
                        np.array([half, half, half / 10]),
                        np.array([lookat[0], lookat[1], 0.0]), np.eye(3).ravel(),
                        np.array([0.55, 0.6, 0.65, 1.0], dtype=np.float32))
    scene.ngeom += 1


def check_video_path(path: Path) -> str:
    """The container format for `path`, or an error naming it."""
    fmt = VIDEO_FORMATS.get(path.suffix.lower())
    if fmt is None:
        raise ValueError(f"{path}: unknown video type {path.suffix!r}; use one of "
                         f"{', '.join(VIDEO_FORMATS)}")
    if not path.parent.is_dir():
        raise FileNotFoundError(f"{path}: folder {path.parent} does not exist")
    return fmt


class VideoWriter:
    """H.264 through PyAV, written to a temporary file renamed into place when closed, so an
    interrupted run leaves no half-written video under the asked-for name."""

    def __init__(self, path: str | Path, fps: float, width: int, height: int):
        import av

        self.path = Path(path)
        fmt = check_video_path(self.path)
        self.tmp = self.path.with_name(f".{self.path.name}.part")
        self.container = av.open(str(self.tmp), "w", format=fmt)
        from fractions import Fraction

        self.stream = self.container.add_stream("libx264", rate=Fraction(fps).limit_denominator(
            1000))
        self.stream.width, self.stream.height = width, height
        self.stream.pix_fmt = "yuv420p"
        self.frames = 0

    def write(self, frame: np.ndarray) -> None:
        import av

        packet_frame = av.VideoFrame.from_ndarray(np.ascontiguousarray(frame), format="rgb24")
        for packet in self.stream.encode(packet_frame):
            self.container.mux(packet)
        self.frames += 1

    def close(self, keep: bool = True) -> None:
        for packet in self.stream.encode():
            self.container.mux(packet)
        self.container.close()
        if keep:
            os.replace(self.tmp, self.path)
        else:
            self.tmp.unlink(missing_ok=True)


def _even(n: int) -> int:
    return n + (n % 2)  # H.264 in yuv420p wants even sizes


def record(player: Player, path: str | Path, episodes: int = 1, width: int = 640,
           height: int = 480, max_steps: int | None = None, progress: bool = True
           ) -> dict[str, Any]:
    """Render control steps into a video, about 30 frames per simulated second (software
    OpenGL draws a legged robot with shadows in ~0.1 s at 640x480 on 2 cores, measured)."""
    from tqdm import tqdm

    width, height = _even(width), _even(height)
    every = max(1, round(1.0 / (player.dt * VIDEO_FPS)))
    check_video_path(Path(path))
    frames = FrameRenderer(player, width, height)
    try:
        writer = VideoWriter(path, 1.0 / (player.dt * every), width + frames.panel, height)
    except BaseException:
        frames.close()
        raise
    total = episodes * (max_steps or player.env.max_episode_length)
    returns: list[float] = []
    ok = False
    try:
        with tqdm(total=total, unit="step", disable=not progress,
                  desc=f"play {player.task}") as bar:
            for view in player.episodes(episodes, max_steps):
                # a step that ended an episode already shows the next reset state: not drawn
                if not view.done and view.step % every == 0:
                    writer.write(frames.render(view))
                bar.update(1)
                if view.done or view.step == (max_steps or player.env.max_episode_length):
                    returns.append(player.return_)
        ok = writer.frames > 0
        if not ok:
            raise PlayError(f"{path}: no frame to write (episodes ended at once)")
    finally:
        writer.close(keep=ok)
        frames.close()
    return {"task": player.task, "video": str(path), "frames": writer.frames,
            "fps": round(1.0 / (player.dt * every), 3), "episodes": episodes,
            "mean_return": float(np.mean(returns)) if returns else 0.0}


# --- interactive viewer ----------------------------------------------------------------------

def view(player: Player, episodes: int = 1) -> dict[str, Any]:
    """MuJoCo's passive viewer in real time, the same text as the video's panel in its corner.

    Needs a display; not exercised by the tests (there is none on CI), while the stepping and
    the text it shows are the tested `Player.episodes`.
    """
    import mujoco
    import mujoco.viewer

    returns: list[float] = []
    with mujoco.viewer.launch_passive(player.model, player.data) as viewer:
        start, steps = time.perf_counter(), 0
        for step_view in player.episodes(episodes):
            if not viewer.is_running():
                break
            viewer.set_texts((None, mujoco.mjtGridPos.mjGRID_TOPLEFT,
                              "\n".join(step_view.lines), None))
            viewer.sync()
            steps += 1
            if step_view.done or step_view.step == player.env.max_episode_length:
                returns.append(player.return_)
            lag = start + steps * player.dt - time.perf_counter()
            if lag > 0:
                time.sleep(lag)  # real time
    return {"task": player.task, "viewer": True, "episodes": len(returns),
            "mean_return": float(np.mean(returns)) if returns else 0.0}


def play(policy: str | Path, task: str | None = None, video: str | Path | None = None,
         episodes: int = 1, seed: int = 0, width: int = 640, height: int = 480,
         max_steps: int | None = None, progress: bool = True) -> dict[str, Any]:
    """Watch `policy`: the interactive viewer when there is a display and no `video`; else a
    video (default `play_<task>.mp4` in the current folder)."""
    if video is not None:
        check_video_path(Path(video))  # before any work
    player = Player(policy, task, seed)
    if video is None and has_display():
        return view(player, episodes)
    out = Path(video) if video is not None else Path(f"play_{player.task}.mp4")
    return record(player, out, episodes, width, height, max_steps, progress)
