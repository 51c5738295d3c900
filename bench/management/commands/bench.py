"""``manage.py bench``: a shim over ``bench.cli``."""

from django.core.management.base import BaseCommand

from bench import cli


class Command(BaseCommand):
    help = "Run a benchmark against this machine's real services."

    def add_arguments(self, parser) -> None:
        cli.add_arguments(parser)

    def handle(self, *args, **options) -> None:
        self.stdout.write(cli.run(options))
