"""Finding pages, without a database or a network: canonical URLs, the scope of a source,
links of a page, sitemaps (index, gzip, hostile XML) and robots.txt."""

from __future__ import annotations

import gzip

from knowledge.web.discovery import Scope, canonical, html_links, parse_sitemap, robots
from knowledge.web.sniff import file_name, sniff
from tests.web_site import sitemap


def test_canonical_urls():
    assert canonical("HTTP://Help.Example.COM:80/a/./b/../c?x=1#top") == (
        "http://help.example.com/a/c?x=1"
    )
    assert canonical("https://help.example.com") == "https://help.example.com/"
    assert canonical("https://help.example.com:443/guide/") == "https://help.example.com/guide/"
    assert canonical("https://help.example.com:8443/x") == "https://help.example.com:8443/x"


def test_scope_is_the_start_host_and_the_prefixes():
    scope = Scope("https://help.example.com/", include=("/help/",), exclude=("/help/internal/",))
    assert scope.holds("https://help.example.com/help/reset")
    assert scope.holds("http://help.example.com/help/reset")  # scheme aside
    assert not scope.holds("https://help.example.com/blog/")
    assert not scope.holds("https://help.example.com/help/internal/salaries")
    assert not scope.holds("https://evil.example.com/help/reset")
    assert not scope.holds("https://help.example.com:8443/help/reset")
    assert not scope.holds("ftp://help.example.com/help/reset")


def test_links_are_absolute_without_fragments_nofollow_or_other_schemes():
    page = b"""<html><head><base href="/docs/"></head><body>
        <a href="setup#step-2">Setup</a> <a href="/faq">FAQ</a> <a href="setup">again</a>
        <a href="#top">top</a> <a href="mailto:help@example.com">mail</a>
        <a href="javascript:void(0)">js</a> <a rel="nofollow" href="/login">login</a>
        <a href="https://other.example/x">other</a></body></html>"""
    assert html_links("https://help.example.com/index", page) == [
        "https://help.example.com/docs/setup",
        "https://help.example.com/faq",
        "https://other.example/x",
    ]
    assert html_links("https://help.example.com/", b"") == []


def test_sitemaps_urlset_index_and_gzip():
    urls = ["https://h.example/a", "https://h.example/b"]
    assert parse_sitemap(sitemap(urls), 10_000).pages == urls
    index = (
        b'<?xml version="1.0"?><sitemapindex xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">'
        b"<sitemap><loc>https://h.example/s1.xml.gz</loc></sitemap></sitemapindex>"
    )
    found = parse_sitemap(index, 10_000)
    assert found.pages == [] and found.sitemaps == ["https://h.example/s1.xml.gz"]
    assert parse_sitemap(gzip.compress(sitemap(urls)), 10_000).pages == urls


def test_hostile_or_broken_sitemaps_give_nothing():
    external = (
        b'<?xml version="1.0"?><!DOCTYPE u [<!ENTITY x SYSTEM "file:///etc/passwd">]>'
        b'<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">'
        b"<url><loc>https://h.example/&x;</loc></url></urlset>"
    )
    assert parse_sitemap(external, 10_000).pages == ["https://h.example/"]  # not expanded
    bomb = gzip.compress(b"<urlset>" + b" " * 1_000_000 + b"</urlset>")
    assert parse_sitemap(bomb, 1000).pages == []  # inflated only up to the cap
    assert parse_sitemap(b"<html>Not found</html>", 10_000).pages == []
    assert parse_sitemap(b"\x00garbage", 10_000).pages == []


def test_robots_rules_and_sitemaps():
    rules = robots(b"User-agent: *\nDisallow: /private/\nSitemap: https://h.example/s.xml\n")
    assert not rules.can_fetch("rag-knowledge-base", "https://h.example/private/a")
    assert rules.can_fetch("rag-knowledge-base", "https://h.example/help/a")
    assert rules.site_maps() == ["https://h.example/s.xml"]
    assert robots(None).can_fetch("rag-knowledge-base", "https://h.example/private/a")


def test_file_names_and_types_from_bytes_with_hints():
    assert file_name("https://h.example/docs/guide", "text/html; charset=utf-8") == "guide.html"
    assert file_name("https://h.example/", "text/html") == "index.html"
    assert file_name("https://h.example/page.php", "text/html") == "page.html"
    assert sniff("https://h.example/report", b"%PDF-1.4\n...", "text/html") == ("report.pdf", "pdf")
    assert sniff("https://h.example/a.pdf", b"<html><p>hi</p></html>", "") == ("a.html", "html")
    assert sniff("https://h.example/notes", b"# Notes", "text/markdown") == ("notes.md", "md")
