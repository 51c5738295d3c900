"""Two tenants, A and B, for the fuzz tests (tests/api/test_fuzz_rest.py, test_fuzz_dify.py,
tests/mcp/test_fuzz.py): each with a knowledge base, documents, a key, an owner and a web source,
named with a made-up word found nowhere else, so an answer holding anything of the other tenant
is told by its text; and the Hypothesis values they send, hostile ones among them."""

from __future__ import annotations

import contextlib
import json
import re
from dataclasses import dataclass, field
from typing import Any

from hypothesis import HealthCheck, Phase, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from knowledge.web.sources import create_web_source
from tenancy.models import ApiKey, Membership
from tenancy.services import create_api_key
from tests.api.conftest import make_kb
from tests.factories import MembershipFactory, TenantFactory, UserFactory, add_document

MISSING = 10**17  # an id no row has (18 digits fit the id converter)
RATES = {"api_key": "100000/min", "user": "100000/min"}


@dataclass
class Side:
    """One tenant's objects, its key and owner, and the strings that identify it."""

    word: str  # a made-up word in its names, titles and texts, nowhere else
    tenant: Any = None
    kb: Any = None
    documents: list = field(default_factory=list)
    chunks: list = field(default_factory=list)
    key: ApiKey | None = None
    raw_key: str = ""
    owner: Any = None
    source: Any = None

    @property
    def ids(self) -> dict[str, int]:
        """A real id per resource of the REST paths (``/api/v1/<resource>/{id}``)."""
        return {
            "knowledge-bases": self.kb.pk,
            "documents": self.documents[0].pk,
            "chunks": self.chunks[0],
            "api-keys": self.key.pk,
            "web-sources": self.source.pk,
        }

    @property
    def objects(self) -> dict[str, set[int]]:
        """Its ids by the keys an answer names them with."""
        return {
            "knowledge_base_id": {self.kb.pk},
            "document_id": {d.pk for d in self.documents},
            "chunk_id": set(self.chunks),
        }

    @property
    def secrets(self) -> list[str]:
        names = [self.kb.name, self.kb.description, self.tenant.name, self.tenant.slug]
        names += [d.title for d in self.documents] + [d.original_filename for d in self.documents]
        return [self.word, *names, self.key.prefix, self.owner.get_username()]


def make_side(name: str, word: str) -> Side:
    side = Side(word)
    side.tenant = TenantFactory(name=f"{name} Holdings", slug=f"{word}-holdings")
    user = UserFactory(username=f"{word}-owner")
    side.owner = MembershipFactory(tenant=side.tenant, user=user, role=Membership.Role.OWNER).user
    side.kb = make_kb(side.tenant, f"{name} vault", description=f"{name}'s {word} archive")
    side.documents = [
        add_document(
            side.kb,
            f"{word}-pumps.md",
            f"# {name} pump handbook\n\nThe {word} pump moves cooling water. Replace the "
            "mechanical seal when it drips.",
            metadata={"site": word, "category": "pumps"},
        ),
        add_document(
            side.kb,
            f"{word}-sensors.md",
            f"# {name} sensor notes\n\nThe {word} sensor reports the casing temperature every "
            "minute and alarms above 85 degrees.",
            metadata={"site": word, "category": "sensors"},
        ),
    ]
    side.chunks = [c.pk for d in side.documents for c in d.chunks.order_by("position")]
    side.key, side.raw_key = create_api_key(
        tenant=side.tenant, name=f"{word} key", scopes=["read", "write"]
    )
    side.source = create_web_source(
        tenant=side.tenant,
        knowledge_base=side.kb,
        start_url=f"https://{word}.example.com/",
        sync=False,
    )
    return side


def make_sides() -> tuple[Side, Side]:
    return make_side("Alphaquark", "zephyrquill"), make_side("Bravonic", "wombatrix")


