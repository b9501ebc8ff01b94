"""OSWorld's harness for one call of an hci-envs server (:mod:`hci_envs.tasks.osworld`): run an OSWorld task's
set-up, or its evaluator, against a desktop the server already runs, with OSWorld's own ``DesktopEnv``.

    python -m hci_envs.osworld.bridge  < {"command": "setup" | "evaluate", "url": GUEST API, "task": {...},
                                          "cache_dir": DIR}

Runs in OSWorld's environment (desktop-env beside hci-envs' light install); prints one JSON line: ``{"ok": true}``,
``{"score": X}`` or ``{"error": "..."}``.
"""

from __future__ import annotations

import contextlib
import json
import sys
from typing import Any
from urllib.parse import urlsplit

from ..errors import ConfigError


class AttachedProvider:
    """OSWorld's provider interface over a desktop that is already running (its guest API at ``url``): nothing
    to start, revert or stop; the server that owns it does that."""

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        if parts.hostname is None or parts.port is None:
            raise ConfigError(f"not a guest API address: {url!r}")
        # the guest API serves the browser's DevTools and VLC's HTTP interface on its port too
        self.address = f"{parts.hostname}:{parts.port}:{parts.port}:0:{parts.port}"
        self.region = None

    def start_emulator(self, path_to_vm: str, headless: bool, os_type: str | None = None) -> None: ...

    def get_ip_address(self, path_to_vm: str) -> str:
        return self.address

    def save_state(self, path_to_vm: str, snapshot_name: str) -> None: ...

    def revert_to_snapshot(self, path_to_vm: str, snapshot_name: str) -> str:
        return path_to_vm

    def stop_emulator(self, path_to_vm: str, *args: Any, **kwargs: Any) -> None: ...


def run(request: dict[str, Any]) -> dict[str, Any]:
    from .provider import DesktopEnv

    task = request["task"]
    with contextlib.redirect_stdout(sys.stderr):  # the harness prints; the answer is this process's last line
        env = DesktopEnv(provider=AttachedProvider(request["url"]), action_space="pyautogui",
                         require_a11y_tree=False, cache_dir=request.get("cache_dir") or "osworld-cache")
        if request["command"] == "setup":
            env.reset(task_config=task)
            return {"ok": True}
        if request["command"] == "evaluate":
            env._set_task_info(task)  # what reset() sets, without running the set-up again (desktop-env 1.0.2)
            env.setup_controller.reset_cache_dir(env.cache_dir)  # the task's own cache folder, as reset() has it
            env.action_history = list(request.get("actions") or [])
            return {"score": float(env.evaluate())}
    raise ConfigError(f"unknown command {request['command']!r}")


def main() -> int:
    try:
        answer = run(json.loads(sys.stdin.read()))
    except Exception as exc:  # noqa: BLE001 - whatever the harness raised is the caller's answer
        answer = {"error": f"{type(exc).__name__}: {exc}"}
    print(json.dumps(answer), flush=True)
    return 0 if "error" not in answer else 1


if __name__ == "__main__":
    sys.exit(main())
