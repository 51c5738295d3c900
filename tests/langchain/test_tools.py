"""The search tool for agents: format_for_tool_output over the local retriever (and the client
package's tool over the remote one), the documents as the tool message's artifact, and failures
as answers the agent can relay."""

import pytest
from asgiref.sync import sync_to_async
from langchain_core.messages import ToolMessage
from rag_kb_client.langchain import RemoteKnowledgeBaseRetriever
from rag_kb_client.langchain import create_search_tool as create_remote_search_tool

from retrieval.langchain import (
    KnowledgeBaseRetriever,
    KnowledgeBaseVectorStore,
    create_search_tool,
)
from retrieval.search import RAGService
from tests.langchain.conftest import make_manuals

QUERY = "How often is the temperature sensor calibrated?"


def expected(tenant, kb_id, top_k=3, max_chunks=5) -> str:
    hits = RAGService(tenant).search(QUERY, kb_id, top_k=top_k).hits
    return RAGService.format_for_tool_output(hits, max_chunks=max_chunks)


@pytest.mark.django_db
def test_the_tool_answers_with_format_for_tool_output(manuals):
    retriever = KnowledgeBaseRetriever(tenant=manuals.tenant, knowledge_base_id=manuals.pk, k=3)
    tool = create_search_tool(retriever, name="search_manuals", max_chunks=2)
    answer = tool.invoke({"query": QUERY})
    assert answer == expected(manuals.tenant, manuals.pk, max_chunks=2)
    assert answer.startswith("Found 3 relevant chunks; showing 2.\n\n[1] ")
    assert tool.name == "search_manuals"
    assert list(tool.args) == ["query"]


@pytest.mark.django_db
def test_a_tool_call_carries_the_documents_as_artifact(manuals):
    retriever = KnowledgeBaseRetriever(tenant=manuals.tenant, knowledge_base_id=manuals.pk, k=3)
    tool = create_search_tool(retriever)
    call = {"type": "tool_call", "id": "call-1", "name": tool.name, "args": {"query": QUERY}}
    message = tool.invoke(call)
    assert isinstance(message, ToolMessage) and message.tool_call_id == "call-1"
    assert message.content == expected(manuals.tenant, manuals.pk)
    assert [d.id for d in message.artifact] == [d.id for d in retriever.invoke(QUERY)]


@pytest.mark.django_db
def test_a_search_that_cannot_be_answered_is_the_tools_answer(manuals):
    missing = KnowledgeBaseRetriever(tenant=manuals.tenant, knowledge_base_id=manuals.pk + 999)
    tool = create_search_tool(missing)
    assert tool.invoke({"query": QUERY}) == f"Error: knowledge base {manuals.pk + 999} not found"
    own = create_search_tool(
        KnowledgeBaseRetriever(tenant=manuals.tenant, knowledge_base_id=manuals.pk)
    )
    assert own.invoke({"query": "   "}) == "Error: query is empty"


@pytest.mark.django_db
async def test_the_tool_searches_asynchronously(manuals):
    retriever = KnowledgeBaseRetriever(tenant=manuals.tenant, knowledge_base_id=manuals.pk, k=3)
    answer = await create_search_tool(retriever).ainvoke({"query": QUERY})
    assert answer == await sync_to_async(expected)(manuals.tenant, manuals.pk)


@pytest.mark.django_db
def test_the_tool_cites_plain_vector_search_results_by_their_metadata(tenant, embeddings):
    store = KnowledgeBaseVectorStore.from_texts(
        ["Calibrate the TH01 sensor every six months."],
        embeddings,
        [{"title": "Sensor schedule"}],
        tenant=tenant,
        name="Schedules",
    )
    answer = create_search_tool(store.as_retriever(search_kwargs={"k": 1})).invoke(
        {"query": "TH01"}
    )
    assert answer == (
        "Found 1 relevant chunk; showing 1.\n\n[1] Sensor schedule (score 0.000)\n"
        "Calibrate the TH01 sensor every six months."
    )


def test_the_tool_over_the_remote_retriever_answers_as_the_local_one(search_api, tenant):
    kb = make_manuals(tenant)
    retriever = RemoteKnowledgeBaseRetriever(
        base_url=search_api.url,
        api_key=search_api.add_key(tenant),
        knowledge_base_id=kb.pk,
        k=3,
        timeout=search_api.timeout,
    )
    answer = create_remote_search_tool(retriever).invoke({"query": QUERY})
    assert answer == expected(tenant, kb.pk)
    unreachable = retriever.model_copy(update={"base_url": "http://127.0.0.1:9", "max_retries": 0})
    answer = create_remote_search_tool(unreachable).invoke({"query": QUERY})
    assert answer.startswith("Error: could not reach the search API at http://127.0.0.1:9/")
