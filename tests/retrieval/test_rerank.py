"""Rerank providers. The HTTP styles talk to a real local server speaking each API
(``FakeRerankServer``), so batching, retries, timeouts and answer checking run for real; the
local provider loads a tiny cross-encoder that the test builds on disk."""

import json
import math
import threading

import pytest

from retrieval.rerank import RerankConfig, RerankError, get_reranker, rerank_config_from_settings
from retrieval.rerank.http import HttpReranker
from retrieval.rerank.local import LocalReranker
from tests.fake_services import FakeRerankServer, Scripted, fake_relevance

QUERY = "how many people live in berlin"
DOCS = [
    "berlin is the capital",
    "paris is the capital of france",
    "the river of the city",
    "museums of berlin",
    "many people live in paris",
]
MODELS = {"cohere": "rerank-v3.5", "jina": "jina-reranker-v2-base-multilingual", "tei": ""}


def config(server: FakeRerankServer, **overrides) -> RerankConfig:
    values = dict(
        provider="http",
        api_style=server.style,
        base_url=server.base_url,
        api_key="rk-test",
        model=MODELS[server.style],
        timeout_s=2.0,
        max_retries=2,
        backoff_s=0.01,
    )
    values.update(overrides)
    return RerankConfig(**values)


def expected_scores(documents: list[str]) -> list[float]:
    return [fake_relevance(QUERY, text) for text in documents]


# --------------------------------------------------------------------------- http: contract


@pytest.mark.parametrize(
    ("style", "path", "body"),
    [
        (
            "cohere",
            "/v1/rerank",
            {
                "model": "rerank-v3.5",
                "query": QUERY,
                "documents": DOCS,
                "top_n": len(DOCS),
                "return_documents": False,
            },
        ),
        (
            "jina",
            "/v1/rerank",
            {
                "model": "jina-reranker-v2-base-multilingual",
                "query": QUERY,
                "documents": DOCS,
                "top_n": len(DOCS),
                "return_documents": False,
            },
        ),
        (
            "tei",
            "/rerank",
            {"query": QUERY, "texts": DOCS, "raw_scores": False, "truncate": True},
        ),
    ],
)
def test_each_style_sends_the_request_its_api_defines(style, path, body):
    with FakeRerankServer(style) as server:
        HttpReranker(config(server)).rerank(QUERY, DOCS)
    [request] = server.requests
    assert request["path"] == path
    assert request["json"] == body
    assert request["auth"] == "Bearer rk-test"


@pytest.mark.parametrize("style", ["cohere", "jina", "tei"])
def test_scores_come_back_in_input_order_although_the_api_sorts_them(style):
    expected = expected_scores(DOCS)
    assert expected != sorted(expected, reverse=True)  # the server's order is not the input's
    with FakeRerankServer(style) as server:
        reranker = HttpReranker(config(server))
        scores = reranker.rerank(QUERY, DOCS)
    assert scores == expected
    assert reranker.name == f"http:{style}:{MODELS[style] or server.base_url}"


def test_no_api_key_sends_no_authorization_header():
    with FakeRerankServer("tei") as server:
        HttpReranker(config(server, api_key="")).rerank(QUERY, DOCS)
    assert server.requests[0]["auth"] is None


@pytest.mark.parametrize("style", ["cohere", "tei"])
def test_no_documents_need_no_request(style):
    with FakeRerankServer(style) as server:
        assert HttpReranker(config(server)).rerank(QUERY, []) == []
    assert server.requests == []


def test_tei_gets_batches_of_its_default_client_limit():
    documents = [f"document {i} about berlin" for i in range(70)]
    with FakeRerankServer("tei") as server:
        scores = HttpReranker(config(server)).rerank(QUERY, documents)
    assert [len(r["json"]["texts"]) for r in server.requests] == [32, 32, 6]
    assert scores == expected_scores(documents)


def test_a_configured_batch_size_splits_cohere_requests_and_keeps_order():
    with FakeRerankServer("cohere") as server:
        scores = HttpReranker(config(server, batch_size=2)).rerank(QUERY, DOCS)
    assert [r["json"]["top_n"] for r in server.requests] == [2, 2, 1]
    assert scores == expected_scores(DOCS)


# --------------------------------------------------------------------------- http: failures


def test_429_and_5xx_are_retried_then_succeed():
    with FakeRerankServer("cohere") as server:
        server.script = [Scripted(429, headers={"Retry-After": "0"}), Scripted(503)]
        scores = HttpReranker(config(server)).rerank(QUERY, DOCS)
    assert len(server.requests) == 3
    assert scores == expected_scores(DOCS)


def test_5xx_exhausted_names_the_status_and_the_attempts():
    with FakeRerankServer("jina") as server:
        server.script = [Scripted(503)] * 10
        with pytest.raises(RerankError, match=r"answered 503, 3 attempts"):
            HttpReranker(config(server, max_retries=2)).rerank(QUERY, DOCS)
    assert len(server.requests) == 3  # 1 + max_retries, not forever


