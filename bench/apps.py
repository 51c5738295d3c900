from django.apps import AppConfig


class BenchConfig(AppConfig):
    """Benchmarks and the evaluation harness (no models): the ``bench`` and ``evaluate``
    management commands."""

    name = "bench"
    verbose_name = "Benchmarks"
