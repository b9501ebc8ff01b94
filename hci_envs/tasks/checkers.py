"""The checks a task's checker is made of: what the world must look like once the agent is done.

Files and JSON state files in the home, a command run as the agent, screen pixels; office documents and
workbooks (read as :mod:`.documents` reads them), a browser's profile (bookmarks, history, downloads), the
apps' accessibility tree (widget values and states); and their compositions: ``all``, ``any``, ``mean``, a
``weighted`` rubric with named parts (partial credit), and a ``gate`` (no credit until a first check passes),
as OpenEnv's rubrics compose (WeightedSum, Gate). Binary success is kept: a task passes when its checker
scores 1.0, whatever the partial credit on the way.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any, Literal, Union

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator, model_validator


def _regex(value: str | None) -> str | None:
    if value is not None:
        try:
            re.compile(value)
        except re.error as exc:
            raise ValueError(f"not a regular expression: {exc}") from None
    return value


Regex = Annotated[str, AfterValidator(_regex)]


def _home_relative(path: str) -> str:
    if not path or path.startswith("/") or ".." in Path(path).parts:
        raise ValueError(f"{path!r}: paths are relative paths inside the session's home")
    return path


#: A path relative to the session's home that stays inside it.
HomePath = Annotated[str, AfterValidator(_home_relative)]


class _Check(BaseModel):
    model_config = ConfigDict(extra="forbid")


class FileCheck(_Check):
    """A file in the session's home: it exists, or its text equals / contains / matches."""

    type: Literal["file"]
    path: HomePath
    exists: bool = True
    equals: str | None = None
    contains: str | None = None
    matches: Regex | None = None



class JsonCheck(_Check):
    """A value in a JSON file of the home, addressed by a JSON pointer ("/submitted/name")."""

    type: Literal["json"]
    path: HomePath
    pointer: str = Field(pattern=r"^(/[^/]*)*$")
    equals: Any = None
    is_true: bool = False

    @model_validator(mode="after")
    def _one_condition(self) -> JsonCheck:
        # Without this, a missing "equals" would compare against null, which an app's untouched state matches.
        if ("equals" in self.model_fields_set) == self.is_true:
            raise ValueError("give exactly one of 'equals' (null allowed, if meant) and 'is_true': true")
        return self


class CommandCheck(_Check):
    """A shell command run in the session (its home, its display): exit code and output."""

    type: Literal["command"]
    run: str
    exit_code: int | None = 0
    stdout_equals: str | None = None
    stdout_contains: str | None = None
    timeout: float = Field(10.0, gt=0, le=120)

    @model_validator(mode="after")
    def _some_condition(self) -> CommandCheck:
        if self.exit_code is None and self.stdout_equals is None and self.stdout_contains is None:
            raise ValueError("a command check needs exit_code, stdout_equals or stdout_contains: else it always passes")
        return self


class PixelCheck(_Check):
    """The colour of one screen pixel."""

    type: Literal["pixel"]
    x: int = Field(ge=0)
    y: int = Field(ge=0)
    color: tuple[int, int, int]
    tolerance: int = Field(0, ge=0, le=255)


class AllCheck(_Check):
    """Every check passes (scores 1), else 0."""

    type: Literal["all"]
    checks: list[Check] = Field(min_length=1)


class AnyCheck(_Check):
    """At least one check passes."""

    type: Literal["any"]
    checks: list[Check] = Field(min_length=1)


class MeanCheck(_Check):
    """Partial credit: the share of checks that pass."""

    type: Literal["mean"]
    checks: list[Check] = Field(min_length=1)


class BinaryFile(BaseModel):
    """A home file given as base64 (a document, an image): ``{"base64": "..."}``."""

    model_config = ConfigDict(extra="forbid")
    base64: str


