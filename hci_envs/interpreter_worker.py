"""A persistent Python interpreter in its own process, driven over stdin/stdout (JSON lines).

Run by :mod:`hci_envs.interpreter`, which passes two pipe descriptors for the protocol (``--rpc IN OUT``), so
that nothing the code writes to the process's own stdout can disturb it. Requests:
``{"op": "run", "code": ..., "max_output": n}`` runs code in the
persistent namespace and answers ``{"op": "done", "stdout", "stderr", "truncated", "error"}``;
``{"op": "define", "source": ...}`` adds functions to the namespace. In CodeAct mode (``--codeact``) the
namespace has no ``__import__`` and a few safe builtins less, and tool functions call back to the server: the
worker sends ``{"op": "call", "tool", "arguments"}`` and waits for ``{"op": "return", "value"|"error"}``.
Standard library only. The code's prints are captured and returned.

The worker runs as the session's agent account (the boundary is that uid, not the namespace's filtering).
With ``--contained`` (CodeAct of an environment that gives the agent no programs), it also installs a seccomp
filter before it reads its first request: no execve, no new processes (threads only), no sockets, no tracing
or reading other processes' memory, no io_uring, and no file changes (no open for writing, no unlink, rename,
link, mkdir, chmod, chown, truncate). Whatever escapes the namespace can then read what the agent may read and
call the tools, and nothing else. If the filter cannot be installed, every request is refused (fail closed).
"""

from __future__ import annotations

import builtins
import io
import json
import signal
import sys
import traceback

_RPC_IN: io.TextIOWrapper
_RPC_OUT: io.TextIOWrapper


class ToolCallError(Exception):
    """A tool call from code failed; the message says why."""


class _CappedBuffer(io.StringIO):
    def __init__(self, cap: int) -> None:
        super().__init__()
        self.cap = cap
        self.size = 0
        self.truncated = 0

    def write(self, text: str) -> int:
        room = self.cap - self.size
        if room > 0:
            super().write(text[:room])
        self.size += len(text)
        if len(text) > room:
            self.truncated += len(text) - max(room, 0)
        return len(text)


def _send(message: dict) -> None:
    _RPC_OUT.write(json.dumps(message) + "\n")
    _RPC_OUT.flush()


def _call_tool(name: str, arguments: dict) -> object:
    _send({"op": "call", "tool": name, "arguments": arguments})
    reply = json.loads(_RPC_IN.readline())
    if reply.get("error"):
        raise ToolCallError(reply["error"])
    return reply.get("value")


_UNSAFE = {"__import__", "open", "exec", "eval", "compile", "input", "breakpoint", "globals", "locals", "vars",
           "exit", "quit", "help", "memoryview", "getattr", "setattr", "delattr", "__build_class__"}


def _safe_getattr(obj: object, name: str, *default: object) -> object:
    if name.startswith("_"):
        raise AttributeError(f"access to {name!r} is not allowed in code actions")
    return getattr(obj, name, *default)


def _namespace(codeact: bool) -> dict:
    if not codeact:
        return {"__name__": "__main__", "__builtins__": builtins}
    safe = {k: v for k, v in vars(builtins).items() if k not in _UNSAFE}
    safe["getattr"] = _safe_getattr
    safe["__build_class__"] = builtins.__build_class__  # class statements
    namespace: dict = {"__builtins__": safe, "__name__": "codeact", "ToolCallError": ToolCallError,
                       "_call_tool": _call_tool}
    import collections
    import datetime
    import itertools
    import json as json_module
    import math
    import random
    import re
    import statistics
    import textwrap

    for module in (collections, datetime, itertools, json_module, math, random, re, statistics, textwrap):
        namespace[module.__name__] = module
    return namespace


# -- containment (x86_64 Linux; elsewhere --contained refuses to run code) ---------------------------------
_EPERM, _ENOSYS = 1, 38
_X86_64_DENIED = (
    59, 322,  # execve, execveat
    101, 310, 311, 438, 440,  # ptrace, process_vm_readv/writev, pidfd_getfd, process_madvise
    57, 58,  # fork, vfork (clone is allowed for threads only, below)
    41, 53,  # socket, socketpair
    425, 426, 427, 321, 323, 298,  # io_uring_*, bpf, userfaultfd, perf_event_open
    165, 166, 272, 308, 250, 248, 249,  # mount, umount2, unshare, setns, keyctl, add_key, request_key
    85, 87, 263, 82, 264, 316, 86, 265, 88, 266, 83, 258, 84,  # creat, unlink*, rename*, link*, symlink*, mkdir*, rmdir
    90, 91, 268, 452, 92, 93, 94, 260,  # chmod*, chown*
    76, 77, 133, 259, 132, 235, 280, 261,  # truncate, ftruncate, mknod*, utime*
    188, 189, 190, 197, 198, 199, 304,  # *setxattr, *removexattr, open_by_handle_at
)
_X86_64_ENOSYS = (435, 437)  # clone3, openat2: libc falls back to clone and openat, which are checked
_WRITE_FLAGS = 0o1 | 0o2 | 0o100 | 0o1000  # O_WRONLY | O_RDWR | O_CREAT | O_TRUNC
_CLONE_THREAD = 0x10000


