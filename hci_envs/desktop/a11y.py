"""The accessibility tree of a desktop, read over AT-SPI from its private bus (see :mod:`.a11ybus`).

A walk that asks each element for each property (pyatspi's way) costs one D-Bus round trip per property
per element. This reader takes the bulk of the tree in one call per app (``Cache.GetItems``: every element
the app's bridge has cached, with role, name, states and parent), walks only what the cache lacks
(LibreOffice leaves whole panels out), and asks for boxes, text and values with every call in flight at
once. Everything an app sends is the agent's (the apps run as the agent): names and texts are cut to size,
element and child counts are bounded, a cycle cannot loop, and an app that does not answer in time is left
out of the tree, with the reason, rather than holding the caller.

Elements are numbered 1..N in document order. The numbers of the latest tree (or marked screenshot) are
what ``element=`` in an action refers to; :meth:`Accessibility.resolve` finds the element again when the
action runs and refuses one that is gone or no longer on screen (:class:`StaleElementError`).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ..errors import StaleElementError

log = logging.getLogger(__name__)

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

APP_ROOT = "/org/a11y/atspi/accessible/root"
REGISTRY = ("org.a11y.atspi.Registry", APP_ROOT)
I_ACCESSIBLE = "org.a11y.atspi.Accessible"
I_COMPONENT = "org.a11y.atspi.Component"
I_TEXT = "org.a11y.atspi.Text"
I_VALUE = "org.a11y.atspi.Value"
I_ACTION = "org.a11y.atspi.Action"
I_EDITABLE = "org.a11y.atspi.EditableText"
I_PROPERTIES = "org.freedesktop.DBus.Properties"

#: Bounds on what one query takes from the apps.
MAX_NAME = 300
MAX_TEXT = 2000
MAX_CHILDREN = 2000       # an element with more (a spreadsheet's cells) is not walked; its count is given
HARD_MAX_NODES = 10_000
MAX_DEPTH = 64
CALL_TIMEOUT = 2.0        # one call to one app
QUERY_TIMEOUT = 8.0       # a whole tree
# Calls outstanding at once on the connection. More would not be faster (the app answers one at a time) and
# could fill the socket's send buffer, which dbus-fast takes for a broken connection.
IN_FLIGHT = 128


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
        return "manages descendants" not in self.states and 0 < self.child_count <= MAX_CHILDREN


def _cut(text: Any, limit: int) -> str:
    text = str(text or "").replace("\ufffc", "").strip()
    return text if len(text) <= limit else text[:limit] + "…"


def _states(bits: Iterable[int]) -> frozenset[str]:
    words = list(bits)[:2]
    names = []
    for word_index, word in enumerate(words):
        for bit in range(32):
            if word & (1 << bit):
                number = word_index * 32 + bit
                if number < len(STATES):
                    names.append(STATES[number])
    return frozenset(names)


def _role(number: Any) -> str:
    return ROLES[number] if isinstance(number, int) and 0 <= number < len(ROLES) else "unknown"


@dataclass
class Query:
    """What to read and what to keep."""

    app: str | None = None
    window: str | None = None
    visible_only: bool = True
    interactive_only: bool = False
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

    def scaled(self, scale: float) -> Tree:
        """The same tree with boxes in the pixels of a screenshot taken at ``scale``."""
        if scale == self.scale:
            return self
        factor = scale / self.scale
        nodes = [{**n, "box": _scaled(n["box"], factor)} if "box" in n else n for n in self.nodes]
        return Tree(nodes, self.refs, self.screen, scale, self.apps, self.reason, self.truncated, self.elapsed_ms)

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


class _Loop:
    """One event loop thread for every desktop's bus connections in this process."""

    _lock = threading.Lock()
    _loop: asyncio.AbstractEventLoop | None = None

    @classmethod
    def get(cls) -> asyncio.AbstractEventLoop:
        with cls._lock:
            if cls._loop is None or not cls._loop.is_running():
                loop = asyncio.new_event_loop()
                started = threading.Event()

                def run() -> None:
                    asyncio.set_event_loop(loop)
                    loop.call_soon(started.set)
                    loop.run_forever()

                threading.Thread(target=run, name="hci-envs-a11y", daemon=True).start()
                started.wait()
                cls._loop = loop
            return cls._loop

    @classmethod
    def run(cls, coro: Any, timeout: float) -> Any:
        future = asyncio.run_coroutine_threadsafe(coro, cls.get())
        try:
            return future.result(timeout)
        except TimeoutError:
            future.cancel()
            raise


