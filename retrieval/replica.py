"""Which database serves a search's read-only queries: the primary, or a streaming replica.

With ``DATABASE_REPLICA_URL`` set there is a second Django database alias, ``replica``. A search
reads its knowledge bases' rows (with ``index_version``) from the primary, as it always did; then
``route_for`` asks the replica for the same rows' versions in one query, and the search's reads
go to the replica only if it holds at least every version the primary gave. The version is
bumped in the transaction of every change to a knowledge base's searchable chunks, and a
streaming replica replays transactions whole and in commit order, so a replica showing version
v shows every searchable chunk of version v: the answer is the one the primary would give (or a
newer one, as on the primary when a change commits mid-search). A replica behind, or one that
cannot be reached, sends the search to the primary, and the trace says so (``database``,
``replica_lag_fallback``, ``fallbacks``).

The read sites of a search name their database explicitly with ``using=search_reads()``:
the vector leg (matrix loads, the HNSW query, filter ids), the keyword leg (BM25 builds reading
stored tokens, the retry ladder's titles and first chunks) and the hydration of hits.
``search_reads()`` is the primary everywhere except inside ``reading_from(route)``, which the
search service opens around those steps (a context variable: per thread, per search).

Why not a Django database router: a router decides per model, for every read in the process.
Reads of a write path (a document's processing reading its knowledge base, the BM25 warm-up
after a change, calibration, API-key checks, the admin) would go to a replica that may not yet
hold the write they follow, and a lagging replica would then build and cache an index or answer
a permission check from the past. Here only the few read sites above can reach the replica, only
for a search that checked the replica's versions first, and everything else stays on the
primary without saying so.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, DatabaseError, connections

logger = logging.getLogger(__name__)

PRIMARY = DEFAULT_DB_ALIAS
REPLICA = "replica"

_reads: contextvars.ContextVar[str] = contextvars.ContextVar("rag_search_reads", default=PRIMARY)


def replica_configured() -> bool:
    """Whether ``DATABASE_REPLICA_URL`` gave a ``replica`` database."""
    return REPLICA in settings.DATABASES


def search_reads() -> str:
    """The database alias for a search's read-only queries: the one ``reading_from`` chose
    for the search running in this thread, else the primary."""
    return _reads.get()


@dataclass(frozen=True)
class Route:
    """Where one search reads, and why not the replica when there is one."""

    alias: str = PRIMARY
    lag_fallback: bool = False  # the replica was behind the primary's index_version
    fallback: str | None = None  # the note for trace.fallbacks

    @property
    def database(self) -> str:
        return "replica" if self.alias == REPLICA else "primary"


def route_for(tenant_id: int, versions: dict[int, int]) -> Route:
    """The route of a search over the knowledge bases ``{id: index_version}`` just read from
    the primary: the replica if it holds at least each of those versions, else the primary."""
    if not replica_configured() or not versions:
        return Route()
    try:
        seen = replica_versions(tenant_id, versions)
    except DatabaseError as exc:
        logger.warning("replica unavailable, searching the primary: %s", exc)
        return Route(fallback="replica unavailable -> primary")
    behind = [(pk, seen.get(pk), v) for pk, v in versions.items() if seen.get(pk, -1) < v]
    if behind:
        pk, there, wanted = behind[0]
        return Route(
            lag_fallback=True,
            fallback=f"replica behind (knowledge base {pk}: version {there} < {wanted}) -> primary",
        )
    return Route(REPLICA)


def replica_versions(tenant_id: int, ids: Iterable[int]) -> dict[int, int]:
    """``{id: index_version}`` of the tenant's knowledge bases as the replica has them now."""
    with connections[REPLICA].cursor() as cursor:
        cursor.execute(
            "SELECT id, index_version FROM knowledge_knowledgebase "
            "WHERE tenant_id = %s AND id = ANY(%s)",
            [tenant_id, list(ids)],
        )
        return {int(pk): int(version) for pk, version in cursor.fetchall()}


@contextlib.contextmanager
def reading_from(route: Route) -> Iterator[Route]:
    """Within this block (in this thread), ``search_reads()`` is the route's database."""
    token = _reads.set(route.alias)
    try:
        yield route
    finally:
        _reads.reset(token)
