"""Anthropic's computer toolset (``computer_toolset_20260801``) and the canonical actions.

The toolset is one ``tools[]`` entry without a name (:func:`toolset_param`) that offers the model a family of
tools, its *members*. Each call is a ``tool_use`` block of its own whose ``name`` is the member and whose
``toolset_name`` is ``"computer"``, and its ``tool_result`` must echo ``toolset_name``. The members take the
inputs of the computer tool's actions of the same names (:mod:`.anthropic` translates both), and two more:
``left_click_drag`` holds the keys in its ``text``, and ``key`` has ``repeat``.

    from hci_envs.adapters import anthropic_toolset as toolset

    reply = client.messages.create(model=..., tools=[toolset.toolset_param()], messages=messages, ...)
    calls = [b for b in reply.content if b.type == "tool_use" and b.toolset_name == "computer"]
    turn = toolset.run_turn(calls, env, scale=0.8)      # an Environment or an HciEnvClient: one step
    messages += [{"role": "assistant", "content": reply.content}, turn.message]

Coordinates: the toolset entry declares no display size. The model works in the pixels of the screenshots it
is sent, which must already fit its image limits (the SDK: the API refuses an oversized image instead of
scaling it). Give the factor as ``scale`` (image pixels per screen pixel; :func:`fit_scale` gives the one for
Anthropic's documented budget): the screenshots come at that scale, clicks and drags are mapped back to the
screen, ``cursor_position`` answers in the model's pixels, and ``zoom`` (a region of the model's screenshot)
comes at the screen's full resolution (scaled down only where that exceeds the budget).

A turn runs as it does in the SDK's runner: the calls in order, stopping at the first that fails, each call
after it answered with the API's wording for a call not run (:data:`NOT_EXECUTED`, ``is_error``).
``HciComputerToolset`` is the SDK's own toolset class (``BetaAbstractComputerToolset20260801``) backed by a
session, for the SDK's tool runner; it needs ``pip install 'hci-envs[anthropic]'``, the rest of this module
does not.
"""

from __future__ import annotations

import functools
import math
import typing
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model

from ..errors import ConfigError, EnvironmentStateError, HciEnvsError, InvalidActionError, MissingDependencyError
from ..errors import require as require_module
from ..protocol import ImageData, Observation
from . import UnsupportedActionError, translator
from .anthropic import held_modifiers, translate_action

SCHEMA = "Anthropic computer_toolset_20260801"
TOOLSET_TYPE = "computer_toolset_20260801"
#: The family every member's tool_use carries as ``toolset_name``, and every tool_result echoes.
TOOLSET_NAME = "computer"
#: What a call gets when an earlier call of its turn failed: the API's wording for the computer family (the
#: SDK's ``HALT_TEXT["computer"]``), which tells the model the call was skipped rather than tried.
NOT_EXECUTED = "Not executed: an earlier computer action in this turn failed."

_POINT = "(x, y): x pixels from the left edge, y pixels from the top edge."
_HELD = 'Optional key combination to hold down during this action (e.g. "ctrl", "shift", "ctrl+shift").'
_AT = {"coordinate": (list[int] | None, _POINT), "text": (str | None, _HELD)}
_AT_DOC = "the specified (x, y) pixel coordinate, or the current cursor position if `coordinate` is omitted."


@dataclass(frozen=True)
class ToolsetMember:
    """One member as the SDK's input model types it: ``fields`` maps each input field to its type and
    description (a type that admits None is optional); ``acknowledgment`` is what the model reads after a pure
    action (None: the member answers with an image or the cursor position)."""

    name: str
    description: str
    fields: Mapping[str, tuple[Any, str | None]] = field(default_factory=dict)
    acknowledgment: str | None = None

    @property
    def read_only(self) -> bool:
        return self.acknowledgment is None


