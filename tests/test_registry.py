import pytest

from simreal.api import make_env
from simreal.core.config import ConfigError
from simreal.robots.registry import UnknownNameError
from simreal.sim.registry import BUILTIN_TASKS, get_task
from simreal.train.algos import ALGOS, get_algo


def test_a_task_can_be_named_by_module_path():
    cls = get_task("simreal.sim.tasks.quadrotor_hover:QuadrotorHover")
    assert cls is get_task("quadrotor-hover")


def test_a_bad_module_path_says_why():
    with pytest.raises(UnknownNameError, match="cannot load task 'nowhere.mod:Task'"):
        get_task("nowhere.mod:Task")


def test_task_config_rejects_unknown_keys_naming_them():
    with pytest.raises(ConfigError, match="quadrotor-hover task configuration: episode_seconds"):
        make_env("quadrotor-hover", 2, 0, config={"episode_seconds": 3})
    with pytest.raises(ConfigError, match="reward.alive"):
        make_env("quadrotor-hover", 2, 0, config={"reward": {"alive": "lots"}})


@pytest.mark.parametrize("task", sorted(BUILTIN_TASKS))
def test_train_defaults_validate_against_their_configs(task):
    """`simreal train TASK --algo A` must not fail on the task's own settings for A."""
    cls = get_task(task)
    defaults = cls.train_defaults
    assert defaults["algo"] in ALGOS
    for algo, settings in defaults.items():
        if algo == "algo":
            continue
        assert algo in ALGOS, f"{task}: train_defaults names unknown algo {algo!r}"
        assert set(settings) <= {"envs", "steps", "config", "task_config"}, (task, algo)
        get_algo(algo).config().model_validate(settings.get("config", {}))
        cls.config_class().model_validate(settings.get("task_config", {}))
