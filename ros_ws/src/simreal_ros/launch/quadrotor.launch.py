"""ros2 launch simreal_ros quadrotor.launch.py policy:=/path/policy.onnx [interface:=generic|native]

The deploy node for a quadrotor: generically on /odom -> /rotor_commands (rotor speed
fractions), or natively on PX4's /fmu/out/vehicle_odometry -> /fmu/in/actuator_motors (+
/fmu/in/offboard_control_mode). Parameters: config/quadrotor.yaml.
"""

from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument
from launch.substitutions import LaunchConfiguration, PathJoinSubstitution
from launch_ros.actions import Node
from launch_ros.substitutions import FindPackageShare


def generate_launch_description() -> LaunchDescription:
    config = PathJoinSubstitution([FindPackageShare("simreal_ros"), "config",
                                   "quadrotor.yaml"])
    return LaunchDescription([
        DeclareLaunchArgument("policy", description="path of the exported policy.onnx"),
        DeclareLaunchArgument("interface", default_value="generic",
                              description="generic (Odometry / Float64MultiArray) or native "
                                          "(PX4 px4_msgs)"),
        DeclareLaunchArgument("robot", default_value="crazyflie",
                              description="registered robot name or robot folder"),
        Node(package="simreal_ros", executable="deploy_node", name="simreal_deploy",
             output="screen", emulate_tty=True,
             parameters=[config, {"policy": LaunchConfiguration("policy"),
                                  "interface": LaunchConfiguration("interface"),
                                  "robot": LaunchConfiguration("robot")}]),
    ])
