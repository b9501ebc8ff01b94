"""Persistent Python interpreters in their own processes: the PythonAccess trait's ``python`` tool, and
CodeAct, where every tool of the environment is a pre-imported function.

The interpreter runs as the session's agent account with the session's environment, so code reaches the
desktop the way an app would and nothing of the server. It is the system's Python (``python3`` on the
agent's PATH), not the server's virtual environment, and gets the worker's source on its command line, so it
needs nothing of the server's files. A run that overstays its timeout is interrupted
(KeyboardInterrupt); if the code ignores that, the interpreter is restarted and the caller is told its
variables are gone. Output beyond ``max_output`` characters is dropped and counted.
"""

from __future__ import annotations

import ast
import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import ActionTimeoutError, InvalidActionError

WORKER = Path(__file__).with_name("interpreter_worker.py")

#: Limits of a CodeAct program, shared by the ``execute_code`` tool and the step item
#: (:mod:`hci_envs.tools.codeact`, :mod:`hci_envs.env.steps`).
MAX_CODE_CHARS = 200_000
MAX_CODE_TIMEOUT = 600.0
DEFAULT_CODE_TIMEOUT = 30.0
MAX_CODE_OUTPUT = 16_000_000
DEFAULT_CODE_OUTPUT = 65536
_WORKER_SOURCE: str | None = None


def agent_python() -> str:
    """The Python the agent's side runs: the system's python3 (the server's own may live where the agent
    cannot read, and it carries the server's packages)."""
    from .accounts import AGENT_PATH

    import shutil

    return shutil.which("python3", path=AGENT_PATH) or sys.executable


def _worker_source() -> str:
    global _WORKER_SOURCE
    if _WORKER_SOURCE is None:
        _WORKER_SOURCE = WORKER.read_text(encoding="utf-8")
    return _WORKER_SOURCE
DEFAULT_MAX_OUTPUT = 64 * 1024
INTERRUPT_GRACE = 2.0
#: The longest message the server reads from a worker beyond what a run's output may take (its output is capped
#: before it is sent; a worker that writes more, which only code that escaped its namespace can, is restarted
#: rather than read into memory).
MESSAGE_SLACK = 4 * 1024 * 1024


def message_limit(max_output: int) -> int:
    """Bytes a worker's answer may take: stdout and stderr of ``max_output`` characters each, JSON-escaped (at
    most 6 bytes a character), and the slack for tool calls and the rest."""
    return 12 * max_output + MESSAGE_SLACK


@dataclass
class RunResult:
    stdout: str = ""
    stderr: str = ""
    error: str | None = None
    truncated: int = 0
    timed_out: bool = False
    restarted: bool = False
    images: list[Any] = field(default_factory=list)
    tool_calls: int = 0
    #: Said before the output: the interpreter had exited since the last call, so this ran in a new one.
    notice: str | None = None

    def text(self) -> str:
        parts = [f"[notice] {self.notice}"] if self.notice else []
        if self.stdout:
            parts.append(self.stdout.rstrip("\n"))
        if self.stderr:
            parts.append("[stderr]\n" + self.stderr.rstrip("\n"))
        if self.truncated:
            parts.append(f"[{self.truncated} characters of output dropped: over the output limit]")
        if self.error:
            parts.append("[error]\n" + self.error.rstrip("\n"))
        return "\n".join(parts)

    def data(self) -> dict[str, Any]:
        return {"stdout": self.stdout, "stderr": self.stderr, "error": self.error, "truncated": self.truncated,
                "timed_out": self.timed_out, "restarted": self.restarted, "tool_calls": self.tool_calls,
                "notice": self.notice}


def check_code_action(code: str) -> None:
    """Refuse what a code action may not do: import, reach ``__import__`` or any dunder attribute."""
    try:
        tree = ast.parse(code, "<code>")
    except SyntaxError as exc:
        raise InvalidActionError(f"code: syntax error at line {exc.lineno}: {exc.msg}", field="code") from None
    for node in ast.walk(tree):
        line = getattr(node, "lineno", "?")
        if isinstance(node, ast.Import | ast.ImportFrom):
            raise InvalidActionError(
                f"code: line {line}: import statements are not allowed; every tool is already a function "
                "here, and json, re, math, itertools, collections, statistics, datetime, random and textwrap "
                "are pre-imported", field="code",
            )
        if isinstance(node, ast.Name) and node.id.startswith("__"):
            raise InvalidActionError(f"code: line {line}: {node.id!r} is not available in code actions",
                                     field="code")
        if isinstance(node, ast.Attribute) and node.attr.startswith("__"):
            raise InvalidActionError(f"code: line {line}: attribute {node.attr!r} is not available in code "
                                     "actions", field="code")


