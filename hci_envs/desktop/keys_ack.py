"""Has the app that gets the keys handled them? Who to ask, and how, so that the answer comes in order.

Why it is asked: an X client looks up a key event's keysym when it handles the event, from the keyboard map
as it is *then* (Xlib and GDK reload the map as soon as they read a MappingNotify, ahead of the key events
still queued before it). A scratch key (:mod:`.keyboard`) may be remapped only once the app has handled
every key event sent with the old map. Time says nothing about that: a stopped or busy app takes as long as
it takes. A message sent *after* the keys does, since a client handles its events in order; its answer
means every key before it has been looked up:

* ``_NET_WM_PING``, when the client lists it in its top-level's WM_PROTOCOLS (GTK, Qt, chromium, SDL). The
  toolkit sends the message back to the root window when it handles it.
* Otherwise a synthetic Expose of a 2x2 box in a corner of the client's largest painted window (xterm, Tk,
  Xt and plain Xlib apps). The client repaints the box when it handles the event, and DAMAGE reports the
  drawing. Corners hold borders and margins, which apps paint on Expose, not because a key was typed
  (xterm's inner border). The corner must be on screen and visible (drawing that nobody can see is
  clipped away and damages nothing), so corners covered by a child, by a window stacked above, or off the
  screen are passed over.

Who gets the keys is the X server's rule: the window under the pointer when it lies inside the focus
window, else the focus window itself, and the client that created that window (its resource-id base)
handles them. Nobody needs asking when the keys go nowhere (no focus), to the root window, to the window
manager (it reads keys for its bindings only and inserts no text), or to a window of this process.

After a remap there is a second question, for processes that read the keyboard map on a connection other
than the one their keys come in on: chromium's GTK input method turns key events into characters with
GDK's map, and GDK learns of a new map on its own connection, so chromium read the first key after a
pause with the old map (1 run in 6 with the app stopped). Those other connections (same process, by the
X-Resource extension) are pinged through a window of theirs that lists _NET_WM_PING (GDK's leader window)
before keys are typed on the new map (:func:`find_map_readers`).

Everything here runs on the thread that owns the events connection (:class:`.events.DesktopEvents`); the
walks are bounded, since the windows are the agent's to make.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Any

from Xlib import X, Xatom
from Xlib.ext import res
from Xlib.protocol import event as xevent

#: The size of the box a synthetic Expose asks the app to repaint.
BOX = 2
#: At most this many windows are looked at to find the one to expose, this many ancestors climbed, this
#: many windows stacked above one counted as what may cover it, and this many other connections pinged.
MAX_WINDOWS = 256
MAX_DEPTH = 32
MAX_ABOVE = 64
MAX_CONNECTIONS = 8


@dataclass
class Reader:
    """The client that gets key events now, and how to ask it whether it has handled them.

    ``how`` is "ping" (each of ``windows`` is pinged) or "expose" (``windows[0]`` is exposed at ``box``),
    "none" (nobody needs asking: ``why`` says why) or "unknown" (it cannot be asked: ``why`` says why)."""

    how: str
    windows: tuple[int, ...] = ()
    client: int = 0
    why: str = ""
    name: str = ""
    box: tuple[int, int, int, int] = (0, 0, BOX, BOX)  # what an Expose repaints, in the window's coordinates

    @property
    def window(self) -> int:
        return self.windows[0] if self.windows else 0

    def describe(self) -> str:
        label = f" ({self.name!r})" if self.name else ""
        return f"window {self.window:#x}{label}"


def _id(window: Any) -> int:
    return window if isinstance(window, int) else int(window.id)


def find_reader(d: Any, own_clients: set[int]) -> Reader:
    """Who gets the keys now and how to ask it (see the module's text). ``d`` is an Xlib display."""
    found = _key_client(d, own_clients)
    if isinstance(found, Reader):
        return found
    target, client = found
    mask = d.display.info.resource_id_mask
    root = d.screen().root
    # Climb to the client's own outermost window (its top-level, inside the window manager's frame).
    top, top_protocols = target, None
    window = d.create_resource_object("window", target)
    for _ in range(MAX_DEPTH):
        if window.id == root.id or window.id & ~mask != client:
            break
        top = window.id
        prop = window.get_full_property(d.get_atom("WM_PROTOCOLS"), Xatom.ATOM)
        if prop is not None:
            top_protocols = list(prop.value)
            break
        window = window.query_tree().parent
    name = _title(d, top)
    if top_protocols and d.get_atom("_NET_WM_PING") in top_protocols:
        return Reader("ping", windows=(top,), client=client, name=name)
    painted = _painted_corner(d, root, top, mask, client)
    if painted is None:
        return Reader("unknown", windows=(top,), client=client, name=name,
                      why="it answers no _NET_WM_PING and shows no corner of a painted window to expose")
    return Reader("expose", windows=(painted[0],), client=client, name=name, box=painted[1])


def find_map_readers(d: Any, own_clients: set[int]) -> Reader:
    """The other X connections of the process that gets the keys, to ask whether they have read a new
    keyboard map: a "ping" of one window each that lists _NET_WM_PING, or "none" (one connection, no
    X-Resource extension to tell, or nothing of theirs answers pings)."""
    found = _key_client(d, own_clients)
    if isinstance(found, Reader):
        return found
    _, client = found
    if not d.has_extension("X-Resource"):
        return Reader("none", client=client, why="the display cannot tell an app's connections apart")
    mask = d.display.info.resource_id_mask
    ids = d.res_query_client_ids([{"client": 0, "mask": res.LocalClientPIDMask}]).ids
    pids = {int(i.spec.client) & ~mask: int(i.value[0]) for i in ids if i.value}
    pid = pids.get(client)
    others = {c for c, p in pids.items() if p == pid and c != client} if pid else set()
    windows: list[int] = []
    if others:
        protocols, ping = d.get_atom("WM_PROTOCOLS"), d.get_atom("_NET_WM_PING")
        for window in d.screen().root.query_tree().children[:MAX_WINDOWS]:  # top-levels, mapped or not
            owner = window.id & ~mask
            if owner not in others or len(windows) >= MAX_CONNECTIONS:
                continue
            prop = window.get_full_property(protocols, Xatom.ATOM)
            if prop is not None and ping in prop.value:
                windows.append(window.id)
                others.discard(owner)
    if not windows:
        return Reader("none", client=client, why="the app reads the keyboard map on one connection")
    return Reader("ping", windows=tuple(windows), client=client, name=f"process {pid}")


def _key_client(d: Any, own_clients: set[int]) -> tuple[int, int] | Reader:
    """The window that gets key events now and the client that created it, or a Reader saying that
    nobody needs asking."""
    mask = d.display.info.resource_id_mask
    root = d.screen().root
    focus = _id(d.get_input_focus().focus)
    if focus == X.NONE:
        return Reader("none", why="no window has the keyboard focus: keys go nowhere")
    under = [root.id]  # the windows under the pointer, outermost first
    window = root
    while len(under) < MAX_DEPTH:
        child = _id(window.query_pointer().child)
        if not child:
            break
        under.append(child)
        window = d.create_resource_object("window", child)
    target = under[-1] if focus == X.PointerRoot or focus in under else focus
    if target == root.id:
        return Reader("none", why="the keys go to the root window")
    client = target & ~mask
    if client in own_clients:
        return Reader("none", why="the keys go to a window of the server's own")
    if client == _wm_client(d, root, mask):
        return Reader("none", why="the keys go to the window manager")
    return target, client


def _wm_client(d: Any, root: Any, mask: int) -> int | None:
    prop = root.get_full_property(d.get_atom("_NET_SUPPORTING_WM_CHECK"), Xatom.WINDOW)
    return int(prop.value[0]) & ~mask if prop is not None and len(prop.value) else None


def _title(d: Any, window: int) -> str:
    prop = d.create_resource_object("window", window).get_full_property(d.get_atom("WM_NAME"),
                                                                          X.AnyPropertyType)
    value = prop.value if prop is not None else b""
    return (value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value))[:80]


