"""OSWorld's action spaces over MCP (the ``osworld`` profile, /mcp/osworld), on a real desktop with the Tk probe:
pyautogui code clicks its button and types into its entry, computer_13 actions do too, each answer carries the
settled screenshot, and code that fails says why."""

from __future__ import annotations

import pytest
from helpers import McpClient, text_of

pytestmark = pytest.mark.x11


def test_pyautogui_code_and_computer_13_drive_a_real_app(fresh_probe):
    server, probe = fresh_probe
    with McpClient(f"{server.base_url}/mcp/osworld") as mcp:
        assert sorted(t.name for t in mcp.list_tools()) == ["accessibility_tree", "computer_13", "pyautogui",
                                                            "screenshot"]
        bx, by = probe.center("button")
        clicked = mcp.ok("pyautogui", {"code": f"pyautogui.click({bx}, {by})"})
        assert [c.type for c in clicked.content if c.type == "image"] == ["image"]  # the screen after it
        probe.wait_for(lambda s: s.get("clicks", 0) >= 1, what="the button clicked by pyautogui code")

        ex, ey = probe.center("entry")
        mcp.ok("computer_13", {"action": {"action_type": "CLICK", "parameters": {"x": ex, "y": ey}}})
        mcp.ok("computer_13", {"action": {"action_type": "TYPING", "parameters": {"text": "osworld "}}})
        mcp.ok("pyautogui", {"code": "pyautogui.typewrite('agent'); pyautogui.press('enter')"})
        probe.wait_for(lambda s: s.get("entry") == "osworld agent", what="text typed by both action spaces")

        failed = mcp.call("pyautogui", {"code": "pyautogui.click(undefined_name, 3)"})
        assert failed.is_error and "NameError" in text_of(failed)
        done = mcp.ok("pyautogui", {"code": "DONE"})
        assert done.structured_content == {"signal": "DONE"}
        bad = mcp.call("computer_13", {"action": {"action_type": "FLY"}})
        assert bad.is_error and "FLY" in text_of(bad)
        shot = mcp.ok("screenshot")
        assert shot.content[0].type == "image" and shot.content[0].mime_type == "image/png"
        assert "desktop-frame" in text_of(mcp.ok("accessibility_tree"))
