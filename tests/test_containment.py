"""The agent is contained: tried as an adversarial agent would, holding only its own agent token and acting
only through its MCP tools (bash, python, CodeAct, its apps), it cannot read the trainer's secrets, reach
another session, read the checkers' answers, signal the server, outlive its session or starve other
sessions. Each test is one attack class; each passed on a server without containment.

The containers get the same attacks in test_docker.py.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import signal
import socket
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from helpers import McpClient, ServerProcess, agent_writable_dir, alive, by_app, text_of, wait_until

import hci_envs

CONTROL = "control-" + secrets.token_hex(16)
ROOT = Path(hci_envs.__file__).resolve().parent.parent


class Agent:
    """An adversarial agent: its session's MCP endpoint and agent token, nothing else."""

    def __init__(self, client: McpClient, state: dict[str, Any]) -> None:
        self.mcp = client
        self.state = state

    def bash(self, command: str, timeout: float = 30, persistent: bool = False) -> dict[str, Any]:
        result = self.mcp.call("bash", {"command": command, "timeout": timeout, "persistent": persistent})
        return result.structured_content or {"stdout": text_of(result), "stderr": "", "exit_code": None}

    def out(self, command: str, timeout: float = 30, persistent: bool = False) -> str:
        result = self.bash(command, timeout, persistent)
        assert not result.get("timed_out"), f"{command!r} timed out after {timeout} s: {result}"
        return result["stdout"]

    def uid(self) -> int:
        return int(self.out("id -u").strip())


@pytest.fixture(scope="module")
def server(x11: None) -> Iterator[ServerProcess]:
    # with spares, as `serve` runs by default: a reset swaps in another desktop and agent account. The network
    # open: what is tried here (the server's ports, other sessions' files, displays, buses) must hold on its own,
    # without the network policy that refuses an agent's connections first (tests/test_network.py)
    # a file as old as the server: a secret can only be in a file written since (the agent reads it too)
    since = agent_writable_dir("hci-envs-since-") / "since"
    since.touch()
    since.chmod(0o644)
    proc = ServerProcess("--env", "workstation", "--agent-tokens", "--max-sessions", "4", "--app", "xterm",
                         "--vnc-port", "0", "--spare", "--network", "open", env={"HCI_ENVS_CONTROL_TOKEN": CONTROL})
    proc.since = since  # type: ignore[attr-defined]
    proc.start(timeout=60)
    try:
        yield proc
    finally:
        proc.stop()


def control(server: ServerProcess) -> httpx.Client:
    return server.http(headers={"Authorization": f"Bearer {CONTROL}"})


@contextmanager
def session(server: ServerProcess, mode: str = "tools") -> Iterator[Agent]:
    """A new session of ``server`` and its agent, closed afterwards."""
    with control(server) as http:
        info = http.post("/sessions", json={"mode": mode}).json()
        assert "session_id" in info, info
        try:
            url = info["mcp_code_url"] if mode == "code" else info["mcp_tools_url"]
            with McpClient(url, info["agent_token"]) as client:
                state = http.get(f"/sessions/{info['session_id']}/state").json()
                yield Agent(client, {**info, **state})
        finally:
            http.delete(f"/sessions/{info['session_id']}")


def account_pids(uid: int) -> list[int]:
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                status = Path(f"/proc/{entry}/status").read_text()
            except OSError:
                continue
            real = int(re.search(r"^Uid:\s+(\d+)", status, re.M).group(1))
            state = re.search(r"^State:\s+(\S)", status, re.M).group(1)
            if real == uid and state not in "ZX":
                pids.append(int(entry))
    return pids


# -- privilege separation --------------------------------------------------------------------------------
@pytest.mark.x11
def test_agent_runs_as_an_account_of_its_own_without_privileges(server):
    with session(server) as a, session(server) as b:
        assert a.state["isolation"] == "uid"
        ua, ub = a.uid(), b.uid()
        assert ua != 0 and ub != 0 and ua != ub and os.getuid() not in (ua, ub)
        status = a.out("grep -E '^(CapEff|CapPrm|CapAmb|NoNewPrivs)' /proc/self/status")
        assert re.search(r"CapEff:\s+0+\n", status) and re.search(r"CapAmb:\s+0+\n", status), status
        assert re.search(r"NoNewPrivs:\s+1", status), status
        # a setuid program gives nothing back
        assert a.out("su -c id root 2>&1; sudo -n id 2>&1; echo done").strip().endswith("done")
        assert a.uid() == ua


