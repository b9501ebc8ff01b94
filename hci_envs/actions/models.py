"""The canonical action vocabulary: the single source of truth.

Every action is a frozen pydantic model with a literal ``type`` discriminator. MCP tools, ``step()`` actions,
CodeAct functions, recorder output, replay and the adapters to other schemas are generated from these models
or checked against them (see ``tests/test_models.py``).

Coordinates are pixels of the session's display. An action may say that its coordinates were read off a
screenshot scaled by ``scale`` (the value the screenshot reported); the executor divides by it. Checks that
need the screen size (coordinates on screen, a region inside it) run when a validation context carries the
screen, ``Model.model_validate(data, context={"screen": (width, height)})``, and again in the executor.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal, Union

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from ..errors import InvalidActionError
from .keys import UnknownKeyError, resolve_key, split_combo

#: Longest text ``type_text`` and ``clipboard_set`` accept, in characters.
MAX_TEXT_CHARS = 100_000
#: Longest ``wait``, in milliseconds.
MAX_WAIT_MS = 60_000
#: Longest ``hold_key``, in seconds.
MAX_HOLD_SECONDS = 30.0
#: Most points a drag path may have.
MAX_DRAG_POINTS = 2_000
#: Largest ``repeat`` of ``key`` and largest wheel count of ``scroll`` per axis.
MAX_REPEAT = 100

Button = Literal["left", "right", "middle"]
ImageFormat = Literal["png", "jpeg", "webp"]
TypeMode = Literal["keys", "paste", "auto"]

BUTTON_NUMBERS: dict[str, int] = {"left": 1, "middle": 2, "right": 3}

Scale = Annotated[
    float | None,
    Field(
        gt=0,
        le=4,
        description="Scale of the screenshot these coordinates were read from (the 'scale' it reported). "
        "Omit for screen pixels.",
    ),
]
# No upper bound here: off the screen is one rule with one message, checked against the screen in use
# (check_screen), from a tool call, CodeAct or a batch alike.
Coord = Annotated[int, Field(ge=0)]
Point = tuple[Coord, Coord]
ElementNumber = Annotated[
    int | None,
    Field(ge=1, le=1_000_000, description="An element number from the latest accessibility_tree or screenshot with "
          "marks, instead of x and y: the action happens at the element's centre, wherever it is when it runs."),
]


def _check_key(name: str) -> str:
    try:
        resolve_key(name)
    except UnknownKeyError as exc:
        raise ValueError(str(exc)) from None
    return name


def _check_combo(combo: str) -> str:
    try:
        for part in split_combo(combo):
            resolve_key(part)
    except UnknownKeyError as exc:
        raise ValueError(str(exc)) from None
    return combo


KeyName = Annotated[str, AfterValidator(_check_key)]
KeyCombo = Annotated[str, AfterValidator(_check_combo)]
Modifiers = Annotated[
    list[KeyName], Field(max_length=8, description='Keys held during the action, e.g. ["ctrl", "shift"].')
]


class _Action(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    #: True for actions that only observe (screenshot, cursor_position, ...): MCP marks their tools read-only.
    read_only: ClassVar[bool] = False
    #: True for actions that inject input and are refused while a human holds the desktop.
    injects_input: ClassVar[bool] = True

    @model_validator(mode="after")
    def _check_against_screen(self, info: ValidationInfo) -> Any:
        context = info.context if info is not None else None
        if isinstance(context, dict) and context.get("screen"):
            width, height = context["screen"]
            self.check_screen(width, height)
        return self

    def check_screen(self, width: int, height: int) -> None:
        """Raise :class:`InvalidActionError` if the action does not fit a ``width`` x ``height`` screen."""

    @staticmethod
    def _to_screen(value: int, scale: float | None) -> int:
        return value if scale is None else int(round(value / scale))

    def _check_point(self, field: str, x: int, y: int, scale: float | None, width: int, height: int) -> None:
        sx, sy = self._to_screen(x, scale), self._to_screen(y, scale)
        if sx >= width or sy >= height:
            where = f"({x}, {y})" if scale is None else f"({x}, {y}) at scale {scale} = screen ({sx}, {sy})"
            raise InvalidActionError(
                f"{self.type}.{field}: {where} is off screen; the screen is {width}x{height}, "
                f"valid x is 0..{width - 1} and y is 0..{height - 1}",
                field=field,
            )

    def screen_point(self, x: int, y: int) -> tuple[int, int]:
        scale = getattr(self, "scale", None)
        return self._to_screen(x, scale), self._to_screen(y, scale)

    def _element_or_point(self, *, required: bool, verb: str = "act") -> None:
        """Coordinates or an element, never both; with ``required``, one of them."""
        has_point = getattr(self, "x", None) is not None or getattr(self, "y", None) is not None
        element = getattr(self, "element", None)
        if element is not None and has_point:
            raise ValueError("give x and y, or element, not both")
        if element is None and (getattr(self, "x", None) is None) != (getattr(self, "y", None) is None):
            raise ValueError("give both x and y" + (", or element" if required else
                                                     f", or neither to {verb} where the pointer is"))
        if required and element is None and not has_point:
            raise ValueError("give x and y, or element")


class Region(BaseModel):
    """A rectangle of the screen in screen pixels."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    x: Coord = 0
    y: Coord = 0
    width: Annotated[int, Field(ge=1, le=32767)]
    height: Annotated[int, Field(ge=1, le=32767)]


