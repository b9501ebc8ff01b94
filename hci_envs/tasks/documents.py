"""Office documents as checkers read them: text documents (ODT, DOCX, plain text) and workbooks (ODS, XLSX,
CSV), through odfpy, python-docx and openpyxl (the ``tasks`` extra). The format is told by the content, not
the name: a task that asks for a .docx gets no credit for an ODT saved under that name.

What a checker sees is what the file holds: a workbook's cells are the values the app cached when it saved
(no recalculation here), formulas as written, a text document's paragraphs with their effective formatting
(the style a paragraph or span names, and the styles those inherit from, resolved).
"""

from __future__ import annotations

import csv
import io
import re
import zipfile
from dataclasses import dataclass, field
from typing import Any

from ..errors import TaskFormatError, require

ODF_TEXT = "application/vnd.oasis.opendocument.text"
ODF_SHEET = "application/vnd.oasis.opendocument.spreadsheet"


def detect_format(data: bytes) -> str:
    """``odt``, ``ods``, ``docx``, ``xlsx``, ``pdf`` or ``text`` (anything else that decodes as UTF-8), by content."""
    if data.startswith(b"%PDF-"):
        return "pdf"
    if data.startswith(b"PK"):
        try:
            with zipfile.ZipFile(io.BytesIO(data)) as archive:
                names = set(archive.namelist())
                if "mimetype" in names:
                    mimetype = archive.read("mimetype").decode("ascii", "replace").strip()
                    if mimetype in (ODF_TEXT, ODF_TEXT + "-web", ODF_TEXT + "-master"):
                        return "odt"
                    return "ods" if mimetype == ODF_SHEET else "zip"
                if "word/document.xml" in names:
                    return "docx"
                if "xl/workbook.xml" in names:
                    return "xlsx"
        except zipfile.BadZipFile:
            return "binary"
        return "zip"
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return "binary"
    return "text"


# -- text documents ------------------------------------------------------------------------------------------
@dataclass
class Paragraph:
    text: str
    style: str = ""                  # the named style (display name: "Heading 1", "Default Paragraph Style")
    heading: int | None = None       # outline level of a heading
    align: str = "left"              # left, center, right, justify
    bold: bool = False               # every character with text is bold
    italic: bool = False
    underline: bool = False
    font_size: float | None = None   # points, when the whole paragraph has one
    list_item: bool = False
    bold_spans: list[str] = field(default_factory=list)       # the stretches of bold text, in order
    italic_spans: list[str] = field(default_factory=list)
    underline_spans: list[str] = field(default_factory=list)


@dataclass
class TextDocument:
    format: str
    paragraphs: list[Paragraph] = field(default_factory=list)
    tables: list[list[list[str]]] = field(default_factory=list)
    title: str = ""

    @property
    def text(self) -> str:
        return "\n".join(p.text for p in self.paragraphs)


def read_text_document(data: bytes) -> TextDocument:
    kind = detect_format(data)
    if kind == "odt":
        return _read_odt(data)
    if kind == "docx":
        return _read_docx(data)
    if kind == "text":
        lines = data.decode("utf-8").splitlines()
        return TextDocument("text", [Paragraph(line) for line in lines])
    raise TaskFormatError(f"not a text document (it is {kind})")


_ALIGN = {"start": "left", "left": "left", "end": "right", "right": "right", "center": "center",
          "justify": "justify"}


class _OdfStyles:
    """Effective properties of ODF styles: a style's own, else its parent's, else the family's default."""

    def __init__(self, doc: Any) -> None:
        from odf.namespaces import STYLENS

        self.ns = STYLENS
        self.by_name: dict[tuple[str, str], Any] = {}
        self.defaults: dict[str, Any] = {}
        for container in (doc.styles, doc.automaticstyles):
            for element in container.childNodes:
                if element.qname == (STYLENS, "style"):
                    self.by_name[(element.getAttrNS(STYLENS, "family"), element.getAttrNS(STYLENS, "name"))] = element
                elif element.qname == (STYLENS, "default-style"):
                    self.defaults[element.getAttrNS(STYLENS, "family")] = element

    def chain(self, family: str, name: str | None) -> list[Any]:
        out, seen = [], set()
        while name and (family, name) in self.by_name and name not in seen:
            seen.add(name)
            style = self.by_name[(family, name)]
            out.append(style)
            name = style.getAttrNS(self.ns, "parent-style-name")
        if family in self.defaults:
            out.append(self.defaults[family])
        return out

    def prop(self, chain: list[Any], kind: str, ns: str, attr: str) -> str | None:
        for style in chain:
            for child in style.childNodes:
                if child.qname == (self.ns, kind):
                    value = child.getAttrNS(ns, attr)
                    if value:
                        return value
        return None

    def display_name(self, family: str, name: str | None) -> str:
        """The first named (not automatic) style of the chain, by its display name."""
        for style in self.chain(family, name):
            if style.qname == (self.ns, "default-style"):
                continue
            if (family, style.getAttrNS(self.ns, "name")) in self.by_name and not _automatic(style):
                return style.getAttrNS(self.ns, "display-name") or style.getAttrNS(self.ns, "name").replace("_20_", " ")
        return ""