@pytest.mark.x11
def test_no_secret_in_the_agents_environment_command_lines_or_files(server):
    with session(server) as a, session(server) as b:
        secrets_ = {CONTROL, b.state["agent_token"], *b.state["vnc_secrets"].values(),
                    *a.state["vnc_secrets"].values()}
        env = a.out("env")
        assert "HCI_ENVS" not in env and not any(s in env for s in secrets_), env
        # every command line and every environment of every process it may read, and the files where
        # secrets could have been left
        dump = a.out("for f in /proc/[0-9]*/cmdline /proc/[0-9]*/environ; do tr '\\0' '\\n' < $f; done "
                     "2>/dev/null; cat /proc/$PPID/environ 2>&1 | head -c 200", timeout=50)
        assert "hci_envs" in dump  # it did read the command lines (the server's among them)
        leaked = [s for s in secrets_ if s in dump]
        assert not leaked, "secrets readable in /proc"
        # one pass over the files for all the secrets at once
        patterns = " ".join(f"-e '{secret}'" for secret in secrets_)
        # (every readable regular file under 8 MiB written since the server started: what else the machine holds,
        # other test runs' checkouts and their large files, was never written with these secrets, and reading it
        # all makes the search as slow as the disk is busy)
        found = a.out(f"find /tmp /var/tmp /dev/shm /run /home -type f -newer {server.since} -size -8M -readable "
                      f"-print0 2>/dev/null | xargs -0 -r grep -lsF {patterns} 2>/dev/null; true", timeout=50)
        assert found.strip() == "", f"a secret is readable in {found}"


@pytest.mark.x11
def test_the_server_refuses_the_agent_side_whatever_it_presents(server):
    """Even with a stolen token, a connection from an agent account is refused: the kernel says whose it is."""
    with session(server) as a:
        probe = (
            "import json, urllib.request, urllib.error\n"
            f"for path, token in (('/health', None), ('/sessions', '{CONTROL}'), ('/state', '{CONTROL}')):\n"
            f"    request = urllib.request.Request('{server.base_url}' + path)\n"
            "    if token: request.add_header('Authorization', 'Bearer ' + token)\n"
            "    try:\n"
            "        print(path, urllib.request.urlopen(request, timeout=10).status)\n"
            "    except urllib.error.HTTPError as e:\n"
            "        print(path, e.code, json.loads(e.read())['error']['code'])\n"
        )
        out = a.mcp.ok("python", {"code": probe}).structured_content["stdout"]
        assert out.split("\n")[:3] == ["/health 403 AGENT_PEER", "/sessions 403 AGENT_PEER", "/state 403 AGENT_PEER"], out
        # from any of the machine's addresses, not only loopback ones: a local socket is a local socket
        port = server.port
        sources = a.mcp.ok("python", {"code": (
            "import socket, subprocess\n"
            "addresses = ['127.0.0.1', '127.0.0.2', *subprocess.run(['hostname', '-I'], capture_output=True, "
            "text=True).stdout.split()]\n"
            "for source in addresses:\n"
            "    family = socket.AF_INET6 if ':' in source else socket.AF_INET\n"
            "    target = '::1' if family == socket.AF_INET6 else '127.0.0.1'\n"
            "    try:\n"
            "        s = socket.socket(family)\n"
            "        s.bind((source, 0))\n"
            f"        s.connect((target, {port}))\n"
            "    except OSError as e:\n"
            "        print(source, 'unreachable', e.errno)\n"
            "        continue\n"
            "    s.sendall(b'GET /sessions HTTP/1.1\\r\\nHost: 127.0.0.1\\r\\nConnection: close\\r\\n\\r\\n')\n"
            "    print(source, s.recv(100).split(b'\\r\\n')[0].decode())\n")}).structured_content["stdout"]
        lines = sources.strip().splitlines()
        assert len(lines) >= 3, sources
        assert all("403" in line or "unreachable" in line for line in lines), sources
        assert sum("403" in line for line in lines) >= 3, sources
        # the raw VNC port too: the connection is closed before any handshake
        port = a.state["vnc_native_port"]
        banner = a.mcp.ok("python", {"code": (
            "import socket\ns = socket.create_connection(('127.0.0.1', %d), timeout=10)\nprint(repr(s.recv(12)))"
            % port)}).structured_content["stdout"]
        assert banner.strip() == "b''", banner
    with httpx.Client(base_url=server.base_url) as http:  # the test itself (another user) is served
        assert http.get("/health").status_code == 200


# -- sessions are apart ----------------------------------------------------------------------------------
@pytest.mark.x11
def test_sessions_cannot_read_each_others_files_cookies_or_displays(server):
    with session(server) as a, session(server) as b:
        b.out("echo private-to-b > ~/note.txt")
        listing = a.out(
            "for d in /tmp/hci-envs-home-*/own /tmp/hci-envs-agent-*/own /tmp/hci-envs-home-* /tmp/hci-envs-agent-*; do "
            "  if cat $d/note.txt $d/Xauthority >/dev/null 2>&1 || ls $d >/dev/null 2>&1; then echo READ $d; fi; "
            "done; echo HOME $HOME; echo RUN $XDG_RUNTIME_DIR")
        own = {line.split()[1] for line in listing.splitlines() if line.split()[0] in ("HOME", "RUN")}
        readable = {line.split()[1] for line in listing.splitlines() if line.startswith("READ")}
        assert readable <= own, f"another session's folders are readable: {readable - own}"
        assert len(own) == 2
        # every display on the machine, with every cookie this agent can read: only its own opens
        opened = a.out(
            "for s in /tmp/.X11-unix/X*; do n=${s##*X}; "
            "  for c in $XAUTHORITY /tmp/hci-envs-agent-*/own/Xauthority; do "
            "    XAUTHORITY=$c xdpyinfo -display :$n >/dev/null 2>&1 && echo OPEN :$n; "
            "  done; "
            "done | sort -u; echo MINE $DISPLAY")
        mine = re.search(r"MINE (\S+)", opened).group(1)
        assert [line.split()[1] for line in opened.splitlines() if line.startswith("OPEN")] == [mine], opened
        # nor signal the other session's processes
        ub = b.uid()
        before = account_pids(ub)
        assert before
        out = a.bash(f"kill -9 {' '.join(map(str, before))}")
        assert "Operation not permitted" in out["stderr"], out
        assert all(alive(p) for p in before)
        assert b.out("echo still here").strip() == "still here"


