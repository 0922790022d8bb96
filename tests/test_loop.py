"""The control loop's schedule, on a simulated clock (no wall-clock assertions)."""

import sys

import pytest

from simreal.deploy.loop import cpu_latency_request, run_loop, set_realtime
from tests import test_node_fixtures as fx

legbot, legbot_policy = fx.legbot, fx.legbot_policy  # fixtures


class FakeClock:
    def __init__(self):
        self.t = 100.0
        self.work = {}  # cycle -> seconds of work

    def now(self):
        return self.t

    def sleep(self, dt):
        self.t += dt


def test_deadlines_are_absolute_and_overruns_counted_and_skipped():
    clock = FakeClock()
    wakes = []
    work = {3: 0.035}  # cycle 3 takes 1.75 periods at 50 Hz

    def cycle(k):
        wakes.append(round(clock.t - 100.0, 6))
        clock.t += work.get(k, 0.001)
        return True

    stats = run_loop(cycle, 50.0, max_cycles=7, clock=clock.now, sleep=clock.sleep)
    # cycle 3 starts at 0.06 and ends at 0.095: the 0.08 slot is missed, next wake at 0.10
    assert wakes == [0.0, 0.02, 0.04, 0.06, 0.1, 0.12, 0.14]
    assert stats.cycles == 7 and stats.deadline_misses == 1
    assert abs(stats.latency.percentile(100) - 35000.0) < 1e-3


def test_loop_stops_when_the_cycle_says_so():
    clock = FakeClock()
    stats = run_loop(lambda k: k < 4, 200.0, max_cycles=100, clock=clock.now,
                     sleep=clock.sleep)
    assert stats.cycles == 5


def test_realtime_settings_warn_where_not_permitted():
    warnings = set_realtime(cpu=10_000)  # no such CPU
    assert warnings and "CPU affinity 10000 not applied" in warnings[0]


def test_triggered_loop_runs_on_input_and_counts_timeouts():
    from simreal.deploy.loop import run_triggered

    arrivals = [True, True, False, True, False, False]  # False: no state within the period
    seen = []

    def wait(timeout_s):
        seen.append(timeout_s)
        return arrivals[len(seen) - 1]

    stats = run_triggered(lambda k: True, wait, 0.02, max_cycles=6)
    assert stats.cycles == 6 and stats.deadline_misses == 3
    assert seen == [0.02] * 6


def test_prewarm_blocks_until_shortly_before_the_expected_input_then_warms_and_polls():
    from simreal.deploy.loop import run_triggered

    t = [0.0]  # a scripted clock: each warm step costs 100 us
    arrive = [0.0195, 0.0395]  # the second input comes 0.5 ms after the first was expected
    waits, steps = [], []

    def clock():
        return t[0]

    def wait(timeout_s):
        waits.append((round(t[0], 6), round(timeout_s, 6)))
        due = next((a for a in arrive if a > t[0] - 1e-12), None)
        if due is not None and due <= t[0] + timeout_s + 1e-12:
            t[0] = max(t[0], due)
            arrive.remove(due)
            return True
        t[0] += timeout_s
        return False

    def step(name):
        def run():
            steps.append((name, round(t[0], 6)))
            t[0] += 1e-4
        return run

    def cycle(k):
        t[0] += 5e-4  # the cycle's own time
        return True

    stats = run_triggered(cycle, wait, 0.02, max_cycles=3, clock=clock, hints=False,
                          warm=[step("a"), step("b")], prewarm_s=0.001)
    # first wait: blocks until 1 ms before one period after the start, then warms (a, b, a,
    # ...) polling after each step; the input came at 19.5 ms, in the warm window
    assert waits[0] == (0.0, 0.019)
    assert [n for n, _ in steps[:3]] == ["a", "b", "a"]
    assert all(0.019 <= at < 0.0195 for _, at in steps[:5])
    assert stats.deadline_misses == 1  # no third input: warmed until the period ran out
    assert all(w[1] == 0.0 for w in waits[1:] if w[0] > 0.038 and w[0] < 0.0395)
    # without prewarm the same loop blocks for whole periods and never warms
    steps.clear()
    arrive[:] = [0.0195]
    run_triggered(cycle, wait, 0.02, max_cycles=1, clock=clock, hints=False,
                  warm=[step("a")], prewarm_s=0.0)
    assert steps == []


def test_spinning_wakes_on_the_deadline_not_after_it():
    clock = FakeClock()
    sleeps = []

    def late_sleep(dt):  # the OS wakes a sleeper 80 us late
        sleeps.append(dt)
        clock.t += dt + 80e-6

    def spin_clock():
        clock.t += 1e-6  # each poll of the clock takes a microsecond
        return clock.t

    stats = run_loop(lambda k: True, 50.0, max_cycles=3, clock=spin_clock, sleep=late_sleep,
                     spin_s=200e-6)
    assert all(dt <= 0.02 - 200e-6 + 1e-9 for dt in sleeps)
    assert stats.jitter.percentile(100) < 5.0  # microseconds, not 80


