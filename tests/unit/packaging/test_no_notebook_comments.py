"""The code and the chart carry no lab-notebook notes: no issue numbers, dates, load averages
or "at N nodes" figures in src/, charts/ and manifests/.

Why: a comment says what the code does and why, in the present tense. An issue number points
at a tracker the reader does not have, a date or a load average says when and on what machine
something was measured, and a figure drifts as soon as the code or the machine changes. A
measurement belongs in docs/results/ or benchmarks/results/, and a comment that needs one
names that file instead.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
SCANNED = ("src", "charts", "manifests")
#: Build outputs under the scanned folders, not part of the source.
SKIPPED_DIRS = {"__pycache__"}
SKIPPED_SUFFIXES = (".egg-info",)

#: What a notebook note looks like; each is matched case-insensitively, line by line.
PATTERNS: dict[str, re.Pattern[str]] = {
    "issue number": re.compile(r"\bissues?[\s#-]*\d+", re.IGNORECASE),
    "load average": re.compile(r"\bload averages?\b", re.IGNORECASE),
    "date": re.compile(r"\b20\d{2}-[01]\d-[0-3]\d\b"),
    "figure at a cluster size": re.compile(r"\bat [\d,]+ nodes\b", re.IGNORECASE),
}


#: A pointer to a results file or a doc: ``benchmarks/results/x.json``, ``docs/results/y.md``
#: (a ``*`` names a family of result files, at least one of which must exist).
POINTER = re.compile(r"\b(?:benchmarks/results|docs)/[\w./*-]+\.(?:json|md|png|log|txt)\b")


def scanned_files() -> list[Path]:
    files: list[Path] = []
    for top in SCANNED:
        for path in sorted((ROOT / top).rglob("*")):
            parts = path.relative_to(ROOT).parts
            if any(p in SKIPPED_DIRS or p.endswith(SKIPPED_SUFFIXES) for p in parts):
                continue
            if path.is_file():
                files.append(path)
    return files


def notebook_notes(text: str) -> list[tuple[int, str, str]]:
    """(line number, what it is, the line) for every line of ``text`` that matches."""
    found: list[tuple[int, str, str]] = []
    for number, line in enumerate(text.splitlines(), start=1):
        for what, pattern in PATTERNS.items():
            if pattern.search(line):
                found.append((number, what, line.strip()))
    return found


@pytest.mark.parametrize(
    "line",
    [
        "# issue 24: a node holds no key",
        "(Issue 28 adds two)",
        "see issues 20/24",
        "the issue-17 name",
        "measured 2026-11-26",
        "load average 11-15",
        "0.5 s at 5,000 nodes",
    ],
)
def test_the_patterns_catch_a_note(line: str) -> None:
    assert notebook_notes(line), line


@pytest.mark.parametrize(
    "line",
    [
        "# the operator posts an Event on the issue it found",
        "MAX_CANDIDATE_NODES = 500",
        "benchmarks/results/operator-scale-5000x10000-final.json",
        "like YYYY-MM-DDThh:mm:ssZ",
    ],
)
def test_the_patterns_leave_plain_text_alone(line: str) -> None:
    assert not notebook_notes(line), line


def test_no_notebook_notes_in_code_chart_or_manifests() -> None:
    files = scanned_files()
    assert any(f.suffix == ".py" for f in files), "no Python source found under src/"
    assert any(f.name == "values.yaml" for f in files), "the chart's values.yaml not found"
    problems: list[str] = []
    for path in files:
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue  # not text: nothing a reader takes for a comment
        for number, what, line in notebook_notes(text):
            problems.append(f"{path.relative_to(ROOT)}:{number}: {what}: {line[:120]}")
    assert not problems, (
        "say what and why in the present tense; put a figure in docs/results/ or "
        "benchmarks/results/ and name that file:\n" + "\n".join(problems)
    )


def test_every_pointer_to_a_results_file_or_doc_resolves() -> None:
    """A comment that gives its figure as a pointer names a file that exists: a pointer to a
    moved or renamed file is as stale as the figure it replaced."""
    missing: list[str] = []
    for path in scanned_files():
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        for number, line in enumerate(text.splitlines(), start=1):
            for target in POINTER.findall(line):
                if not any(ROOT.glob(target)):
                    missing.append(f"{path.relative_to(ROOT)}:{number}: {target}")
    assert not missing, "pointers to files that do not exist:\n" + "\n".join(missing)