class _Connection:
    """One D-Bus connection with bounded calls: ``await call(...)`` returns the reply body or raises
    :class:`CallError` (an error reply, a timeout, or the connection gone)."""

    def __init__(self, address: str) -> None:
        self.address = address
        self.bus: Any = None
        self._slots: asyncio.Semaphore | None = None

    async def connect(self) -> None:
        if self.bus is not None and self.bus.connected:
            return
        from dbus_fast.aio import MessageBus

        self.bus = await asyncio.wait_for(MessageBus(bus_address=self.address).connect(), CALL_TIMEOUT)
        self._slots = asyncio.Semaphore(IN_FLIGHT)

    async def call(self, dest: str, path: str, interface: str, member: str, signature: str = "",
                   body: Iterable[Any] = (), timeout: float = CALL_TIMEOUT) -> list[Any]:
        from dbus_fast import Message, MessageType

        await self.connect()
        assert self._slots is not None
        async with self._slots:
            try:
                reply = await asyncio.wait_for(self.bus.call(Message(
                    destination=dest, path=path, interface=interface, member=member, signature=signature,
                    body=list(body))), timeout)
            except asyncio.TimeoutError:
                raise CallError(f"{dest} did not answer {member} within {timeout:g}s", timeout=True) from None
            except Exception as exc:  # noqa: BLE001 - a malformed reply or a closed connection
                raise CallError(f"{member} to {dest} failed: {exc}") from None
        if reply.message_type == MessageType.ERROR:
            raise CallError(f"{member} to {dest}: {reply.error_name}", name=reply.error_name or "")
        return list(reply.body)

    def close(self) -> None:
        if self.bus is not None:
            try:
                self.bus.disconnect()
            except Exception:  # noqa: BLE001 - already gone
                pass
            self.bus = None


class CallError(Exception):
    def __init__(self, message: str, *, timeout: bool = False, name: str = "") -> None:
        super().__init__(message)
        self.timeout = timeout
        self.name = name


def name_has_owner(address: str, name: str) -> bool:
    """Whether ``name`` is owned on the bus at ``address`` (a fresh connection; for start-up waits)."""

    async def ask() -> bool:
        conn = _Connection(address)
        try:
            body = await conn.call("org.freedesktop.DBus", "/org/freedesktop/DBus", "org.freedesktop.DBus",
                                   "NameHasOwner", "s", [name])
            return bool(body[0])
        except (CallError, OSError):
            return False
        finally:
            conn.close()

    try:
        return bool(_Loop.run(ask(), CALL_TIMEOUT + 1))
    except Exception:  # noqa: BLE001 - the bus is not up yet
        return False