def test_sleep_until_wakes_at_or_after_the_deadline_even_through_a_signal():
    import signal
    import sys
    import time

    import pytest

    from simreal.deploy.loop import sleep_until

    if sleep_until is None:
        pytest.skip("no clock_nanosleep on CLOCK_MONOTONIC here")
    assert sys.platform == "linux"
    hits = []
    old = signal.signal(signal.SIGALRM, lambda *_: hits.append(time.perf_counter()))
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.005)
        deadline = time.perf_counter() + 0.03
        sleep_until(deadline)
        woke = time.perf_counter()
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    assert len(hits) == 1 and hits[0] < deadline  # the handler ran during the sleep
    assert woke >= deadline  # and the sleep went on to the deadline


def test_wakeup_hints_apply_to_the_thread_and_are_restored():
    import ctypes
    import sys

    import pytest

    from simreal.deploy.loop import wakeup_hints

    if sys.platform != "linux":
        pytest.skip("Linux only")
    libc = ctypes.CDLL(None)

    def slack() -> int:
        return libc.prctl(30, 0, 0, 0, 0)  # PR_GET_TIMERSLACK, this thread's

    def sched_slice_ns() -> int | None:
        import platform

        from simreal.deploy import loop

        nr = loop._SYS_SCHED_GETATTR.get(platform.machine())
        attr = loop._SchedAttr()
        if nr is None or libc.syscall(nr, 0, ctypes.byref(attr), ctypes.sizeof(attr), 0):
            return None
        return attr.runtime

    before, slice_before = slack(), sched_slice_ns()
    with wakeup_hints() as applied:
        assert "timer slack 1 ns" in applied
        assert slack() == 1
        if "scheduler slice 100 us" in applied:
            assert sched_slice_ns() == 100_000
    assert slack() == before != 1
    assert sched_slice_ns() == slice_before


def test_real_clock_loop_runs_its_cycles_with_the_default_sleep():
    stats = run_loop(lambda k: True, 200.0, max_cycles=5, spin_s=100e-6)
    assert stats.cycles == 5 and len(stats.jitter.samples) == 5
    assert min(stats.jitter.samples) >= 0.0


def test_slice_threads_gives_another_thread_the_short_slice():
    import sys
    import threading

    import pytest

    from simreal.deploy import loop

    if sys.platform != "linux" or loop._get_attr(0) is None:
        pytest.skip("Linux sched_getattr only")
    ready, release = threading.Event(), threading.Event()
    tid: list[int] = []

    def worker() -> None:
        tid.append(threading.get_native_id())
        ready.set()
        release.wait(5.0)

    t = threading.Thread(target=worker)
    t.start()
    try:
        assert ready.wait(5.0)
        assert loop.process_threads()[tid[0]]  # listed by id, with a name
        before = loop._get_attr(tid[0]).runtime
        assert loop.slice_threads([tid[0]], 250.0) == tid
        assert loop._get_attr(tid[0]).runtime == 250_000 != before
        assert loop._get_attr(0).runtime != 250_000  # the caller's own slice is untouched
        assert loop.slice_threads([2**31 - 7]) == []  # no such thread: skipped, no error
    finally:
        release.set()
        t.join(5.0)


def test_cpu_latency_request_holds_the_value_while_inside_and_warns_where_refused(tmp_path):
    device = tmp_path / "cpu_dma_latency"  # a plain file stands in for the PM QoS device
    device.write_bytes(b"")
    with cpu_latency_request(25, device=str(device)) as warnings:
        assert warnings == []
        assert int.from_bytes(device.read_bytes(), sys.byteorder, signed=True) == 25
    with cpu_latency_request(0, device=str(tmp_path / "missing" / "dev")) as warnings:
        assert len(warnings) == 1 and "not applied" in warnings[0] and "0 us" in warnings[0]
    with cpu_latency_request(None, device=str(tmp_path / "missing" / "dev")) as warnings:
        assert warnings == []  # no request asked for: nothing opened, nothing to warn about



def test_the_node_holds_its_cpu_latency_request_while_running(monkeypatch, tmp_path, legbot,
                                                              legbot_policy):
    import simreal.deploy.loop as loop
    from simreal.deploy.app import prepare, run
    from simreal.deploy.node import NodeConfig
    from simreal.deploy.transport import LocalBus

    assert NodeConfig().cpu_dma_latency_us is None  # opt-in: polling idle CPUs costs power
    with pytest.raises(ValueError, match="cpu_dma_latency_us"):
        NodeConfig(cpu_dma_latency_us=-1)
    device = tmp_path / "cpu_dma_latency"
    device.write_bytes(b"")
    monkeypatch.setattr(loop, "CPU_LATENCY_DEVICE", str(device))
    seen = []

    def watch(cycle, *args, **kwargs):  # what the device holds while the loop runs
        seen.append(device.read_bytes())
        return real_loop(cycle, *args, **kwargs)

    real_loop = loop.run_loop
    monkeypatch.setattr("simreal.deploy.app.run_loop", watch)
    node = prepare(legbot_policy, legbot, LocalBus(), {"cpu_dma_latency_us": 7})
    summary = run(node, max_cycles=2)
    assert seen == [(7).to_bytes(4, sys.byteorder, signed=True)]
    assert summary["realtime_warnings"] == []
    monkeypatch.setattr(loop, "CPU_LATENCY_DEVICE", str(tmp_path / "missing" / "dev"))
    node = prepare(legbot_policy, legbot, LocalBus(), {"cpu_dma_latency_us": 0})
    summary = run(node, max_cycles=2)
    assert any("not applied" in w and "missing" in w for w in summary["realtime_warnings"])
