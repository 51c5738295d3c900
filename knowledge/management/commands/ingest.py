"""``python manage.py ingest --tenant T --kb KB [--create] [--wait] [--sync] [--json] PATH|URL...``

Ingests files, folders (recursively) and http(s) URLs (fetched as the first step of their
processing, under the RAG_WEB_* rules) into a knowledge base and prints a summary: ready,
failed (with reasons), refused (with reasons) and duplicates. Documents are processed by the
Celery workers; with ``--sync``, or when no worker answers, they are processed in this process
instead (e-mail attachments included), and the command says so.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from knowledge import selectors
from knowledge.ingestion.parsing import FileTooLarge, ParseError, UnsupportedFileType
from knowledge.models import Document, KnowledgeBase
from knowledge.services import documents as document_services
from knowledge.services import processing
from knowledge.services.knowledge_bases import create_knowledge_base
from knowledge.web.documents import create_url_document, fetch_into
from rag_project.celery import app
from tenancy.models import Tenant
from tenancy.services import get_or_create_tenant

POLL_S = 0.5


def _worker_answers() -> bool:
    try:
        return bool(app.control.ping(timeout=1.0))
    except Exception:  # broker unreachable counts as no worker
        return False


def _is_url(raw: str) -> bool:
    return raw.lower().startswith(("http://", "https://"))


def _files(paths: list[str]) -> list[Path]:
    found: list[Path] = []
    for raw in paths:
        if _is_url(raw):
            continue
        path = Path(raw)
        if path.is_dir():
            found.extend(sorted(p for p in path.rglob("*") if p.is_file()))
        elif path.is_file():
            found.append(path)
        else:
            raise CommandError(f"{raw}: no such file or folder")
    return found


class Command(BaseCommand):
    help = "Ingest files or folders into a knowledge base."

    def add_arguments(self, parser) -> None:
        parser.add_argument("paths", nargs="+", metavar="PATH|URL")
        parser.add_argument("--tenant", required=True, help="tenant name")
        parser.add_argument("--kb", required=True, help="knowledge base name")
        parser.add_argument("--create", action="store_true", help="create tenant and KB if missing")
        parser.add_argument(
            "--wait", action="store_true", help="wait until every document is final"
        )
        parser.add_argument("--sync", action="store_true", help="process in this process")
        parser.add_argument("--replace", action="store_true", help="replace duplicates")
        parser.add_argument("--json", action="store_true", help="print the summary as JSON")

    def handle(self, *args, paths, tenant, kb, create, wait, sync, replace, json, **options):
        files = _files(paths)
        tenant_obj, kb_obj = self._resolve(tenant, kb, create)
        if not sync and not _worker_answers():
            sync = True
            self.stderr.write("no Celery worker answered; processing in this process")

        summary: dict[str, list] = {"ready": [], "failed": [], "refused": [], "duplicates": []}
        created: list[tuple[Path | str, Document]] = []
        for path in files:
            try:
                with path.open("rb") as stream:
                    # In-process runs queue nothing: the documents are processed right here.
                    document = document_services.create_document(
                        tenant=tenant_obj,
                        knowledge_base=kb_obj,
                        name=path.name,
                        stream=stream,
                        replace=replace,
                        queue=not sync,
                    )
                created.append((path, document))
            except (UnsupportedFileType, FileTooLarge) as exc:
                summary["refused"].append({"file": str(path), "reason": str(exc)})
            except document_services.DuplicateDocument as exc:
                summary["duplicates"].append(
                    {"file": str(path), "reason": str(exc), "document_id": exc.existing.pk}
                )
        for url in filter(_is_url, paths):
            try:
                document = create_url_document(
                    tenant=tenant_obj,
                    knowledge_base=kb_obj,
                    url=url,
                    replace=replace,
                    queue=not sync,
                )
                created.append((url, document))
            except ParseError as exc:  # an invalid or refused URL
                summary["refused"].append({"file": url, "reason": str(exc)})
            except document_services.DuplicateDocument as exc:
                summary["duplicates"].append(
                    {"file": url, "reason": str(exc), "document_id": exc.existing.pk}
                )

        if sync:
            # An e-mail's attachments become documents as it is processed: they are processed
            # here too, listed as "message.eml/attachment.pdf".
            for i, (path, document) in enumerate(created, 1):
                processing.process_document(document.pk, fetch=fetch_into)
                attachments = Document.objects.filter(
                    parent=document, status=Document.Status.PENDING
                )
                created.extend((f"{path}/{a.original_filename}", a) for a in attachments)
                self._progress(i, len(created))
        elif wait:
            self._wait([d.pk for _, d in created])

        final = {d.pk: d for d in Document.objects.filter(pk__in=[d.pk for _, d in created])}
        for path, document in created:
            current = final.get(document.pk)
            if current is None:
                continue
            if current.status == Document.Status.READY:
                summary["ready"].append(
                    {"file": str(path), "document_id": current.pk, "chunks": current.chunk_count}
                )
            elif current.status == Document.Status.FAILED:
                summary["failed"].append(
                    {"file": str(path), "document_id": current.pk, "reason": current.error}
                )
            else:
                summary.setdefault("pending", []).append(
                    {"file": str(path), "document_id": current.pk, "status": current.status}
                )
        summary["chunks"] = selectors.chunks(tenant_obj, kb_obj).count()
        summary["processed_in_process"] = sync
        self._report(summary, json)

    def _resolve(self, tenant_name: str, kb_name: str, create: bool):
        if create:
            tenant = get_or_create_tenant(tenant_name)
        else:
            tenant = Tenant.objects.filter(name=tenant_name).first()
            if tenant is None:
                raise CommandError(f"no tenant {tenant_name!r} (use --create to make it)")
        try:
            kb = selectors.get_knowledge_base_by_name(tenant, kb_name)
        except KnowledgeBase.DoesNotExist:
            if not create:
                raise CommandError(
                    f"no knowledge base {kb_name!r} in {tenant_name!r} (use --create to make it)"
                ) from None
            kb = create_knowledge_base(tenant=tenant, name=kb_name)
        return tenant, kb

    def _wait(self, ids: list[int]) -> None:
        while True:
            states = list(Document.objects.filter(pk__in=ids).values_list("status", flat=True))
            done = sum(status in Document.Status.final() for status in states)
            self._progress(done, len(states))
            if done == len(states):
                return
            time.sleep(POLL_S)

    def _progress(self, done: int, total: int) -> None:
        if not total:
            return
        width = 30
        filled = int(width * done / total)
        end = "\n" if done == total else ""
        sys.stderr.write(f"\r[{'#' * filled}{'.' * (width - filled)}] {done}/{total}{end}")
        sys.stderr.flush()

    def _report(self, summary: dict, as_json: bool) -> None:
        if as_json:
            self.stdout.write(json.dumps(summary, ensure_ascii=False))
            return
        w = self.stdout.write
        w(
            f"ready: {len(summary['ready'])}   failed: {len(summary['failed'])}   "
            f"refused: {len(summary['refused'])}   duplicates: {len(summary['duplicates'])}   "
            f"chunks in the knowledge base: {summary['chunks']}"
        )
        for kind, label in (
            ("failed", "failed"),
            ("refused", "refused"),
            ("duplicates", "duplicate"),
        ):
            for item in summary[kind]:
                w(f"  {label}: {item['file']}: {item['reason']}")
        for item in summary.get("pending", []):
            w(f"  still {item['status']}: {item['file']} (document {item['document_id']})")
