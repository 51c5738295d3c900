"""Helpers for the few queries on the search path written as raw SQL (the ORM compiling them
again on every request cost more CPU than running them; see docs/performance.md, session 9)."""

from __future__ import annotations


def model_columns(model, alias: str = "") -> tuple[list[str], str]:
    """(attribute names, SQL column list) of ``model``'s concrete fields in the same order,
    the columns qualified with ``alias`` when given: what ``Model.from_db`` and
    ``Manager.raw`` turn back into instances."""
    fields = model._meta.concrete_fields
    prefix = f"{alias}." if alias else ""
    return [f.attname for f in fields], ", ".join(f"{prefix}{f.column}" for f in fields)