class Screenshot(_Action):
    """Capture the screen (or a region of it) as an image. Downscale with max_side or scale; the result
    reports the scale so coordinates read off the image can be passed back with that scale."""

    read_only: ClassVar[bool] = True
    injects_input: ClassVar[bool] = False
    type: Literal["screenshot"] = "screenshot"
    region: Region | None = Field(None, description="Part of the screen to capture, in screen pixels.")
    scale: Annotated[float | None, Field(gt=0, le=1, description="Downscale factor, e.g. 0.5.")] = None
    max_side: Annotated[
        int | None, Field(ge=16, le=16384, description="Downscale so the longer side is at most this.")
    ] = None
    format: ImageFormat = Field("png", description="Image format: png, jpeg or webp.")
    quality: Annotated[int | None, Field(ge=1, le=100, description="jpeg/webp quality (default 75).")] = None
    cursor: bool = Field(False, description="Draw the mouse cursor into the image.")
    marks: bool = Field(False, description="Draw a numbered box on every element you can act on (set-of-marks) and "
                        "return the table of marks; pass a mark's number as element= to click it.")

    @model_validator(mode="after")
    def _exclusive(self) -> Screenshot:
        if self.scale is not None and self.max_side is not None:
            raise ValueError("give either scale or max_side, not both")
        if self.quality is not None and self.format == "png":
            raise ValueError("quality applies to jpeg and webp only; png is lossless")
        return self

    def check_screen(self, width: int, height: int) -> None:
        r = self.region
        if r is not None and (r.x + r.width > width or r.y + r.height > height):
            raise InvalidActionError(
                f"screenshot.region: x={r.x} y={r.y} width={r.width} height={r.height} extends past the "
                f"{width}x{height} screen",
                field="region",
            )


class MouseMove(_Action):
    """Move the mouse pointer to (x, y), or onto an element."""

    type: Literal["mouse_move"] = "mouse_move"
    x: Coord | None = None
    y: Coord | None = None
    element: ElementNumber = None
    scale: Scale = None

    @model_validator(mode="after")
    def _target(self) -> MouseMove:
        self._element_or_point(required=True)
        return self

    def check_screen(self, width: int, height: int) -> None:
        if self.x is not None and self.y is not None:
            self._check_point("x/y", self.x, self.y, self.scale, width, height)


class Click(_Action):
    """Click a mouse button at (x, y), on an element, or where the pointer is when neither is given. count=2
    is a double click and 3 a triple click; modifiers (e.g. ["ctrl"]) are held during the click."""

    type: Literal["click"] = "click"
    x: Coord | None = None
    y: Coord | None = None
    element: ElementNumber = None
    button: Button = "left"
    count: Annotated[int, Field(ge=1, le=3)] = 1
    modifiers: Modifiers = []
    scale: Scale = None

    @model_validator(mode="after")
    def _target(self) -> Click:
        self._element_or_point(required=False, verb="click")
        return self

    def check_screen(self, width: int, height: int) -> None:
        if self.x is not None and self.y is not None:
            self._check_point("x/y", self.x, self.y, self.scale, width, height)


class MouseDown(_Action):
    """Press and hold a mouse button where the pointer is."""

    type: Literal["mouse_down"] = "mouse_down"
    button: Button = "left"


class MouseUp(_Action):
    """Release a mouse button where the pointer is."""

    type: Literal["mouse_up"] = "mouse_up"
    button: Button = "left"