def _painted_corner(d: Any, root: Any, top: int, mask: int,
                    client: int) -> tuple[int, tuple[int, int, int, int]] | None:
    """A window of ``client`` at or under ``top`` to expose, and the box to expose: the largest viewable
    window that asks for Expose events (the deeper of two the same size: a frame inside its shell), at the
    first of its corners that shows on the screen."""
    candidates: list[tuple[int, int, int, Any]] = []  # (area, depth, id, geometry)
    queue = deque([(top, 0)])
    seen = 0
    while queue and seen < MAX_WINDOWS:
        wid, depth = queue.popleft()
        seen += 1
        window = d.create_resource_object("window", wid)
        attributes = window.get_attributes()
        if attributes.map_state != X.IsViewable:
            continue
        queue.extend((_id(c), depth + 1) for c in window.query_tree().children)
        if wid & ~mask == client and attributes.win_class == X.InputOutput \
                and attributes.all_event_masks & X.ExposureMask:
            geometry = window.get_geometry()
            candidates.append((geometry.width * geometry.height, depth, wid, geometry))
    screen = d.screen()
    for _, _, wid, geometry in sorted(candidates, key=lambda c: c[:2], reverse=True)[:4]:
        window = d.create_resource_object("window", wid)
        origin = root.translate_coords(window, 0, 0)
        obstacles = _obstacles(d, root, window)
        w, h = geometry.width, geometry.height
        for x, y in ((0, 0), (w - BOX, 0), (0, h - BOX), (w - BOX, h - BOX)):
            ax, ay = origin.x + x, origin.y + y
            if x < 0 or y < 0 or ax < 0 or ay < 0 or ax + BOX > screen.width_in_pixels \
                    or ay + BOX > screen.height_in_pixels:
                continue
            if not any(_overlaps((ax, ay, BOX, BOX), rect) for rect in obstacles):
                return wid, (x, y, BOX, BOX)
    return None


