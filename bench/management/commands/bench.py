"""``manage.py bench``: a shim over ``bench.cli``."""

from django.core.management.base import BaseCommand, CommandError
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from bench import cli


class Command(BaseCommand):
    help = "Run a benchmark against this machine's real services."

    def add_arguments(self, parser) -> None:
        cli.add_arguments(parser)

    def handle(self, *args, **options) -> None:
        # A benchmark on a database behind the code fails minutes in, in its fill or teardown:
        # say so before it starts.
        executor = MigrationExecutor(connection)
        pending = executor.migration_plan(executor.loader.graph.leaf_nodes())
        if pending:
            names = ", ".join(f"{m.app_label}.{m.name}" for m, _ in pending[:5])
            raise CommandError(
                f"The database has {len(pending)} unapplied migration(s) ({names}): run "
                "`manage.py migrate` first."
            )
        self.stdout.write(cli.run(options))
