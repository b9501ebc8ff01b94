"""The checkers of the real-application suite: office documents and workbooks as LibreOffice writes them,
chromium's profile, the accessibility tree, and the rubrics (weighted parts, gates). Files are made by the
real LibreOffice (headless conversion) and read back as a checker reads them, in a session's home."""

from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
from pathlib import Path
from typing import Any

import pytest
from conftest import need_programs

from hci_envs.tasks import parse_task, score

HTML = """<html><head><title>Quarterly notes</title></head><body>
<h1>Report Title</h1><p><b>All bold here</b></p><p align="center">Centered text</p>
<p>Mixed <b>bold</b> and <i>italic</i></p><ul><li>apple</li><li>pear</li></ul>
<table border=1><tr><td>a</td><td>b</td></tr><tr><td>1</td><td>2</td></tr></table></body></html>"""

# A flat ODF spreadsheet with a formula: LibreOffice computes it when it converts, as when it saves.
FODS = """<?xml version="1.0" encoding="UTF-8"?>
<office:document xmlns:office="urn:oasis:names:tc:opendocument:xmlns:office:1.0"
 xmlns:table="urn:oasis:names:tc:opendocument:xmlns:table:1.0" xmlns:text="urn:oasis:names:tc:opendocument:xmlns:text:1.0"
 xmlns:of="urn:oasis:names:tc:opendocument:xmlns:of:1.2" office:version="1.2"
 xmlns:style="urn:oasis:names:tc:opendocument:xmlns:style:1.0"
 xmlns:fo="urn:oasis:names:tc:opendocument:xmlns:xsl-fo-compatible:1.0"
 office:mimetype="application/vnd.oasis.opendocument.spreadsheet"><office:automatic-styles>
<style:style style:name="ce1" style:family="table-cell"><style:text-properties fo:font-weight="bold"/></style:style>
</office:automatic-styles><office:body><office:spreadsheet>
<table:table table:name="Data">
<table:table-row>
<table:table-cell table:style-name="ce1" office:value-type="string"><text:p>item</text:p></table:table-cell>
<table:table-cell office:value-type="string"><text:p>qty</text:p></table:table-cell></table:table-row>
<table:table-row><table:table-cell office:value-type="string"><text:p>apple</text:p></table:table-cell>
<table:table-cell office:value-type="float" office:value="3"/></table:table-row>
<table:table-row><table:table-cell office:value-type="string"><text:p>pear</text:p></table:table-cell>
<table:table-cell office:value-type="float" office:value="4.5"/></table:table-row>
<table:table-row><table:table-cell office:value-type="string"><text:p>total</text:p></table:table-cell>
<table:table-cell table:formula="of:=SUM([.B2:.B3])"/></table:table-row>
</table:table><table:table table:name="Summary"><table:table-row><table:table-cell/></table:table-row></table:table>
</office:spreadsheet></office:body></office:document>"""


@pytest.fixture(scope="module")
def office_files(tmp_path_factory: pytest.TempPathFactory) -> Path:
    need_programs("soffice")
    folder = tmp_path_factory.mktemp("office")
    (folder / "doc.html").write_text(HTML)
    (folder / "book.fods").write_text(FODS)
    profile = f"-env:UserInstallation=file://{folder}/profile"
    for source, target in (("doc.html", "odt:writer8"), ("doc.html", "docx:MS Word 2007 XML"),
                           ("book.fods", "ods"), ("book.fods", "xlsx:Calc MS Excel 2007 XML"), ("book.fods", "csv")):
        infilter = ["--infilter=HTML (StarWriter)"] if source.endswith(".html") else []
        subprocess.run(["soffice", "--headless", "--norestore", profile, *infilter, "--convert-to", target,
                        "--outdir", str(folder), str(folder / source)], check=True, capture_output=True, timeout=180)
    return folder


@pytest.fixture(scope="module")
def session() -> Any:
    """A session on the fake desktop (the test seam: these checks read files, not the screen), reset onto each
    test's home folder; its agent account owns the copied files, as an agent's would be."""
    from hci_envs import Environment

    env = Environment(desktop="fake")
    yield env
    env.close()


def check(home: Path, checker: dict[str, Any]) -> Any:
    task = parse_task({"id": "t", "instruction": "x", "checker": checker})
    env = SESSION[0]
    env.reset(start_state={"home_template": str(home)})
    return score(task.checker, env)


SESSION: list[Any] = []


@pytest.fixture(autouse=True)
def _session(session: Any) -> None:
    SESSION[:] = [session]


