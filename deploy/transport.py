"""The transport interface the deploy node talks through, and an in-process implementation.

A transport offers publishers and subscriptions by ROS 2 topic name and message class (the
IDL classes of deploy/messages.py, deploy/unitree.py, deploy/px4.py). Implementations:
`deploy.dds.Transport` (Cyclone DDS on the ROS 2 wire, no ROS install), `deploy.ros2.
RclpyTransport` (rclpy, where ROS 2 is installed) and `LocalBus` here (one process, messages
pass through their CDR bytes; for tests and benchmarks of the node without a network).

QoS follows ROS 2's profiles: SENSOR is best effort, keep last 5; COMMAND (commands, user
inputs, e-stop) is reliable, keep last 10; both volatile.
"""

from __future__ import annotations

import threading
import time
from abc import ABC, abstractmethod
from collections import defaultdict, deque
from enum import StrEnum
from typing import Any, Protocol


class QoS(StrEnum):
    SENSOR = "sensor"
    COMMAND = "command"


DEPTH = {QoS.SENSOR: 5, QoS.COMMAND: 10}


class Publisher(Protocol):
    def write(self, msg: Any) -> None: ...


class Subscription(Protocol):
    def take(self) -> list[Any]:
        """Samples that arrived since the last take, oldest first."""
        ...

    def wait(self, timeout_s: float) -> bool:
        """Block until a sample is waiting or timeout_s passed; True if one is waiting."""
        ...


class TransportBase(ABC):
    name = "transport"

    @abstractmethod
    def publisher(self, topic: str, msg_type: type, qos: QoS = QoS.COMMAND) -> Publisher: ...

    @abstractmethod
    def subscription(self, topic: str, msg_type: type,
                     qos: QoS = QoS.SENSOR) -> Subscription: ...

    def close(self) -> None:  # noqa: B027  (optional for implementations)
        """Release the transport's resources."""

    def tune_wakeups(self) -> list[str]:
        """Make the transport's own threads, which wake first when a message arrives, wake
        the loop sooner (deploy/loop.py `slice_threads`); returns what was tuned."""
        return []


# --- in-process ---------------------------------------------------------------------------------
class _LocalSubscription:
    def __init__(self, bus: LocalBus, msg_type: type, depth: int):
        self._bus, self._type = bus, msg_type
        self._queue: deque[bytes] = deque(maxlen=depth)

    def _deliver(self, data: bytes) -> None:
        self._queue.append(data)

    def take(self) -> list[Any]:
        with self._bus.cond:
            items = list(self._queue)
            self._queue.clear()
        return [self._type.deserialize(d) for d in items]

    def wait(self, timeout_s: float) -> bool:
        end = time.monotonic() + timeout_s
        with self._bus.cond:
            while not self._queue:
                left = end - time.monotonic()
                if left <= 0:
                    return False
                self._bus.cond.wait(left)
            return True


class _LocalPublisher:
    def __init__(self, bus: LocalBus, topic: str, msg_type: type):
        self._bus, self._topic, self._type = bus, topic, msg_type

    def write(self, msg: Any) -> None:
        if not isinstance(msg, self._type):
            raise TypeError(f"{self._topic}: expected {self._type.__name__}, got "
                            f"{type(msg).__name__}")
        data = msg.serialize()
        with self._bus.cond:
            for sub in self._bus.subs[self._topic]:
                sub._deliver(data)
            self._bus.cond.notify_all()


class LocalBus(TransportBase):
    """Topics within one process: every write reaches every subscription of its topic as CDR
    bytes, decoded on take (as a network transport would)."""

    name = "local"

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.subs: dict[str, list[_LocalSubscription]] = defaultdict(list)
        self.types: dict[str, type] = {}

    def _check(self, topic: str, msg_type: type) -> None:
        known = self.types.setdefault(topic, msg_type)
        if known is not msg_type:
            raise TypeError(f"{topic}: already carries {known.__name__}, not "
                            f"{msg_type.__name__}")

    def publisher(self, topic: str, msg_type: type, qos: QoS = QoS.COMMAND) -> Publisher:
        self._check(topic, msg_type)
        return _LocalPublisher(self, topic, msg_type)

    def subscription(self, topic: str, msg_type: type, qos: QoS = QoS.SENSOR) -> Subscription:
        self._check(topic, msg_type)
        sub = _LocalSubscription(self, msg_type, DEPTH[QoS(qos)])
        with self.cond:
            self.subs[topic].append(sub)
        return sub
