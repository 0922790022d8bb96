"""The Python API: make an environment, train, export, evaluate. The CLI calls only these."""

from __future__ import annotations

import shutil
import sys
import time
from pathlib import Path
from typing import Any, Literal

import yaml

from simreal.core.config import read_yaml_mapping, validate_model
from simreal.core.jsonout import json_text
from simreal.deploy.contract import ContractError, PolicyContract
from simreal.robots.registry import get_robot
from simreal.sim.registry import get_task
from simreal.train.checkpoint import CheckpointError, load, newest_intact, write_text_atomic
from simreal.train.run_dir import (
    WRITE_ERRNOS,
    Interrupted,
    RunDirError,
    RunLock,
    StopOnSignal,
    check_writable,
    os_error,
)


def make_env(task: str, num_envs: int = 1024, seed: int = 0,
             config: dict[str, Any] | None = None, robot: str | None = None,
             backend: str = "mujoco", device: str = "cpu"):
    """A batched environment of a registered task (or `module:Class`), simulated by `backend`
    (sim/backends.py: mujoco, mjwarp) on `device` (cpu, cuda, cuda:N)."""
    import inspect

    from simreal.sim.backend import BackendError

    cls = get_task(task)
    robot_obj = get_robot(robot or cls.robot_name)
    cfg = validate_model(config or {}, cls.config_class, f"{task} task configuration")
    if backend == "mujoco" and str(device) == "cpu":
        return cls(robot_obj, cfg, num_envs, seed)
    if "backend" not in inspect.signature(cls.__init__).parameters:
        raise BackendError(f"task {task!r} runs on the mujoco backend on the CPU only")
    return cls(robot_obj, cfg, num_envs, seed, backend=backend, device=device)


def _default_run_dir(task: str, algo: str, seed: int) -> Path:
    return Path("runs") / f"{task}_{algo}_s{seed}_{time.strftime('%Y%m%d-%H%M%S')}"


def train(task: str | None = None, algo: str | None = None, envs: int | None = None,
          steps: int | None = None, seed: int = 0, out: str | Path | None = None,
          resume: str | Path | None = None, eval_episodes: int = 1000, progress: bool = True,
          callback=None, task_config: dict[str, Any] | None = None,
          algo_config: dict[str, Any] | None = None, backend: str | None = None,
          device: str | None = None,
          calibration: str | Path | None = None) -> dict[str, Any]:
    """Train, export policy.onnx, evaluate it through the deploy runtime; returns summary.json.

    `backend`/`device` choose the training simulator (default mujoco on the CPU; mjwarp on
    cuda for a GPU; a resumed run keeps its own unless given). Under torchrun (WORLD_SIZE > 1)
    every process trains its own `envs` environments and rank 0 alone writes the run directory,
    exports and evaluates (train/distributed.py); the other ranks return {"rank": r, ...}.
    Export and evaluation always run on the CPU, through the deploy runtime.

    With no `algo`, the task's default algorithm (`train_defaults["algo"]`); envs, steps and the
    algorithm's config default to the task's measured settings for that algorithm
    (`train_defaults[algo]`: {"envs", "steps", "config", "task_config"}). `task_config` and
    `algo_config` override fields of those (nested mappings merge); both are validated before
    anything runs.

    `calibration` (a calibration YAML, `simreal calibrate`): the run trains on the calibrated
    robot, written to RUN_DIR/robot (its description hash is the policy contract's, so deploy
    the policy with `--robot RUN_DIR/robot`), with the task's randomization ranges set from the
    fit (calibration/apply.py); `task_config` still overrides those.

    `resume` continues RUN_DIR with its own task and settings (`task` may be omitted; given, it
    must match) from its newest intact checkpoint; `steps` is then the run's new total, which
    must exceed what the run has already trained. The run directory is locked while training
    (a second writer is refused); SIGINT/SIGTERM stop after the current iteration with a
    checkpoint written (`Interrupted`); a run directory that cannot be written raises
    `RunDirError` naming the path.
    """
    from simreal.train import distributed

    joined = distributed.launched() and not distributed.is_distributed()
    try:
        return _train(task, algo, envs, steps, seed, out, resume, eval_episodes, progress,
                      callback, task_config, algo_config, backend, device, calibration)
    finally:
        if joined:  # this call joined torchrun's process group: it leaves it
            distributed.shutdown()