def _obstacles(d: Any, root: Any, window: Any) -> list[tuple[int, int, int, int]]:
    """What may hide parts of ``window``, in root coordinates: its viewable children, and the viewable
    windows stacked above it or above any of its ancestors."""
    rects = [r for c in window.query_tree().children[-MAX_ABOVE:] if (r := _extent(d, root, _id(c)))]
    current = window
    for _ in range(MAX_DEPTH):
        parent = current.query_tree().parent
        if not parent or _id(parent) == X.NONE:
            break
        siblings = [_id(s) for s in parent.query_tree().children]
        above = siblings[siblings.index(current.id) + 1:] if current.id in siblings else []
        rects.extend(r for s in above[-MAX_ABOVE:] if (r := _extent(d, root, s)))
        if _id(parent) == root.id:
            break
        current = d.create_resource_object("window", _id(parent))
    return rects


def _extent(d: Any, root: Any, wid: int) -> tuple[int, int, int, int] | None:
    """A viewable window's outer rectangle (its border included) in root coordinates, or None if it hides
    nothing."""
    window = d.create_resource_object("window", wid)
    attributes = window.get_attributes()
    if attributes.map_state != X.IsViewable or attributes.win_class != X.InputOutput:  # InputOnly hides nothing
        return None
    g = window.get_geometry()
    origin = root.translate_coords(window, 0, 0)
    b = g.border_width
    return origin.x - b, origin.y - b, g.width + 2 * b, g.height + 2 * b


def _overlaps(a: tuple[int, int, int, int], b: tuple[int, int, int, int]) -> bool:
    return a[0] < b[0] + b[2] and b[0] < a[0] + a[2] and a[1] < b[1] + b[3] and b[1] < a[1] + a[3]


def ping_message(d: Any, window: int, token: int) -> Any:
    """The _NET_WM_PING a client answers by sending it back to the root window (EWMH): ``token`` stands
    where the timestamp goes, and the answer carries it back."""
    return xevent.ClientMessage(
        window=d.create_resource_object("window", window),
        client_type=d.get_atom("WM_PROTOCOLS"),
        data=(32, [d.get_atom("_NET_WM_PING"), token, window, 0, 0]),
    )


def is_pong(d: Any, event: Any, token: int, window: int) -> bool:
    if event.type != X.ClientMessage or event.client_type != d.get_atom("WM_PROTOCOLS"):
        return False
    fmt, data = event.data
    return fmt == 32 and data[0] == d.get_atom("_NET_WM_PING") and data[1] == token and data[2] == window


def expose_event(d: Any, window: int, box: tuple[int, int, int, int]) -> Any:
    x, y, w, h = box
    return xevent.Expose(window=d.create_resource_object("window", window), x=x, y=y, width=w, height=h,
                         count=0)


def touches_box(area: Any, box: tuple[int, int, int, int]) -> bool:
    """Whether a damaged rectangle (in the exposed window's coordinates) overlaps the exposed box."""
    return area.width > 0 and area.height > 0 and _overlaps((area.x, area.y, area.width, area.height), box)