def test_a_timeout_is_retried():
    with FakeRerankServer("tei") as server:
        # Held until the test ends: only a client that gives up at its timeout gets scores.
        server.script = [Scripted(held=True)]
        scores = HttpReranker(config(server, timeout_s=1.0)).rerank(QUERY, DOCS)
    # The held request and the answered one (one more if a loaded machine made an answer miss
    # the timeout too; the retry budget covers that).
    assert len(server.requests) >= 2
    assert scores == expected_scores(DOCS)


def test_timeouts_exhausted_say_so():
    with FakeRerankServer("cohere") as server:
        server.script = [Scripted(held=True)] * 3
        with pytest.raises(RerankError, match=r"timed out after 0.1 s, 3 attempts"):
            HttpReranker(config(server, timeout_s=0.1, max_retries=2)).rerank(QUERY, DOCS)
        # The server may record the last request after the client has given up on it.
        assert len(server.wait_for_requests(3)) == 3


@pytest.mark.parametrize(
    ("status", "hint"),
    [(400, "RERANK_MODEL"), (401, "RERANK_API_KEY"), (404, "RERANK_BASE_URL"), (422, "")],
)
def test_other_4xx_are_not_retried(status, hint):
    with FakeRerankServer("cohere") as server:
        server.script = [Scripted(status)] * 3
        with pytest.raises(RerankError, match=rf"answered {status}: .*{hint}"):
            HttpReranker(config(server)).rerank(QUERY, DOCS)
    assert len(server.requests) == 1


def test_a_base_url_missing_the_version_is_a_404_naming_the_url():
    with FakeRerankServer("cohere") as server:
        root = server.base_url.removesuffix("/v1")
        with pytest.raises(RerankError, match=r"answered 404.*RERANK_BASE_URL .*/rerank"):
            HttpReranker(config(server, base_url=root)).rerank(QUERY, DOCS)


def test_tei_refusing_the_batch_size_says_which_flag_to_raise():
    refusal = b'{"error": "batch size 32 > maximum allowed batch size 16", "error_type": "x"}'
    with FakeRerankServer("tei") as server:
        server.script = [Scripted(413, body=refusal)]
        with pytest.raises(RerankError, match="--max-client-batch-size"):
            HttpReranker(config(server)).rerank(QUERY, DOCS)
    assert len(server.requests) == 1


def results(*pairs) -> dict:
    return {"results": [{"index": i, "relevance_score": score} for i, score in pairs]}


@pytest.mark.parametrize(
    ("style", "body"),
    [
        pytest.param("cohere", b"<html>502 bad gateway</html>", id="not-json"),
        pytest.param(
            "cohere",
            {"results": [{"relevance_score": 0.9}, {"relevance_score": 0.1}]},
            id="no-index",
        ),
        pytest.param("cohere", results((0, 0.9), (0, 0.1)), id="duplicate-index"),
        pytest.param("jina", results((1, 0.9)), id="too-few"),
        pytest.param("jina", results((0, 0.9), (2, 0.1)), id="index-out-of-range"),
        pytest.param("jina", results((0, 0.9), (True, 0.1)), id="index-not-an-int"),
        pytest.param("cohere", results((0, "high"), (1, 0.1)), id="score-not-a-number"),
        pytest.param("cohere", results((0, math.nan), (1, 0.1)), id="score-nan"),
        pytest.param("cohere", [{"index": 0, "score": 0.9}], id="tei-answer-to-cohere"),
        pytest.param("tei", {"results": [{"index": 0, "score": 0.9}]}, id="object-answer-to-tei"),
        pytest.param("tei", [{"index": 0, "score": 0.9}, {"index": 1}], id="tei-no-score"),
        pytest.param(
            "tei",
            [{"index": 0, "score": 0.9}, {"index": 1, "score": 0.1}, {"index": 1, "score": 0.2}],
            id="tei-too-many",
        ),
    ],
)
def test_garbage_answers_are_errors_not_scores(style, body):
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()  # NaN stays NaN
    with FakeRerankServer(style) as server:
        server.script = [Scripted(200, body=raw)]
        with pytest.raises(RerankError, match=rf"unexpected answer .*RERANK_API_STYLE={style}"):
            HttpReranker(config(server)).rerank(QUERY, DOCS[:2])
    assert len(server.requests) == 1  # a garbled answer is not retried


def test_http_configuration_errors_say_what_to_set():
    with pytest.raises(RerankError, match="RERANK_BASE_URL"):
        HttpReranker(RerankConfig(provider="http", model="rerank-v3.5"))
    with pytest.raises(RerankError, match="RERANK_MODEL"):
        HttpReranker(RerankConfig(provider="http", base_url="https://api.cohere.com/v2"))
    tei = HttpReranker(RerankConfig(provider="http", api_style="tei", base_url="http://tei:80"))
    assert tei.name == "http:tei:http://tei:80"  # TEI serves one model and takes no name


# --------------------------------------------------------------------------- local


