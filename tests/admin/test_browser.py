"""The admin in a real browser: Playwright drives Debian's Chromium (headless, no network)
against a live server, with a real Celery worker processing the uploads. Screenshots of every
page land in artifacts/screenshots/.

Chromium is installed by `make test` (apt); nothing is downloaded by Playwright. A missing
browser fails these tests with that instruction: they are never skipped.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator

import pytest
from django.urls import reverse

from knowledge.embeddings import EmbeddingConfig
from knowledge.models import Chunk, Document
from knowledge.services.knowledge_bases import create_knowledge_base
from tests.admin.conftest import PASSWORD, add_document, staff
from tests.builders import build_pdf
from tests.conftest import CEILING_S, REPO
from tests.factories import TenantFactory

pytestmark = pytest.mark.e2e

CHROMIUM = "/usr/bin/chromium"
# Without these Chromium stalls on a machine without network (component updates, sync...).
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
SCREENSHOTS = REPO / "artifacts" / "screenshots"
# Ceilings, not deadlines: Playwright waits for each condition (a page, a text, a status) and
# gives up only after this long; a loaded machine is slow, not broken.
TIMEOUT_MS = int(CEILING_S * 1000)

PDF_LINES = [
    "Pump P-300 service manual.",
    "The impeller of pump P-300 is inspected every 400 operating hours.",
    "Replace the impeller when its blades show pitting.",
]
CHINESE_TEXT = (
    "温度传感器说明\n\n温度传感器 TH01 每六个月校准一次。校准时使用标准温度计，记录两者读数的差值。"
)


@pytest.fixture(scope="module")
def browser() -> Iterator:
    try:
        from playwright.sync_api import expect, sync_playwright
    except ImportError:
        pytest.fail(
            "Playwright is not installed: run `make test` (it installs requirements-dev.txt)"
        )
    if not os.access(CHROMIUM, os.X_OK):
        pytest.fail(
            f"Chromium is missing ({CHROMIUM}): run `make test`, which installs Debian's "
            "chromium package (apt-get install chromium); Playwright downloads nothing."
        )
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    # expect() assertions have their own timeout (5 s unless set), apart from the pages' one.
    expect.set_options(timeout=TIMEOUT_MS)
    # Playwright's sync API keeps an asyncio loop on this thread; Django would then refuse the
    # tests' own (synchronous) database calls. They are synchronous; say so while it runs.
    previous = os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    try:
        with sync_playwright() as playwright:
            chromium = playwright.chromium.launch(
                executable_path=CHROMIUM, args=CHROMIUM_ARGS, timeout=TIMEOUT_MS
            )
            yield chromium
            chromium.close()
    finally:
        if previous is None:
            os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
        else:
            os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = previous


@pytest.fixture
def page_for(browser, live_server):
    """``page_for(user)``: a new browser page, logged in to the live server's admin."""
    contexts = []

    def login(user):
        context = browser.new_context(viewport={"width": 1280, "height": 900})
        context.set_default_timeout(TIMEOUT_MS)
        contexts.append(context)
        page = context.new_page()
        page.goto(f"{live_server.url}/admin/login/?next=/admin/")
        page.fill("#id_username", user.username)
        page.fill("#id_password", PASSWORD)
        page.click("input[type=submit]")
        page.wait_for_url(f"{live_server.url}/admin/")
        return page

    yield login
    for context in contexts:
        context.close()


def shot(page, name: str) -> None:
    page.screenshot(path=str(SCREENSHOTS / f"admin-{name}.png"), full_page=True)


