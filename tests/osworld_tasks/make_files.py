"""Writes the files the OSWorld-format tasks under examples/ take, all generated here (no binaries in the repo):

    make_files.py FOLDER CACHE_DIR

FOLDER/files/...: what upload_file steps send (their local_path is relative to the runner's working folder, FOLDER);
CACHE_DIR/<task id>/...: OSWorld's cache, so that nothing goes to the network: a download step's file as
``<uuid5(NAMESPACE_URL, url)>_<basename of its path>``, a cloud_file getter's as ``<dest>``, a cache_file getter's
as its ``path``. Run with OSWorld's environment's python (openpyxl, python-docx, python-pptx, odfpy and Pillow)."""

from __future__ import annotations

import io
import math
import sqlite3
import sys
import uuid
import wave
import zipfile
from pathlib import Path

#: Where the tasks' download and cloud_file URLs point: never fetched, their files are in the cache.
URL = "https://example.invalid/hci-envs/"


class Maker:
    def __init__(self, folder: Path, cache: Path) -> None:
        self.files = folder / "files"
        self.cache = cache

    def upload(self, name: str, data: bytes | str) -> None:
        """FOLDER/files/NAME, for an upload_file step's local_path "files/NAME"."""
        self._write(self.files / name, data)

    def download(self, task: str, name: str, data: bytes | str, path: str | None = None) -> None:
        """The cache entry of a download step of URL+NAME to the VM path ``path`` (by default one named NAME)."""
        base = (path or name).rsplit("/", 1)[-1]
        self._write(self.cache / task / f"{uuid.uuid5(uuid.NAMESPACE_URL, URL + name)}_{base}", data)

    def cloud(self, task: str, dest: str, data: bytes | str) -> None:
        """The cache entry of a cloud_file (or cache_file) getter whose dest (path) is ``dest``."""
        self._write(self.cache / task / dest, data)

    @staticmethod
    def _write(path: Path, data: bytes | str) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(data, str):
            data = data.encode()
        path.write_bytes(data)


# -- builders of office files -----------------------------------------------------------------------------------
def xlsx(rows: list[list], *, title: str = "Sheet1", freeze: str | None = None, bold_header: bool = False) -> bytes:
    import openpyxl
    from openpyxl.styles import Font

    book = openpyxl.Workbook()
    sheet = book.active
    sheet.title = title
    for row in rows:
        sheet.append(row)
    if freeze:
        sheet.freeze_panes = freeze
    if bold_header:
        for cell in sheet[1]:
            cell.font = Font(bold=True)
    out = io.BytesIO()
    book.save(out)
    return out.getvalue()


def docx(paragraphs: list, *, table: list[list[str]] | None = None) -> bytes:
    """A document of paragraphs: each a string, or a list of (text, {"italic": bool, "size": pt}) runs."""
    from docx import Document
    from docx.shared import Pt

    doc = Document()
    for para in paragraphs:
        p = doc.add_paragraph()
        for text, fmt in ([(para, {})] if isinstance(para, str) else para):
            run = p.add_run(text)
            if fmt.get("italic"):
                run.italic = True
            if fmt.get("size"):
                run.font.size = Pt(fmt["size"])
    if table:
        grid = doc.add_table(rows=len(table), cols=len(table[0]))
        for i, row in enumerate(table):
            for j, text in enumerate(row):
                grid.cell(i, j).text = text
    out = io.BytesIO()
    doc.save(out)
    return out.getvalue()


def odt(paragraphs: list[str]) -> bytes:
    from odf.opendocument import OpenDocumentText
    from odf.text import P

    doc = OpenDocumentText()
    for text in paragraphs:
        doc.text.addElement(P(text=text))
    out = io.BytesIO()
    doc.write(out)
    return out.getvalue()


def pptx(slides: list[tuple[str, str]]) -> bytes:
    """A presentation of (title, body) slides on the title-and-content layout."""
    from pptx import Presentation

    prs = Presentation()
    for title, body in slides:
        slide = prs.slides.add_slide(prs.slide_layouts[1])
        slide.shapes.title.text = title
        slide.placeholders[1].text = body
    out = io.BytesIO()
    prs.save(out)
    return out.getvalue()


def sqlite_db(rows: list[tuple[str, str]]) -> bytes:
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "db.sqlite"
        con = sqlite3.connect(path)
        con.execute("CREATE TABLE books (id INTEGER PRIMARY KEY, title TEXT NOT NULL, author TEXT NOT NULL)")
        con.executemany("INSERT INTO books (title, author) VALUES (?, ?)", rows)
        con.commit()
        con.close()
        return path.read_bytes()


