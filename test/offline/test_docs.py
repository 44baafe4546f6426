"""The documentation holds together: README.md stays the product's face (at
most 400 lines), every relative link and #anchor in README.md,
CONTRIBUTING.md and docs/ resolves (GitHub's anchor rules), no table cell
is a wall of text, the user's pages sit directly in docs/ (PGXS installs
docs/*.md flat) and the index lists them all, the SQL Server login and the
CDC gating role are never called by finalize's PostgreSQL role names, and
the signed webhook example carries its true signature. No server needed."""

import hashlib
import hmac
import os
import re
import unicodedata
from collections import Counter
from pathlib import Path

import pytest

TOP = Path(__file__).resolve().parents[2]
DOCS = TOP / "docs"
MAX_README_LINES = 400
MAX_CELL = 400


def doc_files():
    files = [TOP / "README.md", TOP / "CONTRIBUTING.md"]
    files += sorted(DOCS.rglob("*.md"))
    return [f for f in files if f.exists()]


def rel(path):
    return str(path.relative_to(TOP))


def without_fences(text):
    """The text with every fenced code block blanked (line numbers kept)."""
    out, fence = [], None
    for line in text.split("\n"):
        m = re.match(r"^\s*(`{3,}|~{3,})", line)
        if fence is None and m:
            fence = m.group(1)[0] * 3
            out.append("")
        elif fence is not None:
            if line.strip().startswith(fence):
                fence = None
            out.append("")
        else:
            out.append(line)
    return "\n".join(out)


def without_code_spans(text):
    return re.sub(r"(`+)(?:(?!\1).)+?\1", "``", text, flags=re.S)