class Drag(_Action):
    """Press a button at the first point of path, move through the others and release at the last."""

    type: Literal["drag"] = "drag"
    path: list[Point] = Field(min_length=2, max_length=MAX_DRAG_POINTS, description="[[x, y], ...], at least two")
    button: Button = "left"
    modifiers: Modifiers = []
    scale: Scale = None

    def check_screen(self, width: int, height: int) -> None:
        for i, (x, y) in enumerate(self.path):
            self._check_point(f"path[{i}]", x, y, self.scale, width, height)


class Scroll(_Action):
    """Turn the mouse wheel at (x, y), over an element, or where the pointer is: dy > 0 scrolls down, dy < 0
    up, dx > 0 right, dx < 0 left, in wheel clicks."""

    type: Literal["scroll"] = "scroll"
    x: Coord | None = None
    y: Coord | None = None
    element: ElementNumber = None
    dx: Annotated[int, Field(ge=-MAX_REPEAT, le=MAX_REPEAT)] = 0
    dy: Annotated[int, Field(ge=-MAX_REPEAT, le=MAX_REPEAT)] = 0
    modifiers: Modifiers = []
    scale: Scale = None

    @model_validator(mode="after")
    def _something_to_do(self) -> Scroll:
        self._element_or_point(required=False, verb="scroll")
        if self.dx == 0 and self.dy == 0:
            raise ValueError("scroll needs a non-zero dx or dy")
        return self

    def check_screen(self, width: int, height: int) -> None:
        if self.x is not None and self.y is not None:
            self._check_point("x/y", self.x, self.y, self.scale, width, height)


class TypeText(_Action):
    """Type text exactly as given, any Unicode. mode 'keys' sends key strokes (characters missing from the
    keyboard map are mapped in temporarily), 'paste' pastes through the clipboard (shift+Insert, which xterm,
    GTK, Qt, Tk and browsers all paste with), 'auto' types key strokes unless the text needs more temporary
    keys than exist, then pastes."""

    type: Literal["type_text"] = "type_text"
    text: str = Field(min_length=1, max_length=MAX_TEXT_CHARS)
    mode: TypeMode = "auto"


class Key(_Action):
    """Press a key or combination, e.g. "enter", "ctrl+shift+t", or a list of them pressed in order;
    repeat presses the whole sequence that many times."""

    type: Literal["key"] = "key"
    keys: str | list[str] = Field(description='"ctrl+c", or a list like ["ctrl+a", "delete"] pressed in order')
    repeat: Annotated[int, Field(ge=1, le=MAX_REPEAT)] = 1

    @field_validator("keys")
    @classmethod
    def _combos_valid(cls, v: str | list[str]) -> str | list[str]:
        if isinstance(v, list):
            if not 1 <= len(v) <= 64:
                raise ValueError("give between 1 and 64 key combinations")
            return [_check_combo(c) for c in v]
        return _check_combo(v)

    @property
    def combos(self) -> list[str]:
        return [self.keys] if isinstance(self.keys, str) else list(self.keys)


class KeyDown(_Action):
    """Press and hold one key (release it with key_up)."""

    type: Literal["key_down"] = "key_down"
    key: KeyName


class KeyUp(_Action):
    """Release a key held with key_down."""

    type: Literal["key_up"] = "key_up"
    key: KeyName


class HoldKey(_Action):
    """Hold a key or combination down for a number of seconds, then release it."""

    type: Literal["hold_key"] = "hold_key"
    keys: KeyCombo
    seconds: Annotated[float, Field(gt=0, le=MAX_HOLD_SECONDS)]


class Wait(_Action):
    """Do nothing for ms milliseconds."""

    injects_input: ClassVar[bool] = False
    type: Literal["wait"] = "wait"
    ms: Annotated[int, Field(ge=0, le=MAX_WAIT_MS)]


class CursorPosition(_Action):
    """Report where the mouse pointer is, in screen pixels (or, with ``scale``, in the pixels of a screenshot
    taken at that scale)."""

    read_only: ClassVar[bool] = True
    injects_input: ClassVar[bool] = False
    type: Literal["cursor_position"] = "cursor_position"
    scale: Scale = None


