"""The documents the office tasks are given: ODT, DOCX and ODS files built here, the same bytes for the same
seed (a fixed date on every zip entry), as small as LibreOffice and Word open."""

from __future__ import annotations

import io
import zipfile
from typing import Any
from xml.sax.saxutils import escape


def _package(parts: list[tuple[str, str]]) -> bytes:
    """A zip package of ``parts``; an OpenDocument's ``mimetype`` is stored uncompressed, as the format asks."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        for name, text in parts:
            method = zipfile.ZIP_STORED if name == "mimetype" else zipfile.ZIP_DEFLATED
            archive.writestr(zipfile.ZipInfo(name, (2024, 1, 1, 0, 0, 0)), text, compress_type=method)
    return out.getvalue()


_NS = ('xmlns:office="urn:oasis:names:tc:opendocument:xmlns:office:1.0" '
       'xmlns:style="urn:oasis:names:tc:opendocument:xmlns:style:1.0" '
       'xmlns:text="urn:oasis:names:tc:opendocument:xmlns:text:1.0" '
       'xmlns:table="urn:oasis:names:tc:opendocument:xmlns:table:1.0" '
       'xmlns:fo="urn:oasis:names:tc:opendocument:xmlns:xsl-fo-compatible:1.0" '
       'xmlns:svg="urn:oasis:names:tc:opendocument:xmlns:svg-compatible:1.0" office:version="1.3"')
_STYLES = (
    f'<?xml version="1.0" encoding="UTF-8"?>\n<office:document-styles {_NS}>'
    '<office:font-face-decls><style:font-face style:name="Liberation Serif" svg:font-family="\'Liberation Serif\'"'
    ' style:font-family-generic="roman"/></office:font-face-decls><office:styles>'
    '<style:default-style style:family="paragraph"><style:paragraph-properties fo:margin-top="0cm" '
    'fo:margin-bottom="0.2cm"/><style:text-properties style:font-name="Liberation Serif" fo:font-size="12pt" '
    'fo:language="en" fo:country="US"/></style:default-style>'
    '<style:style style:name="Standard" style:family="paragraph" style:class="text"/>'
    '</office:styles></office:document-styles>\n')
_MANIFEST = (
    '<?xml version="1.0" encoding="UTF-8"?>\n<manifest:manifest '
    'xmlns:manifest="urn:oasis:names:tc:opendocument:xmlns:manifest:1.0" manifest:version="1.3">'
    '<manifest:file-entry manifest:full-path="/" manifest:media-type="application/vnd.oasis.opendocument.text"/>'
    '<manifest:file-entry manifest:full-path="content.xml" manifest:media-type="text/xml"/>'
    '<manifest:file-entry manifest:full-path="styles.xml" manifest:media-type="text/xml"/>'
    '</manifest:manifest>\n')


def odt(paragraphs: list[str]) -> bytes:
    """An ODT document of plain paragraphs (default style, 12 pt), the same bytes every time."""
    body = "".join(f'<text:p text:style-name="Standard">{escape(p)}</text:p>' for p in paragraphs)
    content = (f'<?xml version="1.0" encoding="UTF-8"?>\n<office:document-content {_NS}>'
               f'<office:body><office:text>{body}</office:text></office:body></office:document-content>\n')
    return _package([("mimetype", "application/vnd.oasis.opendocument.text"), ("content.xml", content),
                     ("styles.xml", _STYLES), ("META-INF/manifest.xml", _MANIFEST)])


_DOCX_PARTS = {
    "[Content_Types].xml": (
        '<?xml version="1.0" encoding="UTF-8" standalone="yes"?>\n<Types '
        'xmlns="http://schemas.openxmlformats.org/package/2006/content-types"><Default Extension="rels" '
        'ContentType="application/vnd.openxmlformats-package.relationships+xml"/><Default Extension="xml" '
        'ContentType="application/xml"/><Override PartName="/word/document.xml" ContentType="application/'
        'vnd.openxmlformats-officedocument.wordprocessingml.document.main+xml"/></Types>'),
    "_rels/.rels": (
        '<?xml version="1.0" encoding="UTF-8" standalone="yes"?>\n<Relationships '
        'xmlns="http://schemas.openxmlformats.org/package/2006/relationships"><Relationship Id="rId1" '
        'Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/officeDocument" '
        'Target="word/document.xml"/></Relationships>'),
}


def docx(paragraphs: list[str]) -> bytes:
    """A Word document of plain paragraphs (the smallest package Word and LibreOffice open), fixed bytes."""
    body = "".join(f'<w:p><w:r><w:t xml:space="preserve">{escape(p)}</w:t></w:r></w:p>' for p in paragraphs)
    document = ('<?xml version="1.0" encoding="UTF-8" standalone="yes"?>\n<w:document '
                'xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main">'
                f'<w:body>{body}</w:body></w:document>')
    return _package([*_DOCX_PARTS.items(), ("word/document.xml", document)])


def _ods_cell(value: Any) -> str:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return f'<table:table-cell office:value-type="float" office:value="{value}"><text:p>{value}</text:p>' \
               "</table:table-cell>"
    return f'<table:table-cell office:value-type="string"><text:p>{escape(str(value))}</text:p></table:table-cell>'


def ods(sheets: dict[str, list[list[Any]]]) -> bytes:
    """A minimal ODS workbook (content and manifest), the same bytes for the same sheets."""
    tables = "".join(
        f'<table:table table:name="{escape(name)}"><table:table-column table:number-columns-repeated='
        f'"{max((len(r) for r in rows), default=1)}"/>'
        + "".join("<table:table-row>" + "".join(_ods_cell(v) for v in row) + "</table:table-row>" for row in rows)
        + "</table:table>" for name, rows in sheets.items())
    content = (
        '<?xml version="1.0" encoding="UTF-8"?>\n<office:document-content '
        'xmlns:office="urn:oasis:names:tc:opendocument:xmlns:office:1.0" '
        'xmlns:table="urn:oasis:names:tc:opendocument:xmlns:table:1.0" '
        'xmlns:text="urn:oasis:names:tc:opendocument:xmlns:text:1.0" office:version="1.2">'
        f"<office:body><office:spreadsheet>{tables}</office:spreadsheet></office:body></office:document-content>")
    manifest = (
        '<?xml version="1.0" encoding="UTF-8"?>\n<manifest:manifest '
        'xmlns:manifest="urn:oasis:names:tc:opendocument:xmlns:manifest:1.0" manifest:version="1.2">'
        '<manifest:file-entry manifest:full-path="/" manifest:version="1.2" '
        'manifest:media-type="application/vnd.oasis.opendocument.spreadsheet"/>'
        '<manifest:file-entry manifest:full-path="content.xml" manifest:media-type="text/xml"/>'
        "</manifest:manifest>")
    return _package([("mimetype", "application/vnd.oasis.opendocument.spreadsheet"), ("content.xml", content),
                     ("META-INF/manifest.xml", manifest)])
