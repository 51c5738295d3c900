"""``manage.py evaluate``: a shim over ``bench.evaluate``."""

from django.core.management.base import BaseCommand

from bench import evaluate


class Command(BaseCommand):
    help = "Measure retrieval quality (nDCG@10, Recall@100, MRR@10) on a BEIR-layout dataset."

    def add_arguments(self, parser) -> None:
        evaluate.add_arguments(parser)

    def handle(self, *args, **options) -> None:
        self.stdout.write(evaluate.run(options))