def _train(task, algo, envs, steps, seed, out, resume, eval_episodes, progress, callback,
           task_config, algo_config, backend, device, calibration=None) -> dict[str, Any]:
    from simreal.train import distributed

    ckpt = None
    if resume is not None:
        run_dir, ckpt, config = _resumed(resume, task, algo, steps, task_config, algo_config,
                                         calibration)
        task = ckpt["task"]
    else:
        if task is None:
            raise ValueError("name the task to train (or --resume a run)")
        run_dir, config = _new_run(task, algo, envs, steps, seed, out, task_config,
                                   algo_config, calibration)
    config["backend"] = backend or config.get("backend", "mujoco")
    config["device"] = device or config.get("device", "cpu")
    # under torchrun: join the process group; cuda becomes this rank's GPU
    rank_device = distributed.init(config["device"])
    main = distributed.is_main()  # rank 0 (or the only process) writes the run
    if not main:
        return _train_in(task, config, ckpt, None, rank_device, eval_episodes, progress,
                         callback)
    created = not run_dir.exists()
    check_writable(run_dir)
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        lock = RunLock(run_dir).acquire()
    except RunDirError:
        raise
    except OSError as exc:
        raise os_error(exc, run_dir) from None
    try:
        # checked under the lock: two processes started together cannot both pass
        if ckpt is None and (run_dir / "checkpoints").exists():
            raise FileExistsError(f"{run_dir}: already holds a run; resume it with --resume "
                                  f"{run_dir} or choose another --out")
        _say(f"run directory {run_dir}")
        return _train_in(task, config, ckpt, run_dir, rank_device, eval_episodes, progress,
                         callback)
    except BaseException:
        if created and not (run_dir / "checkpoints").exists():
            # nothing of a run was written: leave no half-made folder behind
            shutil.rmtree(run_dir, ignore_errors=True)
        raise
    finally:
        lock.release()


def _resumed(resume, task, algo, steps, task_config, algo_config, calibration):
    """(run_dir, checkpoint, config) of a run to continue; refused before anything is written."""
    run_dir = Path(resume)
    _, ckpt = newest_intact(run_dir)
    if task is not None and ckpt["task"] != task:
        raise CheckpointError(f"{resume}: checkpoint is for task {ckpt['task']!r}, "
                              f"not {task!r}")
    if algo is not None and algo != ckpt["algo"]:
        raise CheckpointError(f"{resume}: checkpoint was trained with {ckpt['algo']!r}, "
                              f"not {algo!r}")
    if task_config or algo_config or calibration is not None:
        raise ValueError(f"{resume}: a resumed run keeps its own task and algorithm settings "
                         "(config.yaml); start a new run to change them")
    config = ckpt["config"]
    total = steps if steps is not None else config["steps"]
    if ckpt["env_steps"] >= total:
        raise ValueError(f"{resume}: the run has trained {ckpt['env_steps']} env steps, "
                         f"{'its budget' if steps is None else '--steps'} is {total}: "
                         "--steps is the run's total; give a larger one to train on")
    config["steps"] = total
    return run_dir, ckpt, config


