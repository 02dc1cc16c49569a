"""The README stays a door, and the links of the Markdown a reader follows resolve.

Builds nothing (``make docs`` builds the site with ``mkdocs build --strict``): reads README.md,
benchmarks/RESULTS.md and every page under docs/, and checks each relative link against the
files of the repository, and each ``#anchor`` against the headings of the page it points into
(GitHub's rule for heading ids), so a moved page or a renamed section fails here first.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README_MAX_LINES = 300

# [text](target "title"), not images' sources; the target up to whitespace or ')'.
_LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
_FENCE = re.compile(r"^(```|~~~).*?^\1", re.MULTILINE | re.DOTALL)
_INLINE_CODE = re.compile(r"`[^`\n]*`")


def _markdown_files() -> list[Path]:
    return [
        ROOT / "README.md",
        ROOT / "benchmarks" / "RESULTS.md",
        *sorted((ROOT / "docs").rglob("*.md")),
    ]


def _links(text: str) -> list[str]:
    """The link targets of a Markdown text, outside code blocks and code spans."""
    text = _INLINE_CODE.sub("", _FENCE.sub("", text))
    return _LINK.findall(text)


def _slug(heading: str) -> str:
    """A heading's id as GitHub writes it: lower case, punctuation but ``-`` and ``_``
    dropped, spaces as hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    text = _FENCE.sub("", path.read_text(encoding="utf-8"))
    return {_slug(m) for m in re.findall(r"^#{1,6} (.+)$", text, re.MULTILINE)}


def _broken(path: Path) -> list[str]:
    broken = []
    for target in _links(path.read_text(encoding="utf-8")):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        file_part, _, anchor = target.partition("#")
        dest = (path.parent / file_part).resolve() if file_part else path
        if not dest.exists():
            broken.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
            where = dest.relative_to(ROOT) if dest.is_relative_to(ROOT) else dest
            broken.append(f"{target}: no heading #{anchor} in {where}")
    return broken


def test_readme_is_short() -> None:
    lines = (ROOT / "README.md").read_text(encoding="utf-8").count("\n")
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines (at most {README_MAX_LINES})"


@pytest.mark.parametrize("path", _markdown_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(path: Path) -> None:
    assert path.exists()
    assert _broken(path) == []


def test_the_checks_can_fail(tmp_path: Path) -> None:
    """A missing file and a missing heading are reported; code is not read as links."""
    (tmp_path / "there.md").write_text("# A heading (`x.py`)\n")
    page = tmp_path / "page.md"
    page.write_text(
        "[ok](there.md#a-heading-xpy) [gone](missing.md) [bad](there.md#nope)\n"
        "`[code](nowhere.md)`\n```\n[fenced](nowhere.md)\n```\n[web](https://example.com/x)\n"
    )
    assert [b.split(":")[0] for b in _broken(page)] == ["missing.md", "there.md#nope"]
