"""Check a built site: every internal link resolves, and no reStructuredText is left in the pages.
``make docs`` runs it after mkdocs.

    python tests/check_site_links.py build/docs     # one line per problem; exit 1 if any

Links: each relative `href`/`src` names a file of the site, and each `#anchor` an `id` of the
page it points to. Links with a scheme (`https:`, `mailto:`) or to another host are not checked: the
site is built and read offline.

Markup (`markup_problems`): the docstrings are Google style with Markdown bodies (mkdocs.yml), so
reST in one shows up raw in the API reference. Outside code, a page must not show a Sphinx role
(`:class:`, `:func:`, `:meth:`, `:mod:`, `:attr:`, `:data:`, `:exc:`, `:obj:` before a code span), a
paragraph ending in a `::` literal-block marker, or a cross-reference that mkdocs-autorefs could not
resolve (it leaves the text `[title][identifier]`, or its `autoref` element / `data-autorefs-*`
span when it never ran). Each problem is named with the page and the documented object it is in.

Standard library only: it runs in the docs' own environment.
"""

from __future__ import annotations

import re
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


# Modules whose docstrings are still being converted from reST (their problems are not reported).
# Empty: every module is converted. A module listed here with nothing left to convert fails the check.
NOT_YET_CONVERTED: frozenset[str] = frozenset()

ROLE = re.compile(r":(?:py:)?(?:class|func|meth|mod|attr|data|exc|obj):`[^`]*`?")
UNRESOLVED_REF = re.compile(r"\[[^\[\]\n]+\]\[[^\[\]\s]*\]")
BLOCKS = {"p", "li", "td", "th", "dt", "dd", "h1", "h2", "h3", "h4", "h5", "h6", "summary", "blockquote"}
HEADINGS = {"h1", "h2", "h3", "h4", "h5", "h6"}


class _Text(HTMLParser):
    """The text of each block element (paragraph, list item, table cell), code spans as `code`, code
    blocks left out, with the id of the heading (the documented object) it comes after."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.blocks: list[tuple[str, str]] = []  # (heading id, text)
        self.markers: list[tuple[str, str]] = []  # autorefs elements left in the page
        self.heading = ""
        self.headings: set[str] = set()
        self.skip = 0  # inside <pre>, <script>, <style>
        self.code = 0
        self.open: list[list[str]] = []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "autoref" or any(name.startswith("data-autorefs-") for name in attrs):
            self.markers.append((self.heading, f"<{tag} {' '.join(f'{k}={v!r}' for k, v in attrs.items())}>"))
        if tag in HEADINGS and attrs.get("id"):
            self.heading = attrs["id"]
            self.headings.add(self.heading)
        if tag in ("pre", "script", "style"):
            self.skip += 1
        elif tag == "code" and not self.skip:
            self.code += 1
            self._add("`")
        elif tag in BLOCKS:
            self.open.append([])

    def handle_endtag(self, tag):
        if tag in ("pre", "script", "style"):
            self.skip = max(0, self.skip - 1)
        elif tag == "code" and not self.skip and self.code:
            self.code -= 1
            self._add("`")
        elif tag in BLOCKS and self.open:
            text = "".join(self.open.pop())
            self.blocks.append((self.heading, text))
            self._add(text)

    def handle_data(self, data):
        if not self.skip:
            self._add(data)

    def _add(self, text: str) -> None:
        if self.open:
            self.open[-1].append(text)


def _outside_code(text: str) -> str:
    """`text` with the inside of its code spans (between backticks, as `_Text` writes them) blanked."""
    return re.sub(r"`[^`]*`", lambda span: "`" + " " * (len(span.group(0)) - 2) + "`", text)


def markup_problems(site: Path, not_yet_converted=NOT_YET_CONVERTED) -> list[str]:
    """One line per place of `site`'s HTML pages that shows reST or an unresolved cross-reference,
    less those in the documentation of a module of `not_yet_converted` (and one line per module of
    `not_yet_converted` documented on the site with none left: take it off the list)."""
    site = site.resolve()
    problems, waived, documented = [], set(), set()
    for path in sorted(site.rglob("*.html")):
        page = _Text()
        page.feed(path.read_text(encoding="utf-8", errors="replace"))
        documented |= page.headings
        where = path.relative_to(site)
        found = [(heading, f"autorefs element left: {marker}") for heading, marker in page.markers]
        for heading, text in page.blocks:
            text = " ".join(text.split())
            plain = _outside_code(text)
            for match in ROLE.finditer(text):
                if text.count("`", 0, match.start()) % 2 == 0:  # not inside a code span
                    found.append((heading, f"reST role {match.group(0)}"))
            if plain.endswith("::"):
                found.append((heading, f"reST literal-block marker '::' ending: ...{text[-60:]}"))
            for match in UNRESOLVED_REF.finditer(plain):
                found.append((heading, f"unresolved cross-reference {text[match.start() : match.end()]}"))
        seen = set()
        for heading, problem in found:
            module = next((m for m in not_yet_converted if heading == m or heading.startswith(m + ".")), None)
            if module:
                waived.add(module)
            elif (heading, problem) not in seen:
                seen.add((heading, problem))
                problems.append(f"{where}: {heading or '(page)'}: {problem}")
    for module in sorted(set(not_yet_converted) & documented - waived):
        problems.append(f"{module} shows no reST any more: take it off NOT_YET_CONVERTED in tests/check_site_links.py")
    return problems


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1 or not Path(args[0]).is_dir():
        print("usage: python tests/check_site_links.py SITE_DIR (a built site, e.g. build/docs)", file=sys.stderr)
        return 2
    links = broken_links(Path(args[0]))
    markup = markup_problems(Path(args[0]))
    for line in links + markup:
        print(line)
    pages = len(list(Path(args[0]).rglob("*.html")))
    print(f"{pages} pages, {len(links)} broken internal links, {len(markup)} markup problems", file=sys.stderr)
    return 1 if links or markup else 0


if __name__ == "__main__":
    sys.exit(main())
