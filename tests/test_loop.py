"""The control loop's schedule, on a simulated clock (no wall-clock assertions)."""

from deploy.loop import run_loop, set_realtime


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
