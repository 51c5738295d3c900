"""bench.cpu: CPU seconds of the deployment's processes, read from /proc."""

import os
import subprocess
import sys
import time

from bench.cpu import CpuClock, _gauge_work, machine_gauge_ms, process_seconds, wait_until_idle


def spin(seconds: float) -> None:
    """Use ``seconds`` of this process's CPU (however long that takes on a busy machine)."""
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass


def test_a_process_cpu_is_read_and_grows_with_its_work():
    before = process_seconds(os.getpid())
    spin(0.3)
    assert process_seconds(os.getpid()) - before >= 0.25
    assert process_seconds(2**22 + 12345) is None  # no such process


def test_children_that_exited_are_counted_with_their_parent():
    before = process_seconds(os.getpid(), children=True)
    code = "import time\nend = time.process_time() + 0.4\nwhile time.process_time() < end: pass"
    subprocess.run([sys.executable, "-c", code], check=True)
    assert process_seconds(os.getpid(), children=True) - before >= 0.35


def test_cores_between_two_readings():
    used = iter([10.0, 13.0])
    clock = CpuClock({"web": lambda: next(used), "gone": lambda: None})
    before, after = clock.read(), clock.read()
    assert CpuClock.cores(before, after, 2.0) == {"web": 1.5, "gone": None}


def test_waiting_for_an_idle_part_ends_when_it_stops_working():
    readings = iter([0.0, 1.0, 2.0, 2.01])  # busy, busy, then 0.01 s in a 0.01 s window
    wait_until_idle(lambda: next(readings), below_cores=5.0, window_s=0.01)
    assert next(readings, "all read") == "all read"  # it stopped at the first idle window
    assert wait_until_idle(lambda: None) == 0  # nothing to read: no wait


def test_the_machine_gauge_is_the_cpu_time_of_a_fixed_piece_of_work():
    assert _gauge_work() == _gauge_work()  # the same work every time
    started = time.perf_counter()
    gauge = machine_gauge_ms(repeats=2)
    wall_ms = (time.perf_counter() - started) * 1000
    # The least of two repeats, each the thread's CPU time, which never outruns the clock.
    assert 0 < gauge <= wall_ms / 2 + 0.01