@pytest.mark.x11
def test_opening_the_display_to_others_does_not_outlast_the_episode(server):
    with session(server) as a, session(server) as b:
        display = a.out("echo $DISPLAY").strip()
        a.out("xhost +")  # access control off: anyone on the machine may connect
        assert "OPEN" in b.out(f"xdpyinfo -display {display} >/dev/null 2>&1 && echo OPEN")
        with control(server) as http:
            assert http.post(f"/sessions/{a.state['session_id']}/reset", json={}).status_code == 200
        assert "OPEN" not in b.out(f"xdpyinfo -display {display} >/dev/null 2>&1 && echo OPEN")


# -- answers ------------------------------------------------------------------------------------------------
def _in_another_checkout(path: Path) -> bool:
    """Whether ``path`` is inside a git checkout of a project other than this one's ROOT."""
    for parent in path.parents:
        if parent == ROOT:
            return False
        if (parent / ".git").exists() and (parent / "pyproject.toml").exists():
            return True
    return False


@pytest.mark.x11
def test_the_checkers_answers_are_not_readable(server):
    builtin = ROOT / "hci_envs" / "tasks" / "builtin.jsonl"
    assert builtin.exists()
    answer = "bread\\\\n+done"  # a fragment of one checker's pattern (JSON-escaped), found nowhere else
    assert answer in builtin.read_text()
    with session(server) as a:
        out = a.bash(f"cat {builtin}")
        assert out["exit_code"] != 0 and "Permission denied" in out["stderr"], out
        git = a.bash(f"git -C {ROOT} show HEAD:hci_envs/tasks/builtin.jsonl 2>&1 | head -c 300")["stdout"]
        assert "checker" not in git, git
        found = a.out(f"find {ROOT} / -xdev -name builtin.jsonl 2>/dev/null | sort -u | while read f; do "
                      "head -c 300 \"$f\" 2>/dev/null | grep -q checker && echo \"$f\"; done; true", timeout=120)
        readable = [path for path in found.splitlines() if path.strip()]
        # another checkout on the machine that no set-up command has run in (a fresh clone beside this one) is
        # that checkout's owner's to protect, as any world-readable file is (the README says so)
        assert not [path for path in readable if not _in_another_checkout(Path(path))], readable
        wheels = a.mcp.ok("python", {"code": (
            "import glob, zipfile\n"
            f"for w in glob.glob('{ROOT}/**/*.whl', recursive=True):\n"
            "    try:\n"
            "        z = zipfile.ZipFile(w)\n"
            "        print(z.read('hci_envs/tasks/builtin.jsonl')[:100])\n"
            "    except Exception as e:\n"
            "        print(type(e).__name__)\n")}).structured_content
        assert "checker" not in wheels["stdout"], wheels


# -- signals -------------------------------------------------------------------------------------------------
@pytest.mark.x11
def test_an_agent_sees_its_own_processes_only(server):
    """Other sessions' processes (their command lines: file names, app arguments), the server's and the
    desktop's own are invisible to an agent; its own, its apps' included, are there, and it cannot unmount the
    view."""
    with control(server) as http:
        assert "own account's only" in http.get("/metadata").json()["isolation"]["other_processes"]
    with session(server) as a, session(server) as b:
        marker = f"hci-envs-secret-{os.getpid()}"
        a.out(f"(exec -a {marker} sleep 300 &) ; echo started", persistent=True)
        assert marker in a.out("ps -eo args"), "the agent's own process is not shown to it"
        seen = b.out("ps -eo user,pid,args; ls /proc | grep -c '^[0-9]'")
        assert marker not in seen and "Xvfb" not in seen and "hci_envs" not in seen, seen
        assert "xterm" in seen  # its own app
        users = {line.split()[0] for line in seen.splitlines()[1:-1]}
        assert len(users) == 1, seen  # one account: its own
        assert "not permitted" in b.out("umount /proc 2>&1; mount -t proc proc /tmp 2>&1; true") \
            or "must be superuser" in b.out("umount /proc 2>&1; true"), "the agent changed its /proc view"
        assert marker not in b.out("ps -eo args")


@pytest.mark.x11
def test_the_server_and_its_watchdog_cannot_be_signalled(server):
    from helpers import processes_named

    watchdogs = [p for p in processes_named("watchdog_process.py") if p in server.children()]
    xvfb = [p for p in processes_named("Xvfb") if p in server.children()]
    assert watchdogs and xvfb
    targets = [server.proc.pid, *watchdogs, *xvfb]
    with session(server) as a:
        for sig in ("KILL", "TERM", "STOP"):
            out = a.bash(f"kill -{sig} {' '.join(map(str, targets))}; kill -{sig} $PPID")
            assert out["stderr"].count("Operation not permitted") == len(targets) + 1, out
        assert all(alive(p) for p in targets)
        assert a.out("echo alive").strip() == "alive"
    with server.http() as http:
        assert http.get("/health").status_code == 200


