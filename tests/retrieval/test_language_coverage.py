"""The language rule: a query mostly written in scripts the knowledge base's embedding model does
not cover is searched without the vector leg, unless the request set the weights or the mode.

Pure parts (scripts of a text, models' declarations) without a database; the rule through
RAGService; the demo knowledge base with the packaged English-only local model."""

from collections import Counter

import pytest
from django.core.management import call_command

from knowledge.analysis.scripts import Script, dominant_script, script_units, uncovered_share
from knowledge.embeddings.coverage import (
    ALL,
    LATIN_ONLY,
    coverage,
    model_coverage,
    parse_scripts,
)
from knowledge.models import KnowledgeBase
from knowledge.services.knowledge_bases import create_knowledge_base, update_knowledge_base
from retrieval.search import RAGService
from tests.factories import TenantFactory, add_document


def test_scripts_are_counted_by_character_for_han_and_kana_and_by_word_elsewhere():
    assert script_units("sensor calibration") == Counter({Script.LATIN: 2})
    assert script_units("传感器校准") == Counter({Script.HAN: 5})
    assert script_units("TH01 传感器 calibration?") == Counter({Script.LATIN: 2, Script.HAN: 3})
    assert script_units("カタカナ") == Counter({Script.KANA: 4})
    assert script_units("한국어 문서") == Counter({Script.HANGUL: 2})
    assert script_units("Привет мир") == Counter({Script.CYRILLIC: 2})
    assert script_units("2024-01-01 ... 42%") == Counter()  # digits and punctuation do not vote
    assert script_units("café Zürich") == Counter({Script.LATIN: 2})


def test_the_dominant_script_and_the_share_outside_a_coverage():
    units = script_units("传感器校准周期是多久")
    assert dominant_script(units) is Script.HAN
    assert uncovered_share(units, LATIN_ONLY) == 1.0
    assert uncovered_share(units, ALL) == 0.0
    mixed = script_units("How often is the TH01 传感器 calibrated")  # 6 words, 3 characters
    assert dominant_script(mixed) is Script.LATIN
    assert uncovered_share(mixed, LATIN_ONLY) == pytest.approx(3 / 9)
    assert dominant_script(Counter()) is None
    assert uncovered_share(Counter(), LATIN_ONLY) == 0.0


def test_models_declare_their_coverage_and_a_knowledge_base_may_override_it():
    assert model_coverage("local", "all-MiniLM-L6-v2") == LATIN_ONLY
    assert model_coverage("local", "/models/all-minilm-l6-v2/") == LATIN_ONLY
    assert model_coverage("openai", "BAAI/bge-small-en-v1.5") == LATIN_ONLY
    assert model_coverage("openai", "text-embedding-3-small") == ALL
    assert model_coverage("local", "paraphrase-multilingual-MiniLM-L12-v2") == ALL
    assert model_coverage("hash", "hash-384") == ALL  # not semantic in any script
    assert coverage("openai", "text-embedding-3-small", "latin") == LATIN_ONLY
    assert coverage("local", "all-MiniLM-L6-v2", "*") == ALL
    assert parse_scripts(" Latin, han ") == frozenset({Script.LATIN, Script.HAN})
    assert parse_scripts("") is None
    with pytest.raises(ValueError, match="unknown script 'klingon'"):
        parse_scripts("latin, klingon")


@pytest.fixture
def english_model_kb(db):
    """A knowledge base that declares its model covers the Latin script only (as the packaged
    English model declares itself; the vectors come from the hash embedder of the tests)."""
    tenant = TenantFactory()
    kb = create_knowledge_base(
        tenant=tenant,
        name="Sensors",
        weight_mode=KnowledgeBase.WeightMode.FIXED,
        embedding_scripts="latin",
    )
    add_document(kb, "zh.txt", "传感器每六个月校准一次。")
    add_document(kb, "en.txt", "The pump seal is replaced every year.")
    add_document(kb, "install.txt", "安装传感器时请先断电。Mount the sensor on the wall.")
    kb.refresh_from_db()
    return tenant, kb


def test_a_chinese_query_on_an_english_model_runs_the_keyword_leg_only(english_model_kb):
    tenant, kb = english_model_kb
    result = RAGService(tenant).search("传感器校准周期是多久", kb.pk)
    trace = result.trace
    assert trace.query_script == "han"
    assert trace.retrieval_path == ["keyword"]
    assert trace.weights == {"vector": 0.0, "keyword": kb.keyword_weight}
    assert trace.weight_source == "fixed"
    assert "vector leg off" in trace.knowledge_bases[0].language
    assert f"{kb.embedding_model} embeds latin" in trace.knowledge_bases[0].language
    assert trace.warnings == []
    assert "每六个月" in result.hits[0].content


def test_an_english_query_keeps_both_legs(english_model_kb):
    tenant, kb = english_model_kb
    trace = RAGService(tenant).search("pump seal", kb.pk).trace
    assert trace.query_script == "latin"
    assert trace.retrieval_path == ["vector", "keyword", "fusion"]
    assert trace.knowledge_bases[0].language is None


def test_weights_or_a_vector_mode_given_with_the_request_are_honoured_with_a_warning(
    english_model_kb,
):
    tenant, kb = english_model_kb
    service = RAGService(tenant)
    trace = service.search("传感器校准", kb.pk, vector_weight=0.7, keyword_weight=0.3).trace
    assert trace.retrieval_path == ["vector", "keyword", "fusion"]
    assert trace.weights == {"vector": 0.7, "keyword": 0.3}
    assert len(trace.warnings) == 1 and "runs as the request asked" in trace.warnings[0]
    trace = service.search("传感器校准", kb.pk, mode="vector").trace
    assert trace.retrieval_path == ["vector"]
    assert "han text" in trace.warnings[0]


def test_a_knowledge_base_declaring_its_model_multilingual_keeps_the_vector_leg(
    english_model_kb,
):
    tenant, kb = english_model_kb
    update_knowledge_base(tenant=tenant, knowledge_base=kb, changes={"embedding_scripts": "*"})
    trace = RAGService(tenant).search("传感器校准周期是多久", kb.pk).trace
    assert trace.retrieval_path == ["vector", "keyword", "fusion"]


@pytest.mark.django_db
def test_the_demo_answers_the_chinese_calibration_question_first(settings, monkeypatch):
    """The demo of `make run`, with the packaged English-only local model: 14 chunks, too few
    to calibrate, so the fixed default weights apply; the answer comes first."""
    settings.EMBEDDING_PROVIDER = "local"
    settings.EMBEDDING_MODEL = ""
    monkeypatch.setenv("RAG_DEMO_PASSWORD", "a-long-demo-password")
    call_command("seed_demo", "--sync", stdout=None)
    kb = KnowledgeBase.objects.get(name="Demo knowledge base")
    assert kb.embedding_provider == "local" and kb.calibrated_vector_weight is None
    result = RAGService(kb.tenant).search("传感器校准周期是多久", kb.pk, top_k=3)
    assert "每六个月校准一次" in result.hits[0].content
    assert result.trace.retrieval_path == ["keyword"]
    english = RAGService(kb.tenant).search("How often is the sensor calibrated?", kb.pk)
    assert english.trace.retrieval_path == ["vector", "keyword", "fusion"]