#: The members in the SDK's order (``anthropic.types.ComputerMemberName``), with its descriptions.
MEMBERS: dict[str, ToolsetMember] = {m.name: m for m in (
    ToolsetMember("key", 'Press a key or key-combination on the keyboard. Use "+" to combine modifiers with a key '
                  '(e.g. "ctrl+s", "alt+Tab", "ctrl+shift+Escape"). Key names are case-insensitive; common names '
                  'like "Return", "Tab", "Escape", "Up", "Down", "Left", "Right", "Home", "End", "Page_Up", '
                  '"Page_Down", "Delete", "BackSpace" are supported.',
                  {"text": (str, "The key or key-combination to press."),
                   "repeat": (int | None, "Number of times to repeat the key press. Default is 1.")},
                  "Pressed {text}."),
    ToolsetMember("hold_key", "Hold down a key or key-combination for a specified duration. Uses the same key syntax "
                  "as `key`.",
                  {"duration": (int, "Duration to hold the key, in seconds."),
                   "text": (str, "The key or key-combination to hold.")},
                  "Held {text} for {duration}s."),
    ToolsetMember("type", "Type a string of text on the keyboard.", {"text": (str, "The text to type.")}, "Typed."),
    ToolsetMember("cursor_position", "Get the current (x, y) pixel coordinate of the cursor."),
    ToolsetMember("mouse_move", "Move the cursor to a specified (x, y) pixel coordinate. Use this ONLY to hover "
                  "without clicking; otherwise use a click action directly.",
                  {"coordinate": (list[int], _POINT)}, "Moved the mouse."),
    ToolsetMember("left_mouse_down", "Press and hold the left mouse button at the current cursor position.",
                  acknowledgment="Left mouse button pressed."),
    ToolsetMember("left_mouse_up", "Release the left mouse button.", acknowledgment="Left mouse button released."),
    ToolsetMember("left_click", f"Click the left mouse button at {_AT_DOC}", _AT, "Clicked."),
    ToolsetMember("left_click_drag", "Click and drag the cursor from `start_coordinate` to `coordinate`.",
                  {"coordinate": (list[int], _POINT), "start_coordinate": (list[int], _POINT),
                   "text": (str | None, _HELD)},
                  "Dragged."),
    ToolsetMember("right_click", f"Click the right mouse button at {_AT_DOC}", _AT, "Right-clicked."),
    ToolsetMember("middle_click", f"Click the middle mouse button at {_AT_DOC}", _AT, "Middle-clicked."),
    ToolsetMember("double_click", f"Double-click the left mouse button at {_AT_DOC}", _AT, "Double-clicked."),
    ToolsetMember("triple_click", f"Triple-click the left mouse button at {_AT_DOC}", _AT, "Triple-clicked."),
    ToolsetMember("scroll", "Scroll the screen at the specified (x, y) pixel coordinate, or the current cursor "
                  "position if `coordinate` is omitted. Do NOT use PageUp/PageDown to scroll.",
                  {"scroll_amount": (int, "Number of 'clicks' of the scroll wheel."),
                   "scroll_direction": (Literal["up", "down", "left", "right"], None), **_AT},
                  "Scrolled {scroll_direction}."),
    ToolsetMember("wait", "Wait for a specified duration.", {"duration": (int, "Duration to wait, in seconds.")},
                  "Waited {duration}s."),
    ToolsetMember("screenshot", "Take a screenshot of the screen."),
    ToolsetMember("zoom", "Take a screenshot of a rectangular region. Region coordinates are in the full-screenshot "
                  "space (not physical display pixels). The crop is scaled up to fill the image budget so fine "
                  "details become legible.",
                  {"region": (list[int], "(x0, y0, x1, y1): The region to capture.")}),
)}


#: The image budget of Anthropic's vision docs: an image over 1568 pixels on its long edge or over about 1.15
#: megapixels is scaled down before the model sees it, and the toolset wants screenshots the model sees as sent.
MAX_SIDE = 1568
MAX_PIXELS = 1_150_000


def fit_scale(width: int, height: int, *, max_side: int = MAX_SIDE, max_pixels: int = MAX_PIXELS) -> float | None:
    """The ``scale`` at which a ``width`` x ``height`` screen's screenshots fit the budget (None: at full size;
    a model that reads larger images takes a larger ``max_side`` and ``max_pixels``)."""
    factor = min(max_side / max(width, height), math.sqrt(max_pixels / (width * height)))
    return None if factor >= 1 else factor


def optional(annotation: Any) -> bool:
    """Whether a member's field of this type may be left out (its type admits None, as the SDK's Optional)."""
    return type(None) in typing.get_args(annotation)


@functools.cache
def input_model(name: str) -> type[BaseModel]:
    """The pydantic model of a member's input, typed as the SDK's; undeclared keys are let through, as the SDK
    lets them through."""
    fields: dict[str, Any] = {
        key: (annotation, Field(None if optional(annotation) else ..., description=doc))
        for key, (annotation, doc) in MEMBERS[name].fields.items()
    }
    return create_model(f"{name}_input", __config__=ConfigDict(extra="allow"), **fields)  # type: ignore[call-overload]


