"""Moving tenants, memberships and API keys to the tenancy app loses nothing: a database built
by the migrations before the move, with data in it, migrates forward and everything is still
there and usable (a key authenticates, a knowledge base answers searches, admin history and the
key's knowledge-base restriction follow; a key with restriction rows is marked restricted)."""

import hashlib
import json
import subprocess
import sys
import uuid

import psycopg
import pytest
from django.db import connection

from tests.conftest import CEILING_S, REPO, subprocess_env

# The leaves of the migration graph just before the move (what the previous release deployed).
OLD_LEAVES = [
    ("contenttypes", "0002_remove_content_type_name"),
    ("auth", "0012_alter_user_first_name_max_length"),
    ("admin", "0003_logentry_add_action_flag_choices"),
    ("sessions", "0001_initial"),
    ("knowledge", "0005_kb_langchain_provider"),
    ("retrieval", "0002_bm25_payload_storage_external"),
]
RAW_KEY = "rag_0a1b2c3d_" + "s" * 43


def _connect(dbname: str, **kwargs):
    params = connection.get_connection_params()
    params["dbname"] = dbname
    return psycopg.connect(**params, **kwargs)


def _run(database: str, *args: str) -> subprocess.CompletedProcess:
    env = subprocess_env(
        DJANGO_SETTINGS_MODULE="rag_project.settings.test", RAG_TEST_DB_NAME=database
    )
    result = subprocess.run(
        [sys.executable, *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=CEILING_S,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return result


def _insert(cur, table: str, **values) -> int:
    """INSERT one row (``now()`` for values given as NOW) and return its id."""
    columns = ", ".join(values)
    marks = ", ".join("now()" if v is NOW else "%s" for v in values.values())
    params = [v for v in values.values() if v is not NOW]
    cur.execute(f"INSERT INTO {table} ({columns}) VALUES ({marks}) RETURNING id", params)
    return cur.fetchone()[0]


NOW = object()


def _old_data(conn) -> dict:
    """Rows as the previous release wrote them (its tables, its content types)."""
    cur = conn.cursor()
    # The old release had no tenancy app: its content types were knowledge's (the partial
    # migrate created those from its migration state, and tenancy's from the installed app).
    cur.execute("DELETE FROM django_content_type WHERE app_label = 'tenancy'")
    cur.execute(
        "SELECT model, id FROM django_content_type WHERE app_label = 'knowledge' "
        "AND model IN ('tenant', 'membership', 'apikey')"
    )
    types = dict(cur.fetchall())
    assert set(types) == {"tenant", "membership", "apikey"}
    user = _insert(
        cur,
        "auth_user",
        password="!",
        is_superuser=False,
        username="ada",
        first_name="",
        last_name="",
        email="",
        is_staff=True,
        is_active=True,
        date_joined=NOW,
    )
    tenant = _insert(cur, "knowledge_tenant", name="Acme", slug="acme", created_at=NOW)
    _insert(
        cur, "knowledge_membership", user_id=user, tenant_id=tenant, role="editor", created_at=NOW
    )
    kb = _insert(
        cur,
        "knowledge_knowledgebase",
        tenant_id=tenant,
        name="Manuals",
        description="",
        chunk_size=1500,
        chunk_overlap=150,
        user_words=[],
        embedding_provider="none",
        embedding_model="",
        weight_mode="fixed",
        vector_weight=0.6,
        keyword_weight=0.4,
        top_k=5,
        candidate_multiplier=3,
        rerank_enabled=False,
        rerank_top_n=20,
        index_version=2,
        created_at=NOW,
        updated_at=NOW,
    )
    key = _insert(
        cur,
        "knowledge_apikey",
        tenant_id=tenant,
        name="ci",
        prefix=RAW_KEY[:12],
        secret_hash=hashlib.sha256(RAW_KEY.encode()).hexdigest(),
        scopes=["read"],
        created_at=NOW,
    )
    _insert(cur, "knowledge_apikey_knowledge_bases", apikey_id=key, knowledgebase_id=kb)
    _insert(
        cur,
        "knowledge_apikey",
        tenant_id=tenant,
        name="everything",
        prefix="rag_99999999",
        secret_hash="0" * 64,
        scopes=["read"],
        created_at=NOW,
    )
    document = _insert(
        cur,
        "knowledge_document",
        tenant_id=tenant,
        knowledge_base_id=kb,
        title="Pump manual",
        original_filename="pump.txt",
        file="documents/x",
        file_type="txt",
        size_bytes=60,
        sha256="a" * 64,
        status="ready",
        progress=100,
        error="",
        metadata="{}",
        chunk_count=1,
        analyzer_version=0,
        attempts=1,
        created_at=NOW,
        updated_at=NOW,
        processed_at=NOW,
    )
    _insert(
        cur,
        "knowledge_chunk",
        tenant_id=tenant,
        knowledge_base_id=kb,
        document_id=document,
        position=0,
        content="Replace the mechanical seal every 12 months.",
        tokens=["replac", "mechan", "seal", "month"],
        analyzer_version=0,
        embedding_model="",
        start_char=0,
        end_char=44,
        heading_path=[],
        metadata="{}",
        created_at=NOW,
    )
    _insert(
        cur,
        "django_admin_log",
        action_time=NOW,
        object_id=str(key),
        object_repr="ci",
        action_flag=1,
        change_message="[]",
        content_type_id=types["apikey"],
        user_id=user,
    )
    conn.commit()
    return {"tenant": tenant, "kb": kb, "key": key, "document": document, "user": user}


CHECK = """
import json, sys
import django
django.setup()
from django.contrib.admin.models import LogEntry
from knowledge.models import Chunk, Document, KnowledgeBase
from retrieval.search import RAGService
from tenancy.models import ApiKey, Membership, Tenant
from tenancy.selectors import find_api_key
ids = json.loads(sys.argv[1])
tenant = Tenant.objects.get(pk=ids["tenant"])
key = find_api_key(sys.argv[2])
kb = KnowledgeBase.objects.get(pk=ids["kb"])
hits = RAGService(tenant).search("seal", kb.pk, mode="keyword").hits
entry = LogEntry.objects.get(object_id=str(ids["key"]))
print(json.dumps({
    "tenant": [tenant.name, tenant.slug],
    "role": Membership.objects.get(tenant=tenant).role,
    "key": key.pk if key else None,
    "key_kbs": sorted(key.knowledge_bases.values_list("pk", flat=True)),
    "restricted": dict(ApiKey.objects.values_list("name", "restricted")),
    "kb_keys": sorted(kb.restricted_api_keys.values_list("pk", flat=True)),
    "tenant_kbs": sorted(tenant.knowledge_bases.values_list("pk", flat=True)),
    "documents": Document.objects.filter(tenant=tenant).count(),
    "chunks": Chunk.objects.filter(knowledge_base=kb).count(),
    "hits": [h.document_id for h in hits],
    "log_model": [entry.content_type.app_label, entry.content_type.model],
    "log_object": str(entry.get_edited_object().pk),
}))
"""


@pytest.mark.django_db
def test_a_database_of_the_previous_release_migrates_with_its_data():
    name = f"rag_premove_{uuid.uuid4().hex[:8]}"
    with _connect("postgres", autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        for app, migration in OLD_LEAVES:
            _run(name, "manage.py", "migrate", app, migration, "--noinput")
        with _connect(name) as conn:
            tables = {
                r[0]
                for r in conn.execute("select tablename from pg_tables where schemaname='public'")
            }
            assert {"knowledge_tenant", "knowledge_apikey", "knowledge_membership"} <= tables
            applied = {r[0] for r in conn.execute("select app from django_migrations")}
            assert "tenancy" not in applied  # the old schema, as the previous release left it
            ids = _old_data(conn)

        _run(name, "manage.py", "migrate", "--noinput")
        result = _run(name, "-c", CHECK, json.dumps(ids), RAW_KEY)
    finally:
        with _connect("postgres", autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    state = json.loads(result.stdout.strip().splitlines()[-1])
    assert state == {
        "tenant": ["Acme", "acme"],
        "role": "editor",
        "key": ids["key"],
        "key_kbs": [ids["kb"]],
        "restricted": {"ci": True, "everything": False},
        "kb_keys": [ids["key"]],
        "tenant_kbs": [ids["kb"]],
        "documents": 1,
        "chunks": 1,
        "hits": [ids["document"]],
        "log_model": ["tenancy", "apikey"],
        "log_object": str(ids["key"]),
    }