def test_upload_watch_processing_browse_chunks_and_test_retrieval(
    page_for, live_server, celery_worker_process
):
    from playwright.sync_api import expect

    tenant = TenantFactory(name="Acme")
    kb = create_knowledge_base(
        tenant=tenant, name="Manuals", embedding=EmbeddingConfig(provider="hash", dimensions=32)
    )
    # A third document: BM25's idf is 0 for a term found in one of only two chunks.
    add_document(kb, "valves.md", "# Valve guide\n\nValve V-7 is a gate valve; keep it closed.")
    page = page_for(staff(tenant))
    page.get_by_role("link", name="Knowledge bases", exact=True).first.click()
    page.get_by_role("link", name="Manuals", exact=True).click()
    expect(page.locator("#panel-documents")).to_contain_text("Documents")
    shot(page, "01-knowledge-base")

    page.click("#panel-documents >> text=Upload documents")
    page.wait_for_load_state()
    # Dropped on the page, as from a file manager: upload.js moves them into the form's input.
    dropped = page.evaluate_handle(
        """([pdf, text]) => {
            const files = new DataTransfer();
            files.items.add(new File([new Uint8Array(pdf)], "pump-manual.pdf",
                                     {type: "application/pdf"}));
            files.items.add(new File([text], "传感器说明.txt", {type: "text/plain"}));
            return files;
        }""",
        [list(build_pdf([PDF_LINES])), CHINESE_TEXT],
    )
    page.dispatch_event(".kb-dropzone", "drop", {"dataTransfer": dropped})
    expect(page.locator(".kb-chosen li")).to_have_count(2)
    shot(page, "02-upload-chosen")
    page.click("#upload-form input[type=submit]")
    expect(page.locator("#upload-results .kb-outcome-accepted")).to_have_count(2)
    shot(page, "03-upload-accepted")

    page.evaluate("window.notReloaded = true")  # gone if anything reloads the page
    for name in ("pump-manual.pdf", "传感器说明.txt"):
        status = page.locator(f'tr[data-file="{name}"] [data-field="status"]')
        expect(status).to_have_text("Ready")
    assert page.evaluate("window.notReloaded") is True
    expect(page.locator('tr[data-file="pump-manual.pdf"] .kb-progress span')).to_have_text("100%")
    shot(page, "04-upload-ready")

    pdf = Document.objects.get(knowledge_base=kb, original_filename="pump-manual.pdf")
    page.click('tr[data-file="pump-manual.pdf"] td:last-child a')
    expect(page.locator("#chunks .kb-chunk")).to_have_count(pdf.chunk_count)
    shot(page, "05-document")
    page.locator("#chunks .kb-chunk-link").first.click()
    expect(page.locator("#chunk-content")).to_contain_text("inspected every 400 operating hours")
    expect(page.locator("#chunk-meta")).to_contain_text("pump-manual.pdf")
    expect(page.locator("#chunk-embedding")).to_contain_text("hash-32")
    # "impeller" twice in the text: its stem twice in the tokens (BM25 counts frequency)
    expect(page.locator("#chunk-tokens code", has_text=re.compile("^impel$"))).to_have_count(2)
    shot(page, "06-chunk")

    expected = Chunk.objects.get(document=pdf, position=0)
    page.goto(live_server.url + reverse("admin:knowledge_knowledgebase_hit_testing", args=[kb.pk]))
    page.fill("#id_q", "how often is the impeller inspected")
    page.click("#run-search")
    first = page.locator("#hits .kb-hit").first
    expect(first).to_have_attribute("data-chunk", str(expected.pk))
    expect(first.locator("mark")).to_have_text(["impeller", "inspected", "impeller"])
    expect(first.locator(".kb-scores")).to_contain_text(re.compile(r"BM25 [\d.]+ \(rank 1\)"))
    expect(page.locator("#trace")).to_contain_text("vector → keyword → fusion")
    shot(page, "07-hit-testing")

    chinese = Document.objects.get(knowledge_base=kb, original_filename="传感器说明.txt")
    page.fill("#id_q", "传感器 校准周期")
    page.select_option("#id_mode", "keyword")
    page.click("#run-search")
    first = page.locator("#hits .kb-hit").first
    expect(first.locator("a").first).to_have_text(chinese.title)
    expect(first.locator("mark", has_text="校准").first).to_be_visible()
    expect(page.locator("#history .kb-rerun")).to_have_count(2)
    shot(page, "08-hit-testing-chinese")

    page.goto(live_server.url + reverse("admin:knowledge_document_changelist"))
    expect(page.locator(".kb-badge.kb-ready")).to_have_count(3)
    shot(page, "09-documents")


def test_another_tenants_staff_cannot_see_the_knowledge_base(page_for, live_server):
    from playwright.sync_api import expect

    acme, bolt = TenantFactory(name="Acme"), TenantFactory(name="Bolt")
    hashing = EmbeddingConfig(provider="hash", dimensions=32)
    secret = create_knowledge_base(tenant=acme, name="Acme secrets", embedding=hashing)
    create_knowledge_base(tenant=bolt, name="Bolt notes", embedding=hashing)

    page = page_for(staff(bolt))
    page.get_by_role("link", name="Knowledge bases", exact=True).first.click()
    expect(page.locator("#result_list")).to_contain_text("Bolt notes")
    expect(page.locator("body")).not_to_contain_text("Acme")
    shot(page, "10-other-tenant-list")
    for name in ("change", "hit_testing", "upload"):
        url = reverse(f"admin:knowledge_knowledgebase_{name}", args=[secret.pk])
        response = page.goto(live_server.url + url)
        assert response.status == 404, (name, response.status)
    expect(page.locator("body")).not_to_contain_text("Acme secrets")
    shot(page, "11-other-tenant-404")
