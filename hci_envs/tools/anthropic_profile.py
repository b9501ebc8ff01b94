"""Anthropic's computer toolset (``computer_toolset_20260801``) as tools: one per member, named as the member
and taking the member's input (:data:`hci_envs.adapters.anthropic_toolset.MEMBERS`, typed as the SDK's input
models), so that a model trained on the toolset finds it over MCP as it knows it.

A call translates its input to canonical actions (:func:`~hci_envs.adapters.anthropic_toolset.from_member`) and
runs them on the environment's executor, in the model's space at the profile's ``scale``. Input members return
once the screen has settled: the model cannot ask for that (the members have no ``settle``), and the screenshot
it takes next should show what its action did. Several members share a name with a canonical action tool
(``screenshot``, ``key``, ``wait``, ...) and take other arguments: an environment serves one set or the other.
"""

from __future__ import annotations

import inspect
from typing import Annotated, Any

from pydantic import Field

from ..adapters.anthropic_toolset import MEMBERS, ToolsetMember, fit_scale, from_member, optional, reply_text
from .registry import ToolOutput, ToolSpec


def _parameters(member: ToolsetMember) -> tuple[inspect.Parameter, ...]:
    return tuple(
        inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY,
                          default=None if optional(annotation) else inspect.Parameter.empty,
                          annotation=Annotated[annotation, Field(description=doc)])
        for name, (annotation, doc) in member.fields.items()
    )


def _handler(name: str, scale: float | None) -> Any:
    def run(env: Any, **arguments: Any) -> ToolOutput:
        results = [env.executor.run(action, settle=True) for action in from_member(name, arguments, scale=scale)]
        last = results[-1]
        return ToolOutput(text=reply_text(name, arguments, last.data) or "", data=last.structured() or None,
                          images=[r.image for r in results if r.image is not None])

    return run


def anthropic_toolset_specs(scale: float | None = None, *, width: int | None = None,
                            height: int | None = None) -> dict[str, ToolSpec]:
    """The toolset's members as tool specs, by name, in the SDK's order, in the model's space at ``scale`` (image
    pixels per screen pixel): screenshots come at that scale, coordinates are mapped back, ``zoom`` comes at
    full resolution. Without ``scale``, a ``width`` x ``height`` screen gets the one whose screenshots fit
    Anthropic's documented image budget (:func:`~hci_envs.adapters.anthropic_toolset.fit_scale`)."""
    if scale is None and width and height:
        scale = fit_scale(width, height)
    return {
        member.name: ToolSpec(name=member.name, description=member.description, parameters=_parameters(member),
                              handler=_handler(member.name, scale), read_only=member.read_only,
                              trait="AnthropicComputerToolset")
        for member in MEMBERS.values()
    }
