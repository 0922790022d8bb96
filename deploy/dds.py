"""Cyclone DDS transport on the ROS 2 wire, confined to loopback unless told otherwise.

Topics are ROS 2 names (`/joint_states`), mangled to DDS (`rt/joint_states`); types are those
of deploy/messages.py. QoS follows ROS 2's profiles: sensor data is best effort, keep last 5;
commands and the e-stop are reliable, keep last 10; both volatile.

Network safety: Cyclone's default is multicast discovery on the first external interface.
`Transport` refuses to start unless CYCLONEDDS_URI is set, or `network=True` is passed
explicitly; `use_loopback()` sets the loopback-only configuration (interface `lo`, multicast
off, unicast peer 127.0.0.1) that tests, benches and `simreal hil` use.

Latency: a sample reaches a waiting loop through Cyclone's receive thread (it delivers
synchronously, then signals the wait set); `Transport.tune_wakeups()`, which `deploy.app.run`
calls, gives that thread the loop's short scheduler slice (deploy/loop.py).
"""

from __future__ import annotations

import os
from typing import Any

from cyclonedds.core import (
    InstanceState,
    Policy,
    Qos,
    ReadCondition,
    SampleState,
    ViewState,
    WaitSet,
)
from cyclonedds.domain import DomainParticipant
from cyclonedds.pub import DataWriter
from cyclonedds.sub import DataReader, InvalidSample
from cyclonedds.topic import Topic
from cyclonedds.util import duration

from simreal.deploy.loop import process_threads, slice_threads
from simreal.deploy.messages import ros_topic
from simreal.deploy.transport import QoS, TransportBase

LOOPBACK_CONFIG = (
    "<CycloneDDS><Domain id=\"any\"><General><Interfaces>"
    "<NetworkInterface name=\"lo\"/></Interfaces><AllowMulticast>false</AllowMulticast>"
    "</General><Discovery><ParticipantIndex>auto</ParticipantIndex>"
    "<MaxAutoParticipantIndex>40</MaxAutoParticipantIndex>"
    "<Peers><Peer Address=\"127.0.0.1\"/></Peers></Discovery></Domain></CycloneDDS>"
)

SENSOR_QOS = Qos(Policy.Reliability.BestEffort, Policy.History.KeepLast(5),
                 Policy.Durability.Volatile)
COMMAND_QOS = Qos(Policy.Reliability.Reliable(duration(milliseconds=100)),
                  Policy.History.KeepLast(10), Policy.Durability.Volatile)


class TransportError(RuntimeError):
    pass


def use_loopback(env: dict[str, str] | None = None) -> dict[str, str]:
    """Put the loopback-only configuration into `env` (os.environ by default)."""
    env = os.environ if env is None else env
    env["CYCLONEDDS_URI"] = LOOPBACK_CONFIG
    return env


class _Subscription:
    """A DataReader with the transport interface: take what arrived, wait for more."""

    def __init__(self, participant: DomainParticipant, reader: DataReader):
        self.reader = reader
        self._waitset = WaitSet(participant)
        mask = SampleState.NotRead | ViewState.Any | InstanceState.Any
        self._waitset.attach(ReadCondition(reader, mask))

    def take(self) -> list[Any]:
        # InvalidSample: a writer went away (dispose/unregister), no data
        return [s for s in self.reader.take(N=64) if not isinstance(s, InvalidSample)]

    def wait(self, timeout_s: float) -> bool:
        return self._waitset.wait(duration(seconds=max(0.0, timeout_s))) > 0


class Transport(TransportBase):
    """One DDS participant; writers and readers by ROS 2 topic name."""

    name = "dds"

    def __init__(self, domain_id: int = 0, network: bool = False):
        if not network and not os.environ.get("CYCLONEDDS_URI"):
            raise TransportError(
                "CYCLONEDDS_URI is not set: refusing Cyclone's default multicast discovery on "
                "the external interface; call deploy.dds.use_loopback() or pass network=True "
                "(--network) to reach a real robot")
        self.participant = DomainParticipant(domain_id)
        self._topics: dict[str, Topic] = {}

    def _topic(self, name: str, msg_type: type) -> Topic:
        dds_name = ros_topic(name)
        if dds_name not in self._topics:
            self._topics[dds_name] = Topic(self.participant, dds_name, msg_type)
        return self._topics[dds_name]

    def writer(self, name: str, msg_type: type, qos: Qos = COMMAND_QOS) -> DataWriter:
        return DataWriter(self.participant, self._topic(name, msg_type), qos=qos)

    def reader(self, name: str, msg_type: type, qos: Qos = SENSOR_QOS) -> DataReader:
        return DataReader(self.participant, self._topic(name, msg_type), qos=qos)

    # --- the transport interface (deploy/transport.py) ------------------------------------
    def publisher(self, topic: str, msg_type: type, qos: QoS = QoS.COMMAND) -> DataWriter:
        return self.writer(topic, msg_type, COMMAND_QOS if qos == QoS.COMMAND else SENSOR_QOS)

    def subscription(self, topic: str, msg_type: type, qos: QoS = QoS.SENSOR) -> _Subscription:
        reader = self.reader(topic, msg_type, COMMAND_QOS if qos == QoS.COMMAND else SENSOR_QOS)
        return _Subscription(self.participant, reader)

    def tune_wakeups(self) -> list[str]:
        """The short scheduler slice for Cyclone's receive threads (`recv*`, and `dq.user` where
        it delivers through a queue): a sample's path to a waiting loop is socket -> receive
        thread -> wait set -> loop thread, two wake-ups; under EEVDF a waking thread with the
        default slice (0.7 ms x (1 + log2 CPUs)) waits on a busy CPU for the running thread's
        slice to end. Call it once readers and writers exist (Cyclone starts threads lazily)."""
        threads = {tid: name for tid, name in process_threads().items()
                   if name.startswith("recv") or name == "dq.user"}
        done = slice_threads(list(threads))
        return sorted(threads[t] for t in done)

    @staticmethod
    def latest(reader: DataReader, n: int = 16) -> Any | None:
        """The newest sample waiting on a reader, or None; older ones are discarded."""
        samples = reader.take(N=n)
        return samples[-1] if samples else None
