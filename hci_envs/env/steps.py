"""What one step may carry, defined once: ``step()`` validates with these models and ``/schema`` describes them.

A step item is a canonical action (``{"type": "click", ...}``), a tool call (``{"tool", "arguments"}``),
OpenEnv's ``call_tool`` / ``list_tools``, or a CodeAct program (``{"code", "timeout"?, "max_output"?}``). A
step is one item or a list of them, run in order.
"""

from __future__ import annotations

import json
from typing import Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, field_validator

from ..actions.models import ACTION_MODELS, ACTIONS, ActionBase, format_validation_error, parse_action
from ..errors import InvalidActionError
from ..sandbox.interpreter import (
    DEFAULT_CODE_OUTPUT,
    DEFAULT_CODE_TIMEOUT,
    MAX_CODE_CHARS,
    MAX_CODE_OUTPUT,
    MAX_CODE_TIMEOUT,
    check_code_action,
)



class ToolCall(BaseModel):
    """Call one tool by name."""

    model_config = ConfigDict(extra="forbid")
    tool: str
    arguments: dict[str, Any] = {}

    _no_arguments = field_validator("arguments", mode="before")(lambda v: {} if v is None else v)


class CallToolAction(BaseModel):
    """OpenEnv's MCP tool call; errors come back in the observation's ``error``, not as a failed step."""

    model_config = ConfigDict(extra="forbid")
    type: Literal["call_tool"] = "call_tool"
    tool_name: str
    arguments: dict[str, Any] = {}
    metadata: dict[str, Any] = {}

    _no_arguments = field_validator("arguments", mode="before")(lambda v: {} if v is None else v)


class ListToolsAction(BaseModel):
    """OpenEnv's MCP tool listing."""

    model_config = ConfigDict(extra="forbid")
    type: Literal["list_tools"] = "list_tools"
    metadata: dict[str, Any] = {}


class CodeAction(BaseModel):
    """A CodeAct step: Python in which every tool is a function."""

    model_config = ConfigDict(extra="forbid")
    code: str = Field(min_length=1, max_length=MAX_CODE_CHARS)
    timeout: float = Field(DEFAULT_CODE_TIMEOUT, gt=0, le=MAX_CODE_TIMEOUT)
    max_output: int = Field(DEFAULT_CODE_OUTPUT, ge=1, le=MAX_CODE_OUTPUT)


StepItem = Union[tuple([*ACTION_MODELS, ToolCall, CallToolAction, ListToolsAction, CodeAction])]  # noqa: UP007
#: The JSON schema of a step's ``action``: one item or a list of items.
STEP_ACTION_SCHEMA = TypeAdapter(Union[StepItem, list[StepItem]]).json_schema()  # noqa: UP007

_ENVELOPES: dict[str, type[BaseModel]] = {"call_tool": CallToolAction, "list_tools": ListToolsAction}


def parse_step_item(item: Any, *, screen: tuple[int, int] | None = None) -> Any:
    """One step item (a dict, a JSON string or a model) as its model; raises :class:`InvalidActionError`
    naming the field. Canonical actions are also checked against ``screen``; code is compiled (not run)."""
    if isinstance(item, ActionBase):
        return parse_action(item, screen=screen)
    if isinstance(item, ToolCall | CallToolAction | ListToolsAction | CodeAction):
        return item
    if isinstance(item, str | bytes):
        try:
            item = json.loads(item)
        except ValueError as exc:
            raise InvalidActionError(f"action is not valid JSON: {exc}", field="action") from None
    if not isinstance(item, dict):
        raise InvalidActionError(f"an action must be an object, not {type(item).__name__}", field="action")
    kind = item.get("type")
    if kind in _ENVELOPES:
        return _validate(_ENVELOPES[kind], item)
    if kind is None and "tool" in item:
        return _validate(ToolCall, item)
    if kind is None and "code" in item:
        code = _validate(CodeAction, item)
        if not code.code.strip():
            raise InvalidActionError("'code' must be a non-empty string", field="code")
        check_code_action(code.code)
        return code
    if kind in ACTIONS:
        return parse_action(item, screen=screen)
    raise InvalidActionError(
        f"unknown action {kind!r}; expected a canonical action ({', '.join(ACTIONS)}), "
        "{'tool': NAME, 'arguments': {...}}, {'code': ...}, or OpenEnv's call_tool / list_tools",
        field="type",
    )


def _validate(model: type[BaseModel], item: dict[str, Any]) -> Any:
    try:
        return model.model_validate(item)
    except ValidationError as exc:
        first = next((str(e["loc"][0]) for e in exc.errors(include_url=False) if e.get("loc")), None)
        raise InvalidActionError(format_validation_error(exc), field=first) from None
