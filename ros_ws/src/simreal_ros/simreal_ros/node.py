"""`ros2 run simreal_ros deploy_node`: a thin entry point over simreal's deploy runtime.

Everything the node does (contract check, observation, inference, safety, codecs, the loop)
is simreal's `deploy` package, installed into the Python that ROS uses (`pip install
"simreal[dds]"` from the repository); this package adds the rclpy transport's entry point,
launch files and parameters.
"""

import sys


def main(args=None) -> int:
    try:
        from simreal.deploy.ros2_node import ros_main
    except ImportError as exc:
        print(f"simreal_ros: the simreal deploy runtime is not importable ({exc}); install it "
              "with `pip install \"<simreal repository>[dds]\"` into ROS 2's Python",
              file=sys.stderr)
        return 1
    return ros_main(sys.argv[1:] if args is None else args)


if __name__ == "__main__":
    sys.exit(main())