# -- nothing outlives its session --------------------------------------------------------------------------
SURVIVORS = (
    "setsid -f sleep 901; "
    "( sleep 902 & ) ; "
    "nohup sleep 903 >/dev/null 2>&1 & disown; "
    "python3 -c 'import os, time\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n"
    "        os.setpgid(0, 0); time.sleep(904)\n' ; "
    "sleep 0.3; echo started"
)


def _sleepers(uid: int) -> list[int]:
    out = []
    for pid in account_pids(uid):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if re.search(rb"sleep\x00?90[1-4]|time.sleep\(904\)", cmd):
            out.append(pid)
    return out


@pytest.mark.x11
def test_daemons_do_not_survive_reset_or_close(server):
    with control(server) as http:
        with session(server) as a:
            uid = a.uid()
            assert a.out(SURVIVORS, persistent=True).strip().endswith("started")
            assert len(_sleepers(uid)) == 4, _sleepers(uid)
            assert http.post(f"/sessions/{a.state['session_id']}/reset", json={}).status_code == 200
            assert _sleepers(uid) == [], "daemons survived the reset"
            second = a.uid()  # the spare's account, when the reset swapped it in
            assert a.out(SURVIVORS, persistent=True).strip().endswith("started")
            assert len(_sleepers(second)) == 4
        # the session is closed (DELETE /sessions/{id}): nothing of its accounts is left
        assert wait_until(lambda: not account_pids(uid) and not account_pids(second), 10), \
            (account_pids(uid), account_pids(second))


STASH = """
import ctypes, os, subprocess
os.umask(0)
for place in ('/tmp', '/var/tmp', '/dev/shm', '/run/lock'):
    open(place + '/stash-' + TAG, 'w').write('from the last episode')
libc = ctypes.CDLL('librt.so.1', use_errno=True)
libc.mq_open.restype = ctypes.c_int
queue = libc.mq_open(b'/stash-' + TAG.encode(), os.O_RDWR | os.O_CREAT, 0o666, None)
print('queue', queue, ctypes.get_errno())
print('shm', subprocess.run(['ipcmk', '-M', '4096'], capture_output=True, text=True).stdout.strip())
"""

PROBE_STASH = """
import ctypes, os, subprocess
left = [p for p in ('/tmp', '/var/tmp', '/dev/shm', '/run/lock') if os.path.exists(p + '/stash-' + TAG)]
libc = ctypes.CDLL('librt.so.1', use_errno=True)
queue = libc.mq_open(b'/stash-' + TAG.encode(), os.O_RDONLY, 0, None)
table = open('/proc/sysvipc/shm').read().splitlines()
column = table[0].split().index('uid')
segments = [line for line in table[1:] if int(line.split()[column]) == os.getuid()]
print('left', left, 'queue', queue, 'segments', len(segments))
"""


@pytest.mark.x11
def test_nothing_the_agent_stashes_outlives_the_episode(server):
    """Files in shared writable places, POSIX message queues and System V shared memory are gone at reset:
    the next episode (or session) on the same account finds nothing of this one."""
    tag = secrets.token_hex(4)
    with session(server) as a:
        made = a.mcp.ok("python", {"code": f"TAG = {tag!r}" + STASH}).structured_content["stdout"]
        assert "queue -1" not in made and "Shared memory id" in made, made
        assert "queue -1" not in a.mcp.ok("python", {"code": f"TAG = {tag!r}" + PROBE_STASH}).structured_content["stdout"]
        with control(server) as http:
            assert http.post(f"/sessions/{a.state['session_id']}/reset", json={}).status_code == 200
        left = a.mcp.ok("python", {"code": f"TAG = {tag!r}" + PROBE_STASH}).structured_content["stdout"]
        assert left.strip() == "left [] queue -1 segments 0", left


@pytest.mark.x11
def test_the_agent_cannot_put_a_symlink_where_the_server_works_as_itself(server, tmp_path):
    """Its home and runtime folder are its own, but it cannot rename them away and put a symlink in their place:
    the server empties and fills the home at reset as itself, and would follow one into a folder of root's."""
    victim = tmp_path / "roots-folder"
    victim.mkdir()
    (victim / "keep.txt").write_text("root's")
    with session(server) as a:
        out = a.out(f"for d in \"$HOME\" \"$XDG_RUNTIME_DIR\"; do mv \"$d\" \"$d.moved\" 2>/dev/null && "
                    f"ln -s {victim} \"$d\" && echo SWAPPED $d; done; echo done")
        assert "SWAPPED" not in out, out
        with control(server) as http:
            assert http.post(f"/sessions/{a.state['session_id']}/reset", json={}).status_code == 200
        assert a.out("echo ok > ~/after.txt && cat ~/after.txt").strip() == "ok"
    assert [p.name for p in victim.iterdir()] == ["keep.txt"] and (victim / "keep.txt").read_text() == "root's"


