"""The manual (docs/, built by MkDocs) and the README that leads to it.

- The site builds with `mkdocs build --strict`: a broken link or anchor, a
  missing page or a page left out of mkdocs.yml's nav fails the build.
- README.md is a door (at most 200 lines), and every relative link in it and
  in docs/*.md points at a file that exists (and, into a page of the manual,
  at a heading that exists).
- docs/configuration.md's settings table and queueadmin.core.conf.SETTINGS
  agree: the same names, defaults and descriptions.
- docs/usage.md describes every option of queueadmin's management commands
  and of `queueadmin run`, as their parsers define them.

No Redis, no database: these tests read files and run MkDocs.
"""
from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path
from urllib.parse import unquote

import pytest

from queueadmin.core import conf

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
README = ROOT / "README.md"
PAGES = sorted(DOCS.glob("*.md"))
README_MAX_LINES = 200


# -- reading Markdown ----------------------------------------------------------------

FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,}).*?^ {0,3}\1[ \t]*$", re.M | re.S)
CODE_SPAN = re.compile(r"(`+)(?!`).+?(?<!`)\1(?!`)", re.S)
INLINE_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+(?:\"[^\"]*\"|'[^']*'))?\s*\)")
REFERENCE = re.compile(r"^ {0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)", re.M)
HTML_LINK = re.compile(r"""<(?:a|img)\b[^>]*?\b(?:href|src)\s*=\s*["']([^"']+)["']""", re.I)


def prose(text: str) -> str:
    """The text without fenced code blocks and code spans (a link shown as
    code is an example, not a link)."""
    return CODE_SPAN.sub("", FENCE.sub("", text))


def links(path: Path) -> list[str]:
    text = prose(path.read_text(encoding="utf-8"))
    return [m.group(1) for pattern in (INLINE_LINK, REFERENCE, HTML_LINK) for m in pattern.finditer(text)]


def is_relative(target: str) -> bool:
    return not re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", target) and not target.startswith("//")


def anchors(page: Path) -> set[str]:
    """The ids MkDocs gives the page's headings (Python-Markdown's toc, as
    configured in mkdocs.yml)."""
    import markdown

    md = markdown.Markdown(extensions=["toc", "tables", "fenced_code"])
    md.convert(page.read_text(encoding="utf-8"))

    def walk(tokens):
        for token in tokens:
            yield token["id"]
            yield from walk(token["children"])

    return set(walk(md.toc_tokens))


def cells(row: str) -> list[str]:
    """The cells of a Markdown table row (GFM: a pipe splits cells even in a
    code span unless it is escaped)."""
    row = row.strip()
    if row.startswith("|"):
        row = row[1:]
    if row.endswith("|") and not row.endswith("\\|"):
        row = row[:-1]
    return [c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", row)]


def table_after(text: str, heading: str) -> list[list[str]]:
    """The rows (header excluded) of the first table in the section whose
    heading line is `heading`."""
    lines = FENCE.sub("", text).splitlines()  # a "# settings.py" in a code block is no heading
    start = lines.index(heading)
    rows: list[list[str]] = []
    for line in lines[start + 1:]:
        if re.match(r"^#{1,6} ", line) and not rows:
            raise AssertionError(f"no table under {heading!r}")
        if line.lstrip().startswith("|"):
            rows.append(cells(line))
        elif rows:
            break
    assert len(rows) >= 2 and set("".join(rows[1])) <= set("-: "), f"the table under {heading!r} is malformed"
    return rows[2:]


# -- (a) the site builds ----------------------------------------------------------------


def test_the_manual_builds_with_mkdocs_strict(tmp_path):
    """`mkdocs build --strict` (mkdocs.yml: every page in the nav, links and
    anchors validated as warnings, which --strict makes fatal) into a temp
    dir; the figure of the benchmarks page is part of the site."""
    site = tmp_path / "site"
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(site)], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"mkdocs build --strict failed:\n{done.stdout}\n{done.stderr}"
    for page in PAGES:
        built = site / ("index.html" if page.stem == "index" else f"{page.stem}/index.html")
        assert built.is_file(), f"{page.name} was not built"
    assert (site / "bench.png").is_file()
    assert 'src="../bench.png"' in (site / "benchmarks" / "index.html").read_text(encoding="utf-8")


def test_the_built_site_is_not_committed():
    ignored = [line.strip() for line in (ROOT / ".gitignore").read_text().splitlines()]
    assert "site/" in ignored or "/site/" in ignored


# -- (b) the README is a door, and every relative link leads somewhere -------------------


def test_the_readme_is_a_door():
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines (at most {README_MAX_LINES})"


def test_the_readme_links_every_page_of_the_manual():
    targets = {t.split("#")[0] for t in links(README) if is_relative(t)}
    for page in ("usage", "configuration", "api", "operations", "design", "benchmarks"):
        assert f"docs/{page}.md" in targets, f"README.md does not link docs/{page}.md"


