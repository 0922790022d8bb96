"""Per-process records of a HIL run: every message sent and received, events, ground truth.

Each process (robot, node, harness) appends to its own file, one `write()` per record on an
unbuffered descriptor, so a process killed on purpose (a crash fault) leaves every record it
made. A record is

    <u32 length of the rest> <i64 wall time ns> <u8 kind> <u16 topic id> <u64 identity> payload

kinds: TOPIC declares a topic id (payload JSON: topic, ROS 2 type, QoS); SENT is a message as
its sender wrote it (payload: its CDR bytes); RECEIVED is a message as the receiving application
got it (no payload: the identity matches it to the sender's record); EVENT, TRUTH and CYCLE carry
JSON. A reader stops quietly at a truncated last record.

Identity: a 64-bit hash that both ends compute from the message object, cheaply: the CDR bytes
for messages with the fast codecs, and fields that make a message unique for the native ones
(the Unitree CRC covers the whole message).

`TapTransport` records what an application (the deploy node) sends and takes through any
transport.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from simreal.deploy import px4, unitree
from simreal.deploy.messages import ros_type
from simreal.deploy.transport import QoS, TransportBase

TOPIC, SENT, RECEIVED, EVENT, TRUTH, CYCLE = range(6)
_HEAD = struct.Struct("<IqBHQ")
_BODY = _HEAD.size - 4  # what the length counts besides the payload


def _digest(data: bytes) -> int:
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little")


def _ints(*values: int) -> bytes:
    return struct.pack(f"<{len(values)}Q", *values)


def _f32(values: list[float]) -> bytes:
    # float32 fields: the sender holds float64 values that the wire rounds; packing them as
    # float32 gives the same bytes at both ends
    return struct.pack(f"<{len(values)}f", *values)


# fields that identify a native message without serializing it again
_IDENTITY: dict[type, Callable[[Any], bytes]] = {
    unitree.LowState: lambda m: _ints(m.tick, m.crc),
    unitree.LowCmd: lambda m: _ints(m.crc),
    px4.VehicleOdometry: lambda m: _ints(m.timestamp) + _f32([*m.position, *m.q, *m.velocity]),
    px4.ActuatorMotors: lambda m: _ints(m.timestamp) + _f32(list(m.control)),
    px4.OffboardControlMode: lambda m: _ints(m.timestamp),
}


def identity(msg: Any, data: bytes | None = None) -> int:
    """The message's 64-bit identity (the same at the sender and the receiver)."""
    fields = _IDENTITY.get(type(msg))
    if fields is not None:
        return _digest(fields(msg))
    return _digest(data if data is not None else msg.serialize())


@dataclass(frozen=True)
class Record:
    t_ns: int
    kind: int
    topic: str
    type: str
    key: int
    payload: bytes

    def json(self) -> dict[str, Any]:
        return json.loads(self.payload)