@pytest.fixture(scope="module")
def tiny_cross_encoder(tmp_path_factory):
    """A randomly initialised one-layer BERT cross-encoder over the words of the test texts."""
    import torch
    from transformers import BertConfig, BertForSequenceClassification, BertTokenizerFast

    path = tmp_path_factory.mktemp("tiny-cross-encoder")
    words = sorted({word for text in [QUERY, *DOCS] for word in text.split()})
    vocab = path / "vocab.txt"
    vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *words]) + "\n")
    torch.manual_seed(0)
    bert = BertConfig(
        vocab_size=5 + len(words),
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=64,
        num_labels=1,
        initializer_range=0.5,  # random weights that tell the documents apart
        # Saved like cross-encoder/ms-marco-MiniLM-L6-v2: raw logits unless the reranker says
        # otherwise.
        sbert_ce_default_activation_function="torch.nn.modules.linear.Identity",
    )
    BertForSequenceClassification(bert).save_pretrained(path)
    BertTokenizerFast(vocab_file=str(vocab), model_max_length=64).save_pretrained(path)
    return path


def test_local_scores_each_document_once_in_input_order(tiny_cross_encoder):
    reranker = LocalReranker(str(tiny_cross_encoder))
    scores = reranker.rerank(QUERY, DOCS)
    assert reranker.name == f"local:{tiny_cross_encoder.resolve()}"
    assert len(scores) == len(DOCS)
    assert all(type(s) is float and math.isfinite(s) and 0.0 < s < 1.0 for s in scores)  # sigmoid
    assert len(set(scores)) > 1
    assert reranker.rerank(QUERY, DOCS) == scores  # deterministic
    assert reranker.rerank(QUERY, DOCS[::-1]) == pytest.approx(scores[::-1], rel=1e-5)
    assert reranker.rerank(QUERY, []) == []


def test_local_model_loads_once_and_serves_threads_at_once(tiny_cross_encoder):
    first, second = LocalReranker(str(tiny_cross_encoder)), LocalReranker(str(tiny_cross_encoder))
    assert first._model is second._model
    expected = first.rerank(QUERY, DOCS)
    results: list[list[float] | Exception] = []
    start = threading.Barrier(4)

    def work() -> None:
        start.wait()
        try:
            results.append(second.rerank(QUERY, DOCS))
        except Exception as exc:  # surfaced by the assertion below
            results.append(exc)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results == [expected] * 4


@pytest.mark.parametrize("model", ["cross-encoder/ms-marco-MiniLM-L6-v2", "", "model.bin"])
def test_local_model_must_be_a_directory(model, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "model.bin").write_bytes(b"weights")
    with pytest.raises(RerankError, match=r"is not a directory.*never downloads"):
        LocalReranker(model)


def test_a_directory_without_a_model_is_a_clear_error(tmp_path):
    with pytest.raises(RerankError, match="could not load a cross-encoder"):
        LocalReranker(str(tmp_path))


# --------------------------------------------------------------------------- registry


def test_provider_none_means_no_reranker(settings):
    settings.RERANK_PROVIDER = "none"
    assert get_reranker() is None


@pytest.mark.parametrize("style", ["cohere", "jina", "tei"])
def test_provider_http_builds_the_configured_style_from_settings(style, settings):
    with FakeRerankServer(style) as server:
        settings.RERANK_PROVIDER = "http"
        settings.RERANK_API_STYLE = style
        settings.RERANK_BASE_URL = server.base_url
        settings.RERANK_API_KEY = "rk-settings"
        settings.RERANK_MODEL = MODELS[style]
        settings.RERANK_TIMEOUT_S = 3.0
        settings.RERANK_MAX_RETRIES = 1
        reranker = get_reranker()
        assert isinstance(reranker, HttpReranker)
        assert reranker.style == style
        assert get_reranker() is reranker  # cached per configuration
        assert reranker.rerank(QUERY, DOCS) == expected_scores(DOCS)
    assert server.requests[0]["auth"] == "Bearer rk-settings"
    config = rerank_config_from_settings()
    assert (config.timeout_s, config.max_retries) == (3.0, 1)


def test_provider_local_builds_the_cross_encoder_from_settings(settings, tiny_cross_encoder):
    settings.RERANK_PROVIDER = "local"
    settings.RERANK_MODEL = str(tiny_cross_encoder)
    reranker = get_reranker()
    assert isinstance(reranker, LocalReranker)
    assert len(reranker.rerank(QUERY, DOCS)) == len(DOCS)


@pytest.mark.parametrize(
    ("provider", "style", "accepted"),
    [("cohere", "cohere", "none, http, local"), ("http", "openai", "cohere, jina, tei")],
)
def test_unknown_provider_or_style_lists_the_accepted_values(provider, style, accepted, settings):
    settings.RERANK_PROVIDER = provider
    settings.RERANK_API_STYLE = style
    settings.RERANK_BASE_URL = "https://api.cohere.com/v2"
    settings.RERANK_MODEL = "rerank-v3.5"
    with pytest.raises(RerankError, match=accepted):
        get_reranker()
