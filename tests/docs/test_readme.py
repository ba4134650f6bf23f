"""README.md and docs/: the generated tables match the committed results, links resolve, every committed results
file is named by a page, and nothing points outside the repository. No TensorFlow, no training: seconds."""
from __future__ import annotations

import fnmatch
import itertools
import os
import re
from pathlib import Path

import pytest

from benchmarks import compare
from conftest import ROOT

README = ROOT / "README.md"
DOCS = ROOT / "docs"
RESULT_DIRS = [ROOT / "benchmarks" / "results", *sorted((ROOT / "studies").glob("*/results"))]
IGNORED_RESULTS = {"state", "batch_scaling-state"}  # git-ignored run state (checkpoints), never committed


def pages() -> list[Path]:
    """Every Markdown page a reader is pointed to: README, docs/, and the studies' READMEs."""
    return [README, *sorted(DOCS.rglob("*.md")), *sorted((ROOT / "studies").rglob("README.md"))]


def section(text: str, begin: str, end: str) -> list[str] | None:
    span = compare.section_span(text, begin, end)
    return None if span is None else text[span[0]:span[1]].strip().splitlines()


def test_generated_tables_match_the_committed_results():
    """README's scores and scaling tables and the scores page's table are what benchmarks.compare makes from the
    committed results; a run that changes a results file must regenerate them:
        python -m benchmarks.compare benchmarks/results/scores --readme README.md --readme docs/results/scores.md"""
    wanted = compare.committed_sections()
    readme = README.read_text()
    assert section(readme, compare.README_BEGIN, compare.README_END) is not None, "README has no scores table"
    assert section(readme, compare.SCALING_BEGIN, compare.SCALING_END) is not None, "README has no scaling table"
    scores_page = (DOCS / "results" / "scores.md").read_text()
    assert section(scores_page, compare.ALL_PAPER_BEGIN, compare.ALL_PAPER_END) is not None
    stale = []
    for page in pages():
        text = page.read_text()
        for (begin, end), lines in wanted.items():
            shown = section(text, begin, end)
            if shown is not None and shown != lines:
                stale.append(f"{page.relative_to(ROOT)}: {begin}")
    assert not stale, ("generated tables differ from the committed results (run python -m benchmarks.compare "
                       "benchmarks/results/scores --readme FILE for each): " + ", ".join(stale))
    # the headline table has one row per game of the paper, each backed by a committed evaluation
    table = section(readme, compare.README_BEGIN, compare.README_END)
    assert [line.split("|")[1].strip() for line in table[2:]] == [compare.title(g) for g in compare.PAPER_GAMES]


def test_readme_is_short():
    assert len(README.read_text().splitlines()) <= 250


LINK = re.compile(r"\]\(([^)\s]+)\)")


def test_links_between_pages_resolve():
    broken = []
    for page in pages():
        for target in LINK.findall(page.read_text()):
            if re.match(r"[a-z]+:", target) or target.startswith("#"):
                continue  # a web address, or a heading on the same page
            path = (page.parent / target.split("#")[0]).resolve()
            if not path.exists():
                broken.append(f"{page.relative_to(ROOT)} -> {target}")
    assert not broken, broken


def expand_braces(text: str) -> list[str]:
    """`a{b,c}d` -> [abd, acd]; nested and repeated groups too (the way the pages name groups of files)."""
    m = re.search(r"\{([^{}]*)\}", text)
    if not m:
        return [text]
    return list(itertools.chain.from_iterable(
        expand_braces(text[:m.start()] + alt + text[m.end():]) for alt in m.group(1).split(",")))


def linked_files(page: Path) -> list[str]:
    """The repository paths a page links to (web addresses left out)."""
    out = []
    for target in LINK.findall(page.read_text()):
        path = (page.parent / target.split("#")[0]).resolve()
        if not re.match(r"[a-z]+:", target) and path.is_relative_to(ROOT):
            out.append(path.relative_to(ROOT).as_posix())
    return out


def named_patterns() -> set[str]:
    """Every code span and linked file of every page, brace-expanded: file names, paths and globs."""
    spans = itertools.chain.from_iterable(re.findall(r"`([^`\n]+)`", p.read_text()) + linked_files(p) for p in pages())
    return {name.strip() for span in spans for name in expand_braces(span)}


def committed_results() -> list[Path]:
    files = []
    for top in RESULT_DIRS:
        for d, dirs, names in os.walk(top):
            dirs[:] = [x for x in dirs if x not in IGNORED_RESULTS]
            files += [Path(d) / n for n in names]
    return files


def test_every_results_file_is_named_by_a_page():
    patterns = named_patterns()
    unnamed = []
    for f in committed_results():
        rel = f.relative_to(ROOT).as_posix()
        if not any(fnmatch.fnmatch(f.name, p) or fnmatch.fnmatch(rel, p) or rel.endswith("/" + p) for p in patterns):
            unnamed.append(rel)
    assert not unnamed, f"results files no page names (name them, or remove them): {unnamed}"


@pytest.mark.parametrize("top", ["README.md", "ba3c", "measure", "benchmarks", "studies", "launch", "docs", "tests",
                                 "Makefile", "setup.cfg", ".ci"])
def test_nothing_points_outside_the_repository(top):
    """A user's clone has only this repository: no file may cite the shared folder beside it."""
    outside = "../" + "shared"  # spelled apart so that this file does not match itself
    path = ROOT / top
    files = [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file() and "__pycache__" not in p.parts]
    found = [str(p.relative_to(ROOT)) for p in files
             if p.suffix not in (".png", ".gif", ".npz", ".gz") and outside in p.read_text(errors="ignore")]
    assert not found, found