class AccessibilityTree(_Action):
    """The accessibility tree of the apps on screen: every element with its role, name, states, value, text and
    bounding box, numbered in document order. Pass a number as element= to click, mouse_move or scroll to act on
    that element. Apps that expose nothing (xterm, Tk) give an empty tree with the reason."""

    read_only: ClassVar[bool] = True
    injects_input: ClassVar[bool] = False
    type: Literal["accessibility_tree"] = "accessibility_tree"
    app: str | None = Field(None, max_length=200, description="Only this app (part of its name, any case).")
    window: str | None = Field(None, max_length=200, description="Only windows whose title contains this.")
    visible_only: bool = Field(True, description="Only elements showing on screen.")
    interactive_only: bool = Field(False, description="Only elements you can act on (buttons, fields, links, ...).")
    compact: bool = Field(False, description="Leave out elements with no name, text or value that you cannot act "
                                             "on (panels, fillers): their children take their place.")
    max_depth: Annotated[int | None, Field(ge=1, le=64, description="Depth below each app to stop at.")] = None
    max_nodes: Annotated[int, Field(ge=1, le=10_000, description="Most elements to return.")] = 1000
    scale: Annotated[
        float | None,
        Field(gt=0, le=1, description="Give boxes in the pixels of a screenshot taken at this scale (its 'scale')."),
    ] = None


class ScreenSize(_Action):
    """Report the screen size in pixels."""

    read_only: ClassVar[bool] = True
    injects_input: ClassVar[bool] = False
    type: Literal["screen_size"] = "screen_size"


class ClipboardGet(_Action):
    """Read the text on the clipboard."""

    read_only: ClassVar[bool] = True
    injects_input: ClassVar[bool] = False
    type: Literal["clipboard_get"] = "clipboard_get"


class ClipboardSet(_Action):
    """Put text on the clipboard, ready to paste."""

    type: Literal["clipboard_set"] = "clipboard_set"
    text: str = Field(max_length=MAX_TEXT_CHARS)


ACTION_MODELS: tuple[type[_Action], ...] = (
    Screenshot,
    MouseMove,
    Click,
    MouseDown,
    MouseUp,
    Drag,
    Scroll,
    TypeText,
    Key,
    KeyDown,
    KeyUp,
    HoldKey,
    Wait,
    CursorPosition,
    ScreenSize,
    AccessibilityTree,
    ClipboardGet,
    ClipboardSet,
)

#: Action type name -> model class.
ACTIONS: dict[str, type[_Action]] = {m.model_fields["type"].default: m for m in ACTION_MODELS}

Action = Annotated[Union[tuple(ACTION_MODELS)], Field(discriminator="type")]  # noqa: UP007
_ADAPTER: TypeAdapter[Any] = TypeAdapter(Action)

ActionBase = _Action


def format_validation_error(exc: ValidationError, prefix: str = "") -> str:
    """One readable line per problem, each naming its field: ``click.x: Input should be ... (got -5)``."""
    lines = []
    for err in exc.errors(include_url=False):
        # Drop pydantic's internal union/validator branch names such as "function-after[...]".
        loc = ".".join(str(p) for p in err.get("loc", ()) if "[" not in str(p))
        where = ".".join(p for p in (prefix, loc) if p)
        msg = err.get("msg", "invalid")
        msg = msg.removeprefix("Value error, ")
        if loc and msg.startswith(loc + "."):  # a screen check that already names type.field
            where = prefix
        got = err.get("input")
        shown = ""
        if err.get("type") not in ("missing", "extra_forbidden") and not isinstance(got, dict | BaseModel):
            text = repr(got)
            shown = f" (got {text[:60]}{'...' if len(text) > 60 else ''})"
        lines.append(f"{where}: {msg}{shown}" if where else f"{msg}{shown}")
    return "; ".join(lines)


def _first_field(exc: ValidationError) -> str | None:
    for err in exc.errors(include_url=False):
        loc = [str(p) for p in err.get("loc", ())]
        if len(loc) >= 2:
            return loc[1]
    return None


def parse_action(data: Any, *, screen: tuple[int, int] | None = None) -> _Action:
    """Validate one action given as a dict (or JSON string, or model) into its model.

    Raises :class:`InvalidActionError` naming the offending field. With ``screen`` the action is also checked
    against that screen size.
    """
    if isinstance(data, _Action):
        action = data
    else:
        action = _validate(data)
    if screen:
        action.check_screen(*screen)
    return action


def _validate(data: Any) -> _Action:
    try:
        if isinstance(data, str | bytes):
            return _ADAPTER.validate_json(data)
        if isinstance(data, dict) and "type" not in data:
            raise InvalidActionError(
                f"action has no 'type'; expected one of: {', '.join(ACTIONS)}", field="type"
            )
        if isinstance(data, dict) and (not isinstance(data["type"], str) or data["type"] not in ACTIONS):
            raise InvalidActionError(
                f"unknown action type {data['type']!r}; expected one of: {', '.join(ACTIONS)}", field="type"
            )
        return _ADAPTER.validate_python(data)
    except ValidationError as exc:
        raise InvalidActionError(format_validation_error(exc), field=_first_field(exc)) from None
