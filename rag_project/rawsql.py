"""Helpers for the few queries on the search path written as raw SQL: the ORM compiles them
again on every request, which costs more CPU than running them.

``Columns`` reads a model's rows from a plain cursor: ``Manager.raw`` would do the same, but it
asks the cursor for its description, matches the columns to fields and builds the converters
again on every query (figures: docs/performance.md, "Figures behind choices in the code").
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


class Columns:
    """A model's concrete columns in a SELECT (``sql``, qualified with ``alias``) and how to turn
    them, read by a plain cursor, back into an instance (``load``), the fields' own database
    conversions applied (a JSONField's text decoded) as the ORM would."""

    def __init__(self, model, alias: str = "") -> None:
        fields = model._meta.concrete_fields
        prefix = f"{alias}." if alias else ""
        self.model = model
        self.attnames = [f.attname for f in fields]
        self.sql = ", ".join(f"{prefix}{f.column}" for f in fields)
        self._converted = [(i, f) for i, f in enumerate(fields) if hasattr(f, "from_db_value")]

    def __len__(self) -> int:
        return len(self.attnames)

    def load(self, values: Sequence[Any], connection) -> Any:
        """The instance of one row's values for these columns (in ``sql``'s order)."""
        if self._converted:
            values = list(values)
            for i, field in self._converted:
                values[i] = field.from_db_value(values[i], None, connection)
        return self.model.from_db(connection.alias, self.attnames, values)