class ParagraphMatch(BaseModel):
    """A paragraph the document must have: its text (whole, trimmed) or part of it, and its formatting."""

    model_config = ConfigDict(extra="forbid")
    text: str | None = None
    contains: str | None = None
    style: str | None = Field(None, description='the named paragraph style, e.g. "Heading 1"')
    heading: int | None = Field(None, ge=1, le=10)
    bold: bool | None = None
    italic: bool | None = None
    underline: bool | None = None
    align: Literal["left", "center", "right", "justify"] | None = None
    font_size: float | None = Field(None, gt=0)
    list_item: bool | None = None
    bold_spans: list[str] | None = Field(None, description="exactly these stretches of the paragraph are bold")
    italic_spans: list[str] | None = None
    underline_spans: list[str] | None = None

    @model_validator(mode="after")
    def _names_a_paragraph(self) -> ParagraphMatch:
        if self.text is None and self.contains is None:
            raise ValueError("a paragraph match needs 'text' or 'contains'")
        return self


class TableMatch(BaseModel):
    """A table the document must have (the ``index``-th, from 0): its size, and cells where given."""

    model_config = ConfigDict(extra="forbid")
    index: int = Field(0, ge=0)
    rows: int | None = Field(None, ge=1)
    columns: int | None = Field(None, ge=1)
    cells: list[list[str | None]] | None = Field(None, description="row by row; None skips a cell")


class DocumentCheck(_Check):
    """A text document in the home (ODT, DOCX or plain text, told by its content): its format, text, paragraphs
    with their formatting, tables, title. Every condition given must hold."""

    type: Literal["document"]
    path: HomePath
    format: Literal["odt", "docx", "text"] | None = None
    contains: list[str] = []
    not_contains: list[str] = []
    matches: Regex | None = None
    paragraphs: list[ParagraphMatch] = []
    tables: list[TableMatch] = []
    title: str | None = None

    @model_validator(mode="after")
    def _some_condition(self) -> DocumentCheck:
        if not (self.format or self.contains or self.not_contains or self.matches or self.paragraphs
                or self.tables or self.title is not None):
            raise ValueError("a document check needs a condition: else it passes for any file")
        return self


class ColumnMatch(BaseModel):
    """Values down a column, from ``from_row``: exactly these (then an empty cell), in order."""

    model_config = ConfigDict(extra="forbid")
    column: str = Field(pattern=r"^[A-Za-z]{1,3}$")
    from_row: int = Field(1, ge=1)
    values: list[Any] = Field(min_length=1)


class SpreadsheetCheck(_Check):
    """A workbook in the home (ODS, XLSX or CSV, told by its content): cell values (numbers within
    ``tolerance``, text trimmed), formulas (the cell's formula contains the text, any case), columns, sheet
    names, charts. Values are what the app saved (no recalculation)."""

    type: Literal["spreadsheet"]
    path: HomePath
    format: Literal["ods", "xlsx", "csv"] | None = None
    sheet: str | int | None = Field(None, description="a sheet's name or index (default: the first)")
    cells: dict[str, Any] = {}
    formulas: dict[str, str] = {}
    columns: list[ColumnMatch] = []
    sheets: list[str] | None = Field(None, description="sheet names the workbook has (in this order)")
    charts: int | None = Field(None, ge=1, description="at least this many charts (ODS)")
    bold: list[str] = Field([], description="cells whose font is bold (ODS, XLSX)")
    tolerance: float = Field(1e-6, ge=0)

    @field_validator("cells", "formulas", "bold")
    @classmethod
    def _references(cls, value: Any) -> Any:
        for ref in value:
            if not re.fullmatch(r"[A-Za-z]{1,3}[1-9][0-9]{0,6}", ref):
                raise ValueError(f"{ref!r} is not a cell reference like B12")
        return value

    @model_validator(mode="after")
    def _some_condition(self) -> SpreadsheetCheck:
        if not (self.format or self.cells or self.formulas or self.columns or self.sheets or self.charts
                or self.bold):
            raise ValueError("a spreadsheet check needs a condition: else it passes for any file")
        return self