class Accessibility:
    """The tree of one desktop's apps, and the element numbers of its latest observation."""

    def __init__(self, address: str, screen: tuple[int, int], app_labels: Any = None) -> None:
        self.address = address
        self.screen = screen
        #: ``app_labels()`` -> {session id of an app's process: its label}, to name apps as the start state does
        self.app_labels = app_labels or (lambda: {})
        self._conn = _Connection(address)
        self._activated: set[str] = set()
        self._lock = threading.Lock()
        self._elements: dict[int, dict[str, Any]] = {}
        self._generation = 0

    # -- the public, synchronous side -------------------------------------------------------------------
    def tree(self, query: Query | None = None, *, remember: bool = True) -> Tree:
        """Read and number the tree. With ``remember``, its numbers become what ``element=`` refers to."""
        query = query or Query()
        started = time.perf_counter()
        with self._lock:
            try:
                tree = _Loop.run(self._read(query), QUERY_TIMEOUT + 2)
            except TimeoutError:
                tree = Tree([], {}, self.screen, reason=f"the apps did not answer within {QUERY_TIMEOUT:g}s")
            tree.elapsed_ms = (time.perf_counter() - started) * 1000
            if remember:
                self._generation += 1
                self._elements = {n["element"]: {**n, "ref": tree.refs[n["element"]]} for n in tree.nodes}
        return tree

    def resolve(self, element: int) -> tuple[int, int]:
        """The centre, in screen pixels, of ``element`` of the latest observation, as it is now. Raises
        :class:`StaleElementError` when there is no such element, or it is gone or off screen."""
        with self._lock:
            known = self._elements.get(element)
            if known is None:
                if not self._elements:
                    raise StaleElementError(
                        f"element {element}: there is no element table yet; take an accessibility_tree or a "
                        "screenshot with marks first", element=element)
                raise StaleElementError(
                    f"element {element} is not in the latest observation (elements 1..{max(self._elements)})",
                    element=element)
            label = describe({**known, "box": None, "states": ()})
            try:
                box, states = _Loop.run(self._current(known["ref"]), CALL_TIMEOUT * 2 + 1)
            except (CallError, TimeoutError) as exc:
                raise StaleElementError(f"{label} is gone ({exc}); take a new observation", element=element) from None
        if not ({"showing", "visible"} <= states):
            raise StaleElementError(f"{label} is no longer on screen; take a new observation", element=element)
        x, y, w, h = box
        width, height = self.screen
        x0, y0, x1, y1 = max(x, 0), max(y, 0), min(x + w, width), min(y + h, height)
        if x1 <= x0 or y1 <= y0:
            raise StaleElementError(f"{label} is off screen now ({x},{y} {w}x{h}); take a new observation",
                                    element=element)
        return (x0 + x1 - 1) // 2, (y0 + y1 - 1) // 2

    def forget(self) -> None:
        """A new episode on this display: the numbers of the old one mean nothing, the apps are new."""
        with self._lock:
            self._elements = {}
            self._activated.clear()

    def close(self) -> None:
        """Disconnect (before the bus goes, so that no read is left waiting on a dead socket)."""
        async def disconnect() -> None:
            self._conn.close()

        try:
            _Loop.run(disconnect(), 2.0)
        except Exception:  # noqa: BLE001 - the loop is gone with the interpreter
            pass

    # -- reading (on the loop thread) --------------------------------------------------------------------
    async def _current(self, ref: Ref) -> tuple[tuple[int, int, int, int], frozenset[str]]:
        box, states = await asyncio.gather(
            self._conn.call(ref[0], ref[1], I_COMPONENT, "GetExtents", "u", [0]),
            self._conn.call(ref[0], ref[1], I_ACCESSIBLE, "GetState"))
        return tuple(int(v) for v in box[0])[:4], _states(states[0])  # type: ignore[return-value]

    async def _read(self, query: Query) -> Tree:
        reasons: list[str] = []
        try:
            apps = (await self._conn.call(*REGISTRY, I_ACCESSIBLE, "GetChildren"))[0][:64]
        except (CallError, OSError) as exc:
            return Tree([], {}, self.screen, reason=f"the accessibility bus did not answer: {exc}")
        labels = await self._labels([name for name, _path in apps])
        results = await asyncio.gather(*(self._read_app(name, path, labels.get(name), query) for name, path in apps),
                                       return_exceptions=True)
        elements: dict[Ref, Element] = {}
        roots: list[Ref] = []
        names: list[str] = []
        for (name, path), result in zip(apps, results):
            if isinstance(result, CallError):
                reasons.append(f"an app ({labels.get(name) or name}) was left out: {result}")
                continue
            if isinstance(result, BaseException):
                log.warning("reading the tree of %s failed", name, exc_info=result)
                reasons.append(f"an app ({name}) was left out: {type(result).__name__}")
                continue
            app_elements, root = result
            if query.app and not any(query.app.lower() in n.lower() for n in
                                     (app_elements[root].name, app_elements[root].app)):
                continue
            elements.update(app_elements)
            roots.append(root)
            names.append(app_elements[root].app or app_elements[root].name)
        tree = await self._number(elements, roots, query)
        tree.apps = names
        if not apps:
            reasons.append("no app has registered on the accessibility bus (an app that exposes nothing, "
                           "such as xterm or a Tk app, has no tree)")
        elif not tree.nodes and not reasons:
            reasons.append("nothing matched" if (query.app or query.window or query.interactive_only)
                           else "the apps expose no elements on screen")
        tree.reason = "; ".join(reasons) or None
        return tree

    async def _labels(self, bus_names: list[str]) -> dict[str, str]:
        """The start state's label of each app on the bus, by the session of the process that owns its
        connection (every app starts a session of its own)."""
        import os

        by_session = self.app_labels()
        if not by_session:
            return {}

        async def pid(name: str) -> int | None:
            try:
                return int((await self._conn.call("org.freedesktop.DBus", "/org/freedesktop/DBus",
                                                   "org.freedesktop.DBus", "GetConnectionUnixProcessID", "s",
                                                   [name]))[0])
            except (CallError, ValueError, TypeError):
                return None

        labels = {}
        for name, process in zip(bus_names, await asyncio.gather(*(pid(n) for n in bus_names))):
            if process is None:
                continue
            try:
                label = by_session.get(os.getsid(process))
            except OSError:
                continue
            if label:
                labels[name] = label
        return labels

    async def _read_app(self, name: str, path: str, label: str | None,
                        query: Query) -> tuple[dict[Ref, Element], Ref]:
        c = self._conn
        if name not in self._activated:
            # An app's bridge builds its cache once a client asks for its bus address (or listens to events).
            try:
                await c.call(name, path, "org.a11y.atspi.Application", "GetApplicationBusAddress")
            except CallError as exc:
                if exc.timeout:
                    raise
            self._activated.add(name)
        elements: dict[Ref, Element] = {}
        try:
            items = (await c.call(name, "/org/a11y/atspi/cache", "org.a11y.atspi.Cache", "GetItems"))[0]
        except CallError as exc:
            if exc.timeout:
                raise
            items = []  # a toolkit without the cache: the walk below reads everything
        for item in items[:HARD_MAX_NODES * 2]:
            try:
                ref, _app, parent, index, count, interfaces, elem_name, role, description, states = item
                ref = (str(ref[0]), str(ref[1]))
                elements[ref] = Element(
                    ref, _role(role), _cut(elem_name, MAX_NAME), _cut(description, MAX_NAME), _states(states),
                    frozenset(str(i) for i in interfaces[:32]), int(count), (str(parent[0]), str(parent[1])),
                    int(index))
            except (TypeError, ValueError, IndexError):
                continue  # a malformed item from the app: leave it out
        root = (name, path)
        if root not in elements:
            elements[root] = await self._fetch(root)
        app_element = elements[root]
        app_element.app = label or app_element.name
        app_element.parent = None
        # children from the cache, in their order
        cached: dict[Ref, list[Element]] = {}
        for element in elements.values():
            if element.parent is not None and element.parent in elements and element.ref != root:
                cached.setdefault(element.parent, []).append(element)
        for ref, kids in cached.items():
            kids.sort(key=lambda e: (e.index < 0, e.index, e.ref[1]))
            elements[ref].children = [k.ref for k in kids] if len(kids) >= elements[ref].child_count else None
        await self._walk(elements, root, query)
        for element in elements.values():
            element.app = app_element.app
        return elements, root

    async def _fetch(self, ref: Ref) -> Element:
        """One element the cache did not have: its properties, one call each, all at once."""
        c = self._conn
        role, states, interfaces, props = await asyncio.gather(
            c.call(ref[0], ref[1], I_ACCESSIBLE, "GetRole"),
            c.call(ref[0], ref[1], I_ACCESSIBLE, "GetState"),
            c.call(ref[0], ref[1], I_ACCESSIBLE, "GetInterfaces"),
            c.call(ref[0], ref[1], I_PROPERTIES, "GetAll", "s", [I_ACCESSIBLE]))
        values = {k: getattr(v, "value", v) for k, v in (props[0] or {}).items()} if props else {}
        try:
            count = int(values.get("ChildCount", 0))
        except (TypeError, ValueError):
            count = 0
        return Element(ref, _role(role[0]), _cut(values.get("Name"), MAX_NAME),
                       _cut(values.get("Description"), MAX_NAME), _states(states[0]),
                       frozenset(str(i) for i in interfaces[0][:32]), count)

    async def _walk(self, elements: dict[Ref, Element], root: Ref, query: Query) -> None:
        """Read, level by level with every call of a level in flight at once, the children the cache lacks."""
        frontier = [root]
        depth = 0
        seen = {root}
        limit = min(query.max_depth if query.max_depth is not None else MAX_DEPTH, MAX_DEPTH)
        while frontier and depth < limit and len(elements) < HARD_MAX_NODES * 2:
            wanted = [ref for ref in frontier if elements[ref].children is None and elements[ref].walkable
                      and (not query.visible_only or ref == root or elements[ref].showing)]
            replies = await asyncio.gather(*(self._conn.call(r[0], r[1], I_ACCESSIBLE, "GetChildren") for r in wanted),
                                           return_exceptions=True)
            missing: list[Ref] = []
            for ref, reply in zip(wanted, replies):
                if isinstance(reply, BaseException):
                    elements[ref].children = []
                    continue
                kids = [(str(k[0]), str(k[1])) for k in reply[0][:MAX_CHILDREN]]
                elements[ref].children = kids
                missing += [k for k in kids if k not in elements]
            fetched = await asyncio.gather(*(self._fetch(ref) for ref in dict.fromkeys(missing)),
                                           return_exceptions=True)
            for ref, element in zip(dict.fromkeys(missing), fetched):
                if isinstance(element, Element):
                    elements[ref] = element
            next_frontier = []
            for ref in frontier:
                for kid in elements[ref].children or []:
                    if kid in elements and kid not in seen:
                        seen.add(kid)
                        elements[kid].parent = ref
                        next_frontier.append(kid)
            frontier = next_frontier
            depth += 1

    def _ordered(self, elements: dict[Ref, Element], roots: list[Ref], query: Query) -> list[tuple[Element, int]]:
        """Elements in document order with their depth, pruned by the query (before boxes are known)."""
        out: list[tuple[Element, int]] = []
        limit = min(query.max_depth if query.max_depth is not None else MAX_DEPTH, MAX_DEPTH)
        seen: set[Ref] = set()
        stack = [(ref, 0) for ref in reversed(roots)]
        while stack and len(out) < HARD_MAX_NODES:
            ref, depth = stack.pop()
            if ref in seen or ref not in elements:
                continue
            seen.add(ref)
            element = elements[ref]
            top = depth == 0
            if query.visible_only and not top and not element.showing:
                continue
            if depth == 1 and query.window and query.window.lower() not in element.name.lower():
                continue
            out.append((element, depth))
            if depth < limit:
                stack.extend((kid, depth + 1) for kid in reversed(element.children or []))
        return out

    async def _number(self, elements: dict[Ref, Element], roots: list[Ref], query: Query) -> Tree:
        ordered = self._ordered(elements, roots, query)
        await self._details([element for element, _depth in ordered])
        width, height = self.screen
        kept: list[tuple[Element, int]] = []
        for element, depth in ordered:
            if query.visible_only and depth > 0 and element.box is not None:
                x, y, w, h = element.box
                if w <= 0 or h <= 0 or x + w <= 0 or y + h <= 0 or x >= width or y >= height:
                    continue
            kept.append((element, depth))
        if query.interactive_only:
            kept = [(e, d) for e, d in kept if e.interactive]
        nodes: list[dict[str, Any]] = []
        refs: dict[int, Ref] = {}
        numbers: dict[Ref, int] = {}  # kept elements: their number
        truncated = False
        for element, _depth in kept:
            if len(nodes) >= min(query.max_nodes, HARD_MAX_NODES):
                truncated = True
                break
            # the nearest ancestor that was kept (filters drop the ones in between)
            ancestor, hops = element.parent, 0
            while ancestor is not None and ancestor not in numbers and hops < MAX_DEPTH:
                ancestor, hops = elements[ancestor].parent if ancestor in elements else None, hops + 1
            parent = numbers.get(ancestor) if ancestor is not None else None
            number = len(nodes) + 1
            node: dict[str, Any] = {
                "element": number, "role": element.role, "name": element.name,
                "depth": nodes[parent - 1]["depth"] + 1 if parent else 0,
                "parent": parent, "app": element.app,
                "states": sorted(element.states), "interactive": element.interactive,
            }
            if element.description:
                node["description"] = element.description
            if element.box is not None:
                node["box"] = list(element.box)
            if element.text:
                node["text"] = element.text
            if element.value is not None:
                node["value"] = element.value
            if element.child_count > MAX_CHILDREN or "manages descendants" in element.states:
                node["children_omitted"] = element.child_count
            nodes.append(node)
            refs[number] = element.ref
            numbers[element.ref] = number
        return Tree(nodes, refs, self.screen, truncated=truncated)

    async def _details(self, elements: list[Element]) -> None:
        """Boxes (screen coordinates), texts and values, one call each, all in flight at once."""
        c = self._conn

        async def box(e: Element) -> None:
            reply = await c.call(e.ref[0], e.ref[1], I_COMPONENT, "GetExtents", "u", [0])
            e.box = tuple(int(v) for v in reply[0])[:4]  # type: ignore[assignment]

        async def text(e: Element) -> None:
            reply = await c.call(e.ref[0], e.ref[1], I_TEXT, "GetText", "ii", [0, MAX_TEXT + 1])
            e.text = _cut(reply[0], MAX_TEXT) or None

        async def value(e: Element) -> None:
            reply = await c.call(e.ref[0], e.ref[1], I_PROPERTIES, "Get", "ss", [I_VALUE, "CurrentValue"])
            number = getattr(reply[0], "value", reply[0])
            e.value = float(number) if isinstance(number, int | float) and number == number else None

        calls = []
        for e in elements:
            if I_COMPONENT in e.interfaces:
                calls.append(box(e))
            if I_TEXT in e.interfaces and e.role not in TEXTLESS_ROLES:
                calls.append(text(e))
            if I_VALUE in e.interfaces:
                calls.append(value(e))
        for outcome in await asyncio.gather(*calls, return_exceptions=True):
            if isinstance(outcome, BaseException) and not isinstance(outcome, CallError | ValueError | TypeError):
                raise outcome


#: Roles whose Text interface only repeats their name or holds their children's text (read from them).
TEXTLESS_ROLES = frozenset({"application", "frame", "window", "dialog", "panel", "filler", "push button",
                            "menu item", "menu", "menu bar", "tool bar", "page tab", "scroll pane", "viewport",
                            "document web", "document frame", "section", "form", "list", "table", "tree"})


def _scaled(box: list[int], scale: float) -> list[int]:
    x, y, w, h = box
    return [int(round(x * scale)), int(round(y * scale)), max(1, int(round(w * scale))), max(1, int(round(h * scale)))]
