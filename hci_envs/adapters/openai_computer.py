"""OpenAI's released ``computer`` tool and the canonical actions.

The released tool is declared bare (:func:`computer_tool`); each ``computer_call`` carries a batch of
``actions``, the preview's actions (:mod:`.openai`, whose scroll and key conventions hold here too) whose
pointer actions may hold ``keys`` while they act. :func:`run_computer_call` runs a call's batch as one step,
stopping at the first action that fails, and answers it with a ``computer_call_output`` holding the
screenshot taken after the batch. Safety checks the API marks pending go to the caller, who acknowledges them
or not; they are never acknowledged on nobody's say.

Shapes as the openai SDK (3.51) declares them: ``ComputerToolParam``, ``ResponseComputerToolCall`` (``actions``,
``pending_safety_checks``), ``ResponseInputItemParam``'s ``ComputerCallOutput`` (a screenshot is its only
output, ``status`` its only word on how the call went); the SDK's own runner (``openai/lib/computer.py``) for
how a batch is answered: one screenshot after it, the checks acknowledged only when its caller approves.
Client-side: needs neither the server nor the SDK (only :func:`check_with_sdk` does).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..errors import ConfigError, EnvironmentStateError, HciEnvsError, InvalidActionError
from ..errors import require as require_package
from . import UnsupportedActionError, translator
from .keynames import from_openai_key
from .openai import from_openai

SCHEMA = "OpenAI computer"
#: The actions whose ``keys`` are held while they act (``keypress``'s ``keys`` are the keys it presses).
_HOLDING = {"click", "double_click", "drag", "scroll", "move"}

_Failure = tuple[int | None, dict[str, Any]]  # (the failing action's index in the call, if known; the error)


def computer_tool() -> dict[str, Any]:
    """The released tool, as ``tools=[computer_tool()]`` declares it: it has no settings (no display size, no
    environment); the screenshots tell the model the screen."""
    return {"type": "computer"}


@translator(SCHEMA)
def from_computer_action(payload: dict[str, Any], *, pixels_per_click: int = 100,
                         scale: float | None = None) -> list[dict[str, Any]]:
    """One action of a ``computer_call``'s ``actions``: the preview's actions (a ``wait`` says no duration:
    1 s), whose pointer actions may hold ``keys`` ("SHIFT", "CTRL") while they act."""
    out = from_openai(payload, pixels_per_click=pixels_per_click, scale=scale)
    held = payload.get("keys") if payload.get("type") in _HOLDING else None
    if not held:
        return out
    if not isinstance(held, list):
        raise UnsupportedActionError(f"{SCHEMA}: keys is a list of key names, not {held!r}", field="keys")
    names = [from_openai_key(str(k)) for k in held]
    if payload["type"] == "move":  # our mouse_move holds no keys: press them around it
        return [*({"type": "key_down", "key": k} for k in names), *out,
                *({"type": "key_up", "key": k} for k in reversed(names))]
    out[0]["modifiers"] = names
    return out


def _call_dict(call: Any) -> dict[str, Any]:
    """A computer_call as JSON: response.output's items are the SDK's models, logs and tests have dicts."""
    dump = getattr(call, "model_dump", None)
    data = dump(mode="json", exclude_none=True) if callable(dump) else call
    if not isinstance(data, dict) or data.get("type") != "computer_call":
        raise InvalidActionError(f"{SCHEMA}: not a computer_call item: {str(data)[:200]}", field="type")
    if not isinstance(data.get("call_id"), str):  # what the output must name
        raise InvalidActionError(f"{SCHEMA}: a computer_call without a call_id", field="call_id")
    return data


def _call_actions(call: dict[str, Any]) -> list[dict[str, Any]]:
    """The call's batch, or the preview's single ``action``: exactly one of them, as the SDK's runner requires."""
    if call.get("status", "completed") != "completed":  # an incomplete call's batch may be cut short
        raise InvalidActionError(f"{SCHEMA}: computer_call {call.get('call_id')} is {call['status']!r}, "
                                 "not completed", field="status")
    batch, single = call.get("actions"), call.get("action")
    if (batch is None) == (single is None):
        raise InvalidActionError(f"{SCHEMA}: a computer_call has either actions or action", field="actions")
    actions = batch if batch is not None else [single]
    if not isinstance(actions, list) or not actions:
        raise InvalidActionError(f"{SCHEMA}: a computer_call with no actions", field="actions")
    return actions


def from_computer_call(call: Any, *, pixels_per_click: int = 100, scale: float | None = None) -> list[dict[str, Any]]:
    """Every action of a ``computer_call`` (a dict or the SDK's model) as canonical actions, in order."""
    return [a for action in _call_actions(_call_dict(call))
            for a in from_computer_action(action, pixels_per_click=pixels_per_click, scale=scale)]