def _automatic(style: Any) -> bool:
    return style.parentNode is not None and style.parentNode.qname[1] == "automatic-styles"


def _read_odt(data: bytes) -> TextDocument:
    require("odf", "tasks", "reading ODF documents")
    from odf import teletype
    from odf.namespaces import DCNS, FONS, STYLENS, TABLENS, TEXTNS
    from odf.opendocument import load

    doc = load(io.BytesIO(data))
    styles = _OdfStyles(doc)
    out = TextDocument("odt")
    for element in doc.meta.childNodes:
        if element.qname == (DCNS, "title"):
            out.title = teletype.extractText(element)

    def run_props(chain: list[Any]) -> tuple[bool, bool, bool, float | None]:
        weight = styles.prop(chain, "text-properties", FONS, "font-weight") or "normal"
        style = styles.prop(chain, "text-properties", FONS, "font-style") or "normal"
        underline = styles.prop(chain, "text-properties", STYLENS, "text-underline-style") or "none"
        size = styles.prop(chain, "text-properties", FONS, "font-size")
        return (weight in ("bold", "600", "700", "800", "900"), style == "italic", underline != "none",
                float(size[:-2]) if size and size.endswith("pt") else None)

    def paragraph(element: Any, list_item: bool) -> Paragraph:
        name = element.getAttrNS(TEXTNS, "style-name")
        chain = styles.chain("paragraph", name)
        base = run_props(chain)
        runs: list[tuple[str, tuple[bool, bool, bool, float | None]]] = []

        def walk(node: Any, props: tuple[bool, bool, bool, float | None]) -> None:
            for child in node.childNodes:
                if child.nodeType == child.TEXT_NODE:
                    runs.append((str(child), props))
                elif child.qname == (TEXTNS, "span"):
                    span_chain = styles.chain("text", child.getAttrNS(TEXTNS, "style-name")) + chain
                    walk(child, run_props(span_chain))
                elif child.qname in ((TEXTNS, "s"), (TEXTNS, "tab"), (TEXTNS, "line-break")):
                    runs.append((" ", props))
                else:
                    walk(child, props)

        walk(element, base)
        inked = [props for text, props in runs if text.strip()]
        sizes = {props[3] for props in inked}
        style_name = styles.display_name("paragraph", name)
        level = element.getAttrNS(TEXTNS, "outline-level") if element.qname == (TEXTNS, "h") else None
        return Paragraph(
            text=teletype.extractText(element).strip(), style=style_name,
            heading=_heading_level(style_name, level),
            align=_ALIGN.get(styles.prop(chain, "paragraph-properties", FONS, "text-align") or "start", "left"),
            bold=bool(inked) and all(p[0] for p in inked), italic=bool(inked) and all(p[1] for p in inked),
            underline=bool(inked) and all(p[2] for p in inked),
            font_size=sizes.pop() if len(sizes) == 1 else None, list_item=list_item,
            bold_spans=_spans([(text, props[0]) for text, props in runs]),
            italic_spans=_spans([(text, props[1]) for text, props in runs]),
            underline_spans=_spans([(text, props[2]) for text, props in runs]))

    def visit(node: Any, list_item: bool = False) -> None:
        for child in node.childNodes:
            qname = getattr(child, "qname", None)
            if qname in ((TEXTNS, "p"), (TEXTNS, "h")):
                out.paragraphs.append(paragraph(child, list_item))
            elif qname == (TEXTNS, "list"):
                visit(child, True)
            elif qname == (TABLENS, "table"):
                rows = []
                for row in child.getElementsByType(_odf_class("table", "TableRow")):
                    rows.append([teletype.extractText(cell).strip()
                                 for cell in row.childNodes if cell.qname[1] in ("table-cell", "covered-table-cell")])
                out.tables.append(rows)
            elif getattr(child, "childNodes", None):
                visit(child, list_item)

    visit(doc.text)
    return out


