"""Web import: documents fetched from URLs, and web sources crawled and re-synced.

``addresses`` decides which hosts may be fetched, ``fetch`` fetches one URL safely, ``sniff``
names what came back, ``discovery`` finds pages (sitemaps, robots.txt, links); these import
nothing from Django. ``documents`` (a document from a URL), ``sources`` and ``sync`` (web
sources) are the services; the model lives in ``models``.
"""