@pytest.mark.x11
@pytest.mark.parametrize("how", ["SIGTERM", "SIGKILL"])
def test_daemons_do_not_survive_the_server(x11, how):
    proc = ServerProcess("--env", "workstation", "--agent-tokens")
    proc.start(timeout=60)
    try:
        with proc.http() as http:
            info = http.get("/state").json()
        with McpClient(info["mcp_tools_url"], info["agent_token"]) as client:
            agent = Agent(client, info)
            uid = agent.uid()
            assert agent.out(SURVIVORS, persistent=True).strip().endswith("started")
            assert len(_sleepers(uid)) == 4
    finally:
        proc.stop(getattr(signal, how))
    assert wait_until(lambda: not account_pids(uid), 15), f"left behind after {how}: {account_pids(uid)}"


# -- CodeAct -------------------------------------------------------------------------------------------------
#: Ways out of the CodeAct namespace to the real os module or builtins (no import, no dunder attribute).
ESCAPES = {
    "module attribute": "os_ = random._os",
    "sys.modules": "os_ = statistics.sys.modules['os']",
    "generator frame": "def g():\n    yield\ngen = g()\nos_ = gen.gi_frame.f_globals['random']._os",
    "traceback frame": ("try:\n    1 / 0\nexcept ZeroDivisionError:\n"
                        "    os_ = statistics.sys.exc_info()[2].tb_frame.f_globals['statistics'].sys.modules['os']"),
    "real builtins": ("real = statistics.sys.modules['builtins']\n"
                      "os_ = real.eval(\"__import__('os')\", {'__builtins__': real})"),
    "format": "os_ = statistics.sys.modules['os']; leak = '{0.__globals__}'.format(find_tools)",
}


@pytest.mark.x11
@pytest.mark.parametrize("escape", sorted(ESCAPES))
def test_codeact_escapes_gain_nothing_beyond_the_agents_account(server, escape):
    with session(server, mode="code") as a:
        code = ESCAPES[escape] + (
            "\nB = statistics.sys.modules['builtins']"
            "\nprint('uid', os_.getuid())"
            "\nprint('popen', os_.popen('id -u').read().strip())"
            "\ntry:\n    os_.kill(os_.getppid(), 9)\nexcept OSError as e:\n    print('kill', e.errno)"
            "\ntry:\n    B.open('/proc/%d/environ' % os_.getppid()).read()\nexcept OSError as e:\n    print('environ', e.errno)"
        )
        result = a.mcp.call("execute_code", {"code": code})
        out = result.structured_content["stdout"]
        uid = int(re.search(r"uid (\d+)", out).group(1))
        assert uid != 0 and uid != os.getuid(), out
        assert f"popen {uid}" in out  # this environment has bash: programs run, as the agent
        # EPERM; and the server's /proc entry is hidden (ENOENT) or, where it is shown, unreadable (EACCES)
        assert "kill 1" in out and re.search(r"environ (2|13)\b", out), out
        assert alive(server.proc.pid)


@pytest.fixture(scope="module")
def desktop_server(x11: None) -> Iterator[ServerProcess]:
    """An environment without bash or python: CodeAct must not hand out programs."""
    proc = ServerProcess("--env", "desktop", "--action-mode", "code", "--app", "xterm")
    proc.start(timeout=60)
    try:
        yield proc
    finally:
        proc.stop()


CONTAINED_ATTEMPTS = """
B = statistics.sys.modules['builtins']
def attempt(name, fn):
    try:
        print(name, 'ALLOWED', repr(fn())[:80])
    except BaseException as e:
        print(name, 'refused', repr(e)[:80])
def system():
    status = os_.system('touch MARKER')
    if status != 0:
        raise OSError(status, 'system failed')
    return status
def fork():
    if os_.fork() == 0:
        os_._exit(0)
    return 'forked'
mine = [p for p in os_.listdir('/proc') if p.isdigit() and os_.stat('/proc/' + p).st_uid == os_.getuid()
        and p != str(os_.getpid())]
attempt('system', system)
attempt('popen', lambda: os_.popen('id').read())
attempt('fork', fork)
attempt('exec', lambda: os_.execv('/bin/true', ['true']))
attempt('write', lambda: B.open('MARKER', 'w').write('x'))
attempt('write-home', lambda: B.open('notes.txt', 'w').write('x'))
attempt('mkdir', lambda: os_.mkdir('escape-dir'))
attempt('socket', lambda: B.eval("__import__('socket')", {'__builtins__': B}).socket())
attempt('memory', lambda: B.open('/proc/%s/mem' % mine[0], 'r+b'))
attempt('xattr', lambda: os_.setxattr('.', 'user.mark', b'1'))
def ipc():
    libc = B.eval("__import__('ctypes')", {'__builtins__': B}).CDLL(None, use_errno=True)
    if libc.shmget(0, 4096, 0o1000 | 0o666) == -1:
        raise OSError('shmget failed')
    return 'made a shared memory segment'
attempt('ipc', ipc)
print('read-ok', len(B.open('/etc/hostname').read()) >= 0)
"""


