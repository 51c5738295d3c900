"""``WORKER_NICE``: a Celery worker lowers its own CPU priority when it starts, so the web
processes it shares cores with come first."""

import os

import pytest

pytestmark = pytest.mark.e2e


def _nice(pid: int) -> int:
    """The nice value of process ``pid`` (field 19 of /proc/<pid>/stat)."""
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[16])


def test_a_worker_runs_the_configured_steps_below_the_process_that_started_it(worker_factory):
    ours = os.nice(0)
    lowered = worker_factory(WORKER_NICE="7").start()
    level = worker_factory(WORKER_NICE="0").start()
    assert _nice(lowered.proc.pid) == min(ours + 7, 19)
    assert _nice(level.proc.pid) == ours