@pytest.mark.parametrize("doc", [README, *PAGES], ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_points_at_an_existing_file(doc):
    """Absolute URLs are left alone; a relative link must name a file of the
    repository (its #anchor, for a page of the manual, a heading of it)."""
    broken = []
    own_anchors = None
    for target in links(doc):
        if not is_relative(target):
            continue
        path, _, anchor = unquote(target).partition("#")
        if not path:  # a heading of this page
            own_anchors = own_anchors if own_anchors is not None else anchors(doc)
            if doc.suffix == ".md" and anchor not in own_anchors:
                broken.append(f"{target} (no such heading)")
            continue
        found = (doc.parent / path).resolve()
        if ROOT not in found.parents or not found.exists():
            broken.append(f"{target} (no such file)")
        elif anchor and found.parent == DOCS and found.suffix == ".md" and anchor not in anchors(found):
            broken.append(f"{target} (no such heading in {found.name})")
    assert not broken, f"{doc.relative_to(ROOT)}: broken links: {', '.join(broken)}"


# -- (c) the configuration reference and core/conf.py agree -------------------------------


def literal(text: str):
    """A default as the table writes it, back to a value: a Python literal
    ("qa", 1.0, None, True, {}), or else JSON (null, true)."""
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return json.loads(text)


def test_the_configuration_table_lists_every_setting_with_its_default():
    """docs/configuration.md, section "The QUEUEADMIN settings": one row per
    setting of queueadmin.core.conf.SETTINGS, no more, no less, no repeats.

    Each row is `| `NAME` | `DEFAULT` | description | ... |`. The default cell
    is one code span holding the value as a literal, compared by value, not
    by text: parsed with ast.literal_eval (a Python literal, as one writes it
    in settings.py), or json.loads when that fails (so `null` and `true` read
    as None and True too), and it must equal the setting's default AND be of
    the same type. So `"qa"` and `'qa'` both match "qa", `67108864` matches
    64 * MiB, but `1` does not match 1.0, `0` not False, `"0"` not 0: the
    reader sees the type the code has. The description cell must be the
    setting's doc from conf.py (whitespace aside), so both change together.
    """
    text = (DOCS / "configuration.md").read_text(encoding="utf-8")
    rows = table_after(text, "## The QUEUEADMIN settings")
    expected = {s.name: s for s in conf.SETTINGS}
    seen: list[str] = []
    problems: list[str] = []
    for row in rows:
        name_cell, default_cell, doc_cell = (row + ["", "", ""])[:3]
        name = re.fullmatch(r"`([A-Z][A-Z0-9_]*)`", name_cell)
        if not name:
            problems.append(f"a row whose first cell is not a setting name in backticks: {name_cell!r}")
            continue
        name = name.group(1)
        seen.append(name)
        if name not in expected:
            continue
        setting = expected[name]
        code = re.fullmatch(r"`([^`]+)`", default_cell)
        if not code:
            problems.append(f"{name}: the default cell is not one code span: {default_cell!r}")
            continue
        try:
            value = literal(code.group(1))
        except ValueError:
            problems.append(f"{name}: the default {code.group(1)!r} is neither a Python literal nor JSON")
            continue
        if type(value) is not type(setting.default) or value != setting.default:
            problems.append(f"{name}: the table says {code.group(1)}, conf.py {setting.default!r}")
        if " ".join(doc_cell.split()) != " ".join(setting.doc.split()):
            problems.append(f"{name}: the description differs from conf.py's: {doc_cell!r} != {setting.doc!r}")
    repeated = sorted({n for n in seen if seen.count(n) > 1})
    missing = [n for n in expected if n not in seen]
    unknown = [n for n in seen if n not in expected]
    assert not (repeated or missing or unknown or problems), (
        f"docs/configuration.md and queueadmin/core/conf.py disagree: missing {missing}, not settings {unknown}, "
        f"listed twice {repeated}; " + "; ".join(problems))


# -- the commands' options are all in the manual -----------------------------------------------


COMMANDS = ["queue_worker", "queue_submit", "queue_status", "queue_results", "queue_token", "queue_steer",
            "queue_reencrypt", "queue_prune"]


def options_of(parser) -> set[str]:
    """Every option string of an argparse parser (Django's own common options
    left out), and the names of its positional arguments."""
    common = {"--version", "-v", "--verbosity", "--settings", "--pythonpath", "--traceback", "--no-color",
              "--force-color", "--skip-checks", "-h", "--help"}
    found = set()
    for action in parser._actions:
        if action.option_strings:
            found |= set(action.option_strings) - common
        elif action.dest not in ("help",):
            found.add(action.dest.upper())
    return found


@pytest.mark.parametrize("name", COMMANDS)
def test_every_option_of_the_management_commands_is_in_the_usage_page(name):
    from django.core.management import load_command_class

    parser = load_command_class("queueadmin.core", name).create_parser("manage.py", name)
    text = (DOCS / "usage.md").read_text(encoding="utf-8")
    section = text.split(f"### {name}\n", 1)[1].split("\n### ", 1)[0]
    missing = sorted(o for o in options_of(parser) if f"`{o}`" not in section and f"`{o}," not in section)
    assert not missing, f"docs/usage.md, section {name}: options not described: {missing}"


def test_every_option_of_queueadmin_run_is_in_the_usage_page(monkeypatch):
    import argparse

    from queueadmin import cli

    captured = {}

    def parse(self, args=None, namespace=None):
        captured["parser"] = self
        raise SystemExit(0)

    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", parse)
    with pytest.raises(SystemExit):
        cli.run([])
    text = (DOCS / "usage.md").read_text(encoding="utf-8")
    section = text.split("### queueadmin run\n", 1)[1].split("\n### ", 1)[0]
    missing = sorted(o for o in options_of(captured["parser"]) if f"`{o}`" not in section)
    assert not missing, f"docs/usage.md, section queueadmin run: options not described: {missing}"
