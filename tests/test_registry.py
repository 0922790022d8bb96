import pytest
from pydantic import ValidationError

from simreal.api import make_env
from simreal.registry import UnknownNameError, get_task


def test_a_task_can_be_named_by_module_path():
    cls = get_task("sim.tasks.quadrotor_hover:QuadrotorHover")
    assert cls is get_task("quadrotor-hover")


def test_a_bad_module_path_says_why():
    with pytest.raises(UnknownNameError, match="cannot load task 'nowhere.mod:Task'"):
        get_task("nowhere.mod:Task")


def test_task_config_rejects_unknown_keys_naming_them():
    with pytest.raises(ValidationError, match="episode_seconds"):
        make_env("quadrotor-hover", 2, 0, config={"episode_seconds": 3})
    with pytest.raises(ValidationError, match="reward.alive"):
        make_env("quadrotor-hover", 2, 0, config={"reward": {"alive": "lots"}})