def pending_safety_checks(call: Any) -> list[dict[str, Any]]:
    """The checks (``{"id", "code", "message"}``) a person must acknowledge before the call's actions run."""
    return [{k: check[k] for k in ("id", "code", "message") if k in check}
            for check in _call_dict(call).get("pending_safety_checks") or []]


class SafetyChecksPending(Exception):
    """A computer_call's safety checks were not acknowledged, so none of its actions ran. ``checks`` are the
    API's (``{"id", "code", "message"}``): show them to a person, then run the call again with ``acknowledge``
    approving them, or end the episode. Not an error of the desktop: the caller's decision to make."""

    def __init__(self, call_id: str | None, checks: list[dict[str, Any]]) -> None:
        said = "; ".join(str(c.get("message") or c.get("code") or c["id"]) for c in checks)
        super().__init__(f"computer_call {call_id}: safety checks not acknowledged: {said}")
        self.call_id, self.checks = call_id, checks


@dataclass
class ComputerCallResult:
    """What :func:`run_computer_call` did. ``outcomes`` has one entry per action of the call, ``{"index",
    "status": "ok" | "error" | "not_run", "error"}``; ``scale`` is the scale of the screenshot sent (pass it
    with the next call: the model's coordinates are in its pixels); ``note`` says what failed, as the model is
    told. ``output`` is None when the episode ended with no screen to show (``observation`` says why)."""

    output: dict[str, Any] | None
    observation: Any
    outcomes: list[dict[str, Any]]
    scale: float | None
    note: str | None = None

    @property
    def items(self) -> list[dict[str, Any]]:
        """The input items that answer the call: its ``computer_call_output`` and, when something failed, a
        message saying so (the output item holds a screenshot and nothing else)."""
        if self.output is None:
            return []
        said = [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": self.note}]}]
        return [self.output, *(said if self.note else [])]


def run_computer_call(call: Any, step: Callable[[Any], Any], *,
                      acknowledge: Callable[[list[dict[str, Any]]], bool] | None = None,
                      scale: float | None = None, pixels_per_click: int = 100) -> ComputerCallResult:
    """Run a ``computer_call``'s actions as ONE step of ``step`` (``Environment.step``, ``HciEnvClient.step``),
    in order, stopping at the first that fails, and answer the call with the screenshot taken after them.

    ``scale`` is the previous result's ``scale`` (that of the screenshot the model last saw). Pending safety
    checks go to ``acknowledge(checks)`` first: unless it returns True nothing runs and
    :class:`SafetyChecksPending` is raised; acknowledged, they are passed back in ``acknowledged_safety_checks``.
    A failure (an action without a translation, which refuses the whole call before anything runs, as ``step``
    refuses a list with a malformed item; or an action failing as it runs, one off the screen included) marks
    the output ``incomplete``, and ``items`` adds a message saying which action failed, why, and what did not
    run.
    """
    data = _call_dict(call)
    actions = _call_actions(data)
    checks = pending_safety_checks(data)
    if checks and (acknowledge is None or acknowledge([dict(c) for c in checks]) is not True):
        raise SafetyChecksPending(data.get("call_id"), checks)
    outcomes = [{"index": i, "status": "not_run"} for i in range(len(actions))]
    per_action: list[list[dict[str, Any]]] = []
    failed: _Failure | None = None
    for index, action in enumerate(actions):
        try:
            per_action.append(from_computer_action(action, pixels_per_click=pixels_per_click, scale=scale))
        except InvalidActionError as exc:
            failed = (index, exc.to_dict())
            break
    latest = None
    if failed is None:
        # The SDK's runner answers with one screenshot after the batch, so the batch's screenshots are left out
        # (each would be grabbed and encoded for nothing), unless the call is nothing else.
        owner = [i for i, part in enumerate(per_action) for a in part if a["type"] != "screenshot"] or [0]
        batch = [a for part in per_action for a in part if a["type"] != "screenshot"] or [per_action[0][0]]
        try:
            latest = _observation(step(batch))
        except InvalidActionError as exc:  # a server that checks a whole batch before running any refused it
            failed = (None, exc.to_dict())
        else:
            if latest.outcomes is None and not latest.truncated:  # what ran is unknown: say nothing false
                raise EnvironmentStateError("the step reported no outcomes for its actions: the server predates "
                                            "batches with outcomes (upgrade hci-envs on it)")
            failed = _mark(outcomes, owner, latest.outcomes or [])
            latest = _release_held(batch, latest, step) or latest
    if latest is None:  # nothing ran: only the screen, for the output
        latest = _observation(step({"type": "screen_size"}))
    if failed is not None and failed[0] is not None:
        outcomes[failed[0]] = {"index": failed[0], "status": "error", "error": failed[1]}
    note = _note(data, actions, failed, latest)
    shot = latest.screenshot
    if shot is None and not latest.truncated:
        raise ConfigError("the computer tool is answered with a screenshot: observe with one (an observation "
                          "format, not None)")
    output = None if shot is None else {
        "type": "computer_call_output", "call_id": data["call_id"],
        "output": {"type": "computer_screenshot", "image_url": f"data:{shot.mime_type};base64,{shot.data}"},
        "acknowledged_safety_checks": checks, **({"status": "incomplete"} if note else {})}
    return ComputerCallResult(output, latest, outcomes, shot.scale if shot is not None else scale, note)


def _observation(result: Any) -> Any:
    return getattr(result, "observation", result)  # HciEnvClient's StepResult, or an Observation


def _mark(outcomes: list[dict[str, Any]], owner: list[int], ran: list[dict[str, Any]]) -> _Failure | None:
    """The call's actions ok as far as the step got (an action is ok once all its canonical actions are); the
    first that failed, if one did."""
    for index, outcome in enumerate(outcomes):
        mine = [ran[j] if j < len(ran) else {"status": "not_run"} for j, o in enumerate(owner) if o == index]
        stopped = next((o for o in mine if o["status"] != "ok"), None)
        if stopped is not None:  # not run without an error: the episode ended under the batch
            return (index, stopped.get("error") or {"message": stopped.get("text")}) \
                if stopped["status"] == "error" else None
        outcome["status"] = "ok"
    return None


def _release_held(batch: list[dict[str, Any]], latest: Any, step: Callable[[Any], Any]) -> Any:
    """A held-keys move that failed halfway leaves its keys down: let them up, or every later input has them."""
    ran = [a for a, o in zip(batch, latest.outcomes or [], strict=False) if o["status"] == "ok"]
    held = [a["key"] for a in ran if a["type"] == "key_down"]
    for action in ran:
        if action["type"] == "key_up" and action["key"] in held:
            held.remove(action["key"])
    if not held:
        return None
    try:
        return _observation(step([{"type": "key_up", "key": k} for k in reversed(held)]))
    except HciEnvsError:  # refused too (a person holds the desktop): the keyboard is theirs now
        return None


def _note(call: dict[str, Any], actions: list[dict[str, Any]], failed: _Failure | None, latest: Any) -> str | None:
    """What went wrong, for the model: the output item has no field for it."""
    if latest.truncated:
        return f"The episode ended: {latest.truncated_reason}."
    if failed is None:
        return None
    index, error = failed
    why = f"{error.get('code', 'ERROR')}: {error.get('message', '')}"
    if index is None:
        return f"The actions of computer_call {call['call_id']} were refused and none ran: {why}"
    what = f"Action {index + 1} of {len(actions)} ({actions[index].get('type')}) of computer_call {call['call_id']}"
    if latest.outcomes is None:  # refused before the step: nothing ran
        return f"{what} was refused, so none of the call's actions ran: {why}"
    left = len(actions) - index - 1
    rest = "" if not left else f"; action {index + 2} did not run" if left == 1 else \
        f"; actions {index + 2}-{len(actions)} did not run"
    return f"{what} failed: {why}{rest}. The screenshot shows the screen now."


def check_with_sdk(item: dict[str, Any]) -> Any:
    """An item this module builds (the tool, a computer_call_output, the message saying a failure) as the
    installed SDK's own model, strictly: a field the SDK does not declare is refused too (its models would keep
    it silently). Needs the SDK: ``pip install 'hci-envs[openai]'``."""
    types = require_package("openai.types.responses", "openai", "checking payloads against OpenAI's SDK")
    models = {"computer": types.computer_tool.ComputerTool,
              "computer_call_output": types.response_input_item.ComputerCallOutput,
              "message": types.response_input_item.Message}
    if item.get("type") not in models:
        raise InvalidActionError(f"{SCHEMA}: no SDK type is checked here for {item.get('type')!r}", field="type")
    try:
        model = models[item["type"]].model_validate(item)
    except ValueError as exc:  # pydantic's ValidationError
        raise InvalidActionError(f"{SCHEMA}: {item['type']} does not fit the SDK: {exc}") from None
    unknown = _undeclared(model)
    if unknown:
        raise InvalidActionError(f"{SCHEMA}: {item['type']} has fields the SDK does not declare: "
                                 f"{', '.join(unknown)}", field=unknown[0])
    return model


def _undeclared(model: Any, where: str = "") -> list[str]:
    found = [f"{where}{name}" for name in (model.__pydantic_extra__ or {})]
    for name in type(model).model_fields:
        value = getattr(model, name)
        for part in value if isinstance(value, list) else [value]:
            if hasattr(part, "__pydantic_extra__"):
                found += _undeclared(part, f"{where}{name}.")
    return found
