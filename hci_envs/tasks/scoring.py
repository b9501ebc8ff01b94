"""Scoring a world after an episode with a task's checker. Checkers run on the control plane: they read the
session's files and screen and run commands in it, never through the model's tools.

Scoring has two phases. First, with the agent's processes running, what only a live app can give: the
accessibility tree (read once for every accessibility check), and browsers ended as a person closes them,
so that they write the profile they hold in memory (read by the browser checks). Then the server reads the
agent's files itself while no process of the agent runs (they are stopped), so nothing can swap a file for
a symlink under the check or trace the checker. A ``command`` check runs as the agent's account (it may run
what the agent left in its home), with the system's PATH and none of the server's environment."""

from __future__ import annotations

import json
import logging
import re
import signal
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import ConfigError, EnvironmentStateError, HciEnvsError, MissingDependencyError
from .checkers import (
    AccessibilityCheck,
    AllCheck,
    AnyCheck,
    BrowserCheck,
    CommandCheck,
    DocumentCheck,
    FileCheck,
    GateCheck,
    JsonCheck,
    MeanCheck,
    OsworldCheck,
    PixelCheck,
    SpreadsheetCheck,
    WeightedCheck,
    leaves,
)

log = logging.getLogger(__name__)


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


def _one(check: Any, env: Any, live: Live) -> tuple[bool, str]:
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
        if out.returncode == 127:  # the shell found no such program: the machine's lack, or the agent's?
            from .needs import missing

            lacking = missing(check)
            if lacking:
                raise MissingDependencyError(f"the checker's command `{check.run}` needs {lacking[0].fix()}",
                                             program=lacking[0].name)
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
    if isinstance(check, DocumentCheck):
        return _document(check, env)
    if isinstance(check, SpreadsheetCheck):
        return _spreadsheet(check, env)
    if isinstance(check, BrowserCheck):
        return _browser(check, env, live)
    if isinstance(check, AccessibilityCheck):
        return _accessibility(check, live)
    raise ConfigError(f"unknown check {type(check).__name__}")


# -- the live phase ------------------------------------------------------------------------------------------
@dataclass
class Live:
    """What the live phase read: the whole accessibility tree, and how each browser was ended."""

    tree: list[dict[str, Any]] | None = None
    tree_reason: str | None = None
    ended: dict[str, str] = field(default_factory=dict)
    #: OSWorld's rewards, by id() of their check: its evaluator reads the session live, as the agent left it.
    osworld: dict[int, tuple[float, str]] = field(default_factory=dict)


def prepare(check: Any, env: Any) -> Live:
    """The live phase: the tree, read once, and every browser a check reads ended (in that order: ending a
    browser takes its elements out of the tree)."""
    from ..desktop.a11y_model import Query

    live = Live()
    checks = list(leaves(check))
    desktop = getattr(env, "desktop", None)
    if any(isinstance(c, AccessibilityCheck) for c in checks):
        accessibility = getattr(desktop, "accessibility", None)
        if accessibility is None:
            live.tree_reason = getattr(desktop, "no_accessibility", None) or "the desktop has no accessibility tree"
        else:
            tree = accessibility.tree(Query(visible_only=False, max_nodes=10_000), remember=False)
            live.tree, live.tree_reason = tree.nodes, tree.reason
    for app in dict.fromkeys(c.app for c in checks if isinstance(c, BrowserCheck)):
        live.ended[app] = end_app(desktop, app)
    for check in checks:
        if isinstance(check, OsworldCheck):
            from .osworld import evaluate

            live.osworld[id(check)] = evaluate(env, check)
    return live


#: How long a browser has to write its profile and exit once its windows are closed.
END_GRACE = 20.0


