"""Tools: what traits contribute and what the model calls, over MCP, as CodeAct functions or in a step.

``registry`` (:class:`ToolSpec`, :class:`ToolOutput`, :func:`tool`), ``trait`` (the base of traits and
environments), ``action_tools`` (one tool per canonical action, generated from the vocabulary), ``discovery``
(``find_tools``, ``browse_tools``), ``codeact`` (the environment's own tools and the CodeAct runner) and
``rendering`` (tools and results on the wire). Environment authors import from here.
"""

from ..errors import DuplicateToolError, ToolDefinitionError
from .registry import CONTROL_PLANE_NAMES, ToolOutput, ToolSpec, invalid_arguments, tool

__all__ = ["CONTROL_PLANE_NAMES", "DuplicateToolError", "ToolDefinitionError", "ToolOutput", "ToolSpec",
           "invalid_arguments", "tool"]