@pytest.mark.x11
@pytest.mark.parametrize("escape", sorted(ESCAPES))
def test_codeact_without_shell_traits_cannot_start_programs_or_write(desktop_server, escape):
    with desktop_server.http() as http:
        info = http.get("/state").json()
    marker = f"/tmp/hci-envs-escape-{secrets.token_hex(4)}"
    code = ESCAPES[escape] + CONTAINED_ATTEMPTS.replace("MARKER", marker)
    with McpClient(info["mcp_code_url"], info.get("agent_token")) as client:
        out = client.call("execute_code", {"code": code}).structured_content["stdout"]
    assert "ALLOWED" not in out, out
    assert out.count("refused") == 11 and "NameError" not in out, out
    assert "read-ok True" in out, out  # reading is not the point: it is the agent's own view
    assert not os.path.exists(marker)


# -- the web ------------------------------------------------------------------------------------------------
def _ws_status(base_url: str, origin: str | None, token: str | None = None) -> str:
    """What /ws answers to a browser-like handshake with ``origin``: "open" or the refusal."""
    from websockets.exceptions import InvalidStatus
    from websockets.sync.client import connect

    headers = {"Origin": origin} if origin is not None else {}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    try:
        with connect(base_url.replace("http", "ws", 1) + "/ws", additional_headers=headers, open_timeout=30,
                     origin=None) as ws:
            ws.send(json.dumps({"type": "state"}))
            reply = json.loads(ws.recv(timeout=30))
            return "open" if reply.get("type") == "state" else f"error {reply}"
    except InvalidStatus as exc:
        return f"refused {exc.response.status_code}"
    except Exception as exc:  # closed during the handshake
        return f"refused {type(exc).__name__}"


@pytest.mark.x11
@pytest.mark.parametrize("tokens", ["none", "control only", "agent only"])
def test_foreign_and_null_origins_are_refused(x11, tokens):
    env = {"HCI_ENVS_CONTROL_TOKEN": CONTROL} if tokens == "control only" else {}
    args = ["--agent-tokens"] if tokens == "agent only" else []
    token = CONTROL if tokens == "control only" else None
    with ServerProcess("--no-vnc", *args, env=env) as proc:
        page = f"http://127.0.0.1:{proc.port}"
        assert _ws_status(proc.base_url, "null", token).startswith("refused"), "Origin: null (a sandboxed iframe)"
        assert _ws_status(proc.base_url, "http://evil.example", token).startswith("refused")
        assert _ws_status(proc.base_url, "file://", token).startswith("refused")
        with httpx.Client(base_url=proc.base_url) as http:
            refused = http.post("/step", json={"action": {"type": "wait", "ms": 1}},
                                headers={"Origin": "null", **({"Authorization": f"Bearer {token}"} if token else {})})
            assert refused.status_code == 403 and refused.json()["error"]["code"] == "FORBIDDEN_ORIGIN"
        assert _ws_status(proc.base_url, page, token) == "open"  # the server's own pages work
        assert _ws_status(proc.base_url, None, token) == "open"  # and clients that are not browsers


@pytest.mark.x11
def test_a_client_that_sends_no_headers_is_cut_off(x11):
    with ServerProcess("--no-vnc", env={"HCI_ENVS_HEADER_TIMEOUT": "1"}) as proc:
        idle = socket.create_connection(("127.0.0.1", proc.port))
        slow = socket.create_connection(("127.0.0.1", proc.port))
        slow.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        for sock in (idle, slow):
            sock.settimeout(30)
            try:
                assert sock.recv(1024) == b""  # closed by the server, not left open for ever
            finally:
                sock.close()
        with httpx.Client(base_url=proc.base_url) as http:
            assert http.get("/health").status_code == 200


@pytest.mark.x11
def test_vnc_secrets_are_long_and_refusals_alike(server):
    from websockets.sync.client import connect

    with control(server) as http:
        state = http.get("/state").json()
    alphabet_bits = 5.83  # log2(57)
    for secret in state["vnc_secrets"].values():
        assert len(secret) * alphabet_bits >= 128, secret

    def close_of(session_id: str, secret: str) -> tuple[int, str]:
        url = server.base_url.replace("http", "ws", 1) + f"/vnc/ws/{session_id}/{secret}"
        with connect(url, open_timeout=30) as ws:
            try:
                ws.recv(timeout=30)
            except Exception:
                pass
            return ws.close_code, ws.close_reason

    wrong_secret = close_of(state["session_id"], "x" * 32)
    unknown_session = close_of("nosuchsession", state["vnc_secrets"]["control"])
    assert wrong_secret == unknown_session and wrong_secret[0] == 4401, (wrong_secret, unknown_session)


# -- fair share ------------------------------------------------------------------------------------------------
@pytest.mark.x11
def test_one_session_flooding_does_not_starve_another(server):
    with session(server) as victim:
        flood_session = session(server)
        flooder = flood_session.__enter__()
        done: list[float] = []
        lock = threading.Lock()

        def slow_wait(_: int) -> None:
            flooder.mcp.call("wait", {"ms": 2000})
            with lock:
                done.append(time.monotonic())

        pool = ThreadPoolExecutor(60)
        try:
            futures = [pool.submit(slow_wait, i) for i in range(60)]
            time.sleep(1.0)  # the flood is in: 60 calls of 2 s each, which the flooder's desktop runs in turn
            result = victim.mcp.call("cursor_position")
            with lock:
                finished_before = len(done)
            assert not result.is_error, text_of(result)
            # the victim's call did not wait behind the flood (on a shared pool it waits for ~20 of its calls)
            assert finished_before <= 2, f"{finished_before} of the flood's calls finished before the victim's"
        finally:
            flood_session.__exit__(None, None, None)  # closing the session ends its queue
            pool.shutdown(wait=True)
        assert all(f.done() for f in futures)


