"""The documentation's claims that can go stale: its pictures and its links.

(The site itself is built by ``.ci/run`` after the suite, with warnings as
errors, from the screenshots the browser tests take.)
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).parent.parent
DOCS = ROOT / "docs"


def test_every_picture_in_the_docs_is_one_a_browser_test_takes() -> None:
    shown = {
        name
        for page in DOCS.rglob("*.md")
        for name in re.findall(r"_static/screenshots/([\w.-]+\.png)", page.read_text())
    }
    assert shown, "the docs show screenshots"
    taken = "\n".join(p.read_text() for p in (ROOT / "ui-tests").glob("test_*.py"))
    # A name written whole, or an f-string's pattern ({...} for its fields).
    patterns = [
        re.sub(r"\\\{[^}]*\\\}", "[\\\\w-]+", re.escape(found))
        for found in re.findall(r"""["']([^"'\s]+\.png)["']""", taken)
    ]
    missing = [
        name for name in shown if not any(re.fullmatch(p, name) for p in patterns)
    ]
    assert not missing, f"no browser test takes {missing}"


def test_the_readme_links_to_pages_that_exist() -> None:
    readme = (ROOT / "README.md").read_text()
    links = re.findall(r"\]\(((?:docs|benchmarks)/[^)#]+)\)", readme)
    assert len(links) >= 10
    assert [link for link in links if not (ROOT / link).is_file()] == []
    # Every page is in the docs' table of contents.
    index = (DOCS / "index.md").read_text()
    pages = {p.relative_to(DOCS).with_suffix("").as_posix() for p in DOCS.rglob("*.md")}
    assert {p for p in pages if p != "index" and p not in index} == set()