def _new_run(task, algo, envs, steps, seed, out, task_config, algo_config, calibration):
    """(run_dir, config) of a new run, every setting validated."""
    from simreal.train.algos import get_algo

    cls = get_task(task)
    defaults = getattr(cls, "train_defaults", {})
    algo = algo or defaults.get("algo", "ppo")
    spec = get_algo(algo)
    run_dir = Path(out) if out is not None else _default_run_dir(task, algo, seed)
    algo_defaults = defaults.get(algo, {})
    algo_cfg = validate_model(_merged(algo_defaults.get("config", {}), algo_config or {}),
                              spec.config(), f"{algo} settings")
    calib_cfg: dict[str, Any] = {}
    if calibration is not None:
        from simreal.calibration.apply import task_overrides
        from simreal.calibration.schema import load_calibration

        calib = load_calibration(calibration)
        if calib.robot != get_robot(cls.robot_name).name:
            raise ValueError(f"{calibration}: calibration is for robot {calib.robot!r}; "
                             f"task {task!r} runs {cls.robot_name!r}")
        calib_cfg = task_overrides(calib, cls)
    # the algorithm's training-only task settings (a start curriculum, say) under the
    # caller's; evaluation builds the task with its plain defaults
    task_config = _merged(algo_defaults.get("task_config", {}), task_config or {})
    task_cfg = validate_model(_merged(_merged(cls.config_class().model_dump(mode="json"),
                                              calib_cfg), task_config),
                              cls.config_class, f"{task} task configuration")
    config = {
        "task": task, "algo": algo, "seed": seed,
        "envs": envs or algo_defaults.get("envs", 1024),
        "steps": steps or algo_defaults.get("steps", 5_000_000),
        "robot": cls.robot_name, "task_config": task_cfg.model_dump(mode="json"),
        "algo_config": algo_cfg.model_dump(mode="json"),
    }
    if calibration is not None:
        config["calibration"] = str(Path(calibration).resolve())
    return run_dir, config


def _train_in(task, config, ckpt, run_dir, rank_device, eval_episodes, progress, callback):
    """Train (run_dir None: a rank that writes nothing), then export and evaluate on rank 0."""
    from simreal.train import distributed

    if distributed.is_distributed():
        config["world_size"] = distributed.world_size()
    if ckpt is None and config.get("calibration"):
        config["robot"] = _calibrated_robot(config, run_dir)
    env_seed = distributed.rank_seed(config["seed"] + (ckpt["iteration"] if ckpt else 0))
    # from here a signal stops training after an iteration, with a checkpoint
    with StopOnSignal() as stop:
        env = make_env(task, config["envs"], env_seed, config["task_config"], config["robot"],
                       config["backend"], str(rank_device))
        return _learn(task, config, ckpt, env, run_dir, stop, eval_episodes, progress,
                      callback)


def _learn(task, config, ckpt, env, run_dir, stop, eval_episodes, progress, callback):
    from simreal.train import distributed

    try:
        if run_dir is not None:
            write_text_atomic(yaml.safe_dump(config, sort_keys=False), run_dir / "config.yaml")
        runner = _runner(config, env, run_dir)
        if ckpt is not None:
            runner.load_state_dict(ckpt)
        _say_rounding(config, runner.env_steps)

        def stop_or_callback(r: Any, stats: dict[str, float]) -> bool:
            return stop.requested or bool(callback is not None and callback(r, stats))

        runner.learn(config["steps"], callback=stop_or_callback, progress=progress)
        if stop.requested:  # the runner wrote its checkpoint on the way out
            raise Interrupted(stop.signum, run_dir / "checkpoints" / "latest.pt"
                              if run_dir is not None else None)
        if run_dir is None:  # rank 0 exports and evaluates
            return {"rank": distributed.rank(), "env_steps": runner.env_steps,
                    "iterations": runner.iteration}
        with distributed.suspended():  # rank 0 alone from here: no collectives
            policy_path = export(run_dir / "checkpoints" / "latest.pt",
                                 run_dir / "policy.onnx")
            t0 = time.perf_counter()
            result = evaluate(policy_path, task, episodes=eval_episodes,
                              seed=config["seed"] + 10_000, robot=config["robot"],
                              task_config=config["task_config"])
        summary = {
            "task": task, "algo": config["algo"], "seed": config["seed"],
            "env_steps": runner.env_steps, "wall_s": round(runner.wall_s, 2),
            "iterations": runner.iteration,
            "success_rate": result["success_rate"], "mean_return": result["mean_return"],
            "policy": str(policy_path), "eval_episodes": result["episodes"],
            "eval_wall_s": round(time.perf_counter() - t0, 2),
            "metrics": {k: v for k, v in result.items()
                        if k not in ("success_rate", "mean_return", "episodes", "task",
                                     "policy")},
        }
        write_text_atomic(json_text(summary, indent=2) + "\n", run_dir / "summary.json")
        return summary
    except OSError as exc:
        if isinstance(exc, RunDirError) or exc.errno not in WRITE_ERRNOS:
            raise
        raise os_error(exc, run_dir) from None