@pytest.mark.x11
def test_a_reset_does_not_wait_behind_the_agents_calls(server):
    """The harness resets while the agent has long commands running and more queued: the reset ends them
    instead of waiting (up to their 600 s timeouts), and calls queued in the old episode do not run in the
    new one."""
    with session(server) as a, control(server) as http:
        results: list[Any] = []

        def long_call(i: int) -> None:
            if i % 2:
                results.append(a.mcp.call("bash", {"command": "sleep 120; echo finished", "timeout": 600}))
            else:
                results.append(a.mcp.call("wait", {"ms": 60000}))

        pool = ThreadPoolExecutor(10)
        try:
            for i in range(10):  # 4 run at once, 6 wait in the session's queue
                pool.submit(long_call, i)
            time.sleep(1.5)
            started = time.monotonic()
            reply = http.post(f"/sessions/{a.state['session_id']}/reset", json={})
            took = time.monotonic() - started
            assert reply.status_code == 200, reply.text
            assert took < 30, f"the reset waited {took:.0f}s behind the agent's calls"
        finally:
            pool.shutdown(wait=True)
        texts = [text_of(r) for r in results]
        assert len(texts) == 10 and not any("finished" in t for t in texts), texts
        assert sum("was reset" in t or "interrupted" in t or "exit code -9" in t or "exit code None" in t
                   for t in texts) == 10, texts
        assert a.out("echo next episode").strip() == "next episode"


@pytest.mark.x11
def test_an_agent_cannot_catch_another_sessions_x_connections(server):
    """X clients connect to a display's abstract socket first: an agent that could bind the name of another
    session's display would receive that session's connections and their cookies."""
    with session(server) as a, session(server) as b:
        theirs = b.out("echo $DISPLAY").strip().lstrip(":")
        mine = a.out("echo $DISPLAY").strip().lstrip(":")
        out = a.mcp.ok("python", {"code": (
            "import socket\n"
            f"for n in ({theirs}, {mine}):\n"
            "    s = socket.socket(socket.AF_UNIX)\n"
            "    try:\n"
            "        s.bind('\\0/tmp/.X11-unix/X%d' % n)\n"
            "        print(n, 'BOUND')\n"
            "    except OSError as e:\n"
            "        print(n, 'in use', e.errno)\n")}).structured_content["stdout"]
        assert "BOUND" not in out and out.count("in use 98") == 2, out  # EADDRINUSE: Xvfb holds both
        assert b.out("xdpyinfo >/dev/null && echo reached").strip() == "reached"


@pytest.mark.x11
def test_step_timeout_is_honoured(server):
    with control(server) as http:
        info = http.post("/sessions").json()
        sid = info["session_id"]
        try:
            http.post(f"/sessions/{sid}/reset", json={})
            started = time.monotonic()
            reply = http.post(f"/sessions/{sid}/step", json={"action": {"type": "wait", "ms": 20000}, "timeout_s": 1})
            took = time.monotonic() - started
            assert reply.status_code == 200, reply.text
            observation = reply.json()["observation"]
            assert observation["error"]["code"] == "TIMEOUT", observation
            assert took < 15, took  # nowhere near the 20 s the action asked for
            reply = http.post(f"/sessions/{sid}/step", json={
                "action": {"tool": "bash", "arguments": {"command": "sleep 30; echo late", "timeout": 60}},
                "timeout_s": 1})
            assert "late" not in reply.json()["observation"]["text"]
            assert "timed out" in reply.json()["observation"]["text"], reply.json()
        finally:
            http.delete(f"/sessions/{sid}")


# -- where it cannot hold ------------------------------------------------------------------------------------
@pytest.mark.x11
def test_without_isolation_the_server_says_so_and_stays_on_loopback(x11):
    with ServerProcess("--isolation", "none", "--no-vnc") as proc:
        assert any("isolation: none" in line for line in proc.output)
        with proc.http() as http:
            assert http.get("/metadata").json()["isolation"]["mode"] == "none"
            assert http.get("/state").json()["isolation"] == "none"
    exposed = ServerProcess("--isolation", "none", "--host", "0.0.0.0", "--no-vnc",
                            env={"HCI_ENVS_CONTROL_TOKEN": CONTROL, "HCI_ENVS_AGENT_TOKEN": "a" * 32})
    with pytest.raises(AssertionError, match="without agent isolation"):
        exposed.start()


