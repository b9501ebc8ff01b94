"""OSWorld's guest API, served by a session's desktop: the HTTP routes OSWorld's harness (``desktop-env``) calls on
the server inside its virtual machine, written here from the API's behaviour.

Every command, file read and file write runs on the agent's side of the session (its account, its home, its
display), never as this server. The routes answer as OSWorld's own server does, down to the JSON keys its
client reads, so that the harness runs unchanged. The API is reached on a port of its own (``serve
--osworld-port``), which only the desktop's owner may call: see :class:`OwnerGuard`.

What is not served yet answers 501 with the reason (``UNSUPPORTED``), never a silent success.
"""

from __future__ import annotations

import json
import logging
import os
import posixpath
import re
import shlex
import subprocess
import time
import urllib.parse
from collections import deque
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from ..tools.osworld_profile import agent_env, check_program, run_as_agent

#: How long a command of /execute may run (OSWorld's server gives it as much).
EXECUTE_TIMEOUT = 120.0
#: /run_python's and /run_bash_script's defaults.
PYTHON_TIMEOUT = 30.0
BASH_TIMEOUT = 100.0
#: How long /setup/open_file waits for the file's window (OSWorld's server waits half an hour; a task whose app
#: has not shown its window in five minutes will not).
OPEN_TIMEOUT = 300.0
#: The longest script /run_bash_script takes (it goes to bash as one argument; Linux allows 128 KiB).
MAX_ARGUMENT = 120 * 1024
#: Calls of the API that run at once (more wait their turn).
GUEST_CALLS = 4
#: The longest a caller may ask a command, script or verification to run.
MAX_TIMEOUT = 3600.0
#: The most a file read or upload may hold in memory.
MAX_FILE = 256 * 1024 * 1024
#: How many of the programs /setup/launch started a failed verification tells of (the last ones).
LAUNCHES_KEPT = 8
#: GNOME's background, as OSWorld's server sets and reads it.
WALLPAPER_KEY = ("org.gnome.desktop.background", "picture-uri")

Handler = Callable[[Request], Awaitable[Response]]
log = logging.getLogger(__name__)


class GuestError(Exception):
    """A refusal of a route, answered as JSON with ``status`` (OSWorld's client reads the body as JSON)."""

    def __init__(self, status: int, message: str, **extra: Any) -> None:
        super().__init__(message)
        self.status = status
        self.body = {"status": "error", "message": message, "error": message, **extra}


