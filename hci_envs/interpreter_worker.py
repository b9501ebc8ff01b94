"""A persistent Python interpreter in its own process, driven over stdin/stdout (JSON lines).

Run by :mod:`hci_envs.interpreter`, which passes two pipe descriptors for the protocol (``--rpc IN OUT``), so
that nothing the code writes to the process's own stdout can disturb it. Requests:
``{"op": "run", "code": ..., "max_output": n}`` runs code in the
persistent namespace and answers ``{"op": "done", "stdout", "stderr", "truncated", "error"}``;
``{"op": "define", "source": ...}`` adds functions to the namespace. In CodeAct mode (``--codeact``) the
namespace has no ``__import__`` and a few safe builtins less, and tool functions call back to the server: the
worker sends ``{"op": "call", "tool", "arguments"}`` and waits for ``{"op": "return", "value"|"error"}``.
Standard library only. The code's prints are captured and returned.
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


def main() -> None:
    global _RPC_IN, _RPC_OUT
    position = sys.argv.index("--rpc")
    _RPC_IN = open(int(sys.argv[position + 1]), encoding="utf-8")  # noqa: SIM115
    _RPC_OUT = open(int(sys.argv[position + 2]), "w", encoding="utf-8")  # noqa: SIM115
    codeact = "--codeact" in sys.argv
    namespace = _namespace(codeact)
    # SIGINT interrupts running code (the server's timeout); between requests it is ignored
    while True:
        line = _RPC_IN.readline()
        if not line:
            return
        request = json.loads(line)
        op = request.get("op")
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
