"""The examples of docs/langchain.md, run exactly as written, so the documentation
cannot drift: the agent-side one in a separate process without Django, against the live API."""

import re
import subprocess
import sys

import pytest
from rag_kb_client.langchain import RemoteKnowledgeBaseRetriever

from retrieval.langchain import KnowledgeBaseRetriever
from retrieval.search import RAGService
from tests.conftest import CEILING_S, REPO, subprocess_env
from tests.factories import TenantFactory
from tests.langchain.conftest import make_manuals

DOCS = REPO / "docs" / "langchain.md"
QUERY = "mechanical seal of the P-100 pump"  # the example's tool query
NO_DJANGO = "\nimport sys\nassert not [m for m in sys.modules if m.split('.')[0] == 'django']\n"


def examples() -> list[str]:
    return re.findall(r"^```python\n(.*?)^```$", DOCS.read_text(), flags=re.S | re.M)


def test_the_agent_side_example_runs_in_an_agents_process(search_api, tenant):
    kb = make_manuals(tenant)
    key = search_api.add_key(tenant)
    # The example's retriever gives each request its default 30 s. The first search of a
    # knowledge base in the server does first-time work (its BM25 index and vectors loaded,
    # the analyzer's dictionary), which a loaded machine can stretch past that: the same two
    # searches go through the live API first, waiting as long as they take, so the example
    # meets a server that is ready. (The live server runs in this process.)
    for query in ("How often is the temperature sensor calibrated?", QUERY):
        RemoteKnowledgeBaseRetriever(
            base_url=search_api.url,
            api_key=key,
            knowledge_base_id=kb.pk,
            timeout=search_api.timeout,
        ).invoke(query, k=3)
    env = subprocess_env(RAG_URL=search_api.url, RAG_API_KEY=key, RAG_KB_ID=str(kb.pk))
    env.pop("DJANGO_SETTINGS_MODULE", None)
    agent = subprocess.run(
        [sys.executable, "-c", examples()[0] + NO_DJANGO],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=CEILING_S,
    )
    assert agent.returncode == 0, agent.stderr
    retriever = KnowledgeBaseRetriever(tenant=tenant, knowledge_base_id=kb.pk, k=3)
    found = retriever.invoke("How often is the temperature sensor calibrated?")
    hits = RAGService(tenant).search(QUERY, kb.pk, top_k=3).hits
    assert agent.stdout.splitlines()[:3] == [
        f"{round(d.metadata['score'], 3)} {d.metadata['document_title']} {d.metadata['source']}"
        for d in found
    ]
    assert agent.stdout.split("\n", 3)[3] == RAGService.format_for_tool_output(hits) + "\n"
    assert "Pump handbook" in agent.stdout.split("\n", 3)[3].split("\n\n")[1]


@pytest.mark.django_db
def test_the_server_side_example_runs(capsys):
    tenant = TenantFactory(slug="acme")
    namespace: dict = {}
    exec(examples()[1], namespace)
    assert capsys.readouterr().out.splitlines() == [
        "[Document(id='log-18', metadata={'shift': 'day'}, "
        "page_content='Valve V-7 stays closed during cleaning.')]",
        "2",
        "['log-17']",
    ]
    assert [d.id for d in namespace["same_search"].invoke("P-100 seal")] == ["log-17"]
    assert namespace["store"].tenant == tenant