def _typed_ids(value: Any):
    """(key, id) for every ``knowledge_base_id``, ``document_id`` and ``chunk_id`` in a JSON
    value (iteratively: answers may nest deep)."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            for key, child in item.items():
                if key in ("knowledge_base_id", "document_id", "chunk_id") and isinstance(
                    child, int
                ):
                    yield key, child
                stack.append(child)
        elif isinstance(item, list):
            stack.extend(item)


def leaks(content: bytes | str, other: Side, sent: str = "") -> list[str]:
    """What of ``other``'s an answer holds: its identifying strings (but those the request
    itself sent, which an error message may quote back), and its objects by id."""
    text = content.decode("utf-8", "replace") if isinstance(content, bytes) else content
    lowered, quoted = text.lower(), sent.lower()
    found = [s for s in other.secrets if s.lower() in lowered and s.lower() not in quoted]
    with contextlib.suppress(ValueError):
        found += [
            f"{key}={value}"
            for key, value in _typed_ids(json.loads(text))
            if value in other.objects[key]
        ]
    return found


def normalizer(ids: set[int]):
    """Text with each of ``ids`` written as ID: an answer to one id compared with the answer to
    another (both texts normalized alike, so a number that only looks like an id matches too)."""
    pattern = re.compile(r"(?<![0-9])(?:" + "|".join(map(str, sorted(ids))) + r")(?![0-9])")
    return lambda content: pattern.sub("ID", content.decode("utf-8", "replace"))


def fuzz(strategy, examples: int, check) -> None:
    """Run ``check`` on ``examples`` of ``strategy`` (explicit examples first); a failed check
    fails at once, with Hypothesis's shrunk example."""

    @hypothesis_settings(
        max_examples=examples,
        deadline=None,
        database=None,
        phases=[Phase.explicit, Phase.generate, Phase.shrink],
        suppress_health_check=list(HealthCheck),
    )
    @given(case=strategy)
    def run(case):
        check(case)

    run()


def report(record_property, what: str, **figures: int) -> None:
    for name, value in figures.items():
        record_property(name, value)
    print(f"\n{what}: " + ", ".join(f"{name.replace('_', ' ')} {v}" for name, v in figures.items()))


# --------------------------------------------------------------------------- values

HOSTILE_TEXT = st.sampled_from(
    [
        "",
        " ",
        "\x00",
        "pump\x00seal",
        "\ud800",
        "seal\udfff",
        "nan",
        "NaN",
        "inf",
        "-inf",
        "Infinity",
        "1e999",
        "-1e999",
        "1e20",
        "-1e20",
        "9" * 400,
        "0x1F",
        "'; DROP TABLE knowledge_chunk; --",
        "%_\\",
        "null",
        "[]",
        "😀",
        "温度传感器",
    ]
)
# Text PostgreSQL cannot store and UTF-8 cannot encode, inside other text: a third of all text.
UNSTORABLE = st.tuples(
    st.text(max_size=4), st.sampled_from(["\x00", "\ud800", "\udfff"]), st.text(max_size=4)
).map("".join)
TEXT = st.text(max_size=12) | HOSTILE_TEXT | UNSTORABLE
HOSTILE_NUMBERS = st.sampled_from(
    [
        0,
        -1,
        2**31,
        2**63 - 1,
        2**63,
        -(2**63) - 1,
        10**20,
        -(10**20),
        10**400,
        1e20,
        -1e20,
        1e308,
        5e-324,
        -0.0,
        float("nan"),
        float("inf"),
        float("-inf"),
    ]
)
NUMBERS = st.integers() | st.floats() | HOSTILE_NUMBERS
SCALARS = st.none() | st.booleans() | NUMBERS | TEXT
JSON_VALUES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3),
    max_leaves=6,
)
MOMENTS = st.sampled_from(
    [
        "2024-01-01",
        "2024-01-01T00:00:00Z",
        "9999-12-31T23:59:59-05:00",
        "0001-01-01T00:00:00+05:00",
        "2024-13-45",
        1e20,
        -1e20,
        10**20,
        0,
        1_700_000_000,
        253_402_300_800,
        -62_135_596_801,
    ]
)