def end_app(desktop: Any, label: str) -> str:
    """End the app the start state names ``label`` as a person quits it: its windows are closed through the
    window manager (chromium then writes its history and bookmarks, which a signal would lose), then, if it
    is still running, a SIGTERM; then what it left behind ends. Returns what happened."""
    import os
    import time

    from ..sandbox.processes import stop_group

    if desktop is None:
        return "no desktop"
    found = [proc for spec, proc in desktop.apps() if spec.label == label and proc is not None]
    if not found:
        return "no such app"
    proc = found[-1]
    if proc.poll() is not None:
        return f"had exited ({proc.returncode})"
    outcome = "closed"
    try:
        for window in desktop.windows():  # every app runs in a session of its own, led by its first process
            pid = desktop.input.window_pid(window)
            if pid is not None and callable(getattr(desktop, "host_pid", None)):
                pid = desktop.host_pid(pid)  # apps in a pid namespace of their own (a forkable desktop) say theirs
            try:
                if pid is not None and os.getsid(pid) == proc.pid:
                    desktop.input.close_window(window)
            except OSError:
                continue
        deadline = time.monotonic() + END_GRACE
        while proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(5)
            outcome = "ended by SIGTERM (its windows did not close)"
    except subprocess.TimeoutExpired:
        outcome = f"did not exit within {END_GRACE + 5:g}s"
    except HciEnvsError as exc:  # the display is gone: all that is left is the signal
        proc.send_signal(signal.SIGTERM)
        outcome = f"ended by SIGTERM ({exc.message})"
    stop_group(proc, timeout=0.5)  # what it started and left behind
    return outcome


# -- office documents, browsers, the tree --------------------------------------------------------------------
def _agent_bytes(env: Any, relative: str) -> bytes:
    return read_agent_file(_inside_home(env, relative))


def _parse_agent_file(env: Any, where: str, parse: Any, kind: str) -> tuple[Any, str]:
    """``parse`` of the agent's file, or None and why not: the file is the agent's, perhaps damaged or made
    to break a parser, and gives no credit then, never an exception."""
    try:
        return parse(_agent_bytes(env, where)), ""
    except OSError as exc:
        return None, f"{where}: unreadable ({exc.strerror or exc})"
    except MissingDependencyError:
        raise  # this machine lacks a reader: no score at all, never a zero (hci_envs.tasks.needs)
    except HciEnvsError as exc:
        return None, f"{where}: {exc.message}"
    except Exception as exc:  # noqa: BLE001
        return None, f"{where}: not a readable {kind} ({type(exc).__name__})"


def _document(check: DocumentCheck, env: Any) -> tuple[bool, str]:
    from .documents import read_text_document

    where = check.path
    doc, problem = _parse_agent_file(env, where, read_text_document, "document")
    if doc is None:
        return False, problem
    if check.format is not None and doc.format != check.format:
        return False, f"{where}: is {doc.format}, not {check.format}"
    text = doc.text
    for needle in check.contains:
        if needle not in text:
            return False, f"{where}: does not contain {needle!r}"
    for needle in check.not_contains:
        if needle in text:
            return False, f"{where}: still contains {needle!r}"
    if check.matches is not None and not re.search(check.matches, text):
        return False, f"{where}: does not match {check.matches!r}"
    for want in check.paragraphs:
        if not any(_paragraph_matches(p, want) for p in doc.paragraphs):
            return False, f"{where}: no paragraph {want.model_dump(exclude_none=True)}"
    for want in check.tables:
        if want.index >= len(doc.tables):
            return False, f"{where}: has {len(doc.tables)} table(s), no table {want.index + 1}"
        table = doc.tables[want.index]
        if want.rows is not None and len(table) != want.rows:
            return False, f"{where}: table {want.index + 1} has {len(table)} rows, not {want.rows}"
        if want.columns is not None and any(len(row) != want.columns for row in table):
            return False, f"{where}: table {want.index + 1} does not have {want.columns} columns"
        for r, row in enumerate(want.cells or []):
            for c, value in enumerate(row):
                got = table[r][c] if r < len(table) and c < len(table[r]) else None
                if value is not None and got != value:
                    return False, f"{where}: table {want.index + 1} cell ({r + 1}, {c + 1}) is {got!r}, not {value!r}"
    if check.title is not None and doc.title != check.title:
        return False, f"{where}: title is {doc.title!r}, not {check.title!r}"
    return True, f"{where}: as wanted"