def _say_rounding(config: dict[str, Any], done: int) -> None:
    """Training runs whole iterations: say so when the budget is not a multiple of one."""
    from simreal.train import distributed

    algo_cfg = config["algo_config"]
    per_env = algo_cfg.get("steps_per_env") or algo_cfg.get("steps_per_iteration")
    if not per_env:
        return
    per = per_env * config["envs"] * distributed.world_size()
    todo = config["steps"] - done
    if todo > 0 and todo % per:
        total = done + -(-todo // per) * per
        _say(f"--steps {config['steps']} rounded up to {total} env steps: whole iterations of "
             f"{per} ({config['envs']} envs x {per_env} steps)")


def _say(message: str) -> None:
    """A line on stderr (stdout carries the command's JSON result)."""
    print(f"simreal: {message}", file=sys.stderr, flush=True)


def _calibrated_robot(config: dict[str, Any], run_dir: Path | None) -> str:
    """The calibrated robot folder of a run (RUN_DIR/robot; a temporary copy on other ranks):
    robot.yaml and MJCF with the fitted values, whose hash the policy contract records."""
    import tempfile

    from simreal.calibration.apply import calibrated_robot_dir
    from simreal.calibration.schema import load_calibration

    where = run_dir / "robot" if run_dir is not None else Path(
        tempfile.mkdtemp(prefix="simreal-robot-")) / "robot"
    calibrated_robot_dir(get_robot(config["robot"]), load_calibration(config["calibration"]),
                         where, where=config["calibration"])
    return str(where.resolve())


def _merged(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    """`base` with `override` on top; nested mappings merge key by key."""
    out = dict(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merged(out[key], value)
        else:
            out[key] = value
    return out


def _runner(config: dict[str, Any], env, run_dir: Path | None):
    """The algorithm's runner for a resolved run config."""
    from simreal.train.algos import get_algo

    spec = get_algo(config["algo"])
    algo_cfg = spec.config().model_validate(config["algo_config"])
    return spec.runner()(env, algo_cfg, run_dir, config["seed"], config)


def export(checkpoint: str | Path, out: str | Path,
           feedback: dict[str, Any] | None | Literal["keep"] = "keep") -> Path:
    """policy.onnx from a checkpoint: the deterministic actor with its normalizer and contract.
    `feedback`: the contract's command feedback (a legged task's `command_feedback` settings,
    deploy/feedback.py), None for none, "keep" for the task's. From a policy already exported
    (.onnx) only the feedback changes: the same graph, another contract."""
    from simreal.train.export import export_onnx, rewrite_contract

    if str(checkpoint).endswith(".onnx"):
        if feedback == "keep":
            raise ValueError(f"{checkpoint}: an exported policy is re-exported only to change its "
                             "command feedback: give --command-feedback (or a checkpoint)")
        from simreal.deploy.policy import OnnxPolicy

        contract = OnnxPolicy(checkpoint).contract
        return rewrite_contract(checkpoint, _with_feedback(contract, feedback, str(checkpoint)),
                                out)
    ckpt = load(checkpoint)
    cfg = ckpt["config"]
    env = make_env(ckpt["task"], 1, 0, cfg.get("task_config"), cfg.get("robot"))
    runner = _runner(cfg, env, None)
    try:
        runner.load_state_dict(ckpt)
    except (RuntimeError, KeyError, ValueError) as exc:
        raise CheckpointError(f"{checkpoint}: weights do not fit task {ckpt['task']!r}: "
                              f"{exc}") from None
    contract = env.contract()
    if feedback != "keep":
        contract = _with_feedback(contract, feedback, str(checkpoint))
    return export_onnx(runner.exportable_actor(), contract, out)


def _with_feedback(contract: Any, feedback: dict[str, Any] | None, source: str) -> Any:
    """`contract` with its command feedback replaced (a legged task's `command_feedback`
    settings); forward and lateral axes measure with a leg model of the robot's MJCF."""
    from simreal.sim.tasks.legged import FeedbackConfig, feedback_spec

    if feedback is None:
        return contract.model_copy(update={"command_feedback": None})
    settings = validate_model(feedback, FeedbackConfig, f"{source}: command_feedback")
    fb = feedback_spec(get_robot(contract.robot), settings)
    return PolicyContract.model_validate({**contract.model_dump(),
                                          "command_feedback": fb.model_dump()})


def evaluate(policy: str | Path, task: str | None = None, episodes: int = 100,
             seed: int = 0, robot: str | None = None,
             task_config: dict[str, Any] | None = None) -> dict[str, Any]:
    """Run an ONNX policy through the deploy runtime against the simulator (on `robot`, a
    registered name or a robot folder such as a calibrated run's RUN_DIR/robot; default the
    task's), built with `task_config` (the run's, from its config.yaml; default the task's
    defaults) less its training-only settings. Refuses a policy whose contract (observations,
    action mapping, rate, commands) differs from the evaluation environment's."""
    from simreal.deploy.policy import OnnxPolicy
    from simreal.evaluate import run_episodes

    onnx_policy = OnnxPolicy(policy)
    contract = onnx_policy.contract
    if task is not None and task != contract.task:
        raise ContractError(f"{policy}: policy was trained for task {contract.task!r}, "
                            f"not {task!r}")
    cfg = evaluation_config(contract.task, contract_task_config(contract, task_config))
    env = make_env(contract.task, min(episodes, 2048), seed, cfg, robot=robot)
    contract.check(env.robot)
    check_task_contract(contract, env.contract(), str(policy), from_defaults=not task_config)
    result = run_episodes(env, onnx_policy, episodes)
    return {"task": contract.task, "policy": str(policy), **result}


def evaluate_tracking(policy: str | Path, task: str | None = None,
                      commands: list[Any] | None = None, episodes: int | None = None,
                      seed: int = 0, robot: str | None = None,
                      task_config: dict[str, Any] | None = None,
                      episode_s: float | None = None,
                      settle_s: float | None = None) -> dict[str, Any]:
    """The per-command tracking table of a velocity-tracking policy (go2-flat): each command
    of `commands` (default evaluate.TRACKING_COMMANDS: vx 0.3, 0.5, 1.0, -0.5; vy +-0.3;
    wz +-0.5) held for `episode_s` (20 s) from a standing start in `episodes` (10) seeded
    episodes, run together (one env each) through the deploy runtime, with nominal dynamics
    (no randomization, no pushes) and the task's sensor noise. Errors are measured after
    `settle_s` (2 s). Returns {tracking: [{command, lin_vel_error, ang_vel_error, falls,
    episodes, success_rate, ok}], tracking_ok, success_rate, targets, ...}."""
    from simreal.deploy.policy import OnnxPolicy
    ev = _evaluate_module()

    onnx_policy = OnnxPolicy(policy)
    contract = onnx_policy.contract
    if task is not None and task != contract.task:
        raise ContractError(f"{policy}: policy was trained for task {contract.task!r}, "
                            f"not {task!r}")
    commands = ev.check_commands(list(commands) if commands is not None
                                 else list(ev.TRACKING_COMMANDS))
    episodes = episodes or ev.TRACKING_EPISODES
    episode_s = episode_s or ev.TRACKING_EPISODE_S
    settle_s = ev.TRACKING_SETTLE_S if settle_s is None else settle_s
    commands_cfg = getattr(get_task(contract.task).config_class.model_fields.get("commands"),
                           "annotation", None)
    if "fixed" not in getattr(commands_cfg, "model_fields", {}):
        raise ValueError(f"task {contract.task!r} cannot hold a fixed velocity command "
                         "(--tracking needs a velocity-tracking task such as go2-flat)")
    base = _merged(evaluation_config(contract.task,
                                     contract_task_config(contract, task_config)), {
        "episode_s": episode_s, "randomization": {"enabled": False},
        "init": {"joint_noise": 0.0, "base_speed": 0.0}})
    rows = []
    for i, command in enumerate(commands):
        cfg = _merged(base, {"commands": {"fixed": list(command)}})
        env = make_env(contract.task, episodes, seed + i, cfg, robot=robot)
        if i == 0:
            contract.check(env.robot)
            check_task_contract(contract, env.contract(), str(policy),
                                from_defaults=not task_config)
        rows.append(ev.track_command(env, onnx_policy, command, settle_s))
    return {"task": contract.task, "policy": str(policy), "episodes_per_command": episodes,
            "episode_s": episode_s, "settle_s": settle_s, "dynamics": "nominal, sensor noise",
            **ev.tracking_summary(rows)}


def _evaluate_module():
    """simreal.evaluate (the package attribute `simreal.evaluate` is this module's function)."""
    import importlib

    return importlib.import_module("simreal.evaluate")


def sim2sim(policy: str | Path, robot: str, mjcf: str | Path | None = None,
            variant: str | None = None, commands: list[Any] | None = None,
            episodes: int | None = None, seed: int = 0, imu_site: str | None = None,
            perturb: dict[str, float] | None = None, episode_s: float | None = None,
            settle_s: float | None = None) -> dict[str, Any]:
    """The tracking table (`evaluate_tracking`'s) against another MJCF of the robot (`mjcf`)
    or a rebuilt variant of its own (`variant`: "hard"), with optional model edits
    (`perturb`: friction, latency, strength, mass, damping); simreal/sim2sim.py and
    docs/SIM2SIM.md. A model that lacks a joint, the floor or a free joint raises
    Sim2SimError (a ValueError) naming it."""
    from simreal import sim2sim as s2s
    ev = _evaluate_module()

    commands = ev.check_commands(list(commands) if commands is not None
                                 else list(ev.TRACKING_COMMANDS))
    return s2s.run_sim2sim(policy, get_robot(robot), mjcf=mjcf, variant=variant,
                           commands=commands, episodes=episodes or ev.TRACKING_EPISODES,
                           seed=seed, imu_site=imu_site,
                           perturbation=s2s.Perturbation(**(perturb or {})),
                           episode_s=episode_s or ev.TRACKING_EPISODE_S,
                           settle_s=ev.TRACKING_SETTLE_S if settle_s is None else settle_s)


def contract_task_config(contract, task_config: dict[str, Any] | None) -> dict[str, Any]:
    """`task_config` over what the policy's contract pins (history lengths, an odometry term:
    the task's `settings_from_contract`): a policy trained with such options evaluates without
    its run's config.yaml; a config that says otherwise still wins (and the contract check
    then names the difference)."""
    pinned = get_task(contract.task).settings_from_contract(contract)
    return _merged(pinned, task_config or {})


def evaluation_config(task: str, task_config: dict[str, Any] | None) -> dict[str, Any]:
    """`task_config` without the settings its config class marks `train_only` (a start-state
    curriculum, staggered starts): evaluation measures the task as defined."""
    fields = get_task(task).config_class.model_fields
    return {k: v for k, v in (task_config or {}).items()
            if not ((fields[k].json_schema_extra or {}) if k in fields else {}).get("train_only")}


def check_task_contract(policy, env, source: str, from_defaults: bool = False) -> None:
    """The policy's contract against the environment's: a policy trained with another action
    scale or observation set would be evaluated on the wrong interface, silently."""
    keys = ("actuators", "observations", "action", "control_rate_hz", "commands")
    mine, theirs = policy.model_dump(include=set(keys)), env.model_dump(include=set(keys))
    problems = [f"{key}: policy {mine[key]} vs environment {theirs[key]}"
                for key in keys if mine[key] != theirs[key]]
    if problems:
        hint = (" (built from the task's defaults: pass the run's task configuration, "
                "`simreal eval --task-config RUN_DIR/config.yaml`)" if from_defaults else "")
        raise ContractError(f"{source}: the policy's contract differs from the evaluation "
                            f"environment's{hint}:\n  " + "\n  ".join(problems))


def check_task_config(task: str, settings: dict[str, Any], where: str) -> None:
    """Validate task settings (on top of the task's defaults) naming `where` they came from."""
    cls = get_task(task)
    validate_model(_merged(cls.config_class().model_dump(mode="json"), settings),
                   cls.config_class, where)


def load_task_config(path: str | Path) -> dict[str, Any]:
    """A task configuration from YAML: a run's config.yaml (its `task_config`) or a mapping of
    the task's settings."""
    data = read_yaml_mapping(path, what="task configuration", expected=(
        "a task configuration is a mapping of the task's settings "
        "(or a run's config.yaml)"))
    return data["task_config"] if isinstance(data.get("task_config"), dict) else data
