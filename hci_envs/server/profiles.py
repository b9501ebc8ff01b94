"""The MCP endpoint's tool profiles: one registry, served under the tool sets that different agents expect.

* ``tools`` (``/mcp``): every tool one call at a time, named as the canonical actions;
* ``code`` (``/mcp/code``): CodeAct (code in which every tool is a function) with the discovery tools;
* ``anthropic`` (``/mcp/anthropic``): exactly the members of Anthropic's computer toolset, under their names and
  input schemas, in the model's coordinate space (see :mod:`hci_envs.tools.anthropic_profile`), so that an MCP
  host built around the toolset uses the desktop without translating anything. Served by environments that
  have the screen, keyboard and mouse (HumanComputerInterfaceable);
* ``osworld`` (``/mcp/osworld``): OSWorld's action spaces, ``pyautogui`` code and ``computer_13`` actions, with
  its screenshots and accessibility XML (see :mod:`hci_envs.tools.osworld_profile`), for the same environments.

A session's profiles are at its MCP path plus ``/<profile>`` (``/sessions/{id}/mcp/anthropic``); /metadata,
every session's state and ``serve``'s start-up lines list them as ``mcp_profiles``.
"""

from __future__ import annotations

from typing import Any

from ..tools.codeact import BASE_TOOLS, CODE_TOOL
from ..tools.registry import ToolSpec, in_mode

#: The profile /mcp serves.
DEFAULT_PROFILE = "tools"


def tool_profiles(env_class: Any, *, width: int, height: int, mode: str = "simulation"
                  ) -> dict[str, dict[str, ToolSpec]]:
    """Each profile's tools for an environment class whose screen is ``width`` x ``height``, in a server's
    ``mode`` (production has no simulation-only tool)."""
    specs = in_mode(env_class.tool_specs(), mode)
    profiles = {
        "tools": {n: s for n, s in specs.items() if n != CODE_TOOL},
        "code": {n: s for n, s in specs.items() if n in BASE_TOOLS},
    }
    if "click" in specs and "screenshot" in specs:  # the screen, keyboard and mouse: the toolset fits
        from ..tools.anthropic_profile import anthropic_toolset_specs

        profiles["anthropic"] = anthropic_toolset_specs(width=width, height=height)
        from ..tools.osworld_profile import osworld_specs

        profiles["osworld"] = osworld_specs()
    return profiles


def profile_path(profile: str) -> str:
    """The suffix of a profile's MCP path ("" for the default profile)."""
    return "" if profile == DEFAULT_PROFILE else f"/{profile}"
