"""Calibration by script: a knowledge base mixing Chinese and English chunks calibrates each
script on its own pseudo-queries, and a query takes its script's weights."""

import pytest

from knowledge.embeddings import EmbeddingConfig
from knowledge.services.knowledge_bases import create_knowledge_base
from retrieval.calibration import calibrate
from retrieval.search import RAGService
from tests.factories import add_document

pytestmark = pytest.mark.django_db

ENGLISH = [
    "The centrifugal pump moves cooling water through the loop.",
    "Replace the mechanical seal when the pump drips.",
    "The conveyor belt carries boxes to the loading dock.",
    "A gate valve stops the flow when it is closed.",
    "The thermocouple measures the casing temperature.",
    "Fire doors close by themselves when the alarm sounds.",
]
CHINESE = [
    "离心泵把冷却水送过管路。",
    "水泵滴水时更换机械密封。",
    "输送带把箱子送到装卸台。",
    "闸阀关闭时切断流量。",
    "热电偶测量外壳温度。",
    "火警响起时防火门自动关闭。",
]


@pytest.fixture
def mixed(tenant, settings):
    settings.RAG_CALIBRATION_MIN_CHUNKS = 5
    kb = create_knowledge_base(
        tenant=tenant, name="Mixed", embedding=EmbeddingConfig(provider="hash", dimensions=32)
    )
    for i, text in enumerate(ENGLISH):
        add_document(kb, f"en{i}.txt", text)
    for i, text in enumerate(CHINESE):
        add_document(kb, f"zh{i}.txt", text)
    return kb


def test_each_script_with_enough_chunks_is_calibrated_on_its_own(tenant, mixed):
    overall = calibrate(tenant, mixed)
    mixed.refresh_from_db()
    scripts = mixed.calibration["scripts"]
    assert set(scripts) == {"han", "latin"}
    for bucket in scripts.values():
        assert bucket["queries"] == 6 and bucket["chunks"] == 6
        assert bucket["vector_weight"] + bucket["keyword_weight"] == pytest.approx(1.0)
    assert mixed.calibrated_vector_weight == overall.vector_weight  # the whole KB's pair stays

    service = RAGService(tenant)
    chinese = service.search("更换机械密封", mixed.pk).trace
    assert chinese.weight_source == "calibrated:han"
    assert chinese.weights == {
        "vector": scripts["han"]["vector_weight"],
        "keyword": scripts["han"]["keyword_weight"],
    }
    english = service.search("replace the mechanical seal", mixed.pk).trace
    assert english.weight_source == "calibrated:latin"
    digits = service.search("2024", mixed.pk).trace  # no script: the whole KB's pair
    assert digits.weight_source == "calibrated"


def test_a_script_with_too_few_chunks_is_not_calibrated_alone(tenant, mixed, settings):
    settings.RAG_CALIBRATION_MIN_CHUNKS = 7
    calibrate(tenant, mixed)
    mixed.refresh_from_db()
    assert "scripts" not in mixed.calibration
    assert RAGService(tenant).search("更换机械密封", mixed.pk).trace.weight_source == "calibrated"
