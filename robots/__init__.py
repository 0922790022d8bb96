"""Robot descriptions: one MJCF and one robot.yaml per robot, shared by every stage."""

from simreal.robots.description import Robot, RobotError, RobotSpec, load_robot_dir

__all__ = ["Robot", "RobotError", "RobotSpec", "load_robot_dir"]