class BookmarkMatch(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str | None = None
    url_contains: str | None = None
    folder: Literal["bookmark_bar", "other"] | None = None


class VisitMatch(BaseModel):
    model_config = ConfigDict(extra="forbid")
    url_contains: str | None = None
    title: str | None = None


class BrowserCheck(_Check):
    """Chromium's profile in the home: a bookmark, a visited page, a finished download. The browser holds
    history and bookmarks in memory for seconds, so the check first ends the app named ``app`` as a person
    would close it (chromium writes its profile then), and reads the profile once it has exited."""

    type: Literal["browser"]
    app: str = Field("browser", description="the start state's name of the browser app")
    profile: HomePath = ".config/chromium"
    bookmark: BookmarkMatch | None = None
    no_bookmark: BookmarkMatch | None = None
    visited: VisitMatch | None = None
    download: str | None = Field(None, description="a file name the browser finished downloading")

    @model_validator(mode="after")
    def _some_condition(self) -> BrowserCheck:
        if not (self.bookmark or self.no_bookmark or self.visited or self.download):
            raise ValueError("a browser check needs bookmark, no_bookmark, visited or download")
        return self


class AccessibilityCheck(_Check):
    """An element of the apps' accessibility tree (shown or not): found by app, role and name, then its text,
    value or states. With ``exists: false``, no such element may be there."""

    type: Literal["accessibility"]
    app: str | None = None
    role: str | None = None
    name: str | None = None
    name_matches: Regex | None = None
    text: str | None = None
    text_matches: Regex | None = None
    value: float | None = None
    states: list[str] = []
    exists: bool = True

    @model_validator(mode="after")
    def _finds_something(self) -> AccessibilityCheck:
        if not (self.role or self.name or self.name_matches):
            raise ValueError("an accessibility check needs role, name or name_matches to find its element")
        return self


class OsworldCheck(_Check):
    """An OSWorld task's own evaluator (its getters and metrics, run by OSWorld's harness against the session's
    guest API: :mod:`hci_envs.tasks.osworld`); the reward is OSWorld's, partial where its metric is."""

    type: Literal["osworld"]
    task: dict[str, Any]

    @field_validator("task")
    @classmethod
    def _has_an_evaluator(cls, task: dict[str, Any]) -> dict[str, Any]:
        if not isinstance(task.get("evaluator"), dict) or not task.get("id"):
            raise ValueError("an osworld check holds the OSWorld task (its id and evaluator)")
        return task


class Part(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(min_length=1)
    weight: float = Field(1.0, gt=0)
    check: Check


class WeightedCheck(_Check):
    """A rubric: the weighted mean of named parts' scores (partial credit); it passes when every part does."""

    type: Literal["weighted"]
    parts: list[Part] = Field(min_length=1)


class GateCheck(_Check):
    """No credit until ``gate`` passes (the right file, in the right format); then ``then``'s score."""

    type: Literal["gate"]
    gate: Check
    then: Check


Check = Annotated[Union[FileCheck, JsonCheck, CommandCheck, PixelCheck, DocumentCheck, SpreadsheetCheck,  # noqa: UP007
                        BrowserCheck, AccessibilityCheck, OsworldCheck, AllCheck, AnyCheck, MeanCheck, WeightedCheck,
                        GateCheck],
                  Field(discriminator="type")]
for _model in (AllCheck, AnyCheck, MeanCheck, Part, WeightedCheck, GateCheck):
    _model.model_rebuild()


def leaves(check: Any) -> Iterator[Any]:
    """Every simple check inside ``check``."""
    if isinstance(check, AllCheck | AnyCheck | MeanCheck):
        for child in check.checks:
            yield from leaves(child)
    elif isinstance(check, WeightedCheck):
        for part in check.parts:
            yield from leaves(part.check)
    elif isinstance(check, GateCheck):
        yield from leaves(check.gate)
        yield from leaves(check.then)
    else:
        yield check