def github_slug(heading):
    """GitHub's anchor of a heading: the rendered text (links by their text,
    no markup), lower-case, punctuation dropped except '-' and '_', spaces to '-'."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    text = re.sub(r"<[^>]+>", "", text)
    text = text.strip().lower()
    kept = []
    for ch in text:
        cat = unicodedata.category(ch)
        if ch in "-_ " or cat[0] in "LN" or cat == "Mn":
            kept.append(ch)
    return "".join(kept).replace(" ", "-")


def anchors(path, cache={}):
    """Every anchor a Markdown file defines: its headings (duplicates get -1,
    -2, ... as on GitHub) and explicit <a id/name> anchors."""
    if path not in cache:
        text = without_fences(path.read_text())
        seen, found = Counter(), set()
        for line in text.split("\n"):
            m = re.match(r"^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$", line)
            if m:
                slug = github_slug(m.group(2))
                found.add(slug if seen[slug] == 0 else "%s-%d" % (slug, seen[slug]))
                seen[slug] += 1
        found.update(re.findall(r"<a\s+(?:id|name)=\"([^\"]+)\"", text))
        cache[path] = found
    return cache[path]


def links(path):
    """(line, target) of every inline link and image outside code."""
    text = without_code_spans(without_fences(path.read_text()))
    for m in re.finditer(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)", text):
        yield text.count("\n", 0, m.start()) + 1, m.group(1)


def table_cells(path):
    """(line, cell) of every cell of every table outside code."""
    for n, line in enumerate(without_fences(path.read_text()).split("\n"), 1):
        if line.lstrip().startswith("|"):
            for cell in re.split(r"(?<!\\)\|", line.strip().strip("|")):
                yield n, cell.strip()


def test_the_readme_is_at_most_400_lines():
    lines = (TOP / "README.md").read_text().splitlines()
    assert len(lines) <= MAX_README_LINES, "README.md has %d lines; move sections to docs/" % len(lines)


def test_every_relative_link_and_anchor_resolves():
    broken = []
    for f in doc_files():
        for line, target in links(f):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):  # https:, mailto:, ...
                continue
            path_part, _, anchor = target.partition("#")
            dest = (f.parent / path_part).resolve() if path_part else f
            where = "%s:%d: %s" % (rel(f), line, target)
            if not dest.exists():
                broken.append(where + " (no such file)")
                continue
            if anchor:
                if dest.is_dir() or dest.suffix != ".md":
                    broken.append(where + " (an anchor into something that is not a Markdown file)")
                elif anchor not in anchors(dest):
                    broken.append(where + " (no heading with that anchor)")
    assert not broken, "broken links:\n" + "\n".join(broken)


def test_no_table_cell_is_a_wall_of_text():
    long_cells = ["%s:%d: %d characters: %s..." % (rel(f), n, len(c), c[:60])
                  for f in doc_files() for n, c in table_cells(f) if len(c) > MAX_CELL]
    assert not long_cells, "table cells over %d characters (use a list or a section):\n%s" % (
        MAX_CELL, "\n".join(long_cells))


def test_user_pages_are_directly_in_docs_and_all_in_the_index():
    # make install copies docs/*.md flat (Makefile, FINALIZE_DOCS), so a user's page in a subfolder would not be installed
    # and links between pages must be file names; design notes stay in docs/design/.
    nested = [rel(f) for f in DOCS.rglob("*.md") if f.parent != DOCS and f.parent != DOCS / "design"]
    assert not nested, "user pages must sit directly in docs/: %s" % nested
    index = DOCS / "README.md"
    assert index.exists(), "docs/README.md, the index of the user's guide, is missing"
    listed = {(index.parent / t.partition("#")[0]).resolve() for _, t in links(index) if t.partition("#")[0]}
    missing = [rel(f) for f in DOCS.glob("*.md") if f != index and f.resolve() not in listed]
    assert not missing, "docs/README.md does not link to %s" % missing
    for f in sorted((DOCS / "design").glob("*.md")):
        head = "\n".join(f.read_text().split("\n")[:8]).lower()
        assert "internal history" in head, "%s does not say at the top that it is a design note" % rel(f)


def test_sql_server_names_are_never_finalizes_role_names():
    # finalize_reader, finalize_pipeline, finalize_publisher and finalize_admin are PostgreSQL
    # roles. The SQL Server login (svc_finalize) and the CDC gating role (cdc_gate) are named
    # otherwise in every example, and the old double-duty name cdc_reader is gone (the C file
    # src/mssql/cdc_reader.c keeps its name).
    bad = []
    patterns = [
        r"CREATE\s+(?:LOGIN|USER)\s+\[?finalize_",           # a SQL Server login or user named like a role
        r"(?:GRANT|DENY)\s+[^;\n]*\bTO\s+\[finalize_",          # a T-SQL grant to one
        r"ADD\s+MEMBER\s+\[?finalize_",                         # T-SQL role membership
        r"username\s+'(?:finalize_|cdc_)",                      # a user mapping's SQL Server login
        r"role_name\s*=\s*N?'finalize_",                        # a gating role named like a role
        r"\bcdc_reader\b(?!\.[ch]\b)",                          # the old name of the login and the role
    ]
    for f in doc_files():
        text = f.read_text()
        for p in patterns:
            for m in re.finditer(p, text, re.I):
                bad.append("%s:%d: %s" % (rel(f), text.count("\n", 0, m.start()) + 1, m.group(0)))
    assert not bad, "SQL Server names that read as finalize's roles:\n" + "\n".join(bad)
    script = (DOCS / "sql-server.md").read_text()
    assert "CREATE LOGIN [svc_finalize]" in script and "ALTER ROLE [cdc_gate] ADD MEMBER [svc_finalize]" in script


def test_the_signed_webhook_example_carries_its_true_signature():
    text = (DOCS / "alerts.md").read_text()
    key = re.search(r"hmac_key '([^']+)'", text).group(1)
    m = re.search(r"X-Finalize-Signature: sha256=([0-9a-f]{64})\n\n(\{.*?\})\n```", text, re.S)
    assert m, "docs/alerts.md lost its signed request example"
    body = re.sub(r"\n\s*", " ", m.group(2))  # sent as one line, indented on the page
    assert hmac.new(key.encode(), body.encode(), hashlib.sha256).hexdigest() == m.group(1)


@pytest.mark.parametrize("heading, slug", [
    ("Waiting: `wait_final`", "waiting-wait_final"),
    ("Upgrading from 0.2.0", "upgrading-from-020"),
    ("`finalize.status`", "finalizestatus"),
    ("Large manifests (`files_location`)", "large-manifests-files_location"),
    ("What finalize sends, and what it costs", "what-finalize-sends-and-what-it-costs"),
    ("`cancelled` and `internal_error`", "cancelled-and-internal_error"),
])
def test_anchors_follow_githubs_rules(heading, slug):
    assert github_slug(heading) == slug


def test_the_two_readme_commands_are_there():
    readme = (TOP / "README.md").read_text()
    assert re.search(r"^test/demo\s", readme, re.M) and re.search(r"^test/run-tests\s", readme, re.M)
    assert os.access(TOP / "test" / "demo", os.X_OK) and os.access(TOP / "test" / "run-tests", os.X_OK)
