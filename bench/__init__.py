"""Benchmarks and the evaluation harness, apart from the product.

``manage.py bench <benchmark>`` (``bench.cli``) and ``manage.py evaluate`` (``bench.evaluate``)
run them against this machine's real services; the management commands are thin shims. This
package may import anything; nothing in the product imports it. Benchmarks work in throwaway
tenants (``bench.throwaway``) that leave the database as they found it.
"""