def zip_of(entries: list[tuple[str, str | None]]) -> bytes:
    """A zip of (name, text) entries; a name ending in / with None is a folder's entry."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, text in entries:
            archive.writestr(name, text or "")
    return out.getvalue()


def wav_tone(seconds: int, hz: int = 440, rate: int = 8000) -> bytes:
    """A quiet sine tone, mono 16-bit PCM."""
    frames = b"".join(int(3000 * math.sin(2 * math.pi * hz * n / rate)).to_bytes(2, "little", signed=True)
                      for n in range(seconds * rate))
    out = io.BytesIO()
    with wave.open(out, "wb") as sound:
        sound.setnchannels(1)
        sound.setsampwidth(2)
        sound.setframerate(rate)
        sound.writeframes(frames)
    return out.getvalue()


def png_arrow(width: int = 160, height: int = 100) -> bytes:
    """A picture that a mirror changes: a red arrow pointing right on a pale ground, a blue bar at the left."""
    from PIL import Image, ImageDraw

    image = Image.new("RGB", (width, height), (240, 236, 220))
    draw = ImageDraw.Draw(image)
    draw.rectangle([8, 8, 28, height - 8], fill=(30, 60, 200))
    draw.rectangle([40, height // 2 - 10, width - 50, height // 2 + 10], fill=(210, 30, 30))
    draw.polygon([(width - 50, 15), (width - 10, height // 2), (width - 50, height - 15)], fill=(210, 30, 30))
    out = io.BytesIO()
    image.save(out, "PNG")
    return out.getvalue()


def png_scene(ground: tuple[int, int, int], sun: tuple[int, int, int], width: int = 320, height: int = 200) -> bytes:
    """A plain picture: a ground colour with a disc of another, for wallpapers that a comparison tells apart."""
    from PIL import Image, ImageDraw

    image = Image.new("RGB", (width, height), ground)
    ImageDraw.Draw(image).ellipse([width - 110, 20, width - 30, 100], fill=sun)
    out = io.BytesIO()
    image.save(out, "PNG")
    return out.getvalue()


# -- the tasks' files -------------------------------------------------------------------------------------------
def make(m: Maker) -> None:
    # os: shout-the-notes (upload_file; the expected file goes to the VM too)
    m.upload("notes.txt", "shopping list\nmilk, bread\n")
    m.upload("expected.txt", "SHOPPING LIST\nMILK, BREAD\n")

    # os: count-the-errors
    log = [f"2024-05-0{d} 10:0{i}:00 {level} {what}" for d, i, level, what in [
        (1, 1, "INFO", "server started"), (1, 2, "ERROR", "disk quota exceeded"), (1, 3, "INFO", "request served"),
        (2, 1, "ERROR", "connection reset"), (2, 2, "WARNING", "slow response"), (2, 3, "ERROR", "timeout"),
        (3, 1, "INFO", "request served"), (3, 2, "ERROR", "bad gateway"), (3, 3, "INFO", "server stopped")]]
    m.upload("server.log", "\n".join(log) + "\n")

    # os: make-the-script-runnable
    m.upload("greet.sh", "#!/bin/sh\necho hello from greet\n")

    # os: add-a-book-to-the-library
    m.upload("library.db", sqlite_db([("Emma", "Jane Austen"), ("Ulysses", "James Joyce")]))

    # os: zip-the-reports
    q1, q2 = "Q1 revenue: 120\n", "Q2 revenue: 135\n"
    m.upload("reports/q1.txt", q1)
    m.upload("reports/q2.txt", q2)
    m.upload("reports_old.zip", zip_of([("reports/", None), ("reports/q1.txt", q1)]))
    m.cloud("zip-the-reports", "reports_expected.zip",
            zip_of([("reports/", None), ("reports/q1.txt", q1), ("reports/q2.txt", q2)]))

    # os: add-a-shell-alias
    m.upload("bashrc", "# ~/.bashrc\nexport EDITOR=mousepad\nalias la='ls -A'\n")

    # os: sort-the-guest-list (download, cloud_file)
    guests = ["maria", "tom", "anna", "tom", "lee", "maria", "bob"]
    m.download("sort-the-guest-list", "guests.txt", "\n".join(guests) + "\n")
    m.cloud("sort-the-guest-list", "guests_expected.txt", "\n".join(sorted(set(guests))) + "\n")

    # os: list-the-letters (cache_file)
    m.cloud("list-the-letters", "letters_expected.txt", "april.txt\njanuary.txt\nmarch.txt\n")

    # os: title-of-the-readme
    m.upload("README.md", "Project Aurora\n==============\n\nA small tool that tracks the northern lights.\n")

    # text_editor: sign-the-letter
    letter = "Dear Ana,\n\nthank you for the visit, the garden looks wonderful.\n\n"
    m.upload("letter.txt", letter)
    m.cloud("sign-the-letter", "letter_expected.txt", letter + "Regards, Sam\n")

    # text_editor: fix-the-add-function
    calc = "def add(a, b):\n    return a {} b\n\n\ndef mul(a, b):\n    return a * b\n"
    m.upload("calc.py", calc.format("-"))
    m.cloud("fix-the-add-function", "calc_expected.py", calc.format("+"))

    # text_editor: switch-to-the-dark-theme, fix-the-shopping-list, move-the-server-port, scale-the-deployment
    m.upload("settings.json", '{\n  "theme": "light",\n  "fontSize": 12\n}\n')
    m.upload("shopping.txt", "milk\ncandy\nbread\n")
    m.upload("server.conf", "host = 0.0.0.0\nport = 80\nworkers = 2\n")
    m.upload("deploy.yaml", "name: web\nspec:\n  image: web:1.4\n  replicas: 1\n")

    # writer: center-the-title, break-before-the-appendix
    m.download("center-the-title", "report.docx",
               docx(["Quarterly Report", "Sales grew in every region.", "Costs fell."]))
    m.download("break-before-the-appendix", "thesis.docx",
               docx(["Summary", "The results are good.", "Appendix", "Raw numbers follow."]))

    # writer: finish-the-minutes
    minutes = ["Minutes of the team meeting", "Present: Ana, Ben, Chloe.", "The budget was approved."]
    m.download("finish-the-minutes", "minutes.odt", odt(minutes))
    m.cloud("finish-the-minutes", "minutes_expected.odt", odt(minutes + ["Next meeting: Friday."]))

    # writer: fill-in-the-score
    scores = [["Name", "Score"], ["Ana", "90"], ["Ben", ""]]
    m.download("fill-in-the-score", "scores.docx", docx(["Scores"], table=scores))
    m.cloud("fill-in-the-score", "scores_expected.docx", docx(["Scores"], table=scores[:2] + [["Ben", "85"]]))

    # writer: number-the-pages, one-font-for-the-letter, bigger-book-titles
    m.download("number-the-pages", "essay.docx", docx(["On Rivers", "Rivers shape the land they cross."]))
    m.download("one-font-for-the-letter", "cover.docx",
               docx(["Dear hiring team,", "I am applying for the librarian position.", "Best wishes, Ana"]))
    reading = ["Reading list", [("Dune", {"italic": True})], "A novel about a desert planet."]
    m.download("bigger-book-titles", "reading.docx", docx(reading))
    m.cloud("bigger-book-titles", "reading_original.docx", docx(reading))

    # calc: double-the-prices, bold-the-header, log-the-april-expenses
    stock = [["item", "price"], ["pen", 2], ["paper", 5], ["ink", 12]]
    m.download("double-the-prices", "stock.xlsx", xlsx(stock))
    m.cloud("double-the-prices", "stock_expected.xlsx",
            xlsx([stock[0] + ["doubled"]] + [row + [row[1] * 2] for row in stock[1:]]))
    m.download("bold-the-header", "team.xlsx", xlsx([["name", "role"], ["Ana", "editor"], ["Ben", "writer"]]))
    m.download("log-the-april-expenses", "expenses.xlsx",
               xlsx([["month", "amount"], ["January", 310], ["February", 280], ["March", 295]]))

    # calc: add-a-contact (a CSV file)
    contacts = "name,email\nAna,ana@example.org\nBen,ben@example.org\n"
    m.download("add-a-contact", "contacts.csv", contacts)
    m.cloud("add-a-contact", "contacts_expected.csv", contacts + "Chloe,chloe@example.org\n")

    # calc: freeze-the-header-row, rename-the-sheet
    sales = [["region", "units"]] + [[f"region {n}", n * 10] for n in range(1, 41)]
    m.download("freeze-the-header-row", "sales.xlsx", xlsx(sales))
    m.cloud("freeze-the-header-row", "sales_expected.xlsx", xlsx(sales, freeze="A2"))
    budget = [["item", "cost"], ["rent", 900], ["food", 300]]
    m.download("rename-the-sheet", "budget.xlsx", xlsx(budget))
    m.cloud("rename-the-sheet", "budget_expected.xlsx", xlsx(budget, title="Budget"))

    # impress: retitle-the-talk
    talk = [("Rivers", "Where they start\nWhere they end"), ("The Danube", "Ten countries")]
    m.download("retitle-the-talk", "talk.pptx", pptx(talk))
    m.cloud("retitle-the-talk", "talk_expected.pptx", pptx([("Rivers of Europe", talk[0][1])] + talk[1:]))

    # impress: portrait-slides
    m.download("portrait-slides", "poster.pptx", pptx([("Open day", "Saturday, 10 to 16")]))

    # vlc: play-the-tone (long enough to be still playing when it is scored)
    m.upload("tone.wav", wav_tone(180))

    # gimp: mirror-the-arrow (the original again from the cache, to compare the export with)
    arrow = png_arrow()
    m.upload("arrow.png", arrow)
    m.cloud("mirror-the-arrow", "arrow_original.png", arrow)

    # os: sky-for-a-wallpaper (change_wallpaper, vm_wallpaper; the expected picture from the cache)
    sky = png_scene((150, 200, 245), (255, 220, 60))
    m.upload("sea.png", png_scene((20, 60, 140), (240, 240, 240)))
    m.upload("sky.png", sky)
    m.cloud("sky-for-a-wallpaper", "sky_expected.png", sky)


def main() -> None:
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    make(Maker(Path(sys.argv[1]), Path(sys.argv[2])))


if __name__ == "__main__":
    main()
