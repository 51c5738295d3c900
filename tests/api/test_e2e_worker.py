"""The whole path a program takes, with a real Celery worker: upload over the API, answered 202,
poll until ready, then search and get context."""

import pytest

from tests.api.conftest import API, make_kb, named_file, upload
from tests.builders import build_pdf
from tests.conftest import wait_until

CHINESE = "温度传感器每六个月校准一次。校准时使用标准温度计，并记录偏差。"


@pytest.mark.slow
@pytest.mark.e2e
def test_upload_poll_until_ready_then_search(celery_worker_process, tenant, client):
    kb = make_kb(tenant, "Manuals")
    pdf = build_pdf([["The P-100 pump manual."], ["Replace the mechanical seal every year."]])
    response = upload(
        client,
        kb.pk,
        named_file("manual.pdf", pdf),
        named_file("校准.txt", CHINESE.encode("gb18030")),
    )
    assert response.status_code == 202
    ids = [d["id"] for d in response.json()["documents"]]

    def finished() -> list[dict] | None:
        documents = [client.get(f"{API}/documents/{pk}").json() for pk in ids]
        return documents if all(d["status"] in ("ready", "failed") for d in documents) else None

    documents = wait_until(finished, "the worker to process both uploads", interval=0.3)
    assert [d["status"] for d in documents] == ["ready", "ready"], documents
    assert [d["progress"] for d in documents] == [100, 100]

    hits = client.post(
        f"{API}/knowledge-bases/{kb.pk}/search", {"query": "mechanical seal"}, format="json"
    ).json()["results"]
    assert hits[0]["original_filename"] == "manual.pdf" and hits[0]["page"] == 2
    context = client.post(
        f"{API}/knowledge-bases/{kb.pk}/context", {"query": "传感器校准"}, format="json"
    ).json()["context"]
    assert context.startswith("[1] 校准") and "Sources:" in context