class RecordWriter:
    """Appends records to one file; safe to call from several threads."""

    def __init__(self, path: str | Path, source: str):
        self.path = Path(path)
        self.fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self._lock = threading.Lock()
        self._topics: dict[str, int] = {}
        self.event("source", source=source, pid=os.getpid())

    def _write(self, kind: int, topic_id: int, key: int, payload: bytes,
               t_ns: int | None = None) -> None:
        t_ns = time.time_ns() if t_ns is None else t_ns
        head = _HEAD.pack(_BODY + len(payload), t_ns, kind, topic_id, key)
        with self._lock:
            os.write(self.fd, head + payload)

    def topic(self, topic: str, msg_type: type, qos: QoS | str = QoS.SENSOR) -> int:
        """The id of a topic, declared on first use."""
        with self._lock:
            tid = self._topics.get(topic)
            if tid is not None:
                return tid
            tid = self._topics[topic] = len(self._topics) + 1
        info = {"topic": topic, "type": ros_type(msg_type), "qos": str(QoS(qos))}
        self._write(TOPIC, tid, 0, json.dumps(info).encode())
        return tid

    def sent(self, topic: str, msg: Any, data: bytes, t_ns: int | None = None) -> None:
        tid = self.topic(topic, type(msg))
        self._write(SENT, tid, identity(msg, data), data, t_ns)

    def received(self, topic: str, msg: Any, t_ns: int | None = None,
                 with_bytes: bool = False) -> None:
        """A message the application got; `with_bytes` keeps its CDR bytes too (where no
        sender's record will have them: a real robot)."""
        tid = self.topic(topic, type(msg))
        data = msg.serialize() if with_bytes else b""
        self._write(RECEIVED, tid, identity(msg, data or None), data, t_ns)

    def event(self, kind: str, **fields: Any) -> None:
        self._json(EVENT, {"event": kind, **fields})

    def truth(self, **fields: Any) -> None:
        self._json(TRUTH, fields)

    def cycle(self, **fields: Any) -> None:
        self._json(CYCLE, fields)

    def _json(self, kind: int, obj: dict[str, Any]) -> None:
        self._write(kind, 0, 0, json.dumps(obj, default=_plain).encode())

    def close(self) -> None:
        with self._lock:
            if self.fd >= 0:
                os.close(self.fd)
                self.fd = -1


def _plain(x: Any) -> Any:
    if hasattr(x, "tolist"):
        return x.tolist()
    raise TypeError(f"{type(x).__name__} is not JSON serializable")


def read_records(path: str | Path) -> Iterator[Record]:
    """The records of one file, in order; a truncated last record ends it quietly."""
    data = Path(path).read_bytes()
    topics: dict[int, tuple[str, str]] = {}
    pos, n = 0, len(data)
    while pos + _HEAD.size <= n:
        length, t_ns, kind, tid, key = _HEAD.unpack_from(data, pos)
        end = pos + 4 + length
        if length < _BODY or end > n:
            return
        payload = data[pos + _HEAD.size:end]
        pos = end
        if kind == TOPIC:
            info = json.loads(payload)
            topics[tid] = (info["topic"], info["type"])
        topic, typ = topics.get(tid, ("", ""))
        yield Record(t_ns, kind, topic, typ, key, payload)


# --- a recording tap on any transport ---------------------------------------------------------
class _TapPublisher:
    def __init__(self, inner: Any, rec: RecordWriter, topic: str):
        self.inner, self.rec, self.topic = inner, rec, topic

    def write(self, msg: Any) -> None:
        data = msg.serialize()
        self.rec.sent(self.topic, msg, data)
        msg.serialize = lambda *args, **kwargs: data  # the writer need not serialize again
        self.inner.write(msg)


class _TapSubscription:
    def __init__(self, inner: Any, rec: RecordWriter, topic: str, with_bytes: bool):
        self.inner, self.rec, self.topic, self.with_bytes = inner, rec, topic, with_bytes

    def take(self) -> list[Any]:
        msgs = self.inner.take()
        t_ns = time.time_ns()
        for msg in msgs:
            self.rec.received(self.topic, msg, t_ns, self.with_bytes)
        return msgs

    def wait(self, timeout_s: float) -> bool:
        return self.inner.wait(timeout_s)


class TapTransport(TransportBase):
    """Any transport, with every message written and taken recorded."""

    def __init__(self, inner: TransportBase, rec: RecordWriter, received_bytes: bool = False):
        self.inner, self.rec, self.received_bytes = inner, rec, received_bytes
        self.name = f"{inner.name}+tap"

    def publisher(self, topic: str, msg_type: type, qos: QoS = QoS.COMMAND) -> Any:
        self.rec.topic(topic, msg_type, qos)
        return _TapPublisher(self.inner.publisher(topic, msg_type, qos), self.rec, topic)

    def subscription(self, topic: str, msg_type: type, qos: QoS = QoS.SENSOR) -> Any:
        self.rec.topic(topic, msg_type, qos)
        return _TapSubscription(self.inner.subscription(topic, msg_type, qos), self.rec, topic,
                                self.received_bytes)

    def close(self) -> None:
        self.inner.close()
