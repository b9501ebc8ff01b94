"""A persistent Python interpreter in its own process, driven over stdin/stdout (JSON lines).

Run by :mod:`hci_envs.sandbox.interpreter`, which passes two pipe descriptors for the protocol (``--rpc IN OUT``), so
that nothing the code writes to the process's own stdout can disturb it. Requests:
``{"op": "run", "code": ..., "max_output": n}`` runs code in the
persistent namespace and answers ``{"op": "done", "stdout", "stderr", "truncated", "error"}``;
``{"op": "define", "source": ...}`` adds functions to the namespace. In CodeAct mode (``--codeact``) the
namespace has no ``__import__`` and a few safe builtins less, and tool functions call back to the server: the
worker sends ``{"op": "call", "tool", "arguments"}`` and waits for ``{"op": "return", "value"|"error"}``.
Standard library only. The code's prints are captured and returned.

The worker runs as the session's agent account (the boundary is that uid, not the namespace's filtering).
With ``--contained`` (CodeAct of an environment that gives the agent no programs), it also installs a seccomp
filter before it reads its first request: an allow-list of the system calls CPython needs to compute, read
files, sleep and run threads; everything else fails (no execve, no new processes, no sockets, no tracing, no
IPC objects, no file changes: open only for reading). Whatever escapes the namespace can then read what the
agent may read and call the tools, and nothing else. If the filter cannot be installed, every request is
refused (fail closed).
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
#: The system calls a contained worker may make (x86_64): what CPython needs to compute, read files, sleep,
#: run threads and talk over its two pipes. Everything else fails with EPERM: a list of what to forbid would
#: miss the calls each new kernel adds (setxattrat, file_setattr, ...).
_X86_64_ALLOWED = (
    0, 1, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15,  # read write close stat fstat lstat poll lseek mmap ...
    17, 19, 20, 21, 22, 23, 24, 25, 27, 28,  # pread64 readv writev access pipe select sched_yield mremap ...
    32, 33, 34, 35, 36, 37, 38, 39,  # dup dup2 pause nanosleep getitimer alarm setitimer getpid
    60, 63, 72, 78, 79, 80, 81, 89, 95, 96, 97, 98, 99, 100,  # exit uname fcntl getdents getcwd chdir ...
    102, 104, 107, 108, 110, 111, 115, 118, 120, 121, 124, 125,  # get*id getppid getpgrp ... capget
    127, 128, 130, 131, 137, 138, 140, 143, 145, 146, 147,  # rt_sig* sigaltstack statfs getpriority sched_get*
    157, 158, 186, 201, 202, 204, 217, 218,  # prctl arch_prctl gettid time futex sched_getaffinity getdents64 ...
    228, 229, 230, 231, 234,  # clock_gettime clock_getres clock_nanosleep exit_group tgkill
    262, 267, 269, 270, 271, 273, 292, 293,  # newfstatat readlinkat faccessat pselect6 ppoll set_robust_list dup3 pipe2
    318, 324, 332, 334, 436, 439,  # getrandom membarrier statx rseq close_range faccessat2
)
_X86_64_ENOSYS = (435, 437)  # clone3, openat2: libc falls back to clone and openat, which are checked
#: open(path, flags) and openat(dirfd, path, flags): reading only (the offset of flags in seccomp_data)
_X86_64_OPENS = ((2, 24), (257, 32))
_WRITE_FLAGS = 0o1 | 0o2 | 0o100 | 0o1000  # O_WRONLY | O_RDWR | O_CREAT | O_TRUNC
_CLONE = 56  # threads only
_CLONE_THREAD = 0x10000
_IOCTL = 16  # terminal and descriptor queries only: TCGETS TIOCGWINSZ FIONREAD FIONBIO FIONCLEX FIOCLEX
_IOCTLS = (0x5401, 0x5413, 0x541B, 0x5421, 0x5450, 0x5451)


def _seccomp_program() -> list:
    import platform

    if platform.machine() not in ("x86_64", "AMD64"):
        raise OSError(f"no seccomp policy for {platform.machine()}")
    ld, jeq, jge, jset, ret = 0x20, 0x15, 0x35, 0x45, 0x06
    allow, deny, nosys = 0x7FFF0000, 0x00050000 | _EPERM, 0x00050000 | _ENOSYS
    arch_x86_64, kill_process = 0xC000003E, 0x80000000
    prog = [(ld, 0, 0, 4), (jeq, 1, 0, arch_x86_64), (ret, 0, 0, kill_process), (ld, 0, 0, 0),
            (jge, 0, 1, 0x40000000), (ret, 0, 0, deny)]  # the x32 ABI's numbers
    for nr in _X86_64_ALLOWED:
        prog += [(jeq, 0, 1, nr), (ret, 0, 0, allow)]
    for nr in _X86_64_ENOSYS:
        prog += [(jeq, 0, 1, nr), (ret, 0, 0, nosys)]
    for nr, flags_offset in _X86_64_OPENS:
        prog += [(jeq, 0, 4, nr), (ld, 0, 0, flags_offset), (jset, 0, 1, _WRITE_FLAGS), (ret, 0, 0, deny),
                 (ret, 0, 0, allow)]
    prog += [(jeq, 0, 4, _CLONE), (ld, 0, 0, 16), (jset, 1, 0, _CLONE_THREAD), (ret, 0, 0, deny),
             (ret, 0, 0, allow)]
    prog += [(jeq, 0, 2 * len(_IOCTLS) + 2, _IOCTL), (ld, 0, 0, 24)]  # ioctl(fd, request, ...)
    for request in _IOCTLS:
        prog += [(jeq, 0, 1, request), (ret, 0, 0, allow)]
    prog += [(ret, 0, 0, deny), (ret, 0, 0, deny)]  # an ioctl not listed; anything else
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