def validated_input(name: str, payload: Mapping[str, Any] | None) -> dict[str, Any]:
    """A member's input checked as the SDK checks it, with the fields left out (or null) dropped; raises
    :class:`InvalidActionError` naming the field, or :class:`UnsupportedActionError` for a name that is no member."""
    if name not in MEMBERS:
        raise UnsupportedActionError(f"{SCHEMA} has no member {name!r}; its members are {', '.join(MEMBERS)}",
                                     field="name")
    if payload is not None and not isinstance(payload, Mapping):
        raise InvalidActionError(f"{SCHEMA}: {name}'s input must be an object, not {type(payload).__name__}",
                                 field="input")
    try:
        model = input_model(name).model_validate(dict(payload or {}))
    except ValidationError as exc:
        from ..actions.models import format_validation_error

        first = next((str(e["loc"][0]) for e in exc.errors(include_url=False) if e.get("loc")), None)
        raise InvalidActionError(f"{SCHEMA}: {format_validation_error(exc, prefix=name)}", field=first) from None
    return model.model_dump(exclude_none=True)


def from_member(name: str, payload: Mapping[str, Any] | None, *, scale: float | None = None) -> list[dict[str, Any]]:
    """The canonical actions of one member call (``tool_use.name``, ``tool_use.input``), in the model's space at
    ``scale``; every input the SDK's model accepts translates, and a malformed one raises
    :class:`InvalidActionError` naming the field."""
    return _translate({**validated_input(name, payload), "action": name}, scale=scale)


@translator(SCHEMA)
def _translate(payload: dict[str, Any], *, scale: float | None = None) -> list[dict[str, Any]]:
    actions = translate_action(payload, scale=scale, schema=SCHEMA)
    # What the toolset's members take beyond the computer tool's actions of the same names.
    if payload["action"] == "left_click_drag" and payload.get("text"):
        actions[0]["modifiers"] = held_modifiers(payload)
    if payload["action"] == "key" and "repeat" in payload:
        actions[0]["repeat"] = payload["repeat"]
    if payload["action"] == "zoom":  # full resolution, unless that is more than the model may be sent
        region = actions[0]["region"]
        fit = fit_scale(region["width"], region["height"])
        if fit is not None:
            actions[0]["scale"] = fit
    return actions


def focus_note(data: Mapping[str, Any] | None) -> str | None:
    """The line a keyboard member adds when its keys reached no app (the executor's ``focused: false``)."""
    if data and data.get("focused") is False:
        return "No window had the keyboard focus: no app received the keys."
    return None


def landing_note(name: str, data: Mapping[str, Any] | None) -> str | None:
    """The line a click, drag or scroll adds when the screen did not change where it acted (the executor's
    ``landed``), so that the model can tell a click that missed from one that worked."""
    landed = (data or {}).get("landed") or {}
    if not any(word in name for word in ("click", "drag", "scroll")):
        return None  # a move or a press may rightly change nothing
    return {"nothing": "Nothing changed on the screen.",
            "elsewhere": "The screen changed, but not where this acted."}.get(landed.get("screen"))


def reply_text(name: str, payload: Mapping[str, Any] | None, data: Mapping[str, Any] | None) -> str | None:
    """What the model reads after a member ran, as the SDK renders it: the acknowledgment of a pure action (then
    a line of ours when there is one), ``X=..,Y=..`` for ``cursor_position``; None for an image member."""
    member = MEMBERS[name]
    if name == "cursor_position":
        return f"X={(data or {})['x']},Y={(data or {})['y']}"
    if member.acknowledgment is None:
        return None
    # The template's fields are filled from the input once: a "{...}" the model sent stays text.
    lines = [member.acknowledgment.format_map(validated_input(name, payload)), focus_note(data),
             landing_note(name, data)]
    return "\n".join(line for line in lines if line)