def _paragraph_matches(p: Any, want: Any) -> bool:
    if want.text is not None and p.text != want.text.strip():
        return False
    if want.contains is not None and want.contains not in p.text:
        return False
    for name in ("style", "heading", "bold", "italic", "underline", "align", "list_item", "bold_spans",
                 "italic_spans", "underline_spans"):
        wanted = getattr(want, name)
        if wanted is not None and getattr(p, name) != wanted:
            return False
    return want.font_size is None or (p.font_size is not None and abs(p.font_size - want.font_size) < 0.05)


def _spreadsheet(check: SpreadsheetCheck, env: Any) -> tuple[bool, str]:
    from .documents import cell_position, read_workbook

    where = check.path
    book, problem = _parse_agent_file(env, where, read_workbook, "workbook")
    if book is None:
        return False, problem
    if check.format is not None and book.format != check.format:
        return False, f"{where}: is {book.format}, not {check.format}"
    if check.sheets is not None and [s.name for s in book.sheets] != check.sheets:
        return False, f"{where}: sheets are {[s.name for s in book.sheets]}, not {check.sheets}"
    if check.charts is not None and book.charts < check.charts:
        return False, f"{where}: {book.charts} chart(s), fewer than {check.charts}"
    sheet = book.sheet(check.sheet)
    if sheet is None:
        return False, f"{where}: no sheet {check.sheet!r}"
    for ref, want in check.cells.items():
        got = sheet.cell(ref).value
        if not _cell_equal(got, want, check.tolerance):
            return False, f"{where}: {ref} is {got!r}, not {want!r}"
    for ref, text in check.formulas.items():
        formula = sheet.cell(ref).formula
        if text.lower() not in formula.lower():
            return False, f"{where}: {ref}'s formula {formula!r} has no {text!r}"
    for ref in check.bold:
        if not sheet.cell(ref).bold:
            return False, f"{where}: {ref} is not bold"
    for column in check.columns:
        row, col = cell_position(f"{column.column}{column.from_row}")
        got = []
        while len(got) <= len(column.values) and (row, col) in sheet.cells:
            got.append(sheet.cells[(row, col)].value)
            row += 1
        if len(got) != len(column.values) or not all(_cell_equal(g, w, check.tolerance)
                                                     for g, w in zip(got, column.values)):
            return False, f"{where}: column {column.column} from row {column.from_row} is {got[:12]!r}"
    return True, f"{where}: as wanted"


def _cell_equal(got: Any, want: Any, tolerance: float) -> bool:
    if isinstance(want, bool) or isinstance(got, bool):
        return got is want or (isinstance(got, str) and got.strip().upper() == str(want).upper())
    if isinstance(want, int | float):
        if isinstance(got, str):
            try:
                got = float(got.strip().replace(",", ""))
            except ValueError:
                return False
        return isinstance(got, int | float) and abs(got - want) <= tolerance
    if want is None:
        return got is None or got == ""
    return isinstance(got, str) and got.strip() == str(want).strip()


def _browser(check: BrowserCheck, env: Any, live: Live) -> tuple[bool, str]:
    from .browser_profile import DOWNLOAD_COMPLETE, read_profile

    how = live.ended.get(check.app, "not ended")
    profile = read_profile(_inside_home(env, check.profile), read_agent_file)
    if check.bookmark is not None and not any(_bookmark_matches(b, check.bookmark) for b in profile.bookmarks):
        return False, f"browser ({how}): no bookmark {check.bookmark.model_dump(exclude_none=True)} among " \
                      f"{[b['name'] for b in profile.bookmarks][:10]}"
    if check.no_bookmark is not None and any(_bookmark_matches(b, check.no_bookmark) for b in profile.bookmarks):
        return False, f"browser ({how}): a bookmark {check.no_bookmark.model_dump(exclude_none=True)} is still there"
    if check.visited is not None and not any(
            (check.visited.url_contains is None or check.visited.url_contains in v["url"])
            and (check.visited.title is None or v["title"] == check.visited.title) for v in profile.visits):
        return False, f"browser ({how}): never visited {check.visited.model_dump(exclude_none=True)}"
    if check.download is not None and not any(
            Path(d["path"]).name == check.download and d["state"] == DOWNLOAD_COMPLETE for d in profile.downloads):
        return False, f"browser ({how}): no finished download {check.download!r}"
    return True, f"browser ({how}): as wanted"


