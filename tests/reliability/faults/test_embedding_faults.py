"""The embedding provider answering 429, 500, garbage, or timing out, end to end through the
API with a real worker: bounded retries with backoff, then ``failed`` with a message; searches
meanwhile fall back to keyword and say so in the trace."""

import time

import pytest

from tests.fake_services import FakeEmbeddingsServer, Scripted

pytestmark = pytest.mark.reliability

RETRIES = 2  # EMBEDDING_MAX_RETRIES: 3 attempts per request

FAULTS = {
    "429": lambda: Scripted(status=429, headers={"Retry-After": "0"}),
    "500": lambda: Scripted(status=500),
    "garbage": lambda: Scripted(status=200, body=b"<html>not json</html>"),
    "wrong shape": lambda: Scripted(status=200, body=b'{"data": [{"embedding": "x"}]}'),
    "timeout": lambda: Scripted(delay_s=2.5),
}
MESSAGES = {"429": "429", "500": "500", "timeout": "timed out"}


@pytest.fixture(scope="module")
def provider():
    with FakeEmbeddingsServer(dimensions=8) as server:
        yield server


@pytest.fixture(scope="module")
def deployment(provider):
    from tests.reliability.faults.stack import Stack

    with Stack(
        embedding={
            "provider": "openai",
            "model": "m",
            "dimensions": 8,
            "base_url": provider.base_url,
        },
        EMBEDDING_BASE_URL=provider.base_url,
        EMBEDDING_MAX_RETRIES=str(RETRIES),
        EMBEDDING_TIMEOUT_S="1",
    ) as stack:
        stack.start_web(workers=1, threads=4)
        stack.start_worker()
        with stack.client() as client:
            response = client.post(
                f"/knowledge-bases/{stack.kb}/documents",
                files={"files": ("pumps.md", "# Pumps\n\nReplace the mechanical seal yearly.")},
            )
            good = response.json()["documents"][0]["id"]
            assert stack.wait_final(client, good)["status"] == "ready"
            # More documents, so "seal" (in one of them) has a positive BM25Okapi IDF.
            for name in ("motors.md", "filters.md", "gaskets.md"):
                response = client.post(
                    f"/knowledge-bases/{stack.kb}/documents",
                    files={"files": (name, f"# {name}\n\nNotes about {name[:-3]} upkeep.")},
                )
                filler = response.json()["documents"][0]["id"]
                assert stack.wait_final(client, filler)["status"] == "ready"
        stack.good = good
        yield stack


@pytest.mark.parametrize("fault", FAULTS)
def test_embedding_provider_fault(deployment, provider, fault):
    """Embedding provider fault: bounded retries, document failed with a message, keyword search"""
    stack = deployment
    persistent = fault not in ("garbage", "wrong shape")  # retried; garbage fails at once
    attempts = RETRIES + 1 if persistent else 1
    with stack.client() as client:
        provider.requests.clear()
        provider.script = [FAULTS[fault]() for _ in range(attempts)]
        started = time.monotonic()
        response = client.post(
            f"/knowledge-bases/{stack.kb}/documents",
            files={"files": (f"{fault}.md", f"# Valves {fault}\n\nValve V-7 stays closed.")},
        )
        assert response.status_code == 202
        document_id = response.json()["documents"][0]["id"]
        document = stack.wait_final(client, document_id, timeout=120)
        elapsed = time.monotonic() - started
        assert document["status"] == "failed", document
        assert document["error"] and (MESSAGES.get(fault, "") in document["error"]), document
        assert len(provider.requests) == attempts  # bounded: no retry beyond the limit
        if fault == "500":
            assert elapsed >= 0.5 + 1.0  # backoff 0.5 s, then 1 s, between the attempts
        chunks = client.get(f"/documents/{document_id}/chunks").json()
        assert chunks["count"] == 0

        # The same fault on the query: keyword search answers and says why.
        provider.script = [FAULTS[fault]() for _ in range(attempts)]
        answer = client.post(
            f"/knowledge-bases/{stack.kb}/search",
            json={"query": f"mechanical seal {fault}", "mode": "hybrid", "explain": True},
        )
        assert answer.status_code == 200, answer.text
        body = answer.json()
        assert body["trace"]["mode_used"] == "keyword", body["trace"]
        assert any("keyword" in f for f in body["trace"]["fallbacks"]), body["trace"]
        assert body["results"] and body["results"][0]["document_id"] == stack.good, str(
            body["trace"]
        )

        # The provider is fine again: a reprocess succeeds.
        provider.script = []
        assert client.post(f"/documents/{document_id}/reprocess").status_code == 202
        assert stack.wait_final(client, document_id, timeout=60)["status"] == "ready"