class GuestApi:
    """The routes over one session of a server (``find()`` gives it, or raises SessionNotFoundError when it is
    gone): the default session on ``serve --osworld-port``, each other session on a port of its own
    (:class:`SessionGuest`)."""

    def __init__(self, find: Callable[[], Any]) -> None:
        self.find = find
        self._limiter = anyio.CapacityLimiter(GUEST_CALLS)
        # (desktop, command, process, its output's file) of the last programs /setup/launch started
        self._launched: deque[tuple[Any, str, subprocess.Popen[bytes], Path]] = deque(maxlen=LAUNCHES_KEPT)

    # -- the session's desktop ------------------------------------------------------------------------------
    async def _session(self) -> Any:
        from ..errors import SessionNotFoundError

        try:
            session = self.find()
        except SessionNotFoundError:
            raise GuestError(503, "the desktop is not running") from None
        if getattr(session, "closed", False):
            raise GuestError(503, "the session has closed")
        await session.ensure_started()
        if session.env.desktop is None:
            raise GuestError(503, "the desktop is not running")
        return session

    async def _call(self, fn: Callable[..., Any], *args: Any, changes: bool = True) -> Any:
        session = await self._session()
        if changes:
            # What the harness does through the API acts on the desktop: the next reset (OSWorld's revert) must
            # rebuild it, as after an agent's step (the control plane's doing, not the agent's).
            session.env.episode.touch(by_agent=False)
        desktop = session.env.desktop
        # A limiter of the API's own: a command that takes its two minutes, or a file that never ends, holds
        # none of the workers the session's control plane (reset, step) needs.
        return await anyio.to_thread.run_sync(lambda: fn(desktop, *args), limiter=self._limiter)

    # -- running things as the agent -----------------------------------------------------------------------
    @staticmethod
    def run(desktop: Any, argv: list[str], *, timeout: float, stdin: bytes | None = None,
            cwd: str | None = None, merge: bool = False) -> tuple[int | None, bytes, bytes]:
        """:func:`~hci_envs.tools.osworld_profile.run_as_agent`; a program that is not there fails the route, as
        on OSWorld's server (not an exit code 127)."""
        try:
            if "/" in argv[0] and argv[0] not in ("/bin/sh", "/bin/bash"):  # a path: is it there, as the agent sees?
                there, _, _ = run_as_agent(desktop, ["/bin/sh", "-c", 'test -x "$0"', argv[0]], timeout=10)
                if there != 0:
                    raise FileNotFoundError(2, "No such file or directory", argv[0])
            return run_as_agent(desktop, argv, timeout=timeout, stdin=stdin, cwd=cwd, merge=merge)
        except FileNotFoundError as exc:
            raise GuestError(500, f"[Errno 2] No such file or directory: {exc.filename or argv[0]!r}") from None

    @staticmethod
    def expand(desktop: Any, path: str) -> str:
        """``~`` and ``$VARS`` as the agent's shell would expand them (its home, its environment)."""
        env = desktop.app_env()
        if path == "~" or path.startswith("~/"):
            path = env["HOME"] + path[1:]
        return _VARIABLE.sub(lambda m: env.get(m[1] or m[2], m[0]), path)

    # -- routes ---------------------------------------------------------------------------------------------
    async def screenshot(self, request: Request) -> Response:
        # with the pointer drawn in, as OSWorld's server gives it (its agents see where they point)
        image = await self._call(lambda desktop: desktop.screen.capture(fmt="png", cursor=True), changes=False)
        return Response(image.data, media_type="image/png")

    async def accessibility(self, request: Request) -> Response:
        from ..adapters.osworld_actions import accessibility_tree_xml
        from ..desktop.a11y_model import Query

        def read(desktop: Any) -> str:
            if desktop.accessibility is None:
                raise GuestError(503, "this desktop has no accessibility bus")
            # The app that gets the keys has handled every key sent before this (the agent's pyautogui sends them
            # on a connection of its own; the question goes after them): the tree shows what they did, as a
            # getter reading an address bar right after the solution's last keys expects.
            desktop.input.handled(timeout=2.0)
            tree = desktop.accessibility.tree(Query(visible_only=False, max_nodes=10_000), remember=False)
            return accessibility_tree_xml(tree.to_dict())

        return JSONResponse({"AT": await self._call(read, changes=False)})

    async def terminal(self, request: Request) -> Response:
        # The focused GNOME terminal's text (OSWorld's reads it from the accessibility tree), here from the log of
        # the terminal its gnome-terminal starts (tools.osworld_terminal); null when no such terminal has the
        # focus, as on OSWorld's machine (the harness also uses this route as its liveness probe).
        from ..tools.osworld_terminal import terminal_text

        output = await self._call(lambda desktop: terminal_text(desktop, _read_as_agent), changes=False)
        return JSONResponse({"output": output, "status": "success"})

    async def execute(self, request: Request) -> Response:
        body = await _json(request)
        command, shell = body.get("command"), _truthy(body.get("shell", False))
        timeout = _seconds(body, "timeout", EXECUTE_TIMEOUT)

        def run(desktop: Any) -> dict[str, Any]:
            argv = self._argv(desktop, command, shell)
            code, out, err = self.run(desktop, argv, timeout=timeout)
            if code is None:
                raise GuestError(500, f"the command did not finish within {timeout:g} seconds")
            return {"status": "success", "output": out.decode("utf-8", "replace"),
                    "error": err.decode("utf-8", "replace"), "returncode": code}

        return JSONResponse(await self._call(run))

    async def execute_with_verification(self, request: Request) -> Response:
        """/execute, then wait until a window's title contains ``verification.window_exists`` and/or the shell
        command ``verification.command_success`` succeeds, checking every ``check_interval`` seconds for up to
        ``max_wait_time``."""
        body = await _json(request)
        command, shell = body.get("command"), _truthy(body.get("shell", False))
        verification = body.get("verification") or {}
        if not isinstance(verification, dict):
            raise GuestError(400, "verification must be an object")
        max_wait = _seconds(body, "max_wait_time", 10.0)
        interval = max(0.05, _seconds(body, "check_interval", 1.0))

        def run(desktop: Any) -> tuple[int, dict[str, Any]]:
            code, out, err = self.run(desktop, self._argv(desktop, command, shell), timeout=EXECUTE_TIMEOUT)
            if code is None:
                raise GuestError(500, f"the command did not finish within {EXECUTE_TIMEOUT:g} seconds")
            answer = {"status": "success", "output": out.decode("utf-8", "replace"),
                      "error": err.decode("utf-8", "replace"), "returncode": code}
            if not verification:
                return 200, answer
            started = time.monotonic()
            while True:
                waited = time.monotonic() - started
                if self._verified(desktop, verification):
                    return 200, {**answer, "verification": "passed", "wait_time": round(waited, 3)}
                if waited >= max_wait:
                    # the windows there were and what became of the programs launched, so that a failed set-up
                    # says what it saw instead of what it missed
                    return 500, {**answer, "status": "verification_failed", "verification": "failed",
                                 "wait_time": max_wait, "windows": self._titles(desktop),
                                 "launched": self._launches(desktop)}
                time.sleep(interval)

        status, answer = await self._call(run)
        return JSONResponse(answer, status_code=status)

    @staticmethod
    def _titles(desktop: Any) -> list[str]:
        try:
            return desktop.window_titles()
        except Exception as exc:  # noqa: BLE001 - the desktop may be gone: say so rather than fail the answer
            return [f"(the windows could not be read: {type(exc).__name__}: {exc})"]

    def _launches(self, desktop: Any) -> list[dict[str, Any]]:
        """The programs /setup/launch started on this desktop: each one's command, its exit status (None while it
        runs) and the last lines it wrote."""
        from ..desktop.display import log_tail

        return [{"command": shown, "exit": process.poll(), "output": log_tail(path)}
                for where, shown, process, path in self._launched if where is desktop]

    def _verified(self, desktop: Any, verification: dict[str, Any]) -> bool:
        window = verification.get("window_exists")
        if window and not any(str(window).lower() in title.lower() for title in desktop.window_titles()):
            return False
        check = verification.get("command_success")
        if check and self.run(desktop, ["/bin/sh", "-c", str(check)], timeout=5)[0] != 0:
            return False
        return True

    def _argv(self, desktop: Any, command: Any, shell: bool) -> list[str]:
        if isinstance(command, str) and command:
            _text(command, "command")
            if shell:
                return ["/bin/sh", "-c", command]
            try:
                return self._expanded(desktop, shlex.split(command))
            except ValueError as exc:
                raise GuestError(400, f"command: {exc}") from None
        if isinstance(command, list) and command and all(isinstance(part, str) for part in command):
            for part in command:
                if "\0" in part:
                    raise GuestError(400, "command must not hold a NUL character")
            # with a shell, as POSIX does: the first item is the script, the rest its arguments
            return ["/bin/sh", "-c", *command] if shell else self._expanded(desktop, command)
        raise GuestError(400, "command must be a non-empty string or list of strings")

    def _expanded(self, desktop: Any, argv: list[str]) -> list[str]:
        home = desktop.app_env()["HOME"]
        return [home + part[1:] if part.startswith("~/") else part for part in argv]

    async def launch(self, request: Request) -> Response:
        body = await _json(request)
        command, shell = body.get("command"), _truthy(body.get("shell", False))
        shown = command if isinstance(command, str) else \
            " ".join(map(str, command)) if isinstance(command, list) else ""
        if _DEVTOOLS_FORWARD.match(shown.strip()):
            # OSWorld's tasks forward the browser's DevTools port with socat; here the DevTools are on this
            # API's port (hci_envs.server.osworld_devtools) and the agent opens no port for them
            return PlainTextResponse(f"{shown} not needed: the browser's DevTools are served on this port")

        def start(desktop: Any) -> str:
            argv = self._argv(desktop, command, shell)
            env = agent_env(desktop)
            try:
                check_program(argv[0], env)
            except FileNotFoundError:
                raise GuestError(500, f"[Errno 2] No such file or directory: {argv[0]!r}") from None
            # its output is kept (the server's file) so that a set-up that then waits in vain can say why
            path = desktop.log_file("osworld-launch")
            try:
                with open(path, "wb") as output:
                    process = desktop.spawn_agent("osworld-launch", argv, env=env, stdin=subprocess.DEVNULL,
                                                  stdout=output.fileno(), stderr=output.fileno())
            except FileNotFoundError as exc:
                raise GuestError(500, f"no such program: {exc.filename or argv[0]}") from None
            self._launched.append((desktop, shown, process, path))
            return f"{shown} launched successfully"

        return PlainTextResponse(await self._call(start))

    async def vlc(self, request: Request) -> Response:
        """VLC's HTTP interface (``/requests/...``), forwarded to the agent's player with its own password
        (:mod:`hci_envs.tools.osworld_vlc`): OSWorld's ``vlc_playing_info`` reads ``/requests/status.xml``."""
        import base64
        import http.client as http_client

        from ..tools.osworld_vlc import STATE_NAME
        from ..sandbox.peers import socket_owner

        target = request.url.path + (f"?{request.url.query}" if request.url.query else "")

        def forward(desktop: Any) -> Response:
            runtime = desktop.app_env()["XDG_RUNTIME_DIR"]
            try:
                state = json.loads(_read_as_agent(desktop, posixpath.join(runtime, STATE_NAME)))
                port, password = int(state["port"]), str(state["password"])
            except (GuestError, ValueError, KeyError, TypeError):
                raise GuestError(503, "VLC with its HTTP interface is not running on the desktop: start vlc") from None
            auth = base64.b64encode(f":{password}".encode()).decode()
            http = http_client.HTTPConnection("127.0.0.1", port, timeout=30)
            try:
                http.connect()
                # the file is the agent's to write: the port must be its own player's, not a service of someone
                # else on the machine that this server would call for it
                agent = desktop.account.uid if desktop.account is not None else os.getuid()
                if socket_owner(("127.0.0.1", port), http.sock.getsockname()[:2]) != agent:
                    raise GuestError(503, "VLC's HTTP interface is not the agent's player's")
                http.request("GET", target, headers={"Authorization": f"Basic {auth}"})
                answer = http.getresponse()
                body, status, kind = answer.read(MAX_FILE), answer.status, answer.getheader("Content-Type")
            except (OSError, http_client.HTTPException) as exc:
                raise GuestError(503, f"VLC's HTTP interface does not answer: {exc}") from None
            finally:
                http.close()
            return Response(body, status_code=status, media_type=kind or "application/octet-stream")

        return await self._call(forward, changes=bool(request.url.query))

    async def file(self, request: Request) -> Response:
        form = await request.form()
        path = _text(form.get("file_path"), "file_path", missing="file_path is required")

        def read(desktop: Any) -> bytes:
            return _read_as_agent(desktop, self.expand(desktop, path))

        data = await self._call(read, changes=False)
        name = posixpath.basename(path)
        return Response(data, media_type="application/octet-stream",
                        headers={"Content-Disposition": f'attachment; filename="{_header_safe(name)}"'})

    async def upload(self, request: Request) -> Response:
        form = await request.form()
        path, data = form.get("file_path"), form.get("file_data")
        if not isinstance(path, str) or not path or data is None or isinstance(data, str):
            raise GuestError(400, "file_path and file_data are required")
        _text(path, "file_path")
        if data.size is None or data.size > MAX_FILE:
            raise GuestError(413, f"the file is larger than {MAX_FILE} bytes")
        content = await data.read()

        def write(desktop: Any) -> int:
            full = self.expand(desktop, path)
            script = 'mkdir -p -- "$(dirname -- "$1")" && cat > "$1"'
            code, _, err = self.run(desktop, ["/bin/sh", "-c", script, "sh", full], timeout=120, stdin=content)
            if code != 0:
                raise GuestError(500, f"could not write {full}: {err.decode('utf-8', 'replace').strip()}")
            return len(content)

        written = await self._call(write)
        return PlainTextResponse(f"File Uploaded: {written} bytes")

    async def screen_size(self, request: Request) -> Response:
        width, height = await self._call(lambda desktop: desktop.size, changes=False)
        return JSONResponse({"width": width, "height": height})

    async def window_size(self, request: Request) -> Response:
        form = await request.form()
        name = _text(form.get("app_class_name"), "app_class_name", missing="app_class_name is required")

        def find(desktop: Any) -> dict[str, int]:
            for window in desktop.windows():
                if name.lower() in (n.lower() for n in _wm_class(desktop, window)):
                    box = desktop.input.window_box(window)
                    if box is not None:
                        return {"width": box[2], "height": box[3]}
            raise GuestError(404, f"no window of class {name!r}")

        return JSONResponse(await self._call(find, changes=False))

    async def desktop_path(self, request: Request) -> Response:
        def find(desktop: Any) -> str:
            path = posixpath.join(desktop.app_env()["HOME"], "Desktop")
            code, _, _ = self.run(desktop, ["test", "-d", path], timeout=10)
            if code != 0:
                raise GuestError(404, f"{path} does not exist")
            return path

        return JSONResponse({"desktop_path": await self._call(find, changes=False)})

    async def list_directory(self, request: Request) -> Response:
        body = await _json(request)
        path = _text(body.get("path"), "path", missing="Missing 'path' parameter")

        def walk(desktop: Any) -> Any:
            # -I, as the file reader: none of the agent's own modules (a json.py in its home, its site-packages)
            code, out, err = self.run(desktop, ["python3", "-I", "-c", _TREE_SCRIPT, path], timeout=60)
            if code == 2:
                raise GuestError(400, "The provided path is not a directory")
            if code != 0:
                raise GuestError(500, err.decode("utf-8", "replace").strip() or "listing failed")
            try:
                return json.loads(out)
            except ValueError:
                raise GuestError(500, "the listing was not JSON") from None

        return JSONResponse({"directory_tree": await self._call(walk, changes=False)})

    async def change_wallpaper(self, request: Request) -> Response:
        # GNOME's background setting, as OSWorld's server sets it (gsettings, in the agent's settings: see
        # tools.osworld_profile.agent_env). Nothing draws it: the window manager has no background.
        body = await _json(request)
        path = _text(body.get("path"), "path", missing="Missing 'path' parameter")

        def change(desktop: Any) -> None:
            full = self.expand(desktop, path)
            if self.run(desktop, ["test", "-f", full], timeout=10)[0] != 0:
                raise GuestError(404, f"File not found: {full}")
            code, _, err = self.run(desktop, ["gsettings", "set", *WALLPAPER_KEY, f"file://{full}"], timeout=30)
            if code != 0:
                raise GuestError(500, f"gsettings: {err.decode('utf-8', 'replace').strip()}")

        await self._call(change)
        return Response("Wallpaper changed successfully")

    async def wallpaper(self, request: Request) -> Response:
        def read(desktop: Any) -> bytes:
            code, out, err = self.run(desktop, ["gsettings", "get", *WALLPAPER_KEY], timeout=30)
            if code != 0:
                raise GuestError(500, f"gsettings: {err.decode('utf-8', 'replace').strip()}")
            uri = out.decode("utf-8", "replace").strip().strip("'")
            path = urllib.parse.unquote(uri.removeprefix("file://"))
            if not path.startswith("/"):
                raise GuestError(404, f"the wallpaper is not a file ({uri!r})")
            return _read_as_agent(desktop, path)

        return Response(await self._call(read, changes=False), media_type="application/octet-stream")

    async def open_file(self, request: Request) -> Response:
        body = await _json(request)
        path = _text(body.get("path"), "path", missing="path is required")

        def start(desktop: Any) -> tuple[str, set[str]]:
            full = self.expand(desktop, path)
            exists, _, _ = self.run(desktop, ["test", "-e", full], timeout=10)
            if exists == 0:
                opener, _, _ = self.run(desktop, ["/bin/sh", "-c", "command -v xdg-open"], timeout=10)
                if opener != 0:  # else the spawn's FileNotFoundError would answer a bare 500
                    raise GuestError(500, "xdg-open is not installed on this desktop (Debian's xdg-utils): OSWorld's "
                                          f"open step opens files with it, so {full} cannot be opened")
                argv = ["xdg-open", full]
                base = posixpath.basename(full)
                names = {base, posixpath.splitext(base)[0]}
            else:
                code, _, _ = self.run(desktop, ["/bin/sh", "-c", 'command -v -- "$1"', "sh", full], timeout=10)
                if code != 0:
                    raise GuestError(404, f"Application/file not found: {full}")
                argv, names = [full], {full}
            desktop.spawn_agent("osworld-open", argv, env=agent_env(desktop), stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            return full, {name for name in names if name}

        def activate_if_shown(desktop: Any, names: set[str]) -> bool:
            for window in desktop.windows():
                if any(name in desktop.input.window_title(window) for name in names):
                    desktop.input.activate(window)
                    return True
            return False

        full, names = await self._call(start)
        # polled between looks, not in one blocking call: the wait holds no worker of the session's control plane
        deadline = time.monotonic() + OPEN_TIMEOUT
        while time.monotonic() < deadline:
            if await self._call(activate_if_shown, names):
                return PlainTextResponse("File opened and window activated successfully")
            if await request.is_disconnected():
                raise GuestError(499, "the caller went away")
            await anyio.sleep(0.2)
        raise GuestError(500, f"Failed to find window for {full} within {OPEN_TIMEOUT:g} seconds.")

    async def activate_window(self, request: Request) -> Response:
        return await self._on_window(request, "activate", "Window activated successfully")

    async def close_window(self, request: Request) -> Response:
        return await self._on_window(request, "close_window", "Window closed successfully.")

    async def _on_window(self, request: Request, method: str, answer: str) -> Response:
        body = await _json(request)
        name = _text(body.get("window_name"), "window_name", missing="window_name is required")
        strict, by_class = _truthy(body.get("strict", False)), _truthy(body.get("by_class", False))

        def act(desktop: Any) -> None:
            for window in desktop.windows():
                if _window_matches(desktop, window, name, strict=strict, by_class=by_class):
                    getattr(desktop.input, method)(window)
                    return

        await self._call(act)
        return PlainTextResponse(answer)  # as OSWorld's server: the answer does not say whether one matched

    async def run_python(self, request: Request) -> Response:
        body = await _json(request)
        code_text = body.get("code")
        if not isinstance(code_text, str) or not code_text:
            raise GuestError(400, "Code not supplied!", need_more=False, output=None)
        _text(code_text, "code")

        def run(desktop: Any) -> dict[str, Any]:
            code, out, err = self.run(desktop, ["python3", "-"], timeout=PYTHON_TIMEOUT, stdin=code_text.encode())
            if code is None:
                raise GuestError(500, "Execution timeout: Code took too long to execute", error="TimeoutExpired",
                                 need_more=False, output=None)
            output, error = out.decode("utf-8", "replace"), err.decode("utf-8", "replace")
            if code != 0 and not error:
                error = f"Process exited with code {code}"
            message = output + ("\n" + error if output and error else error)
            return {"status": "success" if code == 0 else "error", "message": message, "need_more": False,
                    "output": output, "error": error, "return_code": code}

        return JSONResponse(await self._call(run))

    async def run_bash_script(self, request: Request) -> Response:
        body = await _json(request)
        script = body.get("script")
        if not isinstance(script, str) or not script:
            return JSONResponse({"status": "error", "output": "Script not supplied!", "error": "", "returncode": -1},
                                status_code=400)
        timeout = _seconds(body, "timeout", BASH_TIMEOUT)
        working_dir = body.get("working_dir")
        if working_dir is not None and working_dir != "":
            _text(working_dir, "working_dir")
        _text(script, "script")
        if len(script.encode()) > MAX_ARGUMENT:
            raise GuestError(400, f"the script is longer than {MAX_ARGUMENT} bytes")

        def run(desktop: Any) -> tuple[int, dict[str, Any]]:
            cwd = self.expand(desktop, working_dir) if isinstance(working_dir, str) and working_dir else None
            if cwd is not None and self.run(desktop, ["test", "-d", cwd], timeout=10)[0] != 0:
                return 400, {"status": "error", "output": f"Working directory does not exist: {cwd}", "error": "",
                             "returncode": -1}
            # the script as bash's argument, not its stdin: a command in it that reads stdin must not eat the rest
            code, out, _ = self.run(desktop, ["/bin/bash", "-c", script], timeout=timeout, cwd=cwd, merge=True)
            if code is None:
                return 500, {"status": "error", "output": f"Script execution timed out after {timeout:g} seconds",
                             "error": "", "returncode": -1}
            return 200, {"status": "success" if code == 0 else "error", "output": out.decode("utf-8", "replace"),
                         "error": "", "returncode": code}

        status, answer = await self._call(run)
        return JSONResponse(answer, status_code=status)

    async def platform(self, request: Request) -> Response:
        return PlainTextResponse("Linux")

    async def cursor_position(self, request: Request) -> Response:
        x, y = await self._call(lambda desktop: desktop.input.pointer(), changes=False)
        return JSONResponse([x, y])

    async def unsupported(self, request: Request) -> Response:
        reason = _UNSUPPORTED.get(request.url.path, "not served by hci-envs")
        return JSONResponse({"status": "error", "code": "UNSUPPORTED", "message": f"{request.url.path}: {reason}"},
                            status_code=501)

    def routes(self) -> list[Route]:
        post, get = ["POST"], ["GET"]
        table: list[tuple[str, Handler, list[str]]] = [
            ("/screenshot", self.screenshot, get),
            ("/accessibility", self.accessibility, get),
            ("/terminal", self.terminal, get),
            ("/execute", self.execute, post),
            ("/setup/execute", self.execute, post),
            ("/setup/launch", self.launch, post),
            ("/setup/execute_with_verification", self.execute_with_verification, post),
            ("/execute_with_verification", self.execute_with_verification, post),
            ("/file", self.file, post),
            ("/setup/upload", self.upload, post),
            ("/screen_size", self.screen_size, post),
            ("/window_size", self.window_size, post),
            ("/desktop_path", self.desktop_path, post),
            ("/list_directory", self.list_directory, post),
            ("/setup/open_file", self.open_file, post),
            ("/setup/change_wallpaper", self.change_wallpaper, post),
            ("/wallpaper", self.wallpaper, post),
            ("/setup/activate_window", self.activate_window, post),
            ("/setup/close_window", self.close_window, post),
            ("/run_python", self.run_python, post),
            ("/run_bash_script", self.run_bash_script, post),
            ("/platform", self.platform, get),
            ("/cursor_position", self.cursor_position, get),
            ("/requests/{rest:path}", self.vlc, get),
        ] + [(path, self.unsupported, ["GET", "POST"]) for path in _UNSUPPORTED]
        from .osworld_devtools import DevTools

        return ([Route(path, _answering(handler), methods=methods) for path, handler, methods in table]
                + DevTools(self._session).routes(_answering))


#: Routes of OSWorld's guest server not served yet, and why.
_UNSUPPORTED = {
    "/start_recording": "record episodes with hci-envs' recorder (POST /recording) instead",
    "/end_recording": "record episodes with hci-envs' recorder (POST /recording) instead",
    "/setup/download_file": "downloads go through the harness's cache (the download set-up step)",
}


def _answering(handler: Handler) -> Handler:
    """A route whose refusals are JSON bodies with their status, and whose failures are not crashes."""

    async def route(request: Request) -> Response:
        from ..errors import HciEnvsError

        try:
            return await handler(request)
        except GuestError as exc:
            return JSONResponse(exc.body, status_code=exc.status)
        except HciEnvsError as exc:
            return JSONResponse({"status": "error", "message": exc.message, "error": exc.message,
                                 "code": exc.code}, status_code=exc.http_status)
        except (ValueError, TypeError, UnicodeError, RecursionError) as exc:  # input no check above foresaw
            message = f"bad request: {type(exc).__name__}: {exc}"[:500]
            return JSONResponse({"status": "error", "message": message, "error": message}, status_code=400)
        except Exception as exc:  # noqa: BLE001 - a fault of ours or of the X library: said, logged, never a crash
            log.exception("OSWorld's guest API: %s failed", request.url.path)
            message = f"internal error: {type(exc).__name__}: {exc}"[:500]
            return JSONResponse({"status": "error", "message": message, "error": message}, status_code=500)

    return route


def _seconds(body: dict[str, Any], key: str, default: float) -> float:
    """A duration from the body: a finite number of seconds from 0 to MAX_TIMEOUT."""
    value = body.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= MAX_TIMEOUT:
        raise GuestError(400, f"{key} must be a number of seconds from 0 to {MAX_TIMEOUT:g}")
    return float(value)


def _text(value: Any, what: str, missing: str | None = None) -> str:
    """A string the agent's side can take as an argument: no NUL character, no lone surrogate. ``missing``: the
    refusal when there is none (OSWorld's server words some)."""
    if not isinstance(value, str) or not value:
        raise GuestError(400, missing or f"{what} must be a non-empty string")
    if "\0" in value:
        raise GuestError(400, f"{what} must not hold a NUL character")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise GuestError(400, f"{what} is not valid text (a lone surrogate)") from None
    return value


async def _json(request: Request) -> dict[str, Any]:
    try:
        body = await request.json()
    except (ValueError, RecursionError):
        raise GuestError(400, "the body must be JSON") from None
    if not isinstance(body, dict):
        raise GuestError(400, "the body must be a JSON object")
    return body


def _truthy(value: Any) -> bool:
    """OSWorld's task files send ``"shell": "true"`` as well as ``true``; its server takes any truthy value."""
    if isinstance(value, str):
        return value.strip().lower() not in ("", "0", "false", "no")
    return bool(value)


#: $NAME and ${NAME}, expanded from the agent's environment (not the server's); unknown ones stay as they are.
#: socat forwarding one loopback TCP port to another, as OSWorld's tasks start it for the browser's DevTools.
_DEVTOOLS_FORWARD = re.compile(r"^socat\s+tcp-listen:\d+(,fork)?\s+tcp:(localhost|127\.0\.0\.1):\d+$", re.IGNORECASE)
_VARIABLE = re.compile(r"\$(?:(\w+)|\{(\w+)\})")


def _header_safe(name: str) -> str:
    return "".join(c if 32 <= ord(c) < 127 and c not in '"\\' else "_" for c in name)


def _wm_class(desktop: Any, window: int) -> tuple[str, ...]:
    return desktop.input.window_class(window)


def _window_matches(desktop: Any, window: int, name: str, *, strict: bool, by_class: bool) -> bool:
    """wmctrl's matching: a title (or, by class, "instance.Class") that contains the name, ignoring case; strict:
    equal to it."""
    if by_class:
        parts = _wm_class(desktop, window)
        candidates = [".".join(parts), *parts] if parts else []
    else:
        candidates = [desktop.input.window_title(window)]
    if strict:
        return name in candidates
    return any(name.lower() in c.lower() for c in candidates)


#: Reads a regular file as the agent to stdout: 2 when it cannot be opened, 3 when it is no regular file (a FIFO
#: would never end, a device never stop), 4 when it is larger than the limit given.
_READ_SCRIPT = r"""
import os, stat, sys
try:
    fd = os.open(sys.argv[1], os.O_RDONLY | os.O_NONBLOCK)
except OSError as exc:
    sys.stderr.write(str(exc)); sys.exit(2)
st = os.fstat(fd)
if not stat.S_ISREG(st.st_mode):
    sys.exit(3)
tail = int(sys.argv[3])
if tail:  # only the end: a log that grows as it is read gives its last bytes, never more
    os.lseek(fd, max(0, st.st_size - tail), os.SEEK_SET)
elif st.st_size > int(sys.argv[2]):
    sys.exit(4)
os.set_blocking(fd, True)
budget = tail or None
while budget is None or budget > 0:
    chunk = os.read(fd, 1 << 20 if budget is None else min(1 << 20, budget))
    if not chunk:
        break
    sys.stdout.buffer.write(chunk)
    if budget is not None:
        budget -= len(chunk)
"""
#: How long reading one file may take.
READ_TIMEOUT = 120.0


def _read_as_agent(desktop: Any, path: str, *, tail: int = 0) -> bytes:
    """A file's bytes as the agent reads them, at most MAX_FILE of them: whatever the agent's side sends, this
    process holds no more than that (-I: none of the agent's own modules or site-packages run in the reader).
    With ``tail``, only its last ``tail`` bytes, whatever its size."""
    import selectors

    proc = desktop.spawn_agent("osworld-file", ["python3", "-I", "-c", _READ_SCRIPT, path, str(MAX_FILE), str(tail)],
                               env=agent_env(desktop), cwd=desktop.agent_home, stdin=subprocess.DEVNULL,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    chunks: list[bytes] = []
    size = 0
    deadline = time.monotonic() + READ_TIMEOUT
    try:
        with selectors.DefaultSelector() as selector:
            selector.register(proc.stdout, selectors.EVENT_READ)
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise GuestError(504, f"reading {path} took more than {READ_TIMEOUT:g} seconds")
                if not selector.select(left):
                    continue
                chunk = os.read(proc.stdout.fileno(), 1 << 20)
                if not chunk:
                    break
                size += len(chunk)
                if size > MAX_FILE:
                    raise GuestError(413, f"the file is larger than {MAX_FILE} bytes")
                chunks.append(chunk)
        code = proc.wait(timeout=10)
        error = proc.stderr.read(4096).decode("utf-8", "replace").strip()
    finally:
        desktop.processes.stop(proc, timeout=1.0)
        proc.stdout.close()
        proc.stderr.close()
    if code == 3:
        raise GuestError(400, f"{path} is not a regular file")
    if code == 4:
        raise GuestError(413, f"the file is larger than {MAX_FILE} bytes")
    if code != 0:
        raise GuestError(404, "File not found", detail=error)
    return b"".join(chunks)


#: Lists a directory as OSWorld's server does ({"type", "name", "children"}), run as the agent.
_TREE_SCRIPT = r"""
import json, os, sys
def tree(path):
    node = {"type": "directory", "name": os.path.basename(path), "children": []}
    for entry in os.listdir(path):
        full = os.path.join(path, entry)
        try:
            node["children"].append(tree(full) if os.path.isdir(full) and not os.path.islink(full)
                                    else {"type": "file", "name": entry})
        except OSError as exc:
            node["children"].append({"error": str(exc)})
    return node
if not os.path.isdir(sys.argv[1]):
    sys.exit(2)
json.dump(tree(sys.argv[1]), sys.stdout)
"""


def guest_app(find: Callable[[], Any]) -> Any:
    """The guest API over the session ``find()`` gives, as an ASGI app: web pages (a foreign Origin) and
    foreign Host names (DNS rebinding) are refused, as on the main port."""
    from .guards import HostGuard

    return HostGuard(Starlette(routes=GuestApi(find).routes()), check_origin=True, check_host=True)


class SessionGuest:
    """OSWorld's guest API for one session beside the default one, on a loopback port of its own (OSWorld's
    harness addresses a desktop by host and port only), served on the server's event loop from the session's
    start to its close, to the same owner as ``--osworld-port``. :meth:`in_own_thread` serves an environment
    that no server serves (``World``'s, or a session of a server started without ``--osworld-port``)."""

    def __init__(self, session: Any, owner: int) -> None:
        import asyncio
        import socket

        import uvicorn

        self._loop = asyncio.get_running_loop()
        self._thread: Any = None  # the thread running the loop, when the loop is this guest's own
        self._socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._socket.bind(("127.0.0.1", 0))  # connections wait in the backlog until the server below takes them
        self._socket.listen(64)
        self.port = self._socket.getsockname()[1]
        app = OwnerGuard(guest_app(lambda: session), owner)
        config = uvicorn.Config(app, lifespan="off", log_level="warning", access_log=False, proxy_headers=False,
                                ws_per_message_deflate=False, timeout_keep_alive=5)
        config.load()
        self._server = uvicorn.Server(config)
        # startup() and shutdown() only: serve() would take the process's signals from the main server
        self._server.lifespan = config.lifespan_class(config)
        self._started = self._loop.create_task(self._server.startup(sockets=[self._socket]))

    @classmethod
    def in_own_thread(cls, env: Any, owner: int) -> SessionGuest:
        """The API over ``env`` (an environment, not a server's session), served from an event loop of its own
        in a thread of its own, until :meth:`close`."""
        import asyncio
        import threading

        loop = asyncio.new_event_loop()
        thread = threading.Thread(target=loop.run_forever, name="hci-envs-osworld-guest", daemon=True)
        thread.start()

        async def make() -> SessionGuest:
            return cls(_Unserved(env), owner)

        try:
            guest = asyncio.run_coroutine_threadsafe(make(), loop).result(timeout=30)
        except BaseException:
            loop.call_soon_threadsafe(loop.stop)
            raise
        guest._thread = thread
        return guest

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def close(self) -> None:
        """Stop serving (from any thread but the loop's: the session's closers run in worker threads)."""
        import asyncio

        async def stop() -> None:
            await self._started
            await self._server.shutdown(sockets=[self._socket])

        try:
            asyncio.run_coroutine_threadsafe(stop(), self._loop).result(timeout=10)
        except Exception:  # noqa: BLE001 - the loop has ended (the server is going): the socket goes with it
            pass
        finally:
            self._socket.close()
            if self._thread is not None:
                self._loop.call_soon_threadsafe(self._loop.stop)
                self._thread.join(timeout=10)
                if not self._thread.is_alive():
                    self._loop.close()


class _Unserved:
    """An environment with no server around it, as the guest API sees a session: always started (its resets
    are its owner's), closed when the environment is."""

    def __init__(self, env: Any) -> None:
        self.env = env

    @property
    def closed(self) -> bool:
        return bool(getattr(self.env, "closed", False))

    async def ensure_started(self) -> None:
        return None


class OwnerGuard:
    """Lets through only connections from the desktop's owner: OSWorld's harness sends no credentials, so the
    guest API is reached on a loopback port of its own, and the kernel's table of sockets says who opened each
    connection (as for the agent side, :mod:`hci_envs.server.guards`). Anyone else, the session's agent above
    all, is refused with 403: the API runs commands on the desktop and reads its files."""

    def __init__(self, app: Any, owner: int) -> None:
        self.app = app
        self.owner = owner

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        from ..sandbox.peers import socket_owner

        if scope["type"] not in ("http", "websocket"):
            return
        websocket = scope["type"] == "websocket"
        if websocket and not scope["path"].startswith("/devtools/"):  # the browser's DevTools only
            await send({"type": "websocket.close", "code": 1008, "reason": "no WebSocket here"})
            return
        client, server = scope.get("client"), scope.get("server")
        owner = socket_owner(tuple(client), tuple(server)) if client and server else None
        if owner != self.owner and websocket:
            await send({"type": "websocket.close", "code": 1008,
                        "reason": "refused: OSWorld's guest API answers only the desktop's owner"})
            return
        if owner != self.owner:
            message = "refused: OSWorld's guest API answers only the desktop's owner"
            await JSONResponse({"status": "error", "code": "NOT_OWNER", "message": message, "error": message},
                               status_code=403)(scope, receive, send)
            return
        await self.app(scope, receive, send)
