"""Check every internal link of a built site: each relative ``href``/``src`` names a file of the site,
and each ``#anchor`` an ``id`` of the page it points to. ``make docs`` runs it after mkdocs.

    python tests/check_site_links.py build/docs     # one line per broken link; exit 1 if any

Links with a scheme (``https:``, ``mailto:``) or to another host are not checked: the site is built
and read offline. Standard library only: it runs in the docs' own environment.
"""

from __future__ import annotations

import sys
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit


class _Page(HTMLParser):
    def __init__(self):
        super().__init__()
        self.ids: set[str] = set()
        self.links: list[str] = []

    def handle_starttag(self, tag, attrs):
        for name, value in attrs:
            if name in ("id", "name") and value:
                self.ids.add(value)
            if value and ((name == "href" and tag in ("a", "link")) or (name == "src" and tag in ("img", "script"))):
                self.links.append(value)


def _parse(path: Path) -> _Page:
    page = _Page()
    page.feed(path.read_text(encoding="utf-8", errors="replace"))
    return page


def broken_links(site: Path) -> list[str]:
    """One line per internal link of ``site``'s HTML pages whose file or anchor is missing."""
    site = site.resolve()
    pages = {path: _parse(path) for path in sorted(site.rglob("*.html"))}
    problems = []
    for path, page in pages.items():
        for link in page.links:
            parts = urlsplit(link)
            if parts.scheme or parts.netloc:
                continue
            if not parts.path:
                target = path
            elif parts.path.startswith("/"):  # from the site's root (mkdocs' 404 page)
                target = (site / unquote(parts.path).lstrip("/")).resolve()
            else:
                target = (path.parent / unquote(parts.path)).resolve()
            if target.is_dir():
                target = target / "index.html"
            where = path.relative_to(site)
            if site not in target.parents and target != site:
                problems.append(f"{where}: {link} leaves the site")
            elif not target.exists():
                problems.append(f"{where}: {link} names no file of the site")
            elif parts.fragment and target.suffix == ".html":
                ids = pages[target].ids if target in pages else _parse(target).ids
                if unquote(parts.fragment) not in ids:
                    problems.append(f"{where}: {link} names no anchor of {target.relative_to(site)}")
    return problems


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1 or not Path(args[0]).is_dir():
        print("usage: python tests/check_site_links.py SITE_DIR (a built site, e.g. build/docs)", file=sys.stderr)
        return 2
    problems = broken_links(Path(args[0]))
    for line in problems:
        print(line)
    pages = len(list(Path(args[0]).rglob("*.html")))
    print(f"{pages} pages, {len(problems)} broken internal links", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
