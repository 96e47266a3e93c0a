"""The documentation holds together: README.md is the short entry point, and every relative link
in it and in docs/*.md reaches an existing file (and heading, for a link with an anchor)."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

_LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)|!\[[^\]]*\]\(([^)\s]+)\)")
_FENCE = re.compile(r"^(```|~~~).*?^\1", re.S | re.M)


def _links(text: str) -> list[str]:
    text = _FENCE.sub("", text)
    return [a or b for a, b in _LINK.findall(text)]


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    h = heading.strip().lower()
    h = re.sub(r"[^\w\- ]", "", h)
    return h.replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    text = _FENCE.sub("", path.read_text())
    return {_slug(m.group(1)) for m in re.finditer(r"^#{1,6} (.+)$", text, re.M)}


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(page: Path):
    broken = []
    for link in _links(page.read_text()):
        if re.match(r"^[a-z]+:", link):  # http(s), mailto
            continue
        target, _, anchor = link.partition("#")
        path = (page.parent / target).resolve() if target else page
        if not path.exists():
            broken.append(f"{link}: no such file")
        elif anchor and path.suffix == ".md" and anchor not in _anchors(path):
            broken.append(f"{link}: no heading #{anchor}")
    assert not broken, f"{page.relative_to(ROOT)}: " + "; ".join(broken)


def test_readme_is_the_short_entry_point():
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) < 300
    assert "make demo" in text and "make test" in text and ".ci/run" in text
    linked = {(ROOT / t.partition("#")[0]).resolve() for t in _links(text) if not re.match(r"^[a-z]+:", t)}
    for page in sorted((ROOT / "docs").glob("*.md")):
        assert page.resolve() in linked, f"README.md does not link {page.relative_to(ROOT)}"


def test_interop_links_the_merge_and_key_pages():
    links = set(_links((ROOT / "docs" / "interop.md").read_text()))
    assert {"merge-settings.md", "delete-markers-and-keys.md"} <= links
