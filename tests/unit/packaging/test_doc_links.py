"""Every relative link in the README, CONTRIBUTING.md and docs/ resolves, and the README stays
a front door.

A link is ``[text](target)`` or a reference definition ``[label]: target`` outside fenced code
blocks and inline code. A target that is not a URL must name a file or folder of the
repository; a ``#fragment`` must name a heading of the file it points into, spelled as GitHub
spells heading anchors (lower case, punctuation dropped, spaces as hyphens, ``-1``, ``-2`` for
repeats). Why: docs move between reference and results, and a link that no longer resolves is
the first thing a new reader meets.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
README_MAX_LINES = 200

_FENCE = re.compile(r"^\s*(```|~~~)")
_INLINE_CODE = re.compile(r"(`+)(?:(?!\1).)+?\1")
_INLINE_LINK = re.compile(
    r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^()\s>]*(?:\([^()\s]*\)[^()\s>]*)*)>?(?:\s+\"[^\"]*\")?\s*\)"
)
_REF_DEF = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$")
_HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
_HTML_ANCHOR = re.compile(r"<a\s+(?:name|id)=\"([^\"]+)\"")
_EXTERNAL = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")


def doc_files() -> list[Path]:
    files = [ROOT / "README.md", ROOT / "CONTRIBUTING.md"]
    files += sorted((ROOT / "docs").rglob("*.md"))
    return [f for f in files if f.is_file()]


def _prose_lines(text: str) -> list[tuple[int, str]]:
    """(line number, line) of the text outside fenced code blocks."""
    out: list[tuple[int, str]] = []
    fence: str | None = None
    for number, line in enumerate(text.splitlines(), start=1):
        m = _FENCE.match(line)
        if m:
            if fence is None:
                fence = m.group(1)
            elif m.group(1) == fence:
                fence = None
            continue
        if fence is None:
            out.append((number, line))
    return out


def slug(heading: str) -> str:
    """GitHub's anchor for a heading's text."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link keeps its text
    text = re.sub(r"<[^>]+>", "", text)  # inline HTML
    text = text.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)  # keeps letters, digits, _, -, spaces
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every anchor a Markdown file offers: its headings' slugs (repeats numbered) and
    explicit ``<a name=…>``/``id=…`` anchors."""
    seen: dict[str, int] = {}
    found: set[str] = set()
    for _, line in _prose_lines(path.read_text(encoding="utf-8")):
        found.update(_HTML_ANCHOR.findall(line))
        m = _HEADING.match(line)
        if not m:
            continue
        base = slug(m.group(2))
        n = seen.get(base, 0)
        seen[base] = n + 1
        found.add(base if n == 0 else f"{base}-{n}")
    return found


def links(path: Path) -> list[tuple[int, str]]:
    """(line number, target) of every link in the file's prose."""
    out: list[tuple[int, str]] = []
    for number, line in _prose_lines(path.read_text(encoding="utf-8")):
        bare = _INLINE_CODE.sub("", line)
        out += [(number, t) for t in _INLINE_LINK.findall(bare)]
        m = _REF_DEF.match(bare)
        if m:
            out.append((number, m.group(1)))
    return out


def broken_links(path: Path, root: Path = ROOT) -> list[str]:
    """One line per link of ``path`` (a file under ``root``) that does not resolve."""
    problems: list[str] = []
    for number, target in links(path):
        if not target or _EXTERNAL.match(target):
            continue
        file_part, _, fragment = target.partition("#")
        dest = (path.parent / file_part).resolve() if file_part else path
        where = f"{path.relative_to(root)}:{number}: {target}"
        if file_part:
            try:
                dest.relative_to(root)
            except ValueError:
                problems.append(f"{where} (points outside the repository)")
                continue
            if not dest.exists():
                problems.append(f"{where} (no such file)")
                continue
        if fragment:
            if dest.is_dir() or dest.suffix.lower() != ".md":
                continue  # GitHub line anchors (#L10) and the like: not checked
            if fragment not in anchors(dest):
                problems.append(f"{where} (no heading with anchor #{fragment})")
    return problems


@pytest.mark.parametrize("doc", doc_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(doc: Path) -> None:
    assert broken_links(doc) == []


def test_the_readme_is_a_front_door() -> None:
    lines = (ROOT / "README.md").read_text(encoding="utf-8").count("\n")
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines (at most {README_MAX_LINES})"


def test_the_docs_have_an_index_of_results() -> None:
    assert (ROOT / "docs" / "results" / "README.md").is_file()


def test_a_broken_link_or_anchor_is_found(tmp_path: Path) -> None:
    """The checker itself: a missing file, a missing heading and a path outside the
    repository are reported; a good file link, a good anchor and a URL are not."""
    root = tmp_path / "repo"
    (root / "docs").mkdir(parents=True)
    (root / "docs" / "target.md").write_text(
        "# A heading: with `code`, punctuation!\n\n## A heading: with `code`, punctuation!\n"
    )
    probe = root / "docs" / "probe.md"
    probe.write_text(
        "See [ok](target.md#a-heading-with-code-punctuation) and\n"
        "[repeat](target.md#a-heading-with-code-punctuation-1), [dir](../docs/),\n"
        "[url](https://example.com/x#y), `[in code](nowhere.md)`,\n"
        "[gone](no-such-file.md), [bad anchor](target.md#nope),\n"
        "[outside](../../elsewhere.md).\n"
        "```\n[fenced](nowhere-either.md)\n```\n"
    )
    problems = broken_links(probe, root)
    assert len(problems) == 3, problems
    assert "no such file" in problems[0] and "no-such-file.md" in problems[0]
    assert "#nope" in problems[1]
    assert "outside the repository" in problems[2]


def test_slugs_follow_github() -> None:
    assert slug("Install on a cluster") == "install-on-a-cluster"
    assert slug("The agent (`horus agent run`, `python -m horus.agent`)") == (
        "the-agent-horus-agent-run-python--m-horusagent"
    )
    assert slug("Which path: `gpuSharing.path`") == "which-path-gpusharingpath"