def _bookmark_matches(bookmark: dict[str, str], want: Any) -> bool:
    return ((want.name is None or bookmark["name"] == want.name)
            and (want.url_contains is None or want.url_contains in bookmark["url"])
            and (want.folder is None or bookmark["folder"] == want.folder))


def _accessibility(check: AccessibilityCheck, live: Live) -> tuple[bool, str]:
    if live.tree is None:
        return False, f"no accessibility tree ({live.tree_reason})"
    found = [n for n in live.tree
             if (check.app is None or check.app.lower() in str(n.get("app", "")).lower())
             and (check.role is None or n["role"] == check.role)
             and (check.name is None or n["name"] == check.name)
             and (check.name_matches is None or re.search(check.name_matches, n["name"]))]
    what = " ".join(f"{k}={v!r}" for k, v in (("app", check.app), ("role", check.role), ("name", check.name),
                                                ("name_matches", check.name_matches)) if v is not None)
    if not check.exists:
        return (not found), f"element {what}: {'present, but should not be' if found else 'absent, as wanted'}"
    if not found:
        return False, f"no element {what}"

    def holds(n: dict[str, Any]) -> bool:
        text = n.get("text") or n.get("name") or ""
        return ((check.text is None or text.strip() == check.text)
                and (check.text_matches is None or re.search(check.text_matches, text) is not None)
                and (check.value is None or (n.get("value") is not None and abs(n["value"] - check.value) < 1e-9))
                and set(check.states) <= set(n.get("states", ())))

    good = [n for n in found if holds(n)]
    if not good:
        shown = [(n.get("text") or n["name"], n.get("value"), [s for s in n.get("states", ()) if s in check.states])
                 for n in found[:3]]
        return False, f"element {what} is {shown}"
    return True, f"element {what}: as wanted"


# -- scoring -------------------------------------------------------------------------------------------------
def score(check: Any, env: Any) -> Score:
    """Score the session's world with ``check``: 1.0 when it passes fully. Live readings first (the tree,
    browsers ended so that they write their profiles), then every file read while the agent's processes are
    stopped."""
    live = prepare(check, env)
    frozen = getattr(env, "agent_frozen", None)
    if frozen is None:
        return _score(check, env, live)
    with frozen():
        return _score(check, env, live)


def _score(check: Any, env: Any, live: Live) -> Score:
    if isinstance(check, AllCheck | AnyCheck | MeanCheck):
        parts = [_score(c, env, live) for c in check.checks]
        details = [d for p in parts for d in p.details]
        if isinstance(check, AllCheck):
            value = 1.0 if all(p.passed for p in parts) else 0.0
        elif isinstance(check, AnyCheck):
            value = 1.0 if any(p.passed for p in parts) else 0.0
        else:
            value = sum(p.value for p in parts) / len(parts)
        return Score(value, value >= 1.0, details)
    if isinstance(check, WeightedCheck):
        scored = [(part, _score(part.check, env, live)) for part in check.parts]
        total = sum(part.weight for part in check.parts)
        value = sum(part.weight * result.value for part, result in scored) / total
        details = [f"[{part.name} {result.value:.2f}x{part.weight:g}] {d}" for part, result in scored
                   for d in result.details]
        return Score(round(value, 6), all(result.passed for _part, result in scored), details)
    if isinstance(check, GateCheck):
        gate = _score(check.gate, env, live)
        if not gate.passed:
            return Score(0.0, False, ["gate: " + d for d in gate.details])
        then = _score(check.then, env, live)
        return Score(then.value, then.passed, gate.details + then.details)
    if isinstance(check, OsworldCheck):
        value, detail = live.osworld[id(check)]
        return Score(value, value >= 1.0, [("pass: " if value >= 1.0 else "fail: ") + detail])
    ok, detail = _one(check, env, live)
    return Score(1.0 if ok else 0.0, ok, [("pass: " if ok else "fail: ") + detail])
