"""ament_python build of the simreal_ros package (colcon build --packages-select simreal_ros)."""

from glob import glob

from setuptools import setup

PACKAGE = "simreal_ros"

setup(
    name=PACKAGE,
    version="0.1.0",
    packages=[PACKAGE],
    data_files=[
        ("share/ament_index/resource_index/packages", [f"resource/{PACKAGE}"]),
        (f"share/{PACKAGE}", ["package.xml", "README.md"]),
        (f"share/{PACKAGE}/launch", glob("launch/*.launch.py")),
        (f"share/{PACKAGE}/config", glob("config/*.yaml")),
    ],
    install_requires=["setuptools"],
    zip_safe=True,
    maintainer="simreal",
    maintainer_email="simreal@example.invalid",
    description="The simreal deploy node (ONNX policy + safety layer) over rclpy",
    license="MIT",
    entry_points={"console_scripts": [f"deploy_node = {PACKAGE}.node:main"]},
)