def toolset_param(*, configs: Mapping[str, Any] | None = None,
                  cache_control: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The ``tools[]`` entry declaring the toolset, as ``ComputerToolset20260801Param`` defines it: ``type``, and
    ``configs`` (``{"<member>": {"enabled": bool, "defer_loading": bool}}``) and ``cache_control`` when given. It
    has no display size: the model's space is that of the screenshots it is sent (see ``scale``)."""
    entry: dict[str, Any] = {"type": TOOLSET_TYPE}
    if configs is not None:
        unknown = sorted(set(configs) - set(MEMBERS))
        if unknown:  # the API refuses the request: its configs keys are exactly the members
            raise ConfigError(f"{SCHEMA}: configs names no member {unknown}; the members are {', '.join(MEMBERS)}")
        entry["configs"] = {name: dict(config) if config is not None else None for name, config in configs.items()}
    if cache_control is not None:
        entry["cache_control"] = dict(cache_control)
    return entry


# -- a turn ----------------------------------------------------------------------------------------------------
@dataclass
class _Call:
    """One member call of a turn and what became of it."""

    id: str
    toolset_name: str | None
    name: str
    payload: Any
    actions: list[dict[str, Any]] = field(default_factory=list)
    status: Literal["ok", "error", "not_run"] = "not_run"
    error: str = ""
    images: list[ImageData] = field(default_factory=list)
    data: dict[str, Any] | None = None


@dataclass
class ToolsetTurn:
    """What :func:`run_turn` did: one ``tool_result`` per ``tool_use``, in their order, and the observation of
    the (last) step (None when nothing ran)."""

    results: list[dict[str, Any]]
    observation: Observation | None = None

    @property
    def message(self) -> dict[str, Any]:
        """The user message that answers the turn."""
        return {"role": "user", "content": self.results}


def _block_field(block: Any, key: str) -> Any:
    """A field of a tool_use block, given as the SDK's model or as a dict."""
    return block.get(key) if isinstance(block, Mapping) else getattr(block, key, None)


def _call(block: Any) -> _Call:
    payload = _block_field(block, "input")
    if isinstance(payload, BaseModel):  # the SDK's typed blocks carry their member's input model
        payload = payload.model_dump()
    return _Call(str(_block_field(block, "id")), _block_field(block, "toolset_name"), str(_block_field(block, "name")),
                 payload)


def run_turn(tool_uses: Iterable[Any], session: Any, *, scale: float | None = None) -> ToolsetTurn:
    """Run the member calls of one assistant turn (its ``tool_use`` blocks whose ``toolset_name`` is "computer",
    as the SDK's models or as dicts) on ``session`` (an Environment, an HciEnvClient, or a ``step(list)``
    callable) as ONE step, in the model's space at ``scale``, and answer each with a ``tool_result`` block as the
    Messages API takes it: images as base64 image blocks, errors with ``is_error``, the calls after the first
    failure with :data:`NOT_EXECUTED`. A call that does not translate fails there; the calls before it run."""
    calls = [_call(block) for block in tool_uses]
    ready: list[_Call] = []
    for call in calls:
        try:
            if call.toolset_name != TOOLSET_NAME:  # a tool of its own, or another family's: not ours to run
                raise UnsupportedActionError(f"{call.name!r} (toolset_name {call.toolset_name!r}) is no member call "
                                             f"of the {TOOLSET_NAME!r} toolset", field="toolset_name")
            call.actions = from_member(call.name, call.payload, scale=scale)
        except HciEnvsError as exc:
            call.status, call.error = "error", exc.message
            break
        ready.append(call)
    observation = _run(ready, session)
    if any(call.status == "error" for call in ready):
        for call in calls[len(ready):]:  # the refused one was never reached: an earlier call failed
            call.status = "not_run"
    return ToolsetTurn([_tool_result(call) for call in calls], observation)


def _step(session: Any, actions: list[dict[str, Any]]) -> Observation:
    step: Callable[[Any], Any] = getattr(session, "step", session)
    result = step(actions)
    return getattr(result, "observation", result)  # an HciEnvClient answers a StepResult, an Environment an Observation


def _run(calls: Sequence[_Call], session: Any) -> Observation | None:
    """Run the calls' actions as one step and set each call's outcome from the step's (one per action, in
    order); the step's observation."""
    if not calls:
        return None
    observation = _step(session, [action for call in calls for action in call.actions])
    outcomes = observation.outcomes
    if outcomes is None:
        if not observation.truncated:
            raise EnvironmentStateError("the step reported no outcomes for its actions: the server predates "
                                        "batches with outcomes (upgrade hci-envs on it)")
        for call in calls:  # the desktop died under the step: what ran before is unknown, and nothing will
            call.status, call.error = "error", f"The episode was truncated: {observation.truncated_reason}"
        return observation
    at = 0
    for call in calls:
        mine, at = outcomes[at:at + len(call.actions)], at + len(call.actions)
        failed = next((o for o in mine if o.get("status") == "error"), None)
        if failed is not None:
            call.status = "error"
            call.error = (failed.get("error") or {}).get("message") or failed.get("text") or "the action failed"
        elif mine and all(o.get("status") == "ok" for o in mine):
            call.status, call.data = "ok", mine[-1].get("data")
            call.images = [observation.images[i] for o in mine for i in o.get("images") or ()]
    return observation


def _image_block(image: ImageData) -> dict[str, Any]:
    return {"type": "image", "source": {"type": "base64", "media_type": image.mime_type, "data": image.data}}


def _tool_result(call: _Call) -> dict[str, Any]:
    result: dict[str, Any] = {"type": "tool_result", "tool_use_id": call.id}
    if call.toolset_name is not None:  # a member's result echoes its family (the API refuses a mismatch)
        result["toolset_name"] = call.toolset_name
    if call.status == "ok":
        text = reply_text(call.name, call.payload, call.data)
        result["content"] = ([_image_block(image) for image in call.images] if text is None
                             else [{"type": "text", "text": line} for line in text.split("\n")])
    else:
        result["content"] = (call.error or "The tool call failed.") if call.status == "error" else NOT_EXECUTED
        result["is_error"] = True
    return result


# -- the SDK's toolset class -----------------------------------------------------------------------------------
def __getattr__(name: str) -> Any:
    # The SDK is an optional dependency: its toolset class is subclassed on first use, so that the rest of this
    # module imports without it.
    if name == "HciComputerToolset":
        cls = _sdk_toolset_class()
        globals()[name] = cls
        return cls
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _sdk_toolset_class() -> type:
    purpose = "HciComputerToolset (the Anthropic SDK's computer toolset, run on an hci-envs session)"
    tools = require_module("anthropic.tools", "anthropic", purpose)
    if not hasattr(tools, "BetaAbstractComputerToolset20260801"):
        raise MissingDependencyError(f"{purpose} needs anthropic>=2.10 (the SDK installed has no computer toolset). "
                                     "Install it with: pip install 'hci-envs[anthropic]'", module="anthropic",
                                     extra="anthropic")

    class HciComputerToolset(tools.BetaAbstractComputerToolset20260801):  # type: ignore[misc, name-defined]
        """The SDK's computer toolset on an hci-envs session (an Environment, an HciEnvClient, or a ``step(list)``
        callable), for the SDK's tool runner (``client.beta.messages.tool_runner(tools=[toolset], ...)``) or
        ``toolset.tool_result(tool_use)``. Every member is served, one step each, in the model's space at
        ``scale``; the runner answers the calls after a failure itself. ``confirm``, ``configs`` and
        ``tool_configs`` are the SDK's: ``confirm`` is required while ``type``, ``key`` or ``hold_key`` is
        enabled (on a sandboxed desktop, ``confirm=lambda context: True`` approves every call)."""

        def __init__(self, session: Any, *, scale: float | None = None, confirm: Any = None,
                     configs: Any = None, tool_configs: Any = None) -> None:
            super().__init__(configs=configs, confirm=confirm, tool_configs=tool_configs)
            self.session, self.scale = session, scale

        def execute(self, context: Any, name: Any, input: Any) -> Any:
            call = _Call(getattr(context.tool_use, "id", ""), TOOLSET_NAME, name, input.model_dump())
            try:
                call.actions = from_member(name, call.payload, scale=self.scale)
            except HciEnvsError as exc:
                raise tools.ToolError(exc.message) from exc
            _run([call], self.session)
            if call.status != "ok":
                raise tools.ToolError(call.error or "The tool call failed.")
            if call.images:
                image = call.images[0]
                return tools.BetaScreenshotResult(data=image.data, media_type=image.mime_type)
            if name == "cursor_position":
                return tools.BetaComputerCursorPositionResult(x=call.data["x"], y=call.data["y"])
            # the SDK writes the acknowledgment itself; our lines say what it cannot know
            notes = [focus_note(call.data), landing_note(name, call.data)]
            return "\n".join(n for n in notes if n) or None

    return HciComputerToolset


__all__ = ["MAX_PIXELS", "MAX_SIDE", "MEMBERS", "NOT_EXECUTED", "SCHEMA", "TOOLSET_NAME", "TOOLSET_TYPE",
           "ToolsetMember", "ToolsetTurn", "fit_scale", "focus_note", "from_member", "input_model", "landing_note", "reply_text",
           "run_turn", "toolset_param", "validated_input"]
