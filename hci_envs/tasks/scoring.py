"""Scoring a world after an episode with a task's checker. Checkers run on the control plane: they read the
session's files and screen and run commands in it, never through the model's tools.

The server reads the agent's files itself, and while it scores no process of the agent runs (they are
stopped), so nothing can swap a file for a symlink under the check or trace the checker. A ``command`` check
runs as the agent's account (it may run what the agent left in its home), with the system's PATH and none
of the server's environment."""

from __future__ import annotations

import json
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import ConfigError, EnvironmentStateError
from .spec import AllCheck, AnyCheck, CommandCheck, FileCheck, JsonCheck, MeanCheck, PixelCheck


@dataclass
class Score:
    value: float
    passed: bool
    details: list[str] = field(default_factory=list)


def _inside_home(env: Any, relative: str) -> Path:
    home = env.home.resolve()
    path = (home / relative).resolve()
    if home not in path.parents and path != home:
        raise ConfigError(f"checker path {relative!r} leaves the session's home")
    return path


#: The largest file a checker reads: the agent makes the files it reads, and a sparse file of many gigabytes
#: costs the agent nothing and the server its memory.
MAX_CHECKED_FILE = 16 * 1024 * 1024


def read_agent_file(path: Path, limit: int = MAX_CHECKED_FILE) -> bytes:
    """A regular file of the agent's, read without following a symlink at its end and only if it is at most
    ``limit`` bytes long (else OSError EFBIG)."""
    import errno
    import os
    import stat

    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise OSError(errno.EINVAL, "not a regular file")
        if st.st_size > limit:
            raise OSError(errno.EFBIG, f"{st.st_size} bytes, more than a checker reads ({limit})")
        return f.read(limit + 1)[:limit]


def _pointer(data: Any, pointer: str) -> tuple[bool, Any]:
    for part in [p.replace("~1", "/").replace("~0", "~") for p in pointer.split("/")[1:]]:
        if isinstance(data, dict) and part in data:
            data = data[part]
        elif isinstance(data, list) and part.isdigit() and int(part) < len(data):
            data = data[int(part)]
        else:
            return False, None
    return True, data


def _json_equal(a: Any, b: Any) -> bool:
    """Equality as JSON means it: true is not 1, and containers compare element by element."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_json_equal(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_json_equal(x, y) for x, y in zip(a, b))
    return a == b


def _running_desktop(env: Any, check: str) -> Any:
    if getattr(env, "desktop", None) is None:
        raise EnvironmentStateError(f"a {check} check needs the session's desktop, which is not running")
    return env.desktop


def _one(check: Any, env: Any) -> tuple[bool, str]:
    if isinstance(check, FileCheck):
        path = _inside_home(env, check.path)
        if not path.is_file():
            return (not check.exists), f"{check.path}: {'absent' if check.exists else 'absent, as wanted'}"
        if not check.exists:
            return False, f"{check.path}: exists, but should not"
        try:
            text = read_agent_file(path).decode("utf-8", errors="replace")
        except OSError as exc:
            return False, f"{check.path}: unreadable ({exc.strerror or exc})"
        if check.equals is not None and text != check.equals:
            return False, f"{check.path}: {text[:80]!r} is not {check.equals[:80]!r}"
        if check.contains is not None and check.contains not in text:
            return False, f"{check.path}: does not contain {check.contains!r}"
        if check.matches is not None and not re.search(check.matches, text):
            return False, f"{check.path}: does not match {check.matches!r}"
        return True, f"{check.path}: as wanted"
    if isinstance(check, JsonCheck):
        path = _inside_home(env, check.path)
        try:
            data = json.loads(read_agent_file(path).decode("utf-8"))
        except (OSError, ValueError) as exc:
            return False, f"{check.path}: unreadable ({exc})"
        found, value = _pointer(data, check.pointer)
        if not found:
            return False, f"{check.path}{check.pointer}: missing"
        ok = bool(value) if check.is_true else _json_equal(value, check.equals)
        return ok, f"{check.path}{check.pointer} = {json.dumps(value)[:80]}"
    if isinstance(check, CommandCheck):
        desktop = _running_desktop(env, "command")
        try:
            argv = ["bash", "-c", check.run]
            if desktop.account is not None:
                argv = desktop.account.command(argv)
            out = subprocess.run(argv, cwd=env.home, env=desktop.app_env(), capture_output=True,
                                 text=True, timeout=check.timeout, start_new_session=True)
        except subprocess.TimeoutExpired:
            return False, f"`{check.run}` timed out"
        if check.exit_code is not None and out.returncode != check.exit_code:
            return False, f"`{check.run}` exited {out.returncode}"
        if check.stdout_equals is not None and out.stdout != check.stdout_equals:
            return False, f"`{check.run}` printed {out.stdout[:80]!r}"
        if check.stdout_contains is not None and check.stdout_contains not in out.stdout:
            return False, f"`{check.run}` printed no {check.stdout_contains!r}"
        return True, f"`{check.run}` as wanted"
    if isinstance(check, PixelCheck):
        frame = _running_desktop(env, "pixel").screen.grab(check.x, check.y, 1, 1)
        b, g, r = bytes(frame.data[:3])
        ok = all(abs(a - w) <= check.tolerance for a, w in zip((r, g, b), check.color))
        return ok, f"pixel ({check.x}, {check.y}) is {(r, g, b)}"
    raise ConfigError(f"unknown check {type(check).__name__}")


def score(check: Any, env: Any) -> Score:
    """Score the session's world with ``check``: 1.0 when it passes fully. The agent's processes are stopped
    meanwhile."""
    frozen = getattr(env, "agent_frozen", None)
    if frozen is None:
        return _score(check, env)
    with frozen():
        return _score(check, env)


def _score(check: Any, env: Any) -> Score:
    if isinstance(check, AllCheck | AnyCheck | MeanCheck):
        parts = [_score(c, env) for c in check.checks]
        details = [d for p in parts for d in p.details]
        if isinstance(check, AllCheck):
            value = 1.0 if all(p.passed for p in parts) else 0.0
        elif isinstance(check, AnyCheck):
            value = 1.0 if any(p.passed for p in parts) else 0.0
        else:
            value = sum(p.value for p in parts) / len(parts)
        return Score(value, value >= 1.0, details)
    ok, detail = _one(check, env)
    return Score(1.0 if ok else 0.0, ok, [("pass: " if ok else "fail: ") + detail])
