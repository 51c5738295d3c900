"""Search filters: which chunks a search may return, as a request gives them. No Django
imports (the remote LangChain classes read them without Django); their SQL, which both legs
read, is ``retrieval.core.filter_sql``."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import date, datetime
from numbers import Integral, Real
from typing import Any


@dataclass(frozen=True)
class SearchFilters:
    """Scope a search like a session or a project. Metadata values match by equality, or by
    membership when given as a list: ``{"project": "apollo", "lang": ["en", "de"]}``.
    ``exclude_chunk_ids``: "not these chunks again" (an agent's recently seen chunks); the legs
    fetch that many more candidates and drop them, so it costs no scan of the allowed rows."""

    document_ids: tuple[int, ...] | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    max_age_days: float | None = None
    created_after: datetime | None = None
    created_before: datetime | None = None
    exclude_chunk_ids: frozenset[int] = frozenset()

    @property
    def active(self) -> bool:
        """Whether the filters narrow the search to an allowed set of chunks (exclusions
        alone do not: see ``without_excluded``)."""
        return bool(
            self.document_ids is not None
            or self.metadata
            or self.max_age_days is not None
            or self.created_after
            or self.created_before
        )

    @classmethod
    def from_dict(cls, value: SearchFilters | Mapping[str, Any] | None) -> SearchFilters:
        """Filters from their JSON shape, as the REST API takes them: ``document_ids`` any
        sequence of integers, ``metadata`` an object, ``max_age_days`` a number >= 0, the two
        dates ISO 8601 text or datetimes. A missing or null key filters nothing; a
        SearchFilters is returned as it is. Raises ValueError naming any unknown key or the
        key whose value has the wrong type."""
        if isinstance(value, SearchFilters):
            return value
        if value is None:
            return cls()
        if not isinstance(value, Mapping):
            raise ValueError(f"filters must be an object, not {type(value).__name__}")
        unknown = set(value) - set(cls.__dataclass_fields__)
        if unknown:
            raise ValueError(f"unknown filters: {', '.join(sorted(map(str, unknown)))}")
        return cls(
            document_ids=_document_ids(value.get("document_ids")),
            metadata=_metadata(value.get("metadata")),
            max_age_days=_days(value.get("max_age_days")),
            created_after=_moment("created_after", value.get("created_after")),
            created_before=_moment("created_before", value.get("created_before")),
            exclude_chunk_ids=frozenset(
                _ids("exclude_chunk_ids", value.get("exclude_chunk_ids")) or ()
            ),
        )

    def without_excluded(
        self, hits: list[tuple[int, float]], limit: int
    ) -> list[tuple[int, float]]:
        """``hits`` (chunk id, score), excluded chunks dropped, cut to ``limit``."""
        if not self.exclude_chunk_ids:
            return hits[:limit]
        return [hit for hit in hits if hit[0] not in self.exclude_chunk_ids][:limit]

    def to_dict(self) -> dict[str, Any]:
        """The active filters in their JSON shape (dates as ISO 8601 text), which
        ``from_dict`` reads back; empty when no filter is active."""
        shape: dict[str, Any] = {}
        if self.document_ids is not None:
            shape["document_ids"] = list(self.document_ids)
        if self.metadata:
            shape["metadata"] = self.metadata
        if self.max_age_days is not None:
            shape["max_age_days"] = self.max_age_days
        if self.created_after:
            shape["created_after"] = self.created_after.isoformat()
        if self.created_before:
            shape["created_before"] = self.created_before.isoformat()
        if self.exclude_chunk_ids:
            shape["exclude_chunk_ids"] = sorted(self.exclude_chunk_ids)
        return shape


def _document_ids(value: Any) -> tuple[int, ...] | None:
    return _ids("document_ids", value)


def _ids(name: str, value: Any) -> tuple[int, ...] | None:
    if value is None:
        return None
    if isinstance(value, str | bytes | Mapping) or not isinstance(value, Iterable):
        raise ValueError(f"{name} must be a list of integers")
    ids = tuple(value)
    if not all(isinstance(i, Integral) and not isinstance(i, bool) for i in ids):
        raise ValueError(f"{name} must be a list of integers")
    return tuple(int(i) for i in ids)


def _metadata(value: Any) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping) or not all(isinstance(key, str) for key in value):
        raise ValueError("metadata must be an object of field names to values")
    return dict(value)


def _days(value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, Real) or not math.isfinite(value):
        raise ValueError("max_age_days must be a number")
    if value < 0:
        raise ValueError("max_age_days must be >= 0")
    return value if isinstance(value, int | float) else float(value)


def _moment(name: str, value: Any) -> datetime | None:
    if value is None or isinstance(value, datetime):
        return value
    if isinstance(value, date):
        return datetime(value.year, value.month, value.day)
    if isinstance(value, str):
        try:
            return datetime.fromisoformat(value)
        except ValueError:
            pass
    raise ValueError(f"{name} must be an ISO 8601 date or date and time, not {value!r}")
