"""Requests that race for the same name or row: the database's constraints decide, and the
one that loses answers 409 (or 400 when it saw the winner first), never a 500."""

from __future__ import annotations

from functools import partial

import pytest

from knowledge.models import KnowledgeBase
from tests.api.conftest import make_kb
from tests.conftest import API, at_once, bearer

pytestmark = pytest.mark.django_db(transaction=True)
ROUNDS = 10


def create(raw: str, name: str) -> int:
    return bearer(raw).post(f"{API}/knowledge-bases/", {"name": name}, format="json").status_code


def rename(raw: str, ids, name: str) -> int:
    url = f"{API}/knowledge-bases/{next(ids)}/"
    return bearer(raw).patch(url, {"name": name}, format="json").status_code


def test_two_creations_of_one_name_make_one_and_refuse_the_other(tenant, make_key):
    raw = make_key(tenant)
    for round_ in range(ROUNDS):
        name = f"Manuals {round_}"
        statuses = sorted(at_once(2, partial(create, raw, name)))
        assert statuses[0] == 201 and statuses[1] in (400, 409), (round_, statuses)
        assert KnowledgeBase.objects.filter(tenant=tenant, name=name).count() == 1


def test_two_renames_to_one_name_rename_one_and_refuse_the_other(tenant, make_key):
    raw = make_key(tenant)
    for round_ in range(ROUNDS):
        first, second = make_kb(tenant, f"A {round_}"), make_kb(tenant, f"B {round_}")
        name = f"Renamed {round_}"
        statuses = sorted(at_once(2, partial(rename, raw, iter([first.pk, second.pk]), name)))
        assert statuses[0] == 200 and statuses[1] in (400, 409), (round_, statuses)
        assert KnowledgeBase.objects.filter(tenant=tenant, name=name).count() == 1