class Interpreter:
    """One persistent interpreter process. Thread-safe: runs are serialised."""

    def __init__(self, *, codeact: bool = False, env: Mapping[str, str] | None = None, cwd: str | None = None,
                 python: str | None = None, spawn: Callable[..., subprocess.Popen[bytes]] | None = None,
                 contained: bool = False) -> None:
        self.codeact = codeact
        self.contained = contained
        self.env = dict(env) if env is not None else None
        self.cwd = cwd
        self.python = python or agent_python()
        self._spawn = spawn
        self._proc: subprocess.Popen[bytes] | None = None
        self._to: Any = None
        self._from: int | None = None
        self._buffer = bytearray()
        self._lock = threading.Lock()
        self._definitions: list[str] = []
        #: The worker's numbers for its two pipes (what it reads, what it writes).
        self._worker_fds: tuple[int, int] = (-1, -1)

    # -- process ---------------------------------------------------------------------------------------
    def _start(self) -> None:
        to_r, to_w = os.pipe()
        from_r, from_w = os.pipe()
        # CodeAct's worker needs only the standard library: isolated mode, no site-packages
        flags = ["-I", "-S", "-B"] if self.codeact else []
        argv = [self.python, *flags, "-u", "-c", _worker_source(), "--rpc", str(to_r), str(from_w)]
        if self.codeact:
            argv.append("--codeact")
        if self.contained:
            argv.append("--contained")
        try:
            if self._spawn is not None:
                proc = self._spawn("interpreter", argv, env=self.env, cwd=self.cwd, pass_fds=(to_r, from_w))
            else:
                proc = subprocess.Popen(argv, env=self.env, cwd=self.cwd, pass_fds=(to_r, from_w),
                                        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                        stderr=subprocess.DEVNULL, start_new_session=True)
        finally:
            os.close(to_r)
            os.close(from_w)
        self._proc = proc
        self._to = os.fdopen(to_w, "w", encoding="utf-8")
        self._from = from_r
        self._worker_fds = (to_r, from_w)
        self._buffer = bytearray()
        for source in self._definitions:
            self._send({"op": "define", "source": source})
            self._receive(time.monotonic() + 10)

    def _ensure(self) -> str | None:
        """A running worker; if the last one exited since the previous call (killed, out of memory, its code
        called os._exit), a new one, and the notice the caller must hear: its variables are gone."""
        if self._proc is not None and self._proc.poll() is not None:
            status = self._proc.returncode
            how = f"was killed by signal {-status}" if status < 0 else f"exited with status {status}"
            self._kill()
            self._start()
            return (f"the interpreter {how} after the last call; this ran in a new one, and the variables of "
                    "earlier calls are gone")
        if self._proc is None:
            self._start()
        return None

    def _send(self, message: dict[str, Any]) -> None:
        self._to.write(json.dumps(message) + "\n")
        self._to.flush()

    def _receive(self, deadline: float, limit: int = MESSAGE_SLACK) -> dict[str, Any] | None:
        """The next message, or None at the deadline. Raises EOFError if the worker died and ValueError if
        it sends a message longer than ``limit`` bytes. Reads append to one buffer and only the new bytes
        are searched for the end of the line (no quadratic work on a long message)."""
        buffer = self._buffer
        end = buffer.find(b"\n")
        while end < 0:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            ready, _, _ = select.select([self._from], [], [], remaining)
            if ready:
                chunk = os.read(self._from, 1 << 20)
                if not chunk:
                    raise EOFError("the interpreter exited")
                start = len(buffer)
                buffer += chunk
                end = buffer.find(b"\n", start)
                if (end if end >= 0 else len(buffer)) > limit:
                    raise ValueError(f"the interpreter sent a message over {limit} bytes")
        line = bytes(buffer[:end])
        del buffer[:end + 1]
        return json.loads(line)

    def close(self) -> None:
        with self._lock:
            self._kill()

    def _kill(self) -> None:
        proc, self._proc = self._proc, None
        try:
            if self._to is not None:
                self._to.close()
            if self._from is not None:
                os.close(self._from)
        except OSError:
            pass
        self._to = self._from = None
        self._buffer = bytearray()
        if proc is not None and proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                proc.kill()
            proc.wait(5)

    # -- carried by a fork ---------------------------------------------------------------------------------
    def lasting_state(self) -> dict[str, Any] | None:
        """What a fork or checkpoint needs to give this interpreter's worker to an interpreter of the copy: its
        pid in a forkable desktop, its pipes' numbers, the definitions (None: no worker to carry)."""
        with self._lock:
            pid = getattr(self._proc, "inside_pid", None)
            if pid is None or self._proc.poll() is not None:  # type: ignore[union-attr]
                return None
            return {"pid": pid, "fds": list(self._worker_fds), "definitions": list(self._definitions)}

    def resume(self, state: dict[str, Any] | None, desktop: Any) -> bool:
        """Take as this interpreter's worker the one ``state`` describes, carried into ``desktop``; False when
        it is not there (the next run starts a new one)."""
        proc = desktop.lasting_process(state["pid"]) if state else None
        if proc is None:
            return False
        with self._lock:
            self._kill()
            to, from_ = state["fds"]  # type: ignore[index]
            self._proc = proc
            self._to = os.fdopen(proc.take_end(to), "w", encoding="utf-8")
            self._from = proc.take_end(from_)
            self._worker_fds = (to, from_)
            self._definitions = list(state["definitions"])  # type: ignore[index]
        return True

    # -- use -------------------------------------------------------------------------------------------
    def define(self, source: str) -> None:
        """Add definitions (tool functions) now and after every restart."""
        with self._lock:
            self._definitions.append(source)
            if self._proc is not None and self._proc.poll() is None:
                self._send({"op": "define", "source": source})
                self._receive(time.monotonic() + 10)

    def run(self, code: str, *, timeout: float = 30.0, max_output: int = DEFAULT_MAX_OUTPUT,
            on_call: Callable[[str, dict[str, Any], RunResult], Any] | None = None) -> RunResult:
        """Run ``code``; tool calls from CodeAct code go to ``on_call(tool, arguments, result)``."""
        with self._lock:
            result = RunResult()
            result.notice = self._ensure()
            result.restarted = result.notice is not None
            deadline = time.monotonic() + timeout
            interrupted_at: float | None = None
            try:
                self._send({"op": "run", "code": code, "max_output": max_output})
                while True:
                    wait_until = deadline if interrupted_at is None else interrupted_at + INTERRUPT_GRACE
                    message = self._receive(wait_until, message_limit(max_output))
                    if message is None:
                        if interrupted_at is None:
                            interrupted_at = time.monotonic()
                            result.timed_out = True
                            os.kill(self._proc.pid, signal.SIGINT)  # type: ignore[union-attr]
                            continue
                        self._kill()  # the code ignored the interrupt
                        result.restarted = True
                        result.error = (f"timed out after {timeout:g}s and did not stop when interrupted; the "
                                        "interpreter was restarted and its variables are gone")
                        return result
                    if message.get("op") == "call":
                        result.tool_calls += 1
                        reply = self._tool_call(message, result, on_call)
                        self._send(reply)
                        continue
                    result.stdout = message.get("stdout", "")
                    result.stderr = message.get("stderr", "")
                    result.truncated = message.get("truncated", 0)
                    result.error = message.get("error")
                    if result.timed_out:
                        result.error = f"timed out after {timeout:g}s (interrupted)"
                    return result
            except (EOFError, BrokenPipeError, OSError, ValueError) as exc:
                self._kill()
                result.restarted = True
                result.error = f"the interpreter died ({exc}); it was restarted and its variables are gone"
                return result

    @staticmethod
    def _tool_call(message: dict[str, Any], result: RunResult,
                   on_call: Callable[[str, dict[str, Any], RunResult], Any] | None) -> dict[str, Any]:
        if on_call is None:
            return {"op": "return", "error": "no tools here"}
        try:
            value = on_call(message["tool"], message.get("arguments") or {}, result)
        except ActionTimeoutError as exc:
            return {"op": "return", "error": f"timeout: {exc.message}"}
        except Exception as exc:  # becomes ToolCallError inside the code
            text = getattr(exc, "message", None) or str(exc)
            return {"op": "return", "error": text}
        try:
            json.dumps(value)
        except TypeError:
            value = str(value)
        return {"op": "return", "value": value}
