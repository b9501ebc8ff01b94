"""The accessibility tree's data model: AT-SPI's roles, states and interfaces, an element as read from its
app, the :class:`Query` that says what to read and keep, and the numbered :class:`Tree` with its outline for
a model. Pure data and formatting: reading it over D-Bus is :mod:`.a11y`'s (with :mod:`.a11y_dbus`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any

Ref = tuple[str, str]  # (bus name, object path)

# AT-SPI's role and state enumerations (atspi-constants.h), in order: the index is the number on the wire.
ROLES = tuple(" ".join(name.split("_")).lower() for name in """
INVALID ACCELERATOR_LABEL ALERT ANIMATION ARROW CALENDAR CANVAS CHECK_BOX CHECK_MENU_ITEM COLOR_CHOOSER
COLUMN_HEADER COMBO_BOX DATE_EDITOR DESKTOP_ICON DESKTOP_FRAME DIAL DIALOG DIRECTORY_PANE DRAWING_AREA
FILE_CHOOSER FILLER FOCUS_TRAVERSABLE FONT_CHOOSER FRAME GLASS_PANE HTML_CONTAINER ICON IMAGE INTERNAL_FRAME
LABEL LAYERED_PANE LIST LIST_ITEM MENU MENU_BAR MENU_ITEM OPTION_PANE PAGE_TAB PAGE_TAB_LIST PANEL
PASSWORD_TEXT POPUP_MENU PROGRESS_BAR PUSH_BUTTON RADIO_BUTTON RADIO_MENU_ITEM ROOT_PANE ROW_HEADER
SCROLL_BAR SCROLL_PANE SEPARATOR SLIDER SPIN_BUTTON SPLIT_PANE STATUS_BAR TABLE TABLE_CELL
TABLE_COLUMN_HEADER TABLE_ROW_HEADER TEAROFF_MENU_ITEM TERMINAL TEXT TOGGLE_BUTTON TOOL_BAR TOOL_TIP TREE
TREE_TABLE UNKNOWN VIEWPORT WINDOW EXTENDED HEADER FOOTER PARAGRAPH RULER APPLICATION AUTOCOMPLETE EDITBAR
EMBEDDED ENTRY CHART CAPTION DOCUMENT_FRAME HEADING PAGE SECTION REDUNDANT_OBJECT FORM LINK
INPUT_METHOD_WINDOW TABLE_ROW TREE_ITEM DOCUMENT_SPREADSHEET DOCUMENT_PRESENTATION DOCUMENT_TEXT
DOCUMENT_WEB DOCUMENT_EMAIL COMMENT LIST_BOX GROUPING IMAGE_MAP NOTIFICATION INFO_BAR LEVEL_BAR TITLE_BAR
BLOCK_QUOTE AUDIO VIDEO DEFINITION ARTICLE LANDMARK LOG MARQUEE MATH RATING TIMER STATIC MATH_FRACTION
MATH_ROOT SUBSCRIPT SUPERSCRIPT DESCRIPTION_LIST DESCRIPTION_TERM DESCRIPTION_VALUE FOOTNOTE
CONTENT_DELETION CONTENT_INSERTION MARK SUGGESTION PUSH_BUTTON_MENU
""".split())
STATES = tuple(name.lower().replace("_", " ") for name in """
INVALID ACTIVE ARMED BUSY CHECKED COLLAPSED DEFUNCT EDITABLE ENABLED EXPANDABLE EXPANDED FOCUSABLE FOCUSED
HAS_TOOLTIP HORIZONTAL ICONIFIED MODAL MULTI_LINE MULTISELECTABLE OPAQUE PRESSED RESIZABLE SELECTABLE
SELECTED SENSITIVE SHOWING SINGLE_LINE STALE TRANSIENT VERTICAL VISIBLE MANAGES_DESCENDANTS INDETERMINATE
REQUIRED TRUNCATED ANIMATED INVALID_ENTRY SUPPORTS_AUTOCOMPLETION SELECTABLE_TEXT IS_DEFAULT VISITED
CHECKABLE HAS_POPUP READ_ONLY
""".split())

#: Roles an agent acts on: pressing, typing, choosing, following.
INTERACTIVE_ROLES = frozenset({
    "push button", "toggle button", "check box", "radio button", "menu item", "check menu item",
    "radio menu item", "menu", "combo box", "entry", "password text", "spin button", "slider", "link",
    "page tab", "list item", "tree item", "icon", "desktop icon", "push button menu", "table cell",
    "text", "terminal", "document text", "scroll bar", "autocomplete", "dial", "table column header",
    "column header", "row header", "table row header",
})
#: States worth showing an agent (the rest are layout bookkeeping).
SHOWN_STATES = ("focused", "checked", "selected", "pressed", "expanded", "collapsed", "editable",
                "indeterminate", "visited", "read only", "modal", "required", "invalid entry")

# The AT-SPI interfaces an element may implement (the names on the wire).
I_ACCESSIBLE = "org.a11y.atspi.Accessible"
I_COMPONENT = "org.a11y.atspi.Component"
I_TEXT = "org.a11y.atspi.Text"
I_VALUE = "org.a11y.atspi.Value"
I_ACTION = "org.a11y.atspi.Action"
I_EDITABLE = "org.a11y.atspi.EditableText"

#: An element with more children than this (a spreadsheet's cells) is not walked; its count is given.
MAX_CHILDREN = 2000


@dataclass
class Element:
    """One element as read from its app (before filtering and numbering)."""

    ref: Ref
    role: str
    name: str = ""
    description: str = ""
    states: frozenset[str] = frozenset()
    interfaces: frozenset[str] = frozenset()
    child_count: int = 0
    parent: Ref | None = None
    index: int = -1
    children: list[Ref] | None = None  # known in order, when walked
    box: tuple[int, int, int, int] | None = None
    text: str | None = None
    value: float | None = None
    app: str = ""

    @property
    def showing(self) -> bool:
        return "showing" in self.states and "visible" in self.states

    @property
    def interactive(self) -> bool:
        if "enabled" not in self.states and "sensitive" not in self.states:
            return False
        if self.role in INTERACTIVE_ROLES:
            return self.role not in ("text", "document text", "terminal", "table cell", "list item", "tree item") \
                or bool({"editable", "focusable", "selectable"} & self.states)
        return I_ACTION in self.interfaces and bool({"focusable", "selectable", "checkable"} & self.states) \
            and self.role not in ("frame", "window", "application", "panel", "filler", "scroll pane", "viewport")

    @property
    def walkable(self) -> bool:
        if "manages descendants" in self.states:
            # Not a table: Calc's sheet gives -1 too (too many cells to count) and asking for its children stalls
            # the app. LibreOffice's text documents give -1 and the paragraphs in view, the text an agent reads.
            return self.role in ("document text",) and self.child_count < 0
        return 0 < self.child_count <= MAX_CHILDREN


def cut(text: Any, limit: int) -> str:
    """An app's text as shown: without object replacement characters, cut to ``limit`` characters."""
    text = str(text or "").replace("\ufffc", "").strip()
    return text if len(text) <= limit else text[:limit] + "…"


