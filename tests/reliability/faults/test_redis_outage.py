"""Redis stopped under a running deployment: searches keep answering from L1/L3 (L2 skipped,
the outage logged), uploads made meanwhile wait as ``pending``, and once Redis is back the
worker reconnects and the reaper queues them: they become ready with nobody doing anything."""

import time

import pytest

from tests.reliability.faults.stack import wait_for

pytestmark = pytest.mark.reliability

DOCS = {
    "pumps.md": "# Pump handbook\n\nThe P-100 centrifugal pump moves cooling water. "
    "Replace the mechanical seal when it drips.",
    "valves.md": "# Valve guide\n\nValve V-7 is a gate valve. Keep it closed during cleaning.",
    "传感器.md": "# 温度传感器\n\n温度传感器每六个月校准一次。校准时使用标准温度计。",
}


def upload(client, kb, name, text):
    response = client.post(f"/knowledge-bases/{kb}/documents", files={"files": (name, text)})
    assert response.status_code == 202, response.text
    return response.json()["documents"][0]["id"]


def search(client, kb, query):
    response = client.post(f"/knowledge-bases/{kb}/search", json={"query": query, "top_k": 5})
    assert response.status_code == 200, response.text
    return response.json()


def test_redis_stopped_during_searches_and_uploads(stack_factory):
    """Redis stopped: searches 200 with the same hits, uploads wait, all resumes by itself"""
    stack = stack_factory(RAG_STUCK_AFTER_S="3", RAG_REAPER_INTERVAL_S="2")
    stack.start_web()
    stack.start_worker(beat=True)
    with stack.client() as client:
        ids = [upload(client, stack.kb, name, text) for name, text in DOCS.items()]
        for document_id in ids:
            assert stack.wait_final(client, document_id)["status"] == "ready"
        before = {q: search(client, stack.kb, q) for q in ("mechanical seal", "校准", "valve")}
        assert all(body["results"] for body in before.values())

        stack.stop_redis()
        started = time.monotonic()
        while time.monotonic() - started < 8:  # every web thread meets the outage
            for query, body in before.items():
                answer = search(client, stack.kb, query)
                assert [h["chunk_id"] for h in answer["results"]] == [
                    h["chunk_id"] for h in body["results"]
                ]
        assert client.get("/me").status_code == 200  # throttling lets requests through
        # /healthz checks at most every RAG_HEALTH_INTERVAL_S: it says so within that.
        health = wait_for(
            lambda: (answer := client.get(f"{stack.url}/healthz")).status_code == 503 and answer,
            timeout=30,
            what="/healthz to answer 503",
        )
        assert "redis" in health.text.lower()  # the development profile's full report

        waiting = upload(client, stack.kb, "late.md", "# Late note\n\nThe Z-9 compressor hums.")
        time.sleep(6)  # longer than RAG_STUCK_AFTER_S: the reaper cannot queue it either
        assert stack.document(client, waiting)["status"] == "pending"
        hits = search(client, stack.kb, "compressor Z-9")["results"]
        assert waiting not in {h["document_id"] for h in hits}

        stack.start_redis()
        done = stack.wait_final(client, waiting, timeout=120)
        assert done["status"] == "ready", done
        hits = search(client, stack.kb, "compressor Z-9")["results"]
        assert hits and hits[0]["document_id"] == waiting
        # Earlier searches still find what they found, now with Redis (L2) back.
        wait_for(lambda: client.get(f"{stack.url}/healthz").status_code == 200, timeout=30)
        for query, body in before.items():
            found = {h["chunk_id"] for h in search(client, stack.kb, query)["results"]}
            assert {h["chunk_id"] for h in body["results"]} <= found
    web_log = stack.log_text("web")
    assert "Traceback" not in web_log, web_log[-3000:]
    assert "redis" in web_log.lower()  # the outage was logged
