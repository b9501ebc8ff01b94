"""The environment's tools as an MCP server (the official ``mcp`` SDK's low-level ``Server``, streamable HTTP).

One MCP server serves every session of an environment class: the tools are the same, and each request is
routed to its session's environment by the ASGI layer in front (it puts the session into the request scope
after checking the session's agent token). The server is stateless and answers with plain JSON: every
request stands on its own (no ``initialize`` needed, no protocol session to keep or reap), and clients of the
2026-07-28 protocol, the SDK's own among them, take its single-request path, the cheapest through the SDK
(handshake-era clients pay for a transport per request; see docs/design.md).

The SDK carries the protocol; the tool list and the results are rendered by :mod:`hci_envs.tools.rendering` (the
same renderer the WebSocket and OpenEnv's step use), and arguments are validated once, by the tool itself
(unknown arguments are refused, never dropped).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..errors import HciEnvsError, SessionNotFoundError, UnknownToolError
from ..tools.rendering import error_output, tool_listing, tool_result
from ..tools.registry import ToolOutput, ToolSpec

SCOPE_KEY = "hci_envs.session"


def mcp_result(out: ToolOutput) -> dict[str, Any]:
    """A tool output as a ``CallToolResult`` in wire form. Handed to the SDK as a dict, not as the SDK's model:
    the SDK validates every result against the protocol version's result type anyway (and sieves it to that
    version's fields), so a model built here was validated and dumped once more for nothing."""
    return tool_result(out, style="mcp")


def header_schemas(specs: dict[str, ToolSpec]) -> dict[str, dict[str, Any] | None]:
    """Each tool's input schema for the SDK's ``Mcp-Param-*`` header check, or None for a tool that declares
    no header (``x-mcp-header``): the SDK walks the schema on every call to find declarations, and for a
    schema without any the check accepts every request, as it does when it gets None."""
    from mcp.shared.inbound import X_MCP_HEADER_KEY  # "x-mcp-header"

    def declares(node: Any) -> bool:
        if isinstance(node, dict):
            return X_MCP_HEADER_KEY in node or any(declares(v) for v in node.values())
        return isinstance(node, list) and any(declares(v) for v in node)

    return {name: (spec.input_schema() if declares(spec.input_schema()) else None) for name, spec in specs.items()}


def tracing_configured() -> bool:
    """Whether an OpenTelemetry tracer provider is set (by the application, or ``opentelemetry-instrument``):
    then the SDK's span per MCP request is kept."""
    from opentelemetry import trace

    return not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)


def build_mcp_server(
    specs: dict[str, ToolSpec],
    get_session: Callable[[Any], Any],
    *,
    name: str = "hci-envs",
    instructions: str | None = None,
    version: str = "",
) -> Any:
    """An MCP ``Server`` with one tool per spec; ``get_session(request)`` finds the session of an HTTP
    request, whose ``run_sync`` runs the call under the session's own limiter."""
    from mcp.server.lowlevel import Server
    from mcp.server.transport_security import TransportSecuritySettings
    from mcp_types import ListToolsResult

    listing = ListToolsResult.model_validate({"tools": tool_listing(specs)})

    async def list_tools(ctx: Any, params: Any) -> Any:
        return listing

    async def call_tool(ctx: Any, params: Any) -> Any:
        # The click path, room by room: the SDK (parsed the body, checked the protocol) -> the session (its
        # queue) -> the environment (its lock, the episode) -> the tool spec (validates the arguments into the
        # action's model) -> the executor -> the desktop's input. The tool is looked up here, once, among the
        # tools this face serves; the environment is handed the spec.
        try:
            spec = specs.get(params.name)
            if spec is None:
                raise UnknownToolError(f"unknown tool {params.name!r}; available: {', '.join(sorted(specs))}",
                                       tool=params.name)
            session = get_session(ctx.request)
            env = session.env
            epoch = env.epoch  # a reset while the call waits in the session's queue voids it
            out = await session.run_sync(env.run_tool, spec, params.arguments or {}, epoch=epoch)
        except HciEnvsError as exc:
            out = error_output(exc)
        return mcp_result(out)

    schemas = header_schemas(specs)

    def input_schema(tool: str) -> dict[str, Any] | None:
        return schemas.get(tool)

    server = Server(name, version=version, instructions=instructions, on_list_tools=list_tools,
                    on_call_tool=call_tool, get_tool_input_schema=input_schema)
    if not tracing_configured():
        # The SDK wraps every request in an OpenTelemetry span, a no-op without a tracer provider that still
        # costs about a tenth of a call's time in the server; the SDK's documented opt-out is to drop it.
        from mcp.server._otel import OpenTelemetryMiddleware

        server.middleware = [m for m in server.middleware if not isinstance(m, OpenTelemetryMiddleware)]
    # Creates the session manager. Host/Origin checks and auth happen in our ASGI layer in front, for every
    # route alike, so the SDK's own DNS-rebinding check is off here.
    server.streamable_http_app(
        json_response=True,
        stateless_http=True,
        transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
    )
    return server


def session_from_request(request: Any) -> Any:
    """The session the ASGI layer attached to this MCP request."""
    session = request.scope.get(SCOPE_KEY) if request is not None else None
    if session is None:
        raise SessionNotFoundError("this MCP request is not bound to a session")
    return session
