"""Fault tests: each starts and stops its own deployment (``stack.Stack``)."""

import pytest

from tests.reliability.faults.stack import Stack


@pytest.fixture
def stack_factory():
    stacks: list[Stack] = []

    def make(**kwargs) -> Stack:
        stack = Stack(**kwargs).__enter__()
        stacks.append(stack)
        return stack

    yield make
    for stack in stacks:
        stack.close()
