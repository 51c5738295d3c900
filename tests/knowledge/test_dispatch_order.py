"""The fair dispatch order, pure: round-robin by load, ties by the oldest waiting document, and
the closed-form queue position that must agree with it (hand-computed and by property)."""

from hypothesis import given
from hypothesis import strategies as st

from knowledge.services.dispatch import TenantLoad, TenantQueue, position, round_robin


def test_a_tenant_with_one_document_goes_before_the_next_of_a_thousand():
    a = TenantQueue(1, in_flight=2, waiting=list(range(100, 1100)), oldest=(0, 100))
    b = TenantQueue(2, in_flight=0, waiting=[5000], oldest=(9, 5000))
    assert round_robin([a, b], 3) == [5000, 100, 101]


def test_equal_loads_alternate_oldest_first():
    a = TenantQueue(1, 0, [1, 2, 3], (10, 1))
    b = TenantQueue(2, 0, [7, 8], (5, 7))  # b's oldest document is older: b first
    c = TenantQueue(3, 1, [9], (1, 9))  # one in flight already: waits a round
    assert round_robin([a, b, c]) == [7, 1, 9, 8, 2, 3]


def test_positions_by_hand():
    loads = {1: TenantLoad(0, 3, (10, 1)), 2: TenantLoad(0, 2, (5, 7)), 3: TenantLoad(1, 1, (1, 9))}
    # order [7, 1, 9, 8, 2, 3]: tenant 1's documents are 2nd, 5th and 6th
    assert [position(loads, 1, k) for k in range(3)] == [2, 5, 6]
    assert [position(loads, 2, k) for k in range(2)] == [1, 4]
    assert position(loads, 3, 0) == 3


@given(
    st.lists(
        st.tuples(st.integers(0, 3), st.integers(1, 5), st.integers(0, 20)),
        min_size=1,
        max_size=5,
    )
)
def test_the_closed_form_position_is_the_place_in_round_robin_order(tenants):
    queues, loads, next_id = [], {}, 0
    for tenant_id, (in_flight, waiting, age) in enumerate(tenants, start=1):
        ids = list(range(next_id, next_id + waiting))
        next_id += waiting
        queues.append(TenantQueue(tenant_id, in_flight, ids, (age, ids[0])))
        loads[tenant_id] = TenantLoad(in_flight, waiting, (age, ids[0]))
    order = round_robin(queues)
    for queue in queues:
        for k, document_id in enumerate(queue.waiting):
            assert position(loads, queue.tenant_id, k) == order.index(document_id) + 1