def _spans(runs: list[tuple[str, bool]]) -> list[str]:
    """The stretches of text whose characters have a flag (bold, italic, ...), whitespace collapsed. Spaces
    between flagged words belong to the stretch whatever their own flag: "quick fox" italicised word by word
    is one stretch, as a reader sees it."""
    out, current = [], ""
    for text, flag in runs:
        for char in text:
            if char.isspace():
                current += char if current else ""
            elif flag:
                current += char
            elif current:
                out.append(" ".join(current.split()))
                current = ""
    if current.strip():
        out.append(" ".join(current.split()))
    return out


def _heading_level(style: str, outline_level: str | None) -> int | None:
    """A heading's level: its outline level (ODF's text:h), else its style's number ("Heading 2")."""
    if outline_level and outline_level.isdigit():
        return int(outline_level)
    match = re.fullmatch(r"Heading (\d)", style)
    return int(match.group(1)) if match else (1 if outline_level is not None else None)


def _odf_class(module: str, name: str) -> Any:
    import importlib

    return getattr(importlib.import_module(f"odf.{module}"), name)


def _read_docx(data: bytes) -> TextDocument:
    docx = require("docx", "tasks", "reading DOCX documents")
    document = docx.Document(io.BytesIO(data))
    out = TextDocument("docx", title=document.core_properties.title or "")
    align_names = {0: "left", 1: "center", 2: "right", 3: "justify"}
    for p in document.paragraphs:
        inked = [r for r in p.runs if r.text.strip()]
        style = p.style.name if p.style is not None else ""
        sizes = {(r.font.size.pt if r.font.size else None) for r in inked}

        def on(run: Any, name: str, para: Any = p) -> bool:
            return bool(getattr(run, name) if getattr(run, name) is not None
                        else getattr(para.style.font, name) if para.style else False)

        def flag(name: str, runs: list[Any] = inked) -> bool:
            return bool(runs) and all(on(r, name) for r in runs)

        out.paragraphs.append(Paragraph(
            text=p.text.strip(), style=style, heading=_heading_level(style, None),
            align=align_names.get(int(p.alignment) if p.alignment is not None else 0, "left"),
            bold=flag("bold"), italic=flag("italic"), underline=flag("underline"),
            font_size=sizes.pop() if len(sizes) == 1 else None,
            list_item="List" in style or p._p.pPr is not None and p._p.pPr.numPr is not None,
            bold_spans=_spans([(r.text, on(r, "bold")) for r in p.runs]),
            italic_spans=_spans([(r.text, on(r, "italic")) for r in p.runs]),
            underline_spans=_spans([(r.text, on(r, "underline")) for r in p.runs])))
    for table in document.tables:
        out.tables.append([[cell.text.strip() for cell in row.cells] for row in table.rows])
    return out


# -- workbooks -----------------------------------------------------------------------------------------------
@dataclass
class Cell:
    value: Any            # a number, a string, a bool, or None for an empty cell
    formula: str = ""
    bold: bool = False    # its font is bold (its own style, or the style that style inherits from)


@dataclass
class Sheet:
    name: str
    cells: dict[tuple[int, int], Cell] = field(default_factory=dict)  # (row, column), both from 1

    def cell(self, ref: str) -> Cell:
        return self.cells.get(cell_position(ref), Cell(None))


@dataclass
class Workbook:
    format: str
    sheets: list[Sheet] = field(default_factory=list)
    charts: int = 0

    def sheet(self, which: str | int | None) -> Sheet | None:
        if which is None:
            return self.sheets[0] if self.sheets else None
        if isinstance(which, int):
            return self.sheets[which] if 0 <= which < len(self.sheets) else None
        return next((s for s in self.sheets if s.name == which), None)


def cell_position(ref: str) -> tuple[int, int]:
    """``"B12"`` -> (12, 2)."""
    match = re.fullmatch(r"\$?([A-Za-z]{1,3})\$?([1-9][0-9]{0,6})", ref.strip())
    if not match:
        raise TaskFormatError(f"{ref!r} is not a cell reference like B12")
    column = 0
    for letter in match.group(1).upper():
        column = column * 26 + ord(letter) - 64
    return int(match.group(2)), column