def as_json(value: Any, literal: bool) -> str:
    """JSON text; NaN and infinities as Python writes them (``NaN``, ``Infinity``), or with
    ``literal`` infinity as the number ``1e999``, which reads as one."""
    text = json.dumps(value)
    return text.replace("Infinity", "1e999") if literal else text


def mostly(usual, odd):
    """``usual`` four times in five, else ``odd``: generated requests get past their first
    check often enough to reach what lies behind it."""
    return st.integers(min_value=0, max_value=4).flatmap(lambda n: odd if n == 0 else usual)


def values_of(schema: dict, defs: dict, pools: dict, words: list[str], name: str = ""):
    """A strategy for values of the JSON schema ``schema`` (an MCP tool's inputSchema, or a REST
    request body's in the OpenAPI schema, ``defs`` holding what ``$ref`` names): mostly what it
    describes, with hostile leaves, and for the properties that name objects (``pools``) the
    ids of both tenants and of none."""
    if schema.get("nullable"):  # OpenAPI 3.0's null
        return values_of({**schema, "nullable": False}, defs, pools, words, name) | st.none()
    if "$ref" in schema:
        return values_of(defs[schema["$ref"].rsplit("/", 1)[1]], defs, pools, words, name)
    for alternatives in ("anyOf", "oneOf", "allOf"):  # allOf: one $ref, as drf-spectacular writes
        if alternatives in schema:
            return st.one_of([values_of(s, defs, pools, words, name) for s in schema[alternatives]])
    kind = schema.get("type")
    if name in pools:
        ids = mostly(st.sampled_from(pools[name]), HOSTILE_NUMBERS)
        if kind == "string":
            return ids.map(str)
        return st.lists(ids, min_size=1, max_size=3) if kind == "array" else ids
    if "enum" in schema:
        return mostly(st.sampled_from(schema["enum"]), TEXT)
    if kind == "object" and "properties" not in schema:  # metadata: any object
        metadata = st.dictionaries(st.sampled_from(["site", "category"]), SCALARS, max_size=2)
        return mostly(metadata, st.dictionaries(TEXT, JSON_VALUES, max_size=3))
    if kind == "object":
        members = {
            key: values_of(value, defs, pools, words, key)
            for key, value in schema.get("properties", {}).items()
        }
        required = set(schema.get("required", []))
        return st.fixed_dictionaries(
            {key: value for key, value in members.items() if key in required},
            optional={key: value for key, value in members.items() if key not in required},
        )
    if kind == "array":
        return st.lists(values_of(schema.get("items", {}), defs, pools, words, name), max_size=3)
    if kind == "integer":
        bounded = st.integers(min_value=schema.get("minimum"), max_value=schema.get("maximum"))
        return mostly(bounded, HOSTILE_NUMBERS)
    if kind == "number":
        return mostly(st.floats(min_value=0, max_value=1), HOSTILE_NUMBERS)
    if kind == "string":
        if schema.get("format") == "date-time":
            return mostly(MOMENTS.filter(lambda m: isinstance(m, str)), TEXT)
        return mostly(st.sampled_from(["pump", "mechanical seal", *words]), TEXT)
    if kind == "boolean":
        return mostly(st.booleans(), SCALARS)
    return JSON_VALUES


def id_pools(a: Side, b: Side) -> dict[str, list[int]]:
    """Ids of both tenants (and of none) for the fields that name objects."""
    kbs = [a.kb.pk, b.kb.pk, MISSING]
    documents = [d.pk for d in a.documents + b.documents] + [MISSING]
    chunks = [*a.chunks, *b.chunks, MISSING]
    return {
        "knowledge_base_ids": kbs,
        "knowledge_id": kbs,
        "document_id": documents,
        "document_ids": documents,
        "ids": documents,
        "chunk_id": chunks,
        "exclude_chunk_ids": chunks,
    }
