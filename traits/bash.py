"""BashAccess: shell commands in the session, as the session's agent account.

``bash`` runs one command (``bash -c``) in the session's home (or ``cwd``), with the desktop's environment
(so GUI programs it starts appear on the desktop), a timeout, and stdout/stderr kept up to ``max_output``
bytes each. With ``persistent=true`` commands run in one shell that lives for the episode, so ``cd`` and
variables carry over. Processes a one-shot command leaves behind end with it; the episode's shell ends at
reset.
"""

from __future__ import annotations

import os
import secrets
import shlex
import signal
import subprocess
import threading
import time
from typing import Annotated, Any

from pydantic import Field

from hci_envs.errors import InvalidActionError
from hci_envs.sandbox.pipes import OutputBuffer, read_pipes
from hci_envs.tools.registry import ToolOutput, tool
from hci_envs.tools.trait import Trait

DEFAULT_MAX_OUTPUT = 64 * 1024
#: A command whose output runs this many times past the limit is stopped before its timeout.
RUNAWAY_FACTOR = 16
#: What the shell's background jobs printed between calls is carried through a fork up to this many bytes a stream.
PENDING_MAX = 1 << 20


def _drain(proc: subprocess.Popen[bytes], buffers: dict[int, OutputBuffer], deadline: float, runaway: int,
           finished: Any) -> str | None:
    """Read the pipes until the command is ``finished()`` and all it wrote is read, or until they close.
    Returns "timeout" or "runaway" if it had to stop the command, else None."""
    stopped = read_pipes(buffers, deadline, finished, runaway=runaway)
    if stopped or finished():
        return stopped
    # The pipes closed a moment before the process exits: wait for its status, or the stop that follows
    # would end it with SIGTERM and report -15 for a command that succeeded.
    try:
        proc.wait(timeout=max(0.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        return "timeout"
    return None


def _output(stdout: OutputBuffer, stderr: OutputBuffer, code: int | None, stopped: str | None,
            timeout: float) -> ToolOutput:
    data = {"exit_code": code, "stdout": stdout.text(), "stderr": stderr.text(), "stdout_dropped": stdout.dropped,
            "stderr_dropped": stderr.dropped, "timed_out": stopped == "timeout"}
    parts = []
    if data["stdout"]:
        parts.append(data["stdout"].rstrip("\n"))
    if data["stderr"]:
        parts.append("[stderr]\n" + data["stderr"].rstrip("\n"))
    if stdout.dropped or stderr.dropped:
        parts.append(f"[output over the limit: {stdout.dropped} bytes of stdout and {stderr.dropped} of stderr "
                     "dropped]")
    if stopped == "runaway":
        parts.append("[stopped: the command kept printing far past the output limit]")
    elif stopped == "timeout":
        parts.append(f"[timed out after {timeout:g}s; the command was stopped]")
    parts.append(f"[exit code {code}]")
    return ToolOutput(text="\n".join(parts), data=data, is_error=stopped is not None)


class BashAccess(Trait):
    """Shell commands in the session."""

    system_packages = ("bash", "coreutils", "procps")
    #: The agent may run programs of its choice (CodeAct's worker may exec too).
    grants_programs = True

    @tool()
    def bash(
        self,
        command: Annotated[str, Field(min_length=1, max_length=100_000, description="A bash command line.")],
        timeout: Annotated[float, Field(gt=0, le=600, description="Seconds before the command is stopped.")] = 30.0,
        cwd: Annotated[str | None, Field(description="Working directory (default: the session's home).")] = None,
        max_output: Annotated[int, Field(ge=1, le=64 * 1024 * 1024,
                                         description="Bytes of stdout and of stderr kept.")] = DEFAULT_MAX_OUTPUT,
        persistent: Annotated[bool, Field(description="Run in the episode's long-lived shell (cd and variables "
                                                      "carry over).")] = False,
    ) -> ToolOutput:
        """Run a bash command in the session as its user; returns stdout, stderr and the exit code."""
        home = str(self.home)  # type: ignore[attr-defined]
        directory = os.path.normpath(os.path.join(home, cwd)) if cwd else home
        # Inside the home the server may look; elsewhere only the agent's own shell does (its `cd` below), so
        # that the server's answer tells nothing about places the agent cannot see.
        if (directory == home or directory.startswith(home + os.sep)) and not os.path.isdir(directory):
            raise InvalidActionError(f"bash.cwd: {directory!r} is not a directory", field="cwd")
        desktop = self.desktop  # type: ignore[attr-defined]
        stdout, stderr = OutputBuffer(max_output), OutputBuffer(max_output)
        deadline = time.monotonic() + timeout
        runaway = max_output * RUNAWAY_FACTOR
        if persistent:
            return self._in_shell(desktop, command, desktop.agent_path(directory) if cwd else None, stdout, stderr,
                                  deadline, runaway, timeout)
        script = command if directory == home else \
            f"cd -- {shlex.quote(desktop.agent_path(directory))} || exit 1\n{command}"
        proc = desktop.spawn_agent("bash-command", ["bash", "-c", script], stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE)
        try:
            stopped = _drain(proc, {proc.stdout.fileno(): stdout, proc.stderr.fileno(): stderr}, deadline,
                             runaway, lambda: proc.poll() is not None)
        finally:
            desktop.processes.stop(proc, timeout=1.0)  # and whatever it left running
            proc.stdout.close()
            proc.stderr.close()
        return _output(stdout, stderr, None if stopped else proc.returncode, stopped, timeout)

    # -- the episode's shell ---------------------------------------------------------------------------
    def _shell_slot(self) -> dict[str, Any]:
        return self.__dict__.setdefault("_bash_shell", {"proc": None, "lock": threading.Lock()})

    def _in_shell(self, desktop: Any, command: str, cwd: str | None, stdout: OutputBuffer, stderr: OutputBuffer,
                  deadline: float, runaway: int, timeout: float) -> ToolOutput:
        slot = self._shell_slot()
        with slot["lock"]:
            proc = slot["proc"]
            if proc is None or proc.poll() is not None:
                proc = slot["proc"] = desktop.spawn_lasting(
                    "bash-shell", ["bash", "--noprofile", "--norc"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                )
            marker = f"__hci_envs_{secrets.token_hex(8)}__".encode()
            cd = f"cd -- {shlex.quote(cwd)} && " if cwd else ""
            proc.stdin.write(cd.encode() + command.encode() + b" </dev/null\n"
                             + b"printf '\\n%s %s\\n' " + marker + b" \"$?\"\nprintf '%s\\n' " + marker + b" >&2\n")
            proc.stdin.flush()
            # what the shell's jobs printed before a fork or checkpoint (lasting_state) comes first, in the
            # caller's buffers (their cap, their count of what was dropped): not in this command's own, whose
            # size is what stops a runaway command
            for buffer, (data, size) in zip((stdout, stderr), slot.pop("pending", ())):
                buffer.add_kept(data, size)
            raw_out, raw_err = OutputBuffer(runaway), OutputBuffer(runaway)
            stopped = _drain(proc, {proc.stdout.fileno(): raw_out, proc.stderr.fileno(): raw_err}, deadline,
                             runaway, lambda: marker in raw_out.data and marker in raw_err.data)
            out, _, tail = bytes(raw_out.data).partition(b"\n" + marker + b" ")
            stdout.add(out)
            stderr.add(bytes(raw_err.data).partition(marker + b"\n")[0])
            code = int(tail.split(b"\n", 1)[0]) if tail[:1].isdigit() else None
            if stopped:
                desktop.processes.stop(proc, timeout=1.0)  # the next call starts a fresh shell
                slot["proc"] = None
            return _output(stdout, stderr, code, stopped, timeout)

    def lasting_state(self) -> dict[str, Any]:
        """The shell's process, and what its background jobs printed since the last call: that is in the pipes
        to the server, which a dump cannot carry (CRIU restores a pipe's end, not what is in it). It is read
        now, into this shell's next call's output, and the copies' (at most PENDING_MAX bytes of each stream, and
        the count of the rest). What a job prints between this read and the dump's freeze reaches the source only."""
        state = super().lasting_state()
        slot = self._shell_slot()
        proc = slot["proc"]
        if proc is not None and proc.poll() is None and getattr(proc, "inside_pid", None) is not None:
            state["bash_shell"] = proc.inside_pid
            out, err = OutputBuffer(PENDING_MAX), OutputBuffer(PENDING_MAX)
            for (data, size), kept in zip(slot.pop("pending", ()), (out, err)):
                kept.add_kept(data, size)
            read_pipes({proc.stdout.fileno(): out, proc.stderr.fileno(): err}, time.monotonic() + 1.0,
                       lambda: True)  # what is there now, without waiting for more
            slot["pending"] = state["bash_pending"] = ((bytes(out.data), out.size), (bytes(err.data), err.size))
        return state

    def resume_lasting(self, state: dict[str, Any], desktop: Any) -> None:
        super().resume_lasting(state, desktop)
        if "bash_shell" in state:
            slot = self._shell_slot()
            slot["proc"] = desktop.lasting_process(state["bash_shell"])
            if "bash_pending" in state:
                slot["pending"] = state["bash_pending"]

    def on_session_end(self) -> None:
        super().on_session_end()
        slot = self.__dict__.get("_bash_shell")
        if slot:
            slot.pop("pending", None)  # the ended episode's
        if slot and slot["proc"] is not None:
            proc, slot["proc"] = slot["proc"], None
            if getattr(proc, "tree", None) is not None and proc.poll() is not None:
                return  # a forkable desktop's shell that ended (its tree gone, say): its pid may be another's
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
