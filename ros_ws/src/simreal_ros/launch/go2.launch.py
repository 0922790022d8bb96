"""ros2 launch simreal_ros go2.launch.py policy:=/path/policy.onnx [interface:=native|generic]

The deploy node for a Unitree Go2: natively on rt/lowstate -> rt/lowcmd (unitree_go messages,
CRC), or generically on /joint_states + /imu/data -> a ros2_control forward position
controller. Parameters: config/go2.yaml.
"""

from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument
from launch.substitutions import LaunchConfiguration, PathJoinSubstitution
from launch_ros.actions import Node
from launch_ros.substitutions import FindPackageShare


def generate_launch_description() -> LaunchDescription:
    config = PathJoinSubstitution([FindPackageShare("simreal_ros"), "config", "go2.yaml"])
    return LaunchDescription([
        DeclareLaunchArgument("policy", description="path of the exported policy.onnx"),
        DeclareLaunchArgument("interface", default_value="native",
                              description="native (unitree_go LowState/LowCmd) or generic"),
        DeclareLaunchArgument("robot", default_value="go2",
                              description="registered robot name or robot folder"),
        Node(package="simreal_ros", executable="deploy_node", name="simreal_deploy",
             output="screen", emulate_tty=True,
             parameters=[config, {"policy": LaunchConfiguration("policy"),
                                  "interface": LaunchConfiguration("interface"),
                                  "robot": LaunchConfiguration("robot")}]),
    ])
