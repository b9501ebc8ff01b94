"""The environment's tools as an MCP server (official ``mcp`` SDK, ``MCPServer``, streamable HTTP).

One MCP server serves every session of an environment class: the tools are the same, and each request is
routed to its session's environment by the ASGI layer in front (it puts the session into the request scope
after checking the session's agent token). The server is stateless and answers with plain JSON, which is
the fastest way through the SDK for request/response tools.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from ..errors import HciEnvsError
from ..tools import ToolOutput, ToolSpec

SCOPE_KEY = "hci_envs.session"


def output_to_mcp_dict(out: ToolOutput) -> dict[str, Any]:
    """A tool output as an MCP CallToolResult dict (OpenEnv's CallToolObservation.result shape)."""
    content: list[dict[str, Any]] = []
    if out.text:
        content.append({"type": "text", "text": out.text, "annotations": None, "meta": None})
    for image in out.images:
        content.append(
            {"type": "image", "data": image.base64(), "mimeType": image.mime_type, "annotations": None, "meta": None}
        )
    return {
        "content": content,
        "structured_content": out.data,
        "meta": None,
        "data": out.data if out.data is not None else (out.text if not out.images else None),
        "is_error": out.is_error,
    }


def _result(out: ToolOutput) -> Any:
    from mcp_types import CallToolResult, ImageContent, TextContent

    content: list[Any] = []
    if out.text:
        content.append(TextContent(text=out.text))
    for image in out.images:
        content.append(ImageContent(data=image.base64(), mime_type=image.mime_type))
    return CallToolResult(content=content, structured_content=out.data, is_error=out.is_error)


def _error(exc: HciEnvsError) -> Any:
    from mcp_types import CallToolResult, TextContent

    return CallToolResult(
        content=[TextContent(text=f"{exc.message}")],
        structured_content={"error": exc.to_dict()},
        is_error=True,
    )


def build_mcp_server(
    specs: dict[str, ToolSpec],
    get_session: Callable[[Any], Any],
    *,
    name: str = "hci-envs",
    instructions: str | None = None,
    version: str = "",
) -> Any:
    """An ``MCPServer`` with one tool per spec; ``get_session(ctx)`` finds the session of a request, whose
    ``run_sync`` runs the call under the session's own limiter."""
    from mcp.server import MCPServer
    from mcp.server.mcpserver import Context
    from mcp.server.mcpserver.tools import Tool
    from mcp.server.transport_security import TransportSecuritySettings
    from mcp_types import CallToolResult, ToolAnnotations

    tools = []
    for spec in specs.values():
        fn = _wrapper(spec, get_session, Context, CallToolResult)
        annotations = ToolAnnotations(
            read_only_hint=spec.read_only,
            destructive_hint=False if spec.read_only else None,
            idempotent_hint=True if spec.read_only else None,
            open_world_hint=False,
        )
        tools.append(
            Tool.from_function(
                fn, name=spec.name, description=spec.description, annotations=annotations,
                context_kwarg="ctx", structured_output=False,
            )
        )
    server = MCPServer(name, instructions=instructions, version=version, tools=tools)
    # Creates the session manager. Host/Origin checks and auth happen in our ASGI layer in front, for every
    # route alike, so the SDK's own DNS-rebinding check is off here.
    server.streamable_http_app(
        json_response=True,
        stateless_http=True,
        transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
    )
    return server


def _wrapper(spec: ToolSpec, get_session: Callable[[Any], Any], context_type: type, result_type: type) -> Any:
    async def call(ctx: Any, **arguments: Any) -> Any:
        try:
            session = get_session(ctx)
            epoch = session.env.epoch  # a reset while the call waits in the session's queue voids it
            return _result(await session.run_sync(session.env.call_tool, spec.name, arguments, epoch=epoch))
        except HciEnvsError as exc:
            return _error(exc)

    ctx_param = inspect.Parameter("ctx", inspect.Parameter.KEYWORD_ONLY, annotation=context_type)
    call.__signature__ = inspect.Signature([ctx_param, *spec.parameters], return_annotation=result_type)  # type: ignore[attr-defined]
    call.__annotations__ = {"ctx": context_type, "return": result_type}
    call.__name__ = spec.name
    call.__doc__ = spec.description
    return call


def session_from_context(ctx: Any) -> Any:
    """The session the ASGI layer attached to this MCP request."""
    request = ctx.request_context.request
    session = request.scope.get(SCOPE_KEY) if request is not None else None
    if session is None:
        from ..errors import SessionNotFoundError

        raise SessionNotFoundError("this MCP request is not bound to a session")
    return session
