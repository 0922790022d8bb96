"""Cyclone DDS transport on the ROS 2 wire, confined to loopback unless told otherwise.

Topics are ROS 2 names (`/joint_states`), mangled to DDS (`rt/joint_states`); types are those
of deploy/messages.py. QoS follows ROS 2's profiles: sensor data is best effort, keep last 5;
commands and the e-stop are reliable, keep last 10; both volatile.

Network safety: Cyclone's default is multicast discovery on the first external interface.
`Transport` refuses to start unless CYCLONEDDS_URI is set, or `network=True` is passed
explicitly; `use_loopback()` sets the loopback-only configuration (interface `lo`, multicast
off, unicast peer 127.0.0.1) that tests, benches and `simreal hil` use.

Types: Cyclone matches a reader and a writer by their XTypes type identifiers (a hash of the
definition), not only by type name, and refuses a pair whose definitions are not assignable
without a word beyond a status count. Two things follow.
- A message may have type variants (deploy/messages.py `add_type_variant`): the same bytes and
  type name, another definition. Unitree's firmware SDK (unitree_sdk2, and unitree_sdk2py
  1.0.1 generated from the same IDL) declares LowState's six temperature fields uint8,
  unitree_ros2's .msg files int8. A subscription reads through the message's own class (the
  unitree_ros2 definition: it also matches ROS 2 nodes, whose rmw_cyclonedds endpoints carry no
  type information and match by name) and one more reader per variant (the SDK's, for a
  publisher built on Unitree's SDK, which is what the robot's firmware is built on, if it
  advertises type information); each variant reader insists on type information
  (`force_type_validation`), so an endpoint without it matches the first reader only and no
  sample arrives twice. Writers use the message's own class only (a second writer would reach
  a name-matching ROS 2 reader twice); unitree_go LowCmd has no variant: the SDK's definition
  and unitree_ros2's are the same.
- A remote endpoint on one of our topics that none of our endpoints matched is reported: an
  error naming the topic, its type name and ours, and what Cyclone said (type consistency:
  the definitions differ; or the QoS policy that differs), once per endpoint, within
  `MATCH_GRACE_S` of Cyclone refusing it, or `MATCH_SETTLE_S` of its discovery where Cyclone
  says nothing (another type name without type information). `Transport.mismatches` lists
  those still unmatched. Cyclone's inconsistent-topic status is never raised for this (XTypes
  allows several types on one topic): discovery data and incompatible-QoS statuses are read.

Latency: a sample reaches a waiting loop through Cyclone's receive thread (it delivers
synchronously, then signals the wait set); `Transport.tune_wakeups()`, which `deploy.app.run`
calls, gives that thread the loop's short scheduler slice (deploy/loop.py).
"""

from __future__ import annotations

import gc
import logging
import os
import threading
import time
import uuid
import weakref
from dataclasses import dataclass
from typing import Any