def read_workbook(data: bytes) -> Workbook:
    kind = detect_format(data)
    if kind == "ods":
        return _read_ods(data)
    if kind == "xlsx":
        return _read_xlsx(data)
    if kind == "text":
        return _read_csv(data.decode("utf-8"))
    raise TaskFormatError(f"not a spreadsheet (it is {kind})")


#: Past this many repeated empty rows or columns, the rest of a sheet is empty (ODF writes the whole grid).
_MAX_REPEAT = 10_000


def _read_ods(data: bytes) -> Workbook:
    require("odf", "tasks", "reading ODF spreadsheets")
    from odf import teletype
    from odf.namespaces import FONS, OFFICENS, TABLENS
    from odf.opendocument import load

    doc = load(io.BytesIO(data))
    styles = _OdfStyles(doc)
    bold_styles: dict[str, bool] = {}

    def bold(name: str) -> bool:
        if name not in bold_styles:
            weight = styles.prop(styles.chain("table-cell", name), "text-properties", FONS, "font-weight")
            bold_styles[name] = weight in ("bold", "600", "700", "800", "900")
        return bold_styles[name]

    book = Workbook("ods")
    book.charts = sum(1 for obj in doc.getElementsByType(_odf_class("draw", "Object"))
                      if obj.getAttrNS("http://www.w3.org/1999/xlink", "href"))
    for table in doc.spreadsheet.getElementsByType(_odf_class("table", "Table")):
        sheet = Sheet(table.getAttrNS(TABLENS, "name"))
        row_number = 0
        for row in table.getElementsByType(_odf_class("table", "TableRow")):
            rows = int(row.getAttrNS(TABLENS, "number-rows-repeated") or 1)
            cells = [c for c in row.childNodes if c.qname[1] in ("table-cell", "covered-table-cell")]
            if rows > _MAX_REPEAT and not any(c.childNodes for c in cells):
                row_number += rows
                continue
            for _ in range(min(rows, _MAX_REPEAT)):
                row_number += 1
                column = 0
                for c in cells:
                    repeat = int(c.getAttrNS(TABLENS, "number-columns-repeated") or 1)
                    kind = c.getAttrNS(OFFICENS, "value-type")
                    formula = c.getAttrNS(TABLENS, "formula") or ""
                    if not kind and not formula:
                        column += repeat
                        continue
                    if kind in ("float", "percentage", "currency"):
                        value: Any = float(c.getAttrNS(OFFICENS, "value"))
                    elif kind == "boolean":
                        value = c.getAttrNS(OFFICENS, "boolean-value") == "true"
                    elif kind == "date":
                        value = c.getAttrNS(OFFICENS, "date-value")
                    else:
                        value = teletype.extractText(c)
                    is_bold = bold(c.getAttrNS(TABLENS, "style-name") or "")
                    for _ in range(min(repeat, _MAX_REPEAT)):
                        column += 1
                        sheet.cells[(row_number, column)] = Cell(_integral(value), formula, is_bold)
        book.sheets.append(sheet)
    return book


def _read_xlsx(data: bytes) -> Workbook:
    openpyxl = require("openpyxl", "tasks", "reading XLSX workbooks")
    values = openpyxl.load_workbook(io.BytesIO(data), data_only=True, read_only=True)
    formulas = openpyxl.load_workbook(io.BytesIO(data), data_only=False, read_only=True)
    book = Workbook("xlsx")
    for ws_values, ws_formulas in zip(values.worksheets, formulas.worksheets):
        sheet = Sheet(ws_values.title)
        for row_values, row_formulas in zip(ws_values.iter_rows(), ws_formulas.iter_rows()):
            for cv, cf in zip(row_values, row_formulas):
                if cv.value is None and cf.value is None:
                    continue
                formula = cf.value if isinstance(cf.value, str) and cf.value.startswith("=") else ""
                font = getattr(cv, "font", None)
                sheet.cells[(cv.row, cv.column)] = Cell(_integral(cv.value), formula, bool(font is not None and font.b))
        book.sheets.append(sheet)
    return book


def _read_csv(text: str) -> Workbook:
    sheet = Sheet("csv")
    for r, row in enumerate(csv.reader(io.StringIO(text)), start=1):
        for c, raw in enumerate(row, start=1):
            if raw == "":
                continue
            try:
                value: Any = _integral(float(raw))
            except ValueError:
                value = raw
            sheet.cells[(r, c)] = Cell(value)
    return Workbook("csv", [sheet])


def _integral(value: Any) -> Any:
    return int(value) if isinstance(value, float) and value.is_integer() and abs(value) < 2**53 else value
