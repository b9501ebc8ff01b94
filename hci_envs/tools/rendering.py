"""How tools and their results look on the wire, written once for MCP, the WebSocket and OpenEnv's step.

- :func:`tool_listing`: the tool list (MCP's ``inputSchema``, or OpenEnv's ``input_schema``);
- :func:`error_output`: a failed call as a :class:`ToolOutput`, so that errors and results take one path;
- :func:`tool_result`: a tool's output as an MCP ``CallToolResult`` dict: as the MCP wire spells it
  (``style="mcp"``: the MCP server hands this very dict to the SDK, which validates it once against the
  protocol's result type), or as the SDK's and FastMCP's Python objects spell it (``style="openenv"``: the shape
  OpenEnv's ``CallToolObservation.result`` carries).
"""

from __future__ import annotations

from typing import Any, Literal

from ..errors import HciEnvsError, wire_form
from .registry import ToolOutput, ToolSpec


def tool_listing(specs: dict[str, ToolSpec] | Any, *,
                 style: Literal["mcp", "openenv"] = "mcp") -> list[dict[str, Any]]:
    """One entry per tool: name, description, input schema (and MCP annotations in the MCP style)."""
    out = []
    for spec in (specs.values() if isinstance(specs, dict) else specs):
        if style == "openenv":
            out.append({"name": spec.name, "description": spec.description, "input_schema": spec.input_schema()})
        else:
            out.append({"name": spec.name, "description": spec.description, "inputSchema": spec.input_schema(),
                        "annotations": tool_annotations(spec)})
    return out


def tool_annotations(spec: ToolSpec) -> dict[str, Any]:
    return {
        "readOnlyHint": spec.read_only,
        "destructiveHint": False if spec.read_only else None,
        "idempotentHint": True if spec.read_only else None,
        "openWorldHint": False,
    }


def error_output(exc: HciEnvsError) -> ToolOutput:
    """A failed tool call as the model sees it: the message, and the error's code and details as data."""
    return ToolOutput(text=exc.message, data={"error": exc.to_dict()}, is_error=True)


def openenv_error(exc: HciEnvsError) -> dict[str, Any]:
    """OpenEnv's ToolError: ``{"error_type", "message"}``."""
    return {"error_type": wire_form(exc).tool_error, "message": exc.message}


def tool_result(out: ToolOutput, *, style: Literal["mcp", "openenv"] = "openenv") -> dict[str, Any]:
    """A tool output as an MCP ``CallToolResult`` dict: the wire's field names (``style="mcp"``), or the Python
    objects' names plus FastMCP's ``data``, which OpenEnv reads (``style="openenv"``)."""
    wire = style == "mcp"
    content: list[dict[str, Any]] = []
    if out.text:
        content.append({"type": "text", "text": out.text} if wire else
                       {"type": "text", "text": out.text, "annotations": None, "meta": None})
    for image in out.images:
        # the image's base64 is made once, here: the SDK's validation passes this str object through unchanged,
        # so the JSON encoder (and its UTF-8 bytes) are its only copies on the way out
        data = image.base64()
        content.append({"type": "image", "data": data, "mimeType": image.mime_type} if wire else
                       {"type": "image", "data": data, "mimeType": image.mime_type, "annotations": None, "meta": None})
    if wire:
        # resultType: required from protocol 2026-07-28 on; the SDK drops it for older protocols
        result: dict[str, Any] = {"content": content, "isError": out.is_error, "resultType": "complete"}
        if out.data is not None:
            result["structuredContent"] = out.data
        return result
    return {
        "content": content,
        "structured_content": out.data,
        "meta": None,
        "data": out.data if out.data is not None else (out.text if not out.images else None),
        "is_error": out.is_error,
    }
