"""Japanese and Korean queries find a word inside longer text (kana and Hangul as bigrams)."""

import pytest

from knowledge.services.knowledge_bases import create_knowledge_base
from retrieval.search import RAGService
from tests.factories import TenantFactory, add_document


@pytest.mark.django_db
def test_japanese_and_korean_words_are_found_inside_longer_runs():
    tenant = TenantFactory()
    kb = create_knowledge_base(tenant=tenant, name="Manuals")
    add_document(kb, "ja.txt", "ポンプのメンテナンスマニュアルは年に一度更新されます。")
    add_document(kb, "ko.txt", "펌프유지보수설명서는 매년 갱신됩니다.")
    add_document(kb, "en.txt", "The pump manual is updated every year.")
    service = RAGService(tenant)
    ja = service.search("メンテナンス", kb.pk, mode="keyword").hits
    assert [hit.document_title for hit in ja] == ["ja"]
    ko = service.search("유지보수", kb.pk, mode="keyword").hits
    assert [hit.document_title for hit in ko] == ["ko"]