from cyclonedds.builtin import (
    BuiltinDataReader,
    BuiltinTopicDcpsPublication,
    BuiltinTopicDcpsSubscription,
)
from cyclonedds.core import (
    InstanceState,
    Listener,
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
from simreal.deploy.messages import TYPE_VARIANTS, ros_topic
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


# a variant reader matches only endpoints that declare their type (see the module docstring)
VARIANT_CONSISTENCY = Policy.TypeConsistency.AllowTypeCoercion(force_type_validation=True)
MATCH_GRACE_S = 0.5  # after Cyclone refused a match: the other variants' verdicts
MATCH_SETTLE_S = 2.0  # after discovery, where Cyclone refuses silently

log = logging.getLogger("simreal.deploy.dds")

# DDS QoS policy ids (dds_qos_policy_id_t) as Cyclone's incompatible-QoS statuses name them
POLICY_NAMES = {
    2: "durability", 3: "presentation", 4: "deadline", 5: "latency budget", 6: "ownership",
    8: "liveliness", 10: "partition", 11: "reliability", 12: "destination order",
    24: "type consistency: the type definitions differ (not assignable)",
    25: "data representation (XCDR1/XCDR2)",
}
TYPE_CONSISTENCY_POLICY = 24


_CHECKING = threading.RLock()  # see _MatchWatch.check and Transport.close

class TransportError(RuntimeError):
    pass


@dataclass(frozen=True)
class Mismatch:
    """A remote endpoint on one of our topics that none of our endpoints matched."""

    topic: str  # DDS name (rt/...)
    role: str  # theirs: "publisher" or "subscriber"
    their_type: str
    our_types: tuple[str, ...]  # our type name per definition (the class name in brackets)
    reason: str
    endpoint: str  # their GUID

    def __str__(self) -> str:
        same = (" (the same type name, another definition)"
                if all(t.split(" ")[0] == self.their_type for t in self.our_types) else "")
        return (f"{self.topic}: a {self.role} of type {self.their_type} does not match this "
                f"node's {' / '.join(self.our_types)}{same}; Cyclone: {self.reason}; nothing "
                f"passes between them (endpoint {self.endpoint})")


def use_loopback(env: dict[str, str] | None = None) -> dict[str, str]:
    """Put the loopback-only configuration into `env` (os.environ by default)."""
    env = os.environ if env is None else env
    env["CYCLONEDDS_URI"] = LOOPBACK_CONFIG
    return env


class _Subscription:
    """DataReaders (a message's own type, then its variants) with the transport interface:
    take what arrived, wait for more."""

    def __init__(self, participant: DomainParticipant, readers: list[DataReader]):
        self.readers = readers
        self.reader = readers[0]
        self._waitset = WaitSet(participant)
        mask = SampleState.NotRead | ViewState.Any | InstanceState.Any
        for r in readers:
            self._waitset.attach(ReadCondition(r, mask))

    def take(self) -> list[Any]:
        # InvalidSample: a writer went away (dispose/unregister), no data
        out = [s for s in self.reader.take(N=64) if not isinstance(s, InvalidSample)]
        for r in self.readers[1:]:
            out += [s for s in r.take(N=64) if not isinstance(s, InvalidSample)]
        return out

    def wait(self, timeout_s: float) -> bool:
        return self._waitset.wait(duration(seconds=max(0.0, timeout_s))) > 0


class _MatchWatch:
    """Reports remote endpoints on our topics that none of our endpoints matched.

    Triggered by discovery (the built-in publication and subscription topics) and by our
    endpoints' incompatible-QoS statuses, through listeners that only schedule a check on a
    short-lived timer thread (a listener runs on Cyclone's threads and must not call into DDS).
    """

    def __init__(self, transport: Transport):
        self._lock = threading.Lock()
        self._due: float | None = None
        self._first_seen: dict[uuid.UUID, float] = {}
        self._reported: dict[uuid.UUID, Mismatch] = {}
        self.readers: dict[str, list[DataReader]] = {}
        self.writers: dict[str, list[DataWriter]] = {}
        me = weakref.ref(self)

        def poke(delay: float) -> Any:
            def callback(*_: Any) -> None:
                watch = me()
                if watch is not None:
                    watch.schedule(delay)
            return callback

        self.discovery = Listener(on_data_available=poke(0.0))
        self.refusal = Listener(on_requested_incompatible_qos=poke(MATCH_GRACE_S),
                                on_offered_incompatible_qos=poke(MATCH_GRACE_S))
        participant = transport.participant
        self._own = participant.guid
        self._builtin: dict[str, tuple[BuiltinDataReader, ReadCondition]] = {}
        builtin = {}
        for role, topic in (("publisher", BuiltinTopicDcpsPublication),
                            ("subscriber", BuiltinTopicDcpsSubscription)):
            reader = BuiltinDataReader(participant, topic, listener=self.discovery)
            # cyclonedds converts each endpoint's QoS through class-level ctypes buffers, which
            # two threads (two transports' checks, or a check and the caller) corrupt: a
            # segfault; the check needs neither the QoS nor the type identifier
            reader._cqos_conv = _no_qos
            reader._constructor = _endpoint
            alive = ReadCondition(reader, SampleState.Any | ViewState.Any | InstanceState.Alive)
            builtin[role] = (reader, alive)
        self._builtin = builtin  # (a check may run from the first listener call on)

    def schedule(self, delay: float) -> None:
        at = time.monotonic() + delay
        with self._lock:
            if self._due is not None and self._due <= at:
                return
            self._due = at
        timer = threading.Timer(delay, _check_watch, (weakref.ref(self),))
        timer.daemon = True
        timer.start()

    def _ours(self, role: str) -> dict[str, list[Any]]:
        return self.readers if role == "publisher" else self.writers

    @staticmethod
    def _matched(endpoint: Any) -> set[int]:
        handles = (endpoint.get_matched_publications() if isinstance(endpoint, DataReader)
                   else endpoint.get_matched_subscriptions())
        return {h & 0xFFFF_FFFF_FFFF_FFFF for h in handles}  # (signed here, unsigned there)

    @staticmethod
    def _refusal(endpoint: Any) -> tuple[int, int]:
        st = (endpoint.get_requested_incompatible_qos_status() if isinstance(endpoint, DataReader)
              else endpoint.get_offered_incompatible_qos_status())
        return st.total_count, st.last_policy_id

    def check(self) -> None:
        # one check at a time in the process, whichever transport: cyclonedds' conversions of
        # discovery data share class-level buffers (see _no_qos below)
        with _CHECKING:
            self._check()

    def _check(self) -> None:
        with self._lock:
            self._due = None
        now, later, present = time.monotonic(), None, set()
        for role, (builtin, alive) in self._builtin.items():
            ours = dict(self._ours(role))  # (endpoints may be added meanwhile)
            theirs = [e for e in builtin.read(N=1024, condition=alive)
                      if e.participant_key != self._own and e.topic_name in ours]
            present.update(e.key for e in theirs)
            matched = {e.key for e in theirs if any(
                e.sample_info.instance_handle in self._matched(o) for o in ours[e.topic_name])}
            # a participant reading or writing through type variants, as this one does: one
            # of its endpoints on the topic matched, the others refused by design
            heard = {(e.participant_key, e.topic_name) for e in theirs if e.key in matched}
            for sample in theirs:
                if sample.key in matched or (sample.participant_key, sample.topic_name) in heard:
                    self._first_seen.pop(sample.key, None)
                    done = self._reported.pop(sample.key, None)
                    if done is not None:
                        log.warning("%s: the %s of type %s matched after all (endpoint %s)",
                                    done.topic, done.role, done.their_type, done.endpoint)
                    continue
                if sample.key in self._reported:
                    continue
                endpoints = ours[sample.topic_name]
                first = self._first_seen.setdefault(sample.key, now)
                refused = [policy for count, policy in map(self._refusal, endpoints) if count]
                if (refused and now - first >= MATCH_GRACE_S) or now - first >= MATCH_SETTLE_S:
                    self._report(role, sample, endpoints, refused)
                else:
                    wait = (MATCH_GRACE_S if refused else MATCH_SETTLE_S) - (now - first)
                    later = wait if later is None else min(later, wait)
        for gone in (self._reported.keys() | self._first_seen.keys()) - present:
            self._first_seen.pop(gone, None)
            if (done := self._reported.pop(gone, None)) is not None:
                log.warning("%s: the unmatched %s of type %s went away (endpoint %s)",
                            done.topic, done.role, done.their_type, done.endpoint)
        if later is not None:
            self.schedule(max(0.01, later))

    def _report(self, role: str, sample: Any, endpoints: list[Any], refused: list[int]) -> None:
        ours = tuple(f"{_type_name(e.topic.data_type)} ({e.topic.data_type.__name__})"
                     for e in endpoints)
        if TYPE_CONSISTENCY_POLICY in refused:
            reason = POLICY_NAMES[TYPE_CONSISTENCY_POLICY]
        elif refused:
            reason = "incompatible QoS, " + ", ".join(
                sorted({POLICY_NAMES.get(p, f"policy {p}") for p in refused}))
        else:
            reason = (f"no match after {MATCH_SETTLE_S:g} s and no status (another type name, "
                      "or an endpoint without type information)")
        m = Mismatch(sample.topic_name, role, sample.type_name, ours, reason, str(sample.key))
        self._reported[sample.key] = m
        log.error("DDS type mismatch: %s", m)


@dataclass(frozen=True)
class _Endpoint:
    """What a check reads of a remote endpoint's discovery data."""

    key: uuid.UUID
    participant_key: uuid.UUID
    topic_name: str
    type_name: str
    sample_info: Any


def _no_qos(_pointer: Any) -> None:
    return None


def _endpoint(key: bytes, participant_key: bytes, _participant_handle: int, topic_name: str,
              type_name: str, _qos: Any, sample_info: Any, _type_id: Any) -> _Endpoint:
    return _Endpoint(uuid.UUID(bytes=key), uuid.UUID(bytes=participant_key), topic_name,
                     type_name, sample_info)


def _type_name(cls: type) -> str:
    return cls.__idl_typename__.replace(".", "::")  # as cyclonedds puts it on the wire


def _check_watch(ref: weakref.ref[_MatchWatch]) -> None:
    watch = ref()
    if watch is None:
        return
    try:
        watch.check()
    except Exception:  # a check must never take the node down
        log.warning("DDS match check failed", exc_info=True)


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
        self._topics: dict[tuple[str, type], Topic] = {}
        self._watch = _MatchWatch(self)

    def close(self) -> None:
        """Delete the participant and everything under it, its listeners detached first.

        Left to the garbage collector, this deadlocked the test process once: deleting an
        endpoint makes Cyclone call the discovery listener on the deleting thread, and the
        listener's Python wrapper can start a collection that deletes another entity from
        inside that delete. Detached listeners and no collection while deleting rule it out.
        """
        participant = getattr(self, "participant", None)
        if participant is None:
            return
        self.participant = None
        collecting = gc.isenabled()
        gc.disable()
        try:
            with _CHECKING:  # no match check reads the entities while they go
                watch = getattr(self, "_watch", None)
                if watch is not None:
                    endpoints = [r for r, _ in watch._builtin.values()]
                    for group in (*watch.readers.values(), *watch.writers.values()):
                        endpoints += group
                    watch._builtin, watch.readers, watch.writers = {}, {}, {}
                    for endpoint in endpoints:
                        endpoint.set_listener(None)
                participant.__del__()  # dds_delete: every child entity goes with it
        finally:
            if collecting:
                gc.enable()

    def __del__(self) -> None:
        self.close()

    @property
    def mismatches(self) -> list[Mismatch]:
        """Remote endpoints on our topics that none of ours matches, as reported (one that
        matched later, or went away, is dropped: the log keeps both)."""
        return list(self._watch._reported.values())

    def _topic(self, name: str, msg_type: type) -> Topic:
        key = (ros_topic(name), msg_type)
        if key not in self._topics:
            self._topics[key] = Topic(self.participant, key[0], msg_type)
        return self._topics[key]

    def writer(self, name: str, msg_type: type, qos: Qos = COMMAND_QOS) -> DataWriter:
        w = DataWriter(self.participant, self._topic(name, msg_type), qos=qos,
                       listener=self._watch.refusal)
        self._watch.writers.setdefault(ros_topic(name), []).append(w)
        self._watch.schedule(0.0)  # remote readers discovered before this writer existed
        return w

    def reader(self, name: str, msg_type: type, qos: Qos = SENSOR_QOS) -> DataReader:
        r = DataReader(self.participant, self._topic(name, msg_type), qos=qos,
                       listener=self._watch.refusal)
        self._watch.readers.setdefault(ros_topic(name), []).append(r)
        self._watch.schedule(0.0)
        return r

    # --- the transport interface (deploy/transport.py) ------------------------------------
    def publisher(self, topic: str, msg_type: type, qos: QoS = QoS.COMMAND) -> DataWriter:
        return self.writer(topic, msg_type, COMMAND_QOS if qos == QoS.COMMAND else SENSOR_QOS)

    def subscription(self, topic: str, msg_type: type, qos: QoS = QoS.SENSOR) -> _Subscription:
        """A reader of `msg_type` and one per type variant of it (samples of every variant
        decode into `msg_type`; see the module docstring)."""
        dds_qos = COMMAND_QOS if qos == QoS.COMMAND else SENSOR_QOS
        readers = [self.reader(topic, msg_type, dds_qos)]
        readers += [self.reader(topic, v, Qos(*dds_qos, VARIANT_CONSISTENCY))
                    for v in TYPE_VARIANTS.get(msg_type, ())]
        return _Subscription(self.participant, readers)

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