def state_names(bits: Iterable[int]) -> frozenset[str]:
    """The names of the states set in an AT-SPI state set (two 32-bit words on the wire)."""
    words = list(bits)[:2]
    names = []
    for word_index, word in enumerate(words):
        for bit in range(32):
            if word & (1 << bit):
                number = word_index * 32 + bit
                if number < len(STATES):
                    names.append(STATES[number])
    return frozenset(names)


def role_name(number: Any) -> str:
    """The name of an AT-SPI role number ("unknown" for anything else an app sends)."""
    return ROLES[number] if isinstance(number, int) and 0 <= number < len(ROLES) else "unknown"


@dataclass
class Query:
    """What to read and what to keep."""

    app: str | None = None
    window: str | None = None
    visible_only: bool = True
    interactive_only: bool = False
    compact: bool = False
    max_depth: int | None = None
    max_nodes: int = 1000


@dataclass
class Tree:
    """A numbered tree: ``nodes`` as JSON-ready dicts (element numbers 1..N, boxes in screen pixels unless
    :meth:`scaled`), and what each number refers to."""

    nodes: list[dict[str, Any]]
    refs: dict[int, Ref]
    screen: tuple[int, int]
    scale: float = 1.0
    apps: list[str] = field(default_factory=list)
    reason: str | None = None
    truncated: bool = False
    elapsed_ms: float = 0.0
    #: The apps missing from this read because they did not answer in time (each also in ``reason``).
    left_out: list[str] = field(default_factory=list)

    def scaled(self, scale: float) -> Tree:
        """The same tree with boxes in the pixels of a screenshot taken at ``scale``."""
        if scale == self.scale:
            return self
        factor = scale / self.scale
        nodes = [{**n, "box": _scaled(n["box"], factor)} if "box" in n else n for n in self.nodes]
        return replace(self, nodes=nodes, scale=scale)

    def to_dict(self) -> dict[str, Any]:
        return {"nodes": self.nodes, "count": len(self.nodes), "scale": self.scale,
                "screen": list(self.screen), "apps": self.apps, "truncated": self.truncated,
                "reason": self.reason, "elapsed_ms": round(self.elapsed_ms, 1)}

    def outline(self, limit: int = 400) -> str:
        """The tree as indented lines for a model: ``[7] push button "Save" (x,y wxh) focused``."""
        head = f"accessibility tree: {len(self.nodes)} elements"
        if self.apps:
            head += f" ({', '.join(self.apps)})"
        if self.scale != 1:
            head += f", boxes at scale {self.scale:g}"
        if self.reason:
            head += f"; {self.reason}"
        lines = [head]
        for node in self.nodes[:limit]:
            lines.append("  " * node["depth"] + describe(node))
        if len(self.nodes) > limit:
            lines.append(f"... {len(self.nodes) - limit} more in the structured result")
        return "\n".join(lines)


def describe(node: dict[str, Any]) -> str:
    text = f"[{node['element']}] {node['role']}"
    if node.get("name"):
        text += f" {node['name']!r}"
    box = node.get("box")
    if box:
        text += f" ({box[0]},{box[1]} {box[2]}x{box[3]})"
    shown = [s for s in node.get("states", ()) if s in SHOWN_STATES]
    if "enabled" not in node.get("states", ()) and node.get("interactive") is False and node["role"] in INTERACTIVE_ROLES:
        shown.append("disabled")
    if shown:
        text += " " + " ".join(shown)
    if node.get("value") is not None:
        text += f" value={node['value']:g}"
    if node.get("text") and node.get("text") != node.get("name"):
        text += f" text={node['text'][:80]!r}"
    return text


def _scaled(box: list[int], scale: float) -> list[int]:
    x, y, w, h = box
    return [int(round(x * scale)), int(round(y * scale)), max(1, int(round(w * scale))), max(1, int(round(h * scale)))]
