"""simreal_ros: the simreal deploy node over rclpy (the logic lives in simreal's deploy/)."""