def _seccomp_program() -> list:
    import platform

    if platform.machine() not in ("x86_64", "AMD64"):
        raise OSError(f"no seccomp policy for {platform.machine()}")
    ld, jeq, jge, jset, ret = 0x20, 0x15, 0x35, 0x45, 0x06
    allow, deny, nosys = 0x7FFF0000, 0x00050000 | _EPERM, 0x00050000 | _ENOSYS
    arch_x86_64, kill_process = 0xC000003E, 0x80000000
    prog = [(ld, 0, 0, 4), (jeq, 1, 0, arch_x86_64), (ret, 0, 0, kill_process), (ld, 0, 0, 0),
            (jge, 0, 1, 0x40000000), (ret, 0, 0, deny)]  # the x32 ABI's numbers
    for nr in _X86_64_DENIED:
        prog += [(jeq, 0, 1, nr), (ret, 0, 0, deny)]
    for nr in _X86_64_ENOSYS:
        prog += [(jeq, 0, 1, nr), (ret, 0, 0, nosys)]
    for nr, flags_offset in ((2, 24), (257, 32)):  # open(path, flags), openat(dirfd, path, flags)
        prog += [(jeq, 0, 4, nr), (ld, 0, 0, flags_offset), (jset, 0, 1, _WRITE_FLAGS), (ret, 0, 0, deny),
                 (ret, 0, 0, allow)]
    prog += [(jeq, 0, 4, 56), (ld, 0, 0, 16), (jset, 1, 0, _CLONE_THREAD), (ret, 0, 0, deny), (ret, 0, 0, allow)]
    prog.append((ret, 0, 0, allow))
    return prog


def _contain() -> None:
    """Install the seccomp filter on this process (and all its threads)."""
    import ctypes

    class Instruction(ctypes.Structure):
        _fields_ = [("code", ctypes.c_ushort), ("jt", ctypes.c_ubyte), ("jf", ctypes.c_ubyte), ("k", ctypes.c_uint)]

    class Program(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(Instruction))]

    instructions = _seccomp_program()
    array = (Instruction * len(instructions))(*[Instruction(*i) for i in instructions])
    program = Program(len(instructions), array)
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(38, 1, 0, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS) failed")
    # seccomp(SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC, &program)
    if libc.syscall(317, 1, 1, ctypes.byref(program)) != 0:
        raise OSError(ctypes.get_errno(), "seccomp(SECCOMP_SET_MODE_FILTER) failed")


def main() -> None:
    global _RPC_IN, _RPC_OUT
    position = sys.argv.index("--rpc")
    _RPC_IN = open(int(sys.argv[position + 1]), encoding="utf-8")  # noqa: SIM115
    _RPC_OUT = open(int(sys.argv[position + 2]), "w", encoding="utf-8")  # noqa: SIM115
    codeact = "--codeact" in sys.argv
    namespace = _namespace(codeact)
    refusal = None
    if "--contained" in sys.argv:
        try:
            _contain()
        except Exception as exc:  # fail closed: run nothing uncontained
            refusal = f"code actions are not available on this machine: containment failed ({exc})"
    # SIGINT interrupts running code (the server's timeout); between requests it is ignored
    while True:
        line = _RPC_IN.readline()
        if not line:
            return
        request = json.loads(line)
        op = request.get("op")
        if refusal is not None:
            _send({"op": "defined" if op == "define" else "done", "error": refusal})
            continue
        if op == "define":
            exec(compile(request["source"], "<tools>", "exec"), namespace)  # noqa: S102
            _send({"op": "defined"})
            continue
        if op != "run":
            _send({"op": "done", "error": f"unknown request {op!r}"})
            continue
        out, err = _CappedBuffer(request.get("max_output", 65536)), _CappedBuffer(request.get("max_output", 65536))
        sys.stdout, sys.stderr = out, err
        error = None
        signal.signal(signal.SIGINT, signal.default_int_handler)
        try:
            exec(compile(request["code"], "<code>", "exec"), namespace)  # noqa: S102
        except KeyboardInterrupt:
            error = "KeyboardInterrupt"
        except BaseException:  # the code's own errors go back to the caller, never end the worker
            etype, value, tb = sys.exc_info()
            frames = [f for f in traceback.extract_tb(tb) if f.filename in ("<code>",)]
            error = "".join(traceback.format_list(frames) + traceback.format_exception_only(etype, value))
            if isinstance(value, SystemExit):
                error = "SystemExit: code actions cannot end the interpreter"
        finally:
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            sys.stdout, sys.stderr = sys.__stdout__, sys.__stderr__
        _send({"op": "done", "stdout": out.getvalue(), "stderr": err.getvalue(),
               "truncated": out.truncated + err.truncated, "error": error})


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    main()
