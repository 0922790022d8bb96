"""DDS round trips on loopback only (CYCLONEDDS_URI is set before any participant exists)."""

import os
import subprocess
import sys
import time

import pytest

from simreal.deploy import dds
from simreal.deploy import messages as m


@pytest.fixture(autouse=True)
def loopback(monkeypatch):
    monkeypatch.setenv("CYCLONEDDS_URI", dds.LOOPBACK_CONFIG)


def _wait_for(reader, deadline_s=5.0, count=1):
    got, end = [], time.monotonic() + deadline_s
    while len(got) < count and time.monotonic() < end:
        got += reader.take(N=64)
        time.sleep(0.005)
    return got


def test_refuses_to_start_without_a_dds_configuration(monkeypatch):
    monkeypatch.delenv("CYCLONEDDS_URI")
    with pytest.raises(dds.TransportError, match="refusing Cyclone's default multicast"):
        dds.Transport()


@pytest.mark.parametrize("msg", [
    m.JointState(m.Header(m.Time(3, 4), "base"), ["j1", "j2"], [0.1, 0.2], [0.0, 1.0], []),
    m.Imu(orientation=m.Quaternion(0, 0, 0, 1), angular_velocity=m.Vector3(0.1, 0.2, 0.3)),
    m.Twist(m.Vector3(0.5, 0, 0), m.Vector3(0, 0, 0.3)),
    m.Odometry(child_frame_id="trunk"),
    m.Bool(True),
    m.Float64MultiArray(data=[1.0, 2.0, 3.0]),
], ids=lambda x: type(x).__name__)
def test_round_trip_of_every_message_between_two_participants(msg):
    a, b = dds.Transport(domain_id=17), dds.Transport(domain_id=17)
    topic = f"/simreal_test_{type(msg).__name__.lower()}"
    reader = b.reader(topic, type(msg), qos=dds.COMMAND_QOS)
    writer = a.writer(topic, type(msg))
    got, end = [], time.monotonic() + 5.0
    while not got and time.monotonic() < end:  # bounded: discovery then one sample
        writer.write(msg)
        got = _wait_for(reader, 0.1)
    assert got and got[0] == msg


def test_two_processes_meet_on_loopback():
    code = (
        "import time; from deploy import dds, messages as m\n"
        "t = dds.Transport(domain_id=18)\n"
        "w = t.writer('/joint_states', m.JointState, qos=dds.COMMAND_QOS)\n"
        "for i in range(300):\n"
        "    w.write(m.JointState(name=['a'], position=[float(i)])); time.sleep(0.01)\n"
    )
    b = dds.Transport(domain_id=18)
    reader = b.reader("/joint_states", m.JointState, qos=dds.COMMAND_QOS)
    env = dict(os.environ, CYCLONEDDS_URI=dds.LOOPBACK_CONFIG)
    proc = subprocess.Popen([sys.executable, "-c", code], env=env)
    try:
        got = _wait_for(reader, deadline_s=20.0, count=5)
    finally:
        proc.kill()
        proc.wait(timeout=10)
    assert len(got) >= 5 and got[0].name == ["a"]
    positions = [s.position[0] for s in got]
    assert positions == sorted(positions)


def test_tune_wakeups_gives_cyclones_receive_thread_the_short_slice():
    """In a fresh process, as a node has it (a pytest-xdist worker's threads are not a node's:
    there Cyclone's receive thread was not found by name)."""
    from simreal.deploy import loop

    if sys.platform != "linux" or loop._get_attr(0) is None:
        pytest.skip("Linux sched_getattr only")
    code = (
        "from simreal.deploy import dds, loop\n"
        "from simreal.deploy import messages as m\n"
        "dds.use_loopback()\n"
        "bus = dds.Transport(domain_id=37)\n"
        "bus.subscription('/tune_probe', m.Bool)\n"
        "bus.publisher('/tune_probe', m.Bool)\n"
        "tuned = bus.tune_wakeups()\n"
        "assert 'recv' in tuned, tuned\n"
        "recv = [t for t, n in loop.process_threads().items() if n == 'recv']\n"
        "assert recv and all(loop._get_attr(t).runtime == loop.WAKEUP_SLICE_US * 1000\n"
        "                    for t in recv)\n"
        "bus.close()\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr[-2000:]
