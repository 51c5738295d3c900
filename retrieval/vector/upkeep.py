"""Upkeep of the chunk table after large deletes: HNSW indexes rebuilt, then the table vacuumed
(pgvector's advice: faster than vacuuming the indexes), and the invalid indexes an interrupted
``REINDEX ... CONCURRENTLY`` left dropped; one process at a time (an advisory lock)."""

from __future__ import annotations

import logging
import time
from dataclasses import asdict, dataclass, field

from django.conf import settings
from django.db import connection

logger = logging.getLogger(__name__)

TABLE = "knowledge_chunk"
INDEX_PREFIX = "chunk_embedding_hnsw_"
LOCK_KEY = 7_340_021  # pg_try_advisory_lock key of this upkeep (any constant unique to it)


@dataclass
class TableHealth:
    live: int
    dead: int

    @property
    def dead_ratio(self) -> float:
        total = self.live + self.dead
        return self.dead / total if total else 0.0


@dataclass
class UpkeepReport:
    """What one run saw and did; ``reason`` says why it did nothing, if it did not."""

    live: int = 0
    dead: int = 0
    dropped_invalid: list[str] = field(default_factory=list)
    reindexed: list[str] = field(default_factory=list)
    vacuumed: bool = False
    seconds: float = 0.0
    reason: str = ""

    def to_dict(self) -> dict:
        return asdict(self)


def table_health() -> TableHealth:
    """Live and dead rows of the chunk table from PostgreSQL's statistics (this process's own
    pending counts flushed first, so a delete it just made is counted)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_force_next_flush()")
    with connection.cursor() as cursor:  # a new statement: the flush happened in between
        cursor.execute("SELECT pg_stat_clear_snapshot()")
        cursor.execute(
            "SELECT n_live_tup, n_dead_tup FROM pg_stat_user_tables WHERE relname = %s", [TABLE]
        )
        row = cursor.fetchone()
    return TableHealth(live=int(row[0]), dead=int(row[1])) if row else TableHealth(0, 0)


def hnsw_indexes(valid: bool) -> list[str]:
    """The chunk table's HNSW indexes that are valid (``True``) or left invalid (``False``)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.relname FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
            "WHERE i.indrelid = %s::regclass AND c.relname LIKE %s AND i.indisvalid = %s "
            "ORDER BY c.relname",
            [TABLE, INDEX_PREFIX + "%", valid],
        )
        return [name for (name,) in cursor.fetchall()]


def needs_upkeep(health: TableHealth) -> bool:
    return (
        health.dead >= settings.RAG_VACUUM_MIN_DEAD_ROWS
        and health.dead_ratio >= settings.RAG_VACUUM_DEAD_RATIO
    )


def tidy_chunk_table(force: bool = False) -> UpkeepReport:
    """Rebuild the HNSW indexes and vacuum the chunk table past the thresholds (or ``force``)."""
    if connection.in_atomic_block:
        raise RuntimeError("tidy_chunk_table runs outside a transaction (REINDEX/VACUUM)")
    started = time.monotonic()
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_lock(%s)", [LOCK_KEY])
        if not cursor.fetchone()[0]:
            return UpkeepReport(reason="another process is tidying the chunk table")
    try:
        health = table_health()
        report = UpkeepReport(live=health.live, dead=health.dead)
        if not force and not needs_upkeep(health):
            report.reason = (
                f"{health.dead} dead rows ({health.dead_ratio:.1%}): below "
                f"{settings.RAG_VACUUM_MIN_DEAD_ROWS} rows and "
                f"{settings.RAG_VACUUM_DEAD_RATIO:.0%} together"
            )
            return report
        with connection.cursor() as cursor:
            for name in hnsw_indexes(valid=False):
                cursor.execute(f'DROP INDEX CONCURRENTLY IF EXISTS "{name}"')
                report.dropped_invalid.append(name)
            for name in hnsw_indexes(valid=True):
                cursor.execute(f'REINDEX INDEX CONCURRENTLY "{name}"')
                report.reindexed.append(name)
            cursor.execute(f"VACUUM (ANALYZE) {TABLE}")
            report.vacuumed = True
        report.seconds = round(time.monotonic() - started, 3)
        logger.info(
            "chunk table tidied: %d dead of %d rows; reindexed %s; dropped %s; %.1f s",
            health.dead,
            health.live + health.dead,
            report.reindexed or "nothing",
            report.dropped_invalid or "nothing",
            report.seconds,
        )
        return report
    finally:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_unlock(%s)", [LOCK_KEY])