@pytest.fixture
def home(tmp_path: Path, office_files: Path) -> Path:
    for name in ("doc.odt", "doc.docx", "book.ods", "book.xlsx", "book.csv"):
        shutil.copy(office_files / name, tmp_path / name)
    return tmp_path


@pytest.mark.apps
@pytest.mark.parametrize("name", ["doc.odt", "doc.docx"])
def test_a_text_document_is_read_with_its_formatting(home, name):
    fmt = name.split(".")[1]
    good = {"type": "document", "path": name, "format": fmt, "contains": ["Centered text", "pear"],
            "not_contains": ["banana"], "title": "Quarterly notes",
            "paragraphs": [{"text": "Report Title", "heading": 1, "style": "Heading 1", "bold": True},
                           {"text": "All bold here", "bold": True},
                           {"text": "Centered text", "align": "center", "bold": False},
                           {"text": "apple", "list_item": True},
                           {"text": "Mixed bold and italic", "bold_spans": ["bold"], "italic_spans": ["italic"],
                            "underline_spans": []}],
            "tables": [{"rows": 2, "columns": 2, "cells": [["a", "b"], [None, "2"]]}]}
    result = check(home, good)
    assert result.passed, result.details
    for bad, why in (({"format": "text"}, "not text"), ({"contains": ["banana"]}, "does not contain"),
                     ({"paragraphs": [{"text": "Mixed bold and italic", "bold": True}]}, "no paragraph"),
                     ({"paragraphs": [{"text": "Centered text", "align": "right"}]}, "no paragraph"),
                     ({"paragraphs": [{"text": "Mixed bold and italic", "bold_spans": ["bold and"]}]}, "no paragraph"),
                     ({"tables": [{"rows": 3}]}, "rows"), ({"title": "Other"}, "title"),
                     ({"not_contains": ["apple"]}, "still contains")):
        result = check(home, {**good, **bad})
        assert not result.passed and result.value == 0.0, (bad, result.details)
        assert any(why in d for d in result.details), (why, result.details)


@pytest.mark.apps
@pytest.mark.parametrize("name,fmt", [("book.ods", "ods"), ("book.xlsx", "xlsx"), ("book.csv", "csv")])
def test_a_workbook_is_read_with_the_values_the_app_saved(home, name, fmt):
    checker: dict[str, Any] = {"type": "spreadsheet", "path": name, "format": fmt,
                               "cells": {"A2": "apple", "B3": 4.5, "B4": 7.5, "A1": "item"},
                               "columns": [{"column": "B", "from_row": 2, "values": [3, 4.5, 7.5]}]}
    if fmt != "csv":  # a CSV keeps neither formulas nor sheet names
        checker |= {"formulas": {"B4": "sum("}, "sheets": ["Data", "Summary"], "bold": ["A1"]}
    assert check(home, checker).passed, check(home, checker).details
    for bad in ({"cells": {"B4": 8}}, {"cells": {"A2": "Apple"}},
                {"columns": [{"column": "B", "from_row": 2, "values": [3, 4.5]}]},
                {"format": "ods" if fmt != "ods" else "xlsx"}):
        assert not check(home, {**checker, **bad}).passed, bad
    if fmt != "csv":
        assert not check(home, {**checker, "formulas": {"B4": "AVERAGE"}}).passed
        assert not check(home, {**checker, "sheet": "Nope"}).passed
        assert not check(home, {**checker, "bold": ["A1", "A2"]}).passed
        assert check(home, {"type": "spreadsheet", "path": name, "sheet": "Data", "cells": {"B2": 3}}).passed


@pytest.mark.apps
def test_damaged_or_foreign_files_fail_their_check_without_a_crash(home):
    (home / "junk.odt").write_bytes(b"PK\x03\x04 not really a zip")
    (home / "renamed.docx").write_bytes((home / "doc.odt").read_bytes())
    (home / "binary.xlsx").write_bytes(bytes(range(256)) * 10)
    (home / "link.odt").symlink_to(home / "doc.odt")
    cases = [("junk.odt", "document"), ("renamed.docx", "document"), ("binary.xlsx", "spreadsheet"),
             ("missing.ods", "spreadsheet"), ("link.odt", "document"), ("doc.odt", "spreadsheet")]
    for path, kind in cases:
        extra = {"format": "docx"} if kind == "document" else {"cells": {"A1": "item"}}
        result = check(home, {"type": kind, "path": path, **extra})
        assert not result.passed and result.details, (path, result.details)


