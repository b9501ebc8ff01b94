"""The accessibility tree of a desktop, read over AT-SPI from its private bus (see :mod:`.a11ybus`): the
reader, on the tree model of :mod:`.a11y_model` and the bus calls of :mod:`.a11y_dbus`.

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
from typing import Any

from ..errors import StaleElementError
from .a11y_dbus import CALL_TIMEOUT, BusConnection, BusLoop, CallError, name_has_owner
from .a11y_model import (
    I_ACCESSIBLE, I_COMPONENT, I_TEXT, I_VALUE, MAX_CHILDREN, Element, Query, Ref, Tree, cut, describe, role_name,
    state_names,
)

__all__ = ["Accessibility", "Query", "Tree", "name_has_owner"]  # what callers import from here

log = logging.getLogger(__name__)

APP_ROOT = "/org/a11y/atspi/accessible/root"
REGISTRY = ("org.a11y.atspi.Registry", APP_ROOT)
I_PROPERTIES = "org.freedesktop.DBus.Properties"

#: Bounds on what one query takes from the apps (and the model's MAX_CHILDREN).
MAX_NAME = 300
MAX_TEXT = 2000
HARD_MAX_NODES = 10_000
MAX_DEPTH = 64
QUERY_TIMEOUT = 8.0       # a whole tree
#: One app's whole cache in one reply: LibreOffice's took over 2 s (CALL_TIMEOUT) on a busy machine, and the app
#: was then left out of every read; QUERY_TIMEOUT still bounds the tree.
ITEMS_TIMEOUT = 6.0


def _complete(kids: list[Element], count: int) -> bool:
    """Whether an element's cached children are all it has now: each place 0..count-1 held once. The cache is
    kept by the app's change signals, and a missed one leaves it stale (pcmanfm's folder view once lacked a file's
    icon for 20 s while the screen showed it); the indices and the count are the app's answers of this moment, so
    a cache that disagrees with them is walked instead. A count below 0 (not told) trusts the cache."""
    if count < 0:
        return True
    return len(kids) == count and sorted(k.index for k in kids) == list(range(count))


class Accessibility:
    """The tree of one desktop's apps, and the element numbers of its latest observation."""

    def __init__(self, address: str, screen: tuple[int, int], app_labels: Any = None, *, anonymous: bool = False,
                 host_pid: Any = None) -> None:
        self.address = address
        self.screen = screen
        #: ``app_labels()`` -> {session id of an app's process: its label}, to name apps as the start state does
        self.app_labels = app_labels or (lambda: {})
        #: ``host_pid(pid)``: the pid the bus reports for an app as this process sees it (a bus in another pid
        #: namespace reports its own); None where they are the same
        self.host_pid = host_pid or (lambda pid: pid)
        self._conn = BusConnection(address, anonymous=anonymous)
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
                tree = BusLoop.run(self._read(query), QUERY_TIMEOUT + 2)
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
                box, states = BusLoop.run(self._current(known["ref"]), CALL_TIMEOUT * 2 + 1)
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
            BusLoop.run(disconnect(), 2.0)
        except Exception:  # noqa: BLE001 - the loop is gone with the interpreter
            pass

    # -- reading (on the loop thread) --------------------------------------------------------------------
    async def _current(self, ref: Ref) -> tuple[tuple[int, int, int, int], frozenset[str]]:
        box, states = await asyncio.gather(
            self._conn.call(ref[0], ref[1], I_COMPONENT, "GetExtents", "u", [0]),
            self._conn.call(ref[0], ref[1], I_ACCESSIBLE, "GetState"))
        return tuple(int(v) for v in box[0])[:4], state_names(states[0])  # type: ignore[return-value]

    async def _read(self, query: Query) -> Tree:
        left_out: list[str] = []
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
                left_out.append(f"an app ({labels.get(name) or name}) was left out: {result}")
                continue
            if isinstance(result, BaseException):
                log.warning("reading the tree of %s failed", name, exc_info=result)
                left_out.append(f"an app ({name}) was left out: {type(result).__name__}")
                continue
            app_elements, root = result
            if query.app and not any(query.app.lower() in n.lower() for n in
                                     (app_elements[root].name, app_elements[root].app)):
                continue
            elements.update(app_elements)
            roots.append(root)
            names.append(app_elements[root].app or app_elements[root].name)
        tree = await self._number(elements, roots, query)
        tree.apps, tree.left_out = names, left_out
        reasons = list(left_out)
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
            if process is not None:
                process = self.host_pid(process)
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
            items = (await c.call(name, "/org/a11y/atspi/cache", "org.a11y.atspi.Cache", "GetItems",
                                  timeout=ITEMS_TIMEOUT))[0]
        except CallError as exc:
            if exc.timeout:
                raise
            items = []  # a toolkit without the cache: the walk below reads everything
        for item in items[:HARD_MAX_NODES * 2]:
            try:
                ref, _app, parent, index, count, interfaces, elem_name, role, description, states = item
                ref = (str(ref[0]), str(ref[1]))
                elements[ref] = Element(
                    ref, role_name(role), cut(elem_name, MAX_NAME), cut(description, MAX_NAME), state_names(states),
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
            parent = elements[ref]
            # A count below 0 is "not told": the cache's children are all there is to know, except for an element
            # that is walked for them instead (LibreOffice's text documents, whose cache has the focused
            # paragraph only)
            asked = parent.child_count < 0 and parent.walkable
            parent.children = [k.ref for k in kids] if _complete(kids, parent.child_count) and not asked else None
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
        return Element(ref, role_name(role[0]), cut(values.get("Name"), MAX_NAME),
                       cut(values.get("Description"), MAX_NAME), state_names(states[0]),
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
        if query.compact:  # what a reader learns nothing from: a box around other elements
            kept = [(e, d) for e, d in kept if d == 0 or e.interactive or e.name or e.text or e.value is not None]
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
            if element.child_count > MAX_CHILDREN or ("manages descendants" in element.states
                                                       and not element.walkable):
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
            if not reply[0]:
                # LibreOffice answers nothing for an end past the text's length: ask for the length, then for no
                # more than there is (only for an empty answer; an empty field costs one more call)
                count = await c.call(e.ref[0], e.ref[1], I_PROPERTIES, "Get", "ss", [I_TEXT, "CharacterCount"])
                length = getattr(count[0], "value", count[0])
                if not isinstance(length, int) or isinstance(length, bool) or not 0 < length <= MAX_TEXT:
                    return
                reply = await c.call(e.ref[0], e.ref[1], I_TEXT, "GetText", "ii", [0, length])
            e.text = cut(reply[0], MAX_TEXT) or None

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