@pytest.mark.x11
def test_a_server_that_cannot_switch_users_says_so(x11):
    """Run as an unprivileged user (nobody), the server cannot isolate agents: it says why at start-up, in
    /metadata and in state(), and will not listen off loopback."""
    from helpers import agent_writable_dir

    nobody = ["setpriv", "--reuid", "nobody", "--regid", "nogroup", "--clear-groups", "--"]
    home = agent_writable_dir()  # pytest's own folders are private to root
    env = {"HOME": str(home), "HCI_ENVS_RUN_DIR": str(home / "run")}
    with ServerProcess("--no-vnc", prefix=nobody, env=env) as proc:
        warning = next(line for line in proc.output if "isolation: none" in line)
        assert "cannot switch users" in warning and "CAP_SETUID" in warning, warning
        with proc.http() as http:
            isolation = http.get("/metadata").json()["isolation"]
            assert isolation["mode"] == "none" and "CAP_SETUID" in isolation["reason"], isolation
            assert http.get("/state").json()["isolation"] == "none"
    exposed = ServerProcess("--no-vnc", "--host", "0.0.0.0", prefix=nobody,
                            env={**env, "HCI_ENVS_CONTROL_TOKEN": CONTROL, "HCI_ENVS_AGENT_TOKEN": "a" * 32})
    with pytest.raises(AssertionError, match="without agent isolation"):
        exposed.start()


@pytest.mark.x11
def test_secrets_on_the_command_line_are_refused_when_agents_share_the_machine(x11):
    proc = ServerProcess("--control-token", CONTROL, "--no-vnc")
    with pytest.raises(AssertionError, match="readable by every local user"):
        proc.start()


# -- real applications as the agent's account ------------------------------------------------------------
def _window_title(env: Any) -> str:
    windows = env.desktop.windows()
    return env.desktop.input.window_title(windows[-1]) if windows else ""


def _app_processes(env: Any, name: str) -> dict[int, int]:
    """pid -> real uid of every process of this environment's apps (each app starts a session of its own)
    whose command line mentions ``name``; other sessions' apps (tests running beside these) are not its."""
    sessions = {proc.pid for _spec, proc in env.desktop.apps() if proc is not None}
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmd = Path(f"/proc/{entry}/cmdline").read_bytes()
            status = Path(f"/proc/{entry}/status").read_text()
            sid = os.getsid(int(entry))
        except OSError:
            continue
        if name.encode() in cmd and sid in sessions:
            found[int(entry)] = int(re.search(r"^Uid:\s+(\d+)", status, re.M).group(1))
    return found


PAGE = ("data:text/html,<title>before</title><button style='position:fixed;inset:0;width:100%;height:100%' "
        "onclick=\"document.title='clicked'\">press</button>")


@pytest.mark.parametrize("app", by_app("mousepad", "chromium", "libreoffice", "animation"))
def test_real_apps_run_as_the_agent_and_take_input(x11, app):
    """A GTK editor, a browser, an office suite and an app that never stops drawing start as the session's
    account, get the agent's input, and are gone with the session."""
    from conftest import need_programs
    from hci_envs.traits import WorkstationEnv

    from helpers import ANIMATE

    commands = {
        "mousepad": ["mousepad", "note.txt"],  # in the home, the apps' working directory
        "chromium": ["chromium", "--no-first-run", "--disable-gpu", "--window-position=0,0",
                     "--window-size=1280,800", PAGE],
        "libreoffice": ["libreoffice", "--writer", "--norestore", "--nologo"],
        "animation": ["python3", str(ANIMATE)],
    }
    need_programs({"animation": "python3"}.get(app, app))
    env = WorkstationEnv(start_state={"apps": [{"command": commands[app], "timeout": 90}]})
    try:
        env.reset()
        uid = env.account.uid
        marker = {"animation": "animate.py", "libreoffice": "soffice"}.get(app, app)
        owners = _app_processes(env, marker)
        assert owners and set(owners.values()) == {uid}, owners
        if app == "mousepad":
            env.step([{"type": "type_text", "text": "héllo from the agent"}, {"type": "key", "keys": "ctrl+s"},
                      {"type": "wait", "ms": 800}])
            saved = env.home / "note.txt"
            assert wait_until(lambda: saved.exists() and "héllo from the agent" in saved.read_text(), 10)
            assert saved.stat().st_uid == uid  # the agent's own file
        elif app == "chromium":
            assert wait_until(lambda: _window_title(env).startswith("before"), 30), _window_title(env)
            env.step({"type": "click", "x": 640, "y": 450})
            assert wait_until(lambda: _window_title(env).startswith("clicked"), 10), _window_title(env)
        elif app == "libreoffice":
            assert wait_until(lambda: "Writer" in _window_title(env), 60), _window_title(env)
            time.sleep(1.0)
            before = env.observe().screenshot.to_numpy()
            env.step({"type": "type_text", "text": "Typed into Writer by the agent"})
            assert wait_until(lambda: (env.observe().screenshot.to_numpy() != before).any(axis=2).sum() > 200, 10)
        else:
            first = env.observe().screenshot.to_numpy()
            assert wait_until(lambda: (env.observe().screenshot.to_numpy() != first).any(), 5)
        env.step({"type": "mouse_move", "x": 5, "y": 5})  # touched: the reset rebuilds the desktop
        env.reset()  # the app starts again, as the same account, and the old processes are gone
        assert not [pid for pid in owners if alive(pid)], owners
        assert _app_processes(env, marker)
    finally:
        env.close()
    assert wait_until(lambda: not account_pids(uid), 10), account_pids(uid)