@pytest.mark.apps
def test_a_weighted_rubric_gives_partial_credit_and_a_gate_gives_none_until_it_opens(home):
    part = {"type": "document", "path": "doc.odt", "contains": ["pear"]}
    wrong = {"type": "document", "path": "doc.odt", "contains": ["banana"]}
    rubric = {"type": "weighted", "parts": [{"name": "pear", "weight": 3, "check": part},
                                            {"name": "banana", "weight": 1, "check": wrong}]}
    result = check(home, rubric)
    assert result.value == 0.75 and not result.passed
    assert any(d.startswith("[pear 1.00x3]") for d in result.details)
    assert check(home, {"type": "gate", "gate": wrong, "then": part}).value == 0.0
    gated = check(home, {"type": "gate", "gate": part, "then": rubric})
    assert gated.value == 0.75 and not gated.passed
    assert check(home, {"type": "weighted", "parts": [{"name": "p", "check": part}]}).passed


@pytest.mark.fake
@pytest.mark.parametrize("checker", [
    {"type": "document", "path": "a.odt"},
    {"type": "spreadsheet", "path": "a.ods", "cells": {"B": 1}},
    {"type": "browser", "profile": ".config/chromium"},
    {"type": "accessibility", "text": "42"},
    {"type": "weighted", "parts": []},
    {"type": "document", "path": "a.odt", "paragraphs": [{"bold": True}]},
])
def test_checks_that_could_never_fail_or_name_nothing_are_refused(checker):
    from hci_envs.errors import TaskFormatError

    with pytest.raises(TaskFormatError):
        parse_task({"id": "t", "instruction": "x", "checker": checker})


def _profile(home: Path, bookmarks: list[dict[str, str]], visits: list[tuple[str, str]],
             downloads: list[tuple[str, int]]) -> None:
    """A profile in chromium's on-disk layout (the files the browser writes; their reader is what is tested
    here: a real chromium writes them in the browser templates' oracle runs)."""
    default = home / ".config" / "chromium" / "Default"
    default.mkdir(parents=True)
    roots = {"bookmark_bar": {"type": "folder", "children": [{"type": "url", **b} for b in bookmarks]},
             "other": {"type": "folder", "children": []}}
    (default / "Bookmarks").write_text(json.dumps({"roots": roots, "version": 1}))
    with sqlite3.connect(default / "History") as db:
        db.execute("CREATE TABLE urls (id INTEGER PRIMARY KEY, url TEXT, title TEXT, visit_count INTEGER)")
        db.execute("CREATE TABLE downloads (id INTEGER PRIMARY KEY, target_path TEXT, state INTEGER)")
        db.executemany("INSERT INTO urls (url, title, visit_count) VALUES (?, ?, 1)", visits)
        db.executemany("INSERT INTO downloads (target_path, state) VALUES (?, ?)", downloads)


@pytest.mark.fake
def test_a_browser_profile_is_read_for_bookmarks_visits_and_finished_downloads(tmp_path):
    _profile(tmp_path, [{"name": "Recipes", "url": "http://127.0.0.1:4711/recipes.html"}],
             [("http://127.0.0.1:4711/shop/cart.html", "Cart")],
             [(str(tmp_path / "Downloads" / "report.pdf"), 1), (str(tmp_path / "Downloads" / "half.zip"), 0)])
    base = {"type": "browser", "app": "browser"}
    assert check(tmp_path, {**base, "bookmark": {"name": "Recipes", "url_contains": "/recipes.html",
                                                 "folder": "bookmark_bar"}}).passed
    assert check(tmp_path, {**base, "visited": {"url_contains": "/shop/cart.html", "title": "Cart"}}).passed
    assert check(tmp_path, {**base, "download": "report.pdf"}).passed
    assert check(tmp_path, {**base, "no_bookmark": {"name": "Gone"}}).passed
    for bad in ({"bookmark": {"name": "Recipes", "folder": "other"}}, {"visited": {"url_contains": "/nope"}},
                {"download": "half.zip"}, {"no_bookmark": {"url_contains": "recipes"}}):
        result = check(tmp_path, {**base, **bad})
        assert not result.passed and "browser (no such app)" in result.details[0], (bad, result.details)
    # a profile the browser never wrote, or one damaged, is an empty one
    (tmp_path / ".config" / "chromium" / "Default" / "History").write_bytes(b"not a database")
    assert not check(tmp_path, {**base, "visited": {"url_contains": "cart"}}).passed
    (tmp_path / "elsewhere").mkdir()
    assert not check(tmp_path / "elsewhere", {**base, "download": "report.pdf"}).passed
