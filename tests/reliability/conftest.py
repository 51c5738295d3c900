"""Reliability suites. The bad-input and isolation tests run in ``make test``; the fault and
load suites (marked ``reliability``) only in ``make reliability``, which prints a table of
what was checked (see ``tests/reliability/report.py``)."""

from tests.api.conftest import client  # noqa: F401  (make_key and member: tests/conftest.py)
