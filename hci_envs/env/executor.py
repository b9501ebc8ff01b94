"""The one executor every path uses: MCP tools, ``step()``, CodeAct functions and demonstration replay.

It turns a validated canonical action into operations on a :class:`~hci_envs.desktop.Desktop` and reports an
:class:`ActionResult`. Observers (recorders) see every action with its result.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .. import deadline
from ..actions import models as A
from ..actions.keys import split_combo
from ..actions.models import BUTTON_NUMBERS, parse_action
from ..errors import ActionTimeoutError, DesktopDiedError, HumanControlError, StaleElementError

if TYPE_CHECKING:  # the light install has no desktop runtime: the interface is for the types
    from ..desktop.interface import VirtualDesktop

#: The selections a paste offers its text on (xterm's shift+Insert reads PRIMARY, the others CLIPBOARD).
PASTE_SELECTIONS = ("CLIPBOARD", "PRIMARY")
#: The keys that paste in xterm, GTK, Qt, Tk and chromium alike.
DEFAULT_PASTE_KEYS = "shift+Insert"
#: Window classes (WM_CLASS, any case) of apps that paste PRIMARY with those keys: the terminals.
PRIMARY_PASTERS = frozenset({
    "xterm", "uxterm", "urxvt", "rxvt", "aterm", "eterm", "st", "st-256color", "konsole", "xfce4-terminal",
    "gnome-terminal", "gnome-terminal-server", "mate-terminal", "lxterminal", "qterminal", "terminator", "tilix",
    "sakura", "alacritty", "kitty", "wezterm", "terminology",
})

#: "The screen has settled" after an action: it changed (the action's effect, waited for up to SETTLE_EFFECT
#: seconds; an action may have none) and then stayed still, its background aside, for SETTLE_QUIET seconds,
#: all within SETTLE_TIMEOUT. See DesktopEvents.wait_settled.
SETTLE_QUIET = 0.05
SETTLE_EFFECT = 0.3
SETTLE_TIMEOUT = 2.0

#: An app that answers whether it has read the keys after this many seconds was busy when they came: their effect
#: is waited for from its answer on.
SLOW_ANSWER = 0.05

#: A change within this many pixels of where a pointer action acted counts as its effect "at the action".
LANDED_NEAR = 48
#: Actions that send keys: they land in whatever has the keyboard focus, if anything has it.
KEYBOARD_ACTIONS = frozenset({"type_text", "key", "key_down", "key_up", "hold_key"})


@dataclass
class ActionResult:
    """What an action did: a line of text for the model, structured data, and an image for screenshots."""

    action: str
    text: str = ""
    data: dict[str, Any] = field(default_factory=dict)
    image: Any = None  # hci_envs.desktop.EncodedImage
    settled: bool | None = None
    elapsed_ms: float = 0.0
    #: When the action started (time.monotonic()), and the window that had the keyboard focus then (None:
    #: nothing had it); set for keys and for input actions whose landing is asked for.
    started: float = 0.0
    focus_before: int | None = None
    #: What the screen did after the action (see Executor.land), once a settle window has followed it.
    landed: dict[str, Any] | None = None

    def structured(self) -> dict[str, Any]:
        out = dict(self.data)
        if self.image is not None:
            out.update(self.image.info())
        if self.settled is not None:
            out["settled"] = self.settled
        if self.landed is not None:
            out["landed"] = self.landed
        return out


Observer = Callable[[A.ActionBase, ActionResult], None]


class Executor:
    """Runs canonical actions on one desktop, one at a time."""

    def __init__(
        self,
        desktop: VirtualDesktop | None,
        *,
        paste_keys: str = DEFAULT_PASTE_KEYS,
        settle_quiet: float = SETTLE_QUIET,
        settle_timeout: float = SETTLE_TIMEOUT,
        input_blocked: Callable[[], str | None] = lambda: None,
        resumed: Callable[[], bool] | None = None,
        supervise: Callable[[A.ActionBase], tuple[A.ActionBase | None, str]] | None = None,
    ) -> None:
        #: The desktop acted on (None until the environment's first reset; see :meth:`use`).
        self.desktop = desktop
        self.paste_keys = paste_keys
        self.settle_quiet = settle_quiet
        self.settle_timeout = settle_timeout
        self.observers: list[Observer] = []
        #: Why input actions are refused right now (a human holds the desktop), or None.
        self.input_blocked = input_blocked
        #: False while a hand-over pauses the agent: a ``wait`` begun then ends once it answers True.
        self.resumed = resumed
        #: Propose and accept (hci_envs.env.supervision): given an input action, returns the action to run (it,
        #: or a person's edit; None: a person did something else instead) and what to tell the agent.
        self.supervise = supervise
        self._lock = threading.RLock()
        #: Set while the episode is being reset: long actions (wait) stop at once.
        self.interrupt = threading.Event()
        self._frame_cache: tuple[Any, int, Any] | None = None  # (params, damage generation, image)
        #: When the latest keyboard action started (time.monotonic()): a settle after it asks the app first.
        self.keys_sent = -1.0
        self._handlers: dict[str, Callable[[Any], ActionResult]] = {
            name: getattr(self, f"_do_{name}") for name in A.ACTIONS
        }

    def use(self, desktop: VirtualDesktop) -> None:
        """Act on another desktop from now on (a reset swapped one in); observers and input gates stay."""
        with self._lock:
            self.desktop = desktop
            self._frame_cache = None
            self.interrupt.clear()

    @property
    def screen_size(self) -> tuple[int, int]:
        return self.desktop.size

    def validate(self, action: A.ActionBase | dict[str, Any] | str) -> A.ActionBase:
        return parse_action(action, screen=self.screen_size)

    def run(self, action: A.ActionBase | dict[str, Any] | str, *, settle: bool = False,
            landing: bool = False) -> ActionResult:
        """Validate ``action`` against this screen and carry it out.

        With ``settle`` an input action returns once the screen has stopped changing (or after the settle
        time limit), instead of right after the X server took the input, and says where it landed. With
        ``landing``, the caller settles later and calls :meth:`land` itself (a step does, after its batch).
        """
        checked = self.validate(action)
        told = ""
        if checked.injects_input:
            reason = self.input_blocked()
            if reason:
                raise HumanControlError(reason)
            if self.supervise is not None:
                decided, told = self.supervise(checked)
                if decided is None:  # the person did something else instead: nothing of the agent's runs
                    return ActionResult(checked.type, told, {"human": told})
                checked = decided
        start = time.perf_counter()
        since = time.monotonic()
        with self._lock:
            # the focus is looked up only where it is used (keys, and a landing): not on a bare click's path
            tracked = checked.injects_input and (settle or landing or checked.type in KEYBOARD_ACTIONS)
            focus = self.desktop.input.focused_window() if tracked else None
            if checked.type in KEYBOARD_ACTIONS:
                self.keys_sent = since
            result = self._handlers[checked.type](checked)
            if tracked:
                result.started, result.focus_before = since, focus
            if checked.type in KEYBOARD_ACTIONS and focus is None:
                # keys sent while no window has the focus reach no app: say so rather than "typed N characters"
                result.text += "; but no window had the keyboard focus: no app received the keys"
                result.data["focused"] = False
            if settle and checked.injects_input:
                result.settled = self.settle(since)
                self.land(result)
        result.elapsed_ms = (time.perf_counter() - start) * 1000
        if told:  # in the text and in the data (a CodeAct call's value is its data)
            result.text = f"{told}\n{result.text}"
            result.data["human"] = told
        for observer in list(self.observers):
            observer(checked, result)
        return result

    def land(self, result: ActionResult, until: float | None = None) -> None:
        """Say what the screen did after an input action, once a settle window has followed it: where it changed
        (``at_action``: within LANDED_NEAR pixels of where a pointer action acted; ``elsewhere``; ``changed``
        for keys, which act where the focus is; ``nothing``: no change outside the background), and whether the
        keyboard focus moved. Counts the changes from the action's start until ``until`` (now without it) and
        sets ``result.landed`` (the action's text stays as it was: callers match on it)."""
        boxes = self.desktop.events.changes_since(result.started, until)
        points = _points(result)
        if not boxes:
            screen = "nothing"
        elif not points:
            screen = "changed"
        elif any(near_action(box, point) for box in boxes for point in points):
            screen = "at_action"
        else:
            screen = "elsewhere"
        focus = self.desktop.input.focused_window()
        result.landed = {"screen": screen, "changes": len(boxes), "focus_moved": focus != result.focus_before,
                         "focused": focus is not None}

    def settle(self, since: float) -> bool:
        """Wait until the screen shows the effect of input sent after ``since`` (time.monotonic()).

        After keys, the app that gets them is asked first whether it has handled them (within the settle's
        time): the screen can show them only after that, and an app busy elsewhere (a document being laid
        out, a loaded machine) may not read them for longer than the wait for an effect, which would then see
        nothing and call the unchanged screen settled. An app that was slow to answer had not read the keys
        when asked, so their effect is waited for from its answer on. It is asked only in ways that draw
        nothing (a ping), so that the landing counts no change of the question's own. False when the app did
        not answer in time."""
        start = time.monotonic()
        effect_since, answered = since, True
        handled = getattr(self.desktop.input, "handled", None)  # a desktop of a factory's own may lack it
        if handled is not None and self.keys_sent >= since:
            answer = handled(self.settle_timeout, drawing=False)
            answered = keys_read(answer)
            if answer and time.monotonic() - start > SLOW_ANSWER:  # it was busy: it draws the keys after
                effect_since = time.monotonic()
        left = max(0.0, self.settle_timeout - (time.monotonic() - start))
        settled = self.desktop.events.wait_settled(self.settle_quiet, left, since=effect_since, effect=SETTLE_EFFECT)
        return settled and answered

    # -- observation ---------------------------------------------------------------------------------
    def _do_screenshot(self, a: A.Screenshot) -> ActionResult:
        region = (a.region.x, a.region.y, a.region.width, a.region.height) if a.region else None
        if a.marks:
            return self._marked_screenshot(a, region)
        params = (region, a.scale, a.max_side, a.format, a.quality)
        # The screen has not changed since the last identical capture (no damage since): reuse its bytes. The
        # exact count costs a round trip to the X server, so it is asked only when the count seen so far
        # allows a hit; otherwise the count read before the capture is a safe (never too high) stamp for it.
        events = self.desktop.events
        cached = self._frame_cache

        def hit(generation: int | None) -> bool:
            return generation is not None and cached is not None and cached[0] == params and cached[1] == generation

        generation = None if a.cursor or not events.has_damage else events.damage_count
        if hit(generation):
            generation = events.damage_generation()
        if hit(generation):
            image = cached[2]  # type: ignore[index]
        else:
            image = self.desktop.screen.capture(
                region=region, scale=a.scale, max_side=a.max_side, fmt=a.format, quality=a.quality,
                cursor=a.cursor,
            )
            if generation is not None:
                self._frame_cache = (params, generation, image)
        text = f"screenshot {image.width}x{image.height} {a.format}"
        if image.scale != 1:
            text += f", scale {image.scale:g} (pass scale={image.scale:g} with coordinates read off this image)"
        return ActionResult(a.type, text, image=image)

    def _marked_screenshot(self, a: A.Screenshot, region: tuple[int, int, int, int] | None,
                           tree: Any = None) -> ActionResult:
        """A screenshot with the interactive elements boxed and numbered (their numbers in ``tree``, else in a
        tree of the interactive elements read for it, which becomes what ``element=`` refers to)."""
        from ..desktop.a11y_model import Query
        from ..desktop.encode import Frame
        from ..desktop.marks import draw_marks, mark_table
        from ..desktop.screen import scaled_size

        left, top, width, height = region if region is not None else (0, 0, *self.screen_size)
        scale = scaled_size(width, height, a.scale, a.max_side)[2]
        if tree is None:
            tree = self.read_tree(Query(interactive_only=True, max_nodes=500))
        marks = []
        for mark in mark_table(tree.nodes):
            x, y, w, h = mark["box"]
            x0, y0 = max(x, left), max(y, top)
            x1, y1 = min(x + w, left + width), min(y + h, top + height)
            if x1 <= x0 or y1 <= y0:
                continue  # outside the captured region
            box = [round((x0 - left) * scale), round((y0 - top) * scale)]
            box += [max(1, round((x1 - left) * scale) - box[0]), max(1, round((y1 - top) * scale) - box[1])]
            marks.append({**mark, "box": box})

        def overlay(frame: Frame) -> Frame:
            return draw_marks(frame, marks)

        image = self.desktop.screen.capture(region=region, scale=a.scale, max_side=a.max_side, fmt=a.format,
                                            quality=a.quality, cursor=a.cursor, overlay=overlay)
        listed = ", ".join(f"[{m['element']}] {m['role']}" + (f" {m['name']!r}" if m["name"] else "")
                           for m in marks[:200])
        text = f"screenshot {image.width}x{image.height} {a.format} with {len(marks)} marks"
        if image.scale != 1:
            text += f", scale {image.scale:g}"
        text += f": {listed}" if marks else f" ({tree.reason or 'no element to act on is on screen'})"
        data: dict[str, Any] = {"marks": marks}
        if tree.reason:
            data["reason"] = tree.reason
        return ActionResult(a.type, text, data, image=image)

    def read_tree(self, query: Any, *, remember: bool = True) -> Any:
        """The desktop's accessibility tree (:class:`~hci_envs.desktop.a11y.Tree`, numbered; with ``remember``,
        its numbers become what ``element=`` refers to), or an empty one saying why there is none."""
        from ..desktop.a11y_model import Tree

        accessibility = getattr(self.desktop, "accessibility", None)
        if accessibility is None:
            reason = getattr(self.desktop, "no_accessibility", None) or "this desktop has no accessibility tree"
            return Tree([], {}, self.screen_size, reason=reason)
        return accessibility.tree(query, remember=remember)

    def _do_accessibility_tree(self, a: A.AccessibilityTree) -> ActionResult:
        from ..desktop.a11y_model import Query

        tree = self.read_tree(Query(app=a.app, window=a.window, visible_only=a.visible_only,
                                    interactive_only=a.interactive_only, compact=a.compact,
                                    max_depth=a.max_depth, max_nodes=a.max_nodes))
        tree = tree.scaled(a.scale or 1.0)
        return ActionResult(a.type, tree.outline(), tree.to_dict())

    def observation(self, spec: Any) -> tuple[Any, dict[str, Any] | None, list[dict[str, Any]] | None]:
        """What an observation shows, as ``spec`` (an ObservationSpec) asks: the screenshot, the tree (boxes in
        the screenshot's pixels) and the marks. With both tree and marks, one numbering serves both."""
        from ..desktop.a11y_model import Query

        tree = self.read_tree(Query()) if spec.accessibility else None
        image = marks = None
        if spec.format is not None:
            shot = A.Screenshot(format=spec.format, quality=spec.quality, max_side=spec.max_side, marks=spec.marks)
            result = self._marked_screenshot(shot, None, tree) if spec.marks and tree is not None else self.run(shot)
            image, marks = result.image, result.data.get("marks") if spec.marks else None
        shown = tree.scaled(image.scale if image is not None else 1.0).to_dict() if tree is not None else None
        return image, shown, marks

    def _do_cursor_position(self, a: A.CursorPosition) -> ActionResult:
        x, y = self.desktop.input.pointer()
        if a.scale is not None and a.scale != 1:  # in the space of a screenshot taken at that scale
            x, y = int(round(x * a.scale)), int(round(y * a.scale))
            return ActionResult(a.type, f"cursor at ({x}, {y}) at scale {a.scale:g}", {"x": x, "y": y,
                                                                                     "scale": a.scale})
        return ActionResult(a.type, f"cursor at ({x}, {y})", {"x": x, "y": y})

    def _do_screen_size(self, a: A.ScreenSize) -> ActionResult:
        w, h = self.screen_size
        return ActionResult(a.type, f"screen is {w}x{h}", {"width": w, "height": h})

    def _do_clipboard_get(self, a: A.ClipboardGet) -> ActionResult:
        # ctrl+c is a key the app handles when it gets round to it: read the clipboard once it has
        self.desktop.input.handled()
        text = self.desktop.events.get_clipboard()
        return ActionResult(a.type, text or "", {"text": text})

    # -- pointer -------------------------------------------------------------------------------------
    def _at(self, a: Any) -> tuple[int, int] | None:
        element = getattr(a, "element", None)
        if element is not None:
            accessibility = getattr(self.desktop, "accessibility", None)
            if accessibility is None:
                reason = getattr(self.desktop, "no_accessibility", None) or "it has no accessibility tree"
                raise StaleElementError(f"element {element}: no element can be found on this desktop ({reason})",
                                        element=element)
            return accessibility.resolve(element)
        if getattr(a, "x", None) is None:
            return None
        return a.screen_point(a.x, a.y)

    def _do_mouse_move(self, a: A.MouseMove) -> ActionResult:
        at = self._at(a)
        assert at is not None  # the model requires x and y, or an element
        x, y = at
        self.desktop.input.move(x, y)
        return ActionResult(a.type, f"moved to ({x}, {y})", {"x": x, "y": y})

    def _do_click(self, a: A.Click) -> ActionResult:
        at = self._at(a)
        self.desktop.input.click(BUTTON_NUMBERS[a.button], a.count, at, a.modifiers)
        x, y = at if at is not None else self.desktop.input.pointer()
        kind = {1: "clicked", 2: "double-clicked", 3: "triple-clicked"}[a.count]
        mods = f" with {'+'.join(a.modifiers)}" if a.modifiers else ""
        return ActionResult(a.type, f"{kind} {a.button} at ({x}, {y}){mods}", {"x": x, "y": y})

    def _do_mouse_down(self, a: A.MouseDown) -> ActionResult:
        self.desktop.input.button(BUTTON_NUMBERS[a.button], True)
        return ActionResult(a.type, f"{a.button} button down")

    def _do_mouse_up(self, a: A.MouseUp) -> ActionResult:
        self.desktop.input.button(BUTTON_NUMBERS[a.button], False)
        return ActionResult(a.type, f"{a.button} button up")

    def _do_drag(self, a: A.Drag) -> ActionResult:
        path = [a.screen_point(x, y) for x, y in a.path]
        self.desktop.input.drag(path, BUTTON_NUMBERS[a.button], a.modifiers)
        return ActionResult(a.type, f"dragged {a.button} from {path[0]} to {path[-1]}", {"path": path})

    def _do_scroll(self, a: A.Scroll) -> ActionResult:
        at = self._at(a)
        self.desktop.input.scroll(a.dx, a.dy, at, a.modifiers)
        where = f" at {at}" if at else ""
        data = {"x": at[0], "y": at[1]} if at else {}
        return ActionResult(a.type, f"scrolled dx={a.dx} dy={a.dy}{where}", data)

    # -- keyboard ------------------------------------------------------------------------------------
    def _do_key(self, a: A.Key) -> ActionResult:
        for _ in range(a.repeat):
            for combo in a.combos:
                self.desktop.input.combo(split_combo(combo))
        times = f" x{a.repeat}" if a.repeat > 1 else ""
        return ActionResult(a.type, f"pressed {', '.join(a.combos)}{times}")

    def _do_key_down(self, a: A.KeyDown) -> ActionResult:
        self.desktop.input.key_down(a.key)
        return ActionResult(a.type, f"{a.key} down")

    def _do_key_up(self, a: A.KeyUp) -> ActionResult:
        self.desktop.input.key_up(a.key)
        return ActionResult(a.type, f"{a.key} up")

    def _do_hold_key(self, a: A.HoldKey) -> ActionResult:
        left = deadline.remaining()
        seconds = a.seconds if left is None else max(0.0, min(a.seconds, left))
        self.desktop.input.combo(split_combo(a.keys), hold_seconds=seconds)
        if seconds < a.seconds:
            raise ActionTimeoutError(f"hold_key: released after {seconds:.2f}s by the step's time limit")
        return ActionResult(a.type, f"held {a.keys} for {a.seconds:g}s")

    def _do_type_text(self, a: A.TypeText) -> ActionResult:
        mode = a.mode
        if mode == "auto":
            mode = "keys" if self.desktop.input.fits(a.text) else "paste"
        if mode == "paste":
            self._paste(a.text)
            return ActionResult(a.type, f"typed {len(a.text)} characters (paste)",
                                {"mode": "paste", "chars": len(a.text)})
        typed = self.desktop.input.type_keys(a.text)
        data = {"mode": "keys", "chars": len(a.text), "pauses": typed.pauses}
        if typed.chars == len(a.text):
            return ActionResult(a.type, f"typed {len(a.text)} characters (keys)", data)
        # The app did not show that it had handled the keys sent so far, and remapping the spare keys before
        # it has would change what those keys mean: the rest is pasted ('auto') or left untyped ('keys').
        stopped = (f"type_text: typed {typed.chars} of {len(a.text)} characters as keys, then stopped: "
                   f"{typed.stopped}")
        left = deadline.remaining()
        if a.mode == "keys" or (left is not None and left <= 0):
            raise ActionTimeoutError(f"{stopped}. The spare keys are remapped only once the app has handled the "
                                     "keys sent on them; type the rest when it responds, or use mode 'paste'.",
                                     typed=typed.chars, chars=len(a.text))
        self._paste(a.text[typed.chars:])
        return ActionResult(a.type, f"typed {len(a.text)} characters ({typed.chars} as keys, the rest pasted: "
                            f"{typed.stopped})", {**data, "mode": "keys+paste", "keys": typed.chars})

    def _paste(self, text: str) -> None:
        """Put ``text`` on the selection the focused app pastes with the paste keys, and press them.
        shift+Insert (the default) pastes in every toolkit: terminals insert PRIMARY, GTK, Qt, Tk and chromium
        CLIPBOARD. PRIMARY is offered only to terminals: a text field whose selection loses PRIMARY to another
        client drops that selection, so a paste over selected text would insert beside it instead of
        replacing it. An app of a class not known to read PRIMARY that does not ask for CLIPBOARD is offered
        PRIMARY after all, with the keys pressed again."""
        events = self.desktop.events
        try:
            previous = events.get_clipboard(timeout=1.0)
        except (ActionTimeoutError, DesktopDiedError):
            previous = None
        reads_primary = self.desktop.input.focused_class().lower() in PRIMARY_PASTERS
        offers = [PASTE_SELECTIONS] if reads_primary else [("CLIPBOARD",), ("PRIMARY",)]
        fetched = False
        for selections in offers:
            served = events.requests_served
            events.set_clipboard(text, selections=selections)
            self.desktop.input.combo(split_combo(self.paste_keys))
            fetched = events.wait_served(served, timeout=2.0 if len(offers) > 1 else 3.0)
            if fetched:
                break
        if fetched:
            # An app may still be inserting what it read, and chromium drops a paste whose selection changes
            # owner meanwhile: let the screen show the text before the selections change again.
            events.wait_settled(0.1, 2.0)
        events.clear_clipboard(("PRIMARY",), only_ours=True)  # what a person last selected: not ours to keep
        if not fetched:
            raise ActionTimeoutError(
                f"paste: the focused app did not ask for the clipboard after {self.paste_keys}; "
                "it may not support pasting (use mode 'keys'). The text stays on the clipboard."
            )
        if previous is not None and previous != text:
            events.set_clipboard(previous)  # put back what the user had copied

    def _do_wait(self, a: A.Wait) -> ActionResult:
        start = time.monotonic()
        until = self.resumed if self.resumed is not None and not self.resumed() else None
        if deadline.sleep(a.ms / 1000, "wait", self.interrupt, until=until):
            waited = round((time.monotonic() - start) * 1000)
            return ActionResult(a.type, f"waited {waited} ms of {a.ms}: the desktop is yours again")
        return ActionResult(a.type, f"waited {a.ms} ms")

    def _do_clipboard_set(self, a: A.ClipboardSet) -> ActionResult:
        self.desktop.events.set_clipboard(a.text)
        return ActionResult(a.type, f"clipboard set ({len(a.text)} characters)")


def _points(result: ActionResult) -> list[tuple[int, int]]:
    """Where a pointer action acted, in screen pixels (none for keys)."""
    data = result.data
    if "path" in data:
        return [tuple(p) for p in data["path"]]  # type: ignore[misc]
    if "x" in data and "y" in data:
        return [(data["x"], data["y"])]
    return []


def keys_read(answer: Any) -> bool:
    """Whether an answer of ``input.handled`` lets the caller go on: the app handled the keys, or it cannot be
    asked (``how`` "unknown", or a plain False: nothing to wait for); not when it did not answer in time."""
    return bool(answer) or getattr(answer, "how", "unknown") == "unknown"


def near_action(box: tuple[int, int, int, int], point: tuple[int, int]) -> bool:
    """Whether a changed box is within LANDED_NEAR pixels of where an action acted (its effect "at_action")."""
    x, y, w, h = box
    px, py = point
    return x - LANDED_NEAR <= px <= x + w + LANDED_NEAR and y - LANDED_NEAR <= py <= y + h + LANDED_NEAR
