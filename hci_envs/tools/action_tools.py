"""One tool per canonical action, generated from the vocabulary (:mod:`hci_envs.actions`, the single source of
truth): named exactly as the action type, with the action's fields as parameters. Input tools take an extra
``settle`` flag: return once the screen has stopped changing instead of right after the input was delivered.

A call runs straight down: the tool spec parses the arguments into the action's own model (validated once),
and its handler hands the action to the environment's executor. The HumanComputerInterfaceable trait
(``hci_envs.traits.hci``) only declares these specs as its tools.
"""

from __future__ import annotations

import inspect
from typing import Annotated, Any

from pydantic import Field, TypeAdapter, ValidationError

from ..actions import ACTIONS
from ..errors import InvalidActionError
from .registry import ToolOutput, ToolSpec, invalid_arguments

_SETTLE = inspect.Parameter(
    "settle",
    inspect.Parameter.KEYWORD_ONLY,
    default=False,
    annotation=Annotated[
        bool, Field(description="Return once the screen has stopped changing (up to 2 s) instead of at once.")
    ],
)


_BOOL = TypeAdapter(bool)


def _parameters(model: Any) -> tuple[inspect.Parameter, ...]:
    params = []
    for name, info in model.model_fields.items():
        if name == "type":
            continue
        default = inspect.Parameter.empty if info.is_required() else info.get_default(call_default_factory=True)
        # Keep the field's constraints and description; its default becomes the parameter's default.
        annotation = Annotated[(info.annotation, *info.metadata, Field(description=info.description))]
        params.append(inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=annotation))
    if model.injects_input:
        params.append(_SETTLE)
    return tuple(params)


def _handler(env: Any, action: Any, settle: bool = False) -> ToolOutput:
    result = env.executor.run(action, settle=settle)
    images = [result.image] if result.image is not None else []
    return ToolOutput(text=result.text, data=result.structured() or None, images=images)


def _parser(action_type: str, model: Any) -> Any:
    """The arguments as the action's own model, validated once (the executor then only checks them against
    the screen); ``settle`` is the tool's, not the action's."""

    def parse(arguments: dict[str, Any]) -> dict[str, Any]:
        if "type" in arguments:
            raise InvalidActionError(f"{action_type}.type: Extra inputs are not permitted", field="type")
        try:
            settle = _BOOL.validate_python(arguments.pop("settle", False)) if model.injects_input else False
            action = model.model_validate({**arguments, "type": action_type})
        except ValidationError as exc:
            raise invalid_arguments(exc, action_type) from None
        return {"action": action, "settle": settle}

    return parse


def action_tool_specs() -> list[ToolSpec]:
    """One tool spec per canonical action type."""
    return [
        ToolSpec(
            name=name,
            description=inspect.cleandoc(model.__doc__ or name),
            parameters=_parameters(model),
            handler=_handler,
            parse=_parser(name, model),
            read_only=model.read_only,
            trait="HumanComputerInterfaceable",
        )
        for name, model in ACTIONS.items()
    ]
