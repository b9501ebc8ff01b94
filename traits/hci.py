"""HumanComputerInterfaceable: the screen, keyboard and mouse of the desktop as tools.

One tool per canonical action, named exactly as the action type, with the action's fields as parameters
(generated from :mod:`hci_envs.actions`, the single source of truth). Input tools take an extra ``settle``
flag: return once the screen has stopped changing instead of right after the input was delivered.
"""

from __future__ import annotations

import inspect
from typing import Annotated, Any

from pydantic import Field

from hci_envs.actions import ACTIONS
from hci_envs.tools import ToolOutput, ToolSpec
from hci_envs.trait import Trait

_SETTLE = inspect.Parameter(
    "settle",
    inspect.Parameter.KEYWORD_ONLY,
    default=False,
    annotation=Annotated[
        bool, Field(description="Return once the screen has stopped changing (up to 2 s) instead of at once.")
    ],
)


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


def _handler(action_type: str) -> Any:
    def run(env: Any, settle: bool = False, **fields: Any) -> ToolOutput:
        result = env.executor.run({"type": action_type, **fields}, settle=settle)
        images = [result.image] if result.image is not None else []
        return ToolOutput(text=result.text, data=result.structured() or None, images=images)

    return run


def action_tool_specs() -> list[ToolSpec]:
    """One tool spec per canonical action type."""
    return [
        ToolSpec(
            name=name,
            description=inspect.cleandoc(model.__doc__ or name),
            parameters=_parameters(model),
            handler=_handler(name),
            read_only=model.read_only,
            trait="HumanComputerInterfaceable",
        )
        for name, model in ACTIONS.items()
    ]


class HumanComputerInterfaceable(Trait):
    """Screen, keyboard and mouse: every canonical action as a tool."""

    system_packages = ("xvfb", "openbox", "x11vnc", "xauth", "fonts-dejavu-core")
    __tool_specs__ = action_tool_specs()
