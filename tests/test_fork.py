"""Forking a running desktop (hci_envs.fork): live copies of one moment, with real apps, real CRIU and real
agent accounts. Each copy must show the source's screen at the fork, hold its processes, home, clipboard and
pointer, run as ids of its own, and then go its own way; the source goes on unchanged."""

from __future__ import annotations

import json
import os
import subprocess
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from conftest import need, need_programs
from helpers import ANIMATE, wait_until

from hci_envs.errors import ConfigError, ForkError
from hci_envs.protocol import AppState, StartState

pytestmark = pytest.mark.fork

SIZE = (1024, 700)
#: The animation, top right (its box is left out of the screen comparisons: it moves on after the fork).
ANIMATION_BOX = (724, 0, 1024, 200)
ANIMATION = AppState(command=["python3", "-c", ANIMATE.read_text(), "300", "200", "16", "724", "0"], name="animation")
XTERM = AppState(command=["xterm", "-geometry", "60x8+0+560"], name="xterm")
MOUSEPAD = AppState(command=["mousepad"], name="mousepad")
#: GTK's cursor does not blink in these homes: a blink between two screenshots is not a difference of state.
GTK_SETTINGS = "[Settings]\ngtk-cursor-blink=false\n"


@pytest.fixture(scope="module")
def forkable() -> None:
    from hci_envs.fork import fork_unavailable

    need_programs("Xvfb", "openbox", "mousepad", "xterm")
    why = fork_unavailable()
    need(why is None, f"forking: {why}")


class Accounts:
    """Agent accounts leased from the machine's pool (the real ones), each with a home of its own."""

    def __init__(self) -> None:
        from hci_envs.sandbox.accounts import account_pool

        self._pool = account_pool()
        self.leases: list = []
        self.homes: list[Path] = []

    def take(self, n: int) -> tuple[list, list[Path]]:
        import tempfile

        leases = [self._pool.lease() for _ in range(n)]
        homes = []
        for lease in leases:
            home = Path(tempfile.mkdtemp(prefix="hci-envs-fork-home-"))
            os.chown(home, lease.account.uid, lease.account.gid)
            homes.append(home)
        self.leases += leases
        self.homes += homes
        return [lease.account for lease in leases], homes

    def release(self) -> None:
        import shutil

        for lease in self.leases:
            lease.release()
        for home in self.homes:
            shutil.rmtree(home, ignore_errors=True)


@pytest.fixture
def accounts(forkable: None) -> Iterator[Accounts]:
    held = Accounts()
    try:
        yield held
    finally:
        held.release()


@pytest.fixture
def desktops() -> Iterator[list]:
    """Every desktop a test makes, closed at its end whatever happened."""
    made: list = []
    try:
        yield made
    finally:
        for desktop in made:
            desktop.close()


def start(accounts: Accounts, desktops: list, apps: list[AppState], files: dict[str, str] | None = None):
    from hci_envs.fork import ForkableDesktop

    [account], [home] = accounts.take(1)
    for name, text in {".config/gtk-3.0/settings.ini": GTK_SETTINGS, **(files or {})}.items():
        (home / name).parent.mkdir(parents=True, exist_ok=True)
        (home / name).write_text(text)
    subprocess.run(["chown", "-R", f"{account.uid}:{account.gid}", str(home)], check=True)
    desktop = ForkableDesktop(StartState(width=SIZE[0], height=SIZE[1], apps=apps), home=str(home), account=account)
    desktops.append(desktop)
    return desktop.start()


def fork(source, accounts: Accounts, desktops: list, n: int) -> list:
    copy_accounts, homes = accounts.take(n)
    copies = source.fork(n, accounts=copy_accounts, homes=[str(h) for h in homes])
    desktops.extend(copies)
    return copies


def screen(desktop) -> np.ndarray:
    frame = desktop.screen.grab(0, 0, *SIZE)
    return np.frombuffer(frame.data, np.uint8).reshape(SIZE[1], SIZE[0], -1)[:, :, :3]


def differing(a: np.ndarray, b: np.ndarray) -> int:
    """Pixels that differ between two screens, the animation's box left out."""
    differs = (a != b).any(axis=2)
    left, top, right, bottom = ANIMATION_BOX
    differs[top:bottom, left:right] = False
    return int(differs.sum())


def focus(desktop, window_class: str) -> None:
    """Give the keyboard to the window of ``window_class`` (and wait until the window manager did)."""
    window = next(w for w in desktop.windows() if window_class in desktop.input.window_class(w))
    assert wait_until(lambda: (desktop.input.activate(window), desktop.input.focused_class() == window_class)[1], 10)


def typed(desktop, text: str) -> None:
    desktop.input.type_keys(text)
    desktop.input.delivered()


def settled(desktop) -> None:
    """Until the screen has held still (an animation aside) for half a second, however busy the machine: a
    moment compared with a copy's is a still one."""
    assert desktop.events.wait_settled(quiet=0.5, timeout=30), f"{desktop.display} did not settle"


def uids_of(desktop) -> set[int]:
    return {os.stat(f"/proc/{pid}").st_uid for pid in desktop.processes_inside().values()
            if os.path.exists(f"/proc/{pid}")}


def test_four_copies_show_the_moment_then_each_goes_its_own_way(accounts, desktops, monkeypatch):
    from hci_envs.fork.sharing import SETTING, opted_in

    monkeypatch.delenv(SETTING, raising=False)  # the default
    source = start(accounts, desktops, [XTERM, ANIMATION, MOUSEPAD])
    (Path(source.home) / "before.txt").write_text("in the home before the fork\n")
    focus(source, "Mousepad")
    typed(source, "unsaved text, typed before the fork ✓")
    settled(source)
    before_processes = sorted(source.processes_inside())
    before_screen = screen(source)

    copies = fork(source, accounts, desktops, 4)
    screens = [screen(copy) for copy in copies]
    for copy, shown in zip(copies, screens):
        assert differing(before_screen, shown) == 0, f"copy {copy.display} does not show the source's screen"
        assert sorted(copy.processes_inside()) == before_processes  # every process, under the same pids inside
        assert copy.health().ok and copy.quick_failure() is None
        # nothing open to KSM unless the server says so (see the test of sharing below)
        assert not any(opted_in(pid) for pid in copy.processes_inside().values())
        # a window's pid (the tree's own) leads, as the host sees it, to the copy's app (a checker closes apps so)
        [editor] = [w for w in copy.windows() if "Mousepad" in copy.input.window_class(w)]
        [(_, mousepad)] = [(s, p) for s, p in copy.apps() if s.label == "mousepad"]
        assert os.getsid(copy.host_pid(copy.input.window_pid(editor))) == mousepad.pid
    assert differing(before_screen, screen(source)) == 0, "the fork changed the source's screen"

    # each its own ids: the copy's account for its agent and a root of its own, none of the source's
    source_uids = uids_of(source)
    for copy in copies:
        assert uids_of(copy) == {copy.tree.root_uid, copy.account.uid}
        assert not uids_of(copy) & source_uids
        home = Path(copy.home)
        assert (home / "before.txt").read_text() == "in the home before the fork\n"
        assert (home / "before.txt").stat().st_uid == copy.account.uid

    # each copy's shell writes in its own home only, as its own agent; the source's too
    for name, desktop in [("source", source), *((f"copy-{i}", c) for i, c in enumerate(copies))]:
        focus(desktop, "XTerm")
        typed(desktop, f"echo {name} > ~/typed.txt\n")
    for name, desktop in [("source", source), *((f"copy-{i}", c) for i, c in enumerate(copies))]:
        written = Path(desktop.home) / "typed.txt"
        assert wait_until(lambda: written.exists() and written.read_text() == f"{name}\n", 20), \
            f"{name}: {written.read_text() if written.exists() else 'nothing written'}"
        assert written.stat().st_uid == desktop.account.uid

    # and their editors diverge: each shows what was typed into it, none the others'
    for i, desktop in enumerate([source, *copies]):
        focus(desktop, "Mousepad")
        typed(desktop, f" and then {'X' * (i + 1)}")
    for desktop in [source, *copies]:
        settled(desktop)
    after = [screen(d) for d in [source, *copies]]
    for i in range(len(after)):
        for j in range(i + 1, len(after)):
            assert differing(after[i], after[j]) > 0, f"desktops {i} and {j} show the same after typing apart"


@pytest.mark.parametrize("app, act", [
    ("writer", "type"), ("chromium", "scroll"),
])
def test_an_office_document_mid_edit_and_a_scrolled_page_fork_as_they_are(accounts, desktops, app, act):
    """LibreOffice Writer with typed, unsaved text; chromium scrolled down a long page: each copy shows the
    moment, then goes its own way."""
    long_page = ("data:text/html,<body style='font:40px sans-serif'>" +
                 "".join(f"<p>line {i}</p>" for i in range(200)) + "</body>")
    from hci_envs.tasks.suite.apps import LIBREOFFICE_PROFILE, LIBREOFFICE_STARTED_ONCE, libreoffice_profile, writer

    apps = {"writer": AppState(**writer()),  # the suite's Writer: a profile started once (no tips, no bars)
            "chromium": AppState(command=["chromium", "--no-sandbox", "--no-first-run",
                                          "--user-data-dir={home}/.chromium", "--window-position=0,0",
                                          f"--window-size={SIZE[0]},{SIZE[1]}", long_page], timeout=90)}
    need_programs(apps[app].argv[0])
    source = start(accounts, desktops, [apps[app]],
                   files=libreoffice_profile(LIBREOFFICE_PROFILE, LIBREOFFICE_STARTED_ONCE) if app == "writer" else {})
    settled(source)  # first paint done, the browser's infobar shown
    if act == "type":
        typed(source, "A document mid-edit, never saved.")
    else:
        source.input.move(SIZE[0] // 2, SIZE[1] // 2)
        for _ in range(10):
            source.input.scroll(0, 5)
    # the moment is a still one: a smooth scroll or an infobar sliding in is over (however busy the machine)
    settled(source)
    before = screen(source)
    copies = fork(source, accounts, desktops, 2)
    for copy in copies:
        assert differing(before, screen(copy)) == 0, f"{app}: copy {copy.display} is not the moment"
    typed(copies[0], " One way.") if act == "type" else copies[0].input.scroll(0, -20)
    settled(copies[0])
    assert differing(screen(copies[0]), screen(copies[1])) > 0
    assert differing(before, screen(copies[1])) == 0 and differing(before, screen(source)) == 0


def test_each_copy_has_its_own_accessibility_tree(accounts, desktops):
    """The accessibility bus is in the tree: each copy's tree shows the source's text at the fork, labelled as
    the start state names the app, and then its own text only."""
    from hci_envs.desktop.a11y_model import Query

    def texts(desktop) -> list[str]:
        nodes = desktop.accessibility.tree(Query(app="mousepad")).nodes
        assert nodes and all(n["app"] == "mousepad" for n in nodes)
        return [n["text"] for n in nodes if n.get("role") == "text" and "text" in n]

    source = start(accounts, desktops, [AppState(command=["mousepad"], ready="accessible")])
    assert source.no_accessibility is None
    typed(source, "read by the tree ✓")
    assert wait_until(lambda: texts(source) == ["read by the tree ✓"], 10), texts(source)
    copies = fork(source, accounts, desktops, 2)
    for i, copy in enumerate(copies):
        assert copy.no_accessibility is None and texts(copy) == ["read by the tree ✓"]
        typed(copy, f" copy {i}")
    for i, copy in enumerate(copies):
        assert wait_until(lambda: texts(copy) == [f"read by the tree ✓ copy {i}"], 10), texts(copy)
    assert texts(source) == ["read by the tree ✓"]


def test_the_clipboard_and_the_pointer_come_with_the_copies(accounts, desktops):
    source = start(accounts, desktops, [XTERM])
    source.events.set_clipboard("carried over ✓ 你好")
    source.input.move(321, 123)
    copies = fork(source, accounts, desktops, 2)
    for desktop in [source, *copies]:
        assert desktop.input.pointer() == (321, 123)
        assert desktop.events.get_clipboard() == "carried over ✓ 你好"
    copies[0].events.set_clipboard("only in the first copy")
    assert copies[1].events.get_clipboard() == "carried over ✓ 你好"
    assert source.events.get_clipboard() == "carried over ✓ 你好"


def test_a_copy_serves_vnc_and_the_sources_viewers_come_back(accounts, desktops):
    from rfb_client import RfbClient

    source = start(accounts, desktops, [XTERM])
    source.vnc_socket()
    [copy] = fork(source, accounts, desktops, 1)
    for desktop in (copy, source):
        import socket

        sock = socket.socket(socket.AF_UNIX)
        sock.connect(str(desktop.vnc_socket()))
        from rfb_client import _SocketIO

        client = RfbClient(_SocketIO(sock), None)
        try:
            assert (client.width, client.height) == SIZE
        finally:
            client.close()


def test_a_copy_cannot_reach_the_source(accounts, desktops):
    """From inside a copy, the source's home and display socket are not there, and its own display is its own."""
    source = start(accounts, desktops, [XTERM])
    [copy] = fork(source, accounts, desktops, 1)
    probe = textwrap.dedent(f"""
        import os, socket
        seen = []
        for path in ({str(source.home)!r}, {str(source.tree.folder)!r}, "/run/hci-envs",
                     "/proc/{source.tree.pid1}/root"):
            seen.append(f"{{path}}: {{os.path.exists(path)}}")
        s = socket.socket(socket.AF_UNIX)
        try:
            s.connect({str(source.tree.folder / 'x11' / 'X5')!r})
            seen.append("source socket: reached")
        except OSError as exc:
            seen.append(f"source socket: {{type(exc).__name__}}")
        seen.append("X sockets: " + " ".join(sorted(os.listdir("/tmp/.X11-unix"))))
        open(os.path.expanduser("~/seen.txt"), "w").write("\\n".join(seen))
    """)
    copy.spawn_agent("probe", ["python3", "-c", probe]).wait(30)
    seen = (Path(copy.home) / "seen.txt").read_text().splitlines()
    assert seen == [f"{source.home}: False", f"{source.tree.folder}: False", "/run/hci-envs: False",
                    f"/proc/{source.tree.pid1}/root: False", "source socket: FileNotFoundError",
                    "X sockets: X5 hci-a11y-bus"]  # its own display's and accessibility bus's


def test_no_one_else_on_the_machine_reaches_a_forkable_display_or_its_bus(accounts, desktops):
    """Another agent account on the host tries the source's and a copy's display (its link, the socket it leads
    to, the abstract name) and accessibility bus: all refused. The trees' X servers take any client that reaches
    them, so their sockets must be out of reach."""
    source = start(accounts, desktops, [XTERM])
    [copy] = fork(source, accounts, desktops, 1)
    [stranger], _ = accounts.take(1)
    targets = []
    for desktop in (source, copy):
        targets += [f"/tmp/.X11-unix/X{desktop.display_number}", str(desktop.tree.folder / "x11" / "X5"),
                    f"@/tmp/.X11-unix/X{desktop.display_number}", str(desktop.tree.folder / "x11" / "hci-a11y-bus")]
    probe = ("import socket, sys\n"
             "for target in sys.argv[1:]:\n"
             "    s = socket.socket(socket.AF_UNIX)\n"
             "    try:\n"
             "        s.connect(chr(0) + target[1:] if target.startswith('@') else target)\n"
             "        print('REACHED', target)\n"
             "    except OSError as exc:\n"
             "        print('REFUSED', type(exc).__name__, target)\n")
    out = subprocess.run(stranger.command(["/usr/bin/python3", "-c", probe, *targets]), capture_output=True, text=True,
                         timeout=30, cwd="/")
    assert out.returncode == 0, out.stderr
    assert "REACHED" not in out.stdout and out.stdout.count("REFUSED") == len(targets), out.stdout
    # while the server itself reaches both
    assert source.health().ok and copy.health().ok and copy.accessibility is not None


#: An app that sets up an io_uring (which CRIU cannot dump) and says whether it could ("ok") in the file "ring".
IO_URING = textwrap.dedent("""\
    import ctypes, time
    params = (ctypes.c_ubyte * 120)()
    fd = ctypes.CDLL(None, use_errno=True).syscall(425, 4, params)  # io_uring_setup
    open("ring", "w").write("ok" if fd >= 0 else f"errno {ctypes.get_errno()}")
    time.sleep(3600)
""")
#: An app with a TCP listener and a connection to it that holds unread bytes: once the file "go" appears in
#: the home, it reads them, sends them back over the connection, and writes what came back into "got".
TCP_APP = textwrap.dedent("""\
    import os, socket, time
    listener = socket.create_server(("127.0.0.1", 0))
    client = socket.create_connection(listener.getsockname())
    accepted, _ = listener.accept()
    client.sendall(b"sent before the fork")
    open("connected", "w").close()
    while not os.path.exists("go"):
        time.sleep(0.05)
    accepted.sendall(accepted.recv(100))
    open("got", "w").write(client.recv(100).decode())
    time.sleep(3600)
""")


def test_an_app_with_tcp_connections_forks_with_them(accounts, desktops):
    """A listener and an established connection with bytes in flight, in every copy as in the source."""
    source = start(accounts, desktops, [XTERM])
    app = source.launch(AppState(command=["python3", "-c", TCP_APP], name="tcp", wait_for_window=False))
    assert wait_until((Path(source.home) / "connected").exists, 10)
    copy_accounts, homes = accounts.take(2)
    copies = source.fork(2, accounts=copy_accounts, homes=[str(h) for h in homes])
    desktops.extend(copies)
    for desktop in [*copies, source]:
        (Path(desktop.home) / "go").touch()
        assert wait_until((Path(desktop.home) / "got").exists, 10), "the app's connection did not carry on"
        assert wait_until(lambda: (Path(desktop.home) / "got").read_text() == "sent before the fork", 5)
    app.kill()


@pytest.fixture
def ksm(monkeypatch) -> Iterator[None]:
    """Forkable desktops opened to KSM (the server's setting), and ksmd running and scanning fast for the test.
    Its settings are the machine's: held under a lock for the test (another run of the suite may be here too),
    and put back after, each only where it still is what the test wrote."""
    import fcntl

    from hci_envs.fork.sharing import KSM, SETTING, opted_in

    need((KSM / "run").exists() and opted_in(os.getpid()) is not None, "KSM with ksm_stat: a kernel of 6.7 or later")
    monkeypatch.setenv(SETTING, "1")
    settings = {"pages_to_scan": "5000", "sleep_millisecs": "10", "run": "1"}
    with open("/run/lock/hci-envs-test-ksm.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        was = {name: (KSM / name).read_text().strip() for name in settings}
        try:
            for name, value in settings.items():
                (KSM / name).write_text(value)
            yield
        finally:
            for name in ("run", "pages_to_scan", "sleep_millisecs"):
                if (KSM / name).read_text().strip() == settings[name]:
                    (KSM / name).write_text(was[name])


def test_every_process_started_or_restored_in_a_tree_is_open_to_ksm_only_when_the_server_says_so(monkeypatch):
    """The mark is set where it must be: a command run through ``mergeable`` (as CRIU's restore is) and its
    children carry it when the server's setting is on, and not otherwise; the server's own process never does
    (the mark is the trees', not the machine's)."""
    from hci_envs.fork.sharing import SETTING, mergeable, opted_in

    need(opted_in(os.getpid()) is not None, "ksm_stat: a kernel of 6.7 or later")
    show = ["sh", "-c", "cat /proc/$$/ksm_stat; cat /proc/self/ksm_stat"]
    for setting, marked in (("1", 2), ("0", 0), ("", 0)):
        monkeypatch.setenv(SETTING, setting)
        shown = subprocess.run(mergeable(show), capture_output=True, text=True, check=True).stdout
        assert shown.count("ksm_merge_any: yes") == marked, (setting, shown)
    assert opted_in(os.getpid()) is False


def test_copies_share_the_memory_they_did_not_change_while_the_machine_runs_ksm(accounts, desktops, ksm):
    """With the server's setting on, every process of a forkable desktop, and of its copies, is open to KSM. With
    ksmd running, the copies' unchanged pages merge: each copy's X server counts merged pages (its frame buffer
    alone is the same 700 pages in each; without the mark it counts none). A copy that then changes shows its
    change; the others do not (a merged page is copied again when written)."""
    from hci_envs.fork.sharing import merging_pages, opted_in

    source = start(accounts, desktops, [XTERM, MOUSEPAD])
    settled(source)
    copies = fork(source, accounts, desktops, 3)
    for desktop in [source, *copies]:
        marks = {pid: opted_in(pid) for pid in desktop.processes_inside().values()}
        assert marks and all(mark is not False for mark in marks.values()), marks  # None: it ended meanwhile
    xservers = [copy.tree.xvfb().pid for copy in copies]
    assert wait_until(lambda: all((merging_pages(pid) or 0) >= 700 for pid in xservers), 60), \
        [merging_pages(pid) for pid in xservers]
    for copy in copies:
        settled(copy)
    before = [screen(copy) for copy in copies]
    focus(copies[0], "XTerm")
    typed(copies[0], "echo only-in-copy-zero")
    settled(copies[0])
    for copy in copies[1:]:
        settled(copy)
    after = [screen(copy) for copy in copies]
    assert differing(before[0], after[0]) > 0, "the typing did not show in the copy it went to"
    assert [differing(b, a) for b, a in zip(before[1:], after[1:], strict=True)] == [0, 0]


def test_bad_requests_and_a_desktop_that_cannot_be_dumped_fork_nothing(accounts, desktops):
    source = start(accounts, desktops, [XTERM])
    for n in (0, 17, True, "2", 1.5):
        with pytest.raises(ConfigError):
            source.fork(n, accounts=[], homes=[])
    copy_accounts, homes = accounts.take(2)
    with pytest.raises(ConfigError):
        source.fork(2, accounts=copy_accounts[:1], homes=[str(h) for h in homes])
    trees = set(os.listdir("/run/hci-envs/fork/trees"))
    # an app of the tree holding an io_uring, which CRIU cannot dump
    listener = source.launch(AppState(command=["python3", "-c", IO_URING], name="io-uring", wait_for_window=False))
    assert wait_until((Path(source.home) / "ring").exists, 10)
    assert (Path(source.home) / "ring").read_text() == "ok", "no io_uring here: the dump failure cannot be tried"
    (Path(source.home) / "ring").unlink()
    with pytest.raises(ForkError) as failed:
        source.fork(2, accounts=copy_accounts, homes=[str(h) for h in homes])
    assert failed.value.details["reason"] == "dump failed" and "CRIU" in failed.value.message
    assert set(os.listdir("/run/hci-envs/fork/trees")) == trees, "a failed fork left a copy's folder"
    assert all(not any(h.iterdir()) for h in homes), "a failed fork filled a copy's home"
    assert source.health().ok and screen(source).any()
    listener.kill()
    assert wait_until(lambda: listener.poll() is not None, 10)
    # an app holding a named pipe of the home open: the dump takes it, a copy's home has no pipe (a home copies
    # files, not pipes), so the restore fails, and the copies restored meanwhile are taken down again
    pipe = source.launch(AppState(command=["python3", "-c", "import os, time\nos.mkfifo('pipe')\n"
                                           "fd = os.open('pipe', os.O_RDWR)\nopen('opened', 'w').close()\n"
                                           "time.sleep(3600)"], name="pipe", wait_for_window=False))
    assert wait_until((Path(source.home) / "opened").exists, 10)
    links = {p for p in os.listdir("/tmp/.X11-unix") if p.startswith("X7")}
    with pytest.raises(ForkError) as failed:
        source.fork(2, accounts=copy_accounts, homes=[str(h) for h in homes])
    assert failed.value.details["reason"] == "restore failed" and "pipe" in failed.value.message
    assert set(os.listdir("/run/hci-envs/fork/trees")) == trees, "a failed restore left a copy's folder"
    assert {p for p in os.listdir("/tmp/.X11-unix") if p.startswith("X7")} == links, "a display number stayed"
    pipe.kill()
    assert wait_until(lambda: pipe.poll() is not None, 10)
    for home in homes:  # what the failed fork put in them
        subprocess.run(["find", str(home), "-mindepth", "1", "-delete"], check=True)
    # a command attached to the server by its pipes (a tool's shell) cannot be in a dump: the fork ends it
    command = source.spawn_agent("command", ["sleep", "600"], stdout=subprocess.PIPE)
    [copy] = source.fork(1, accounts=copy_accounts[:1], homes=[str(homes[0])])
    desktops.append(copy)
    assert copy.health().ok and wait_until(lambda: command.poll() is not None, 10)
    command.stdout.close()
    source.close()
    with pytest.raises(ForkError):
        source.fork(1, accounts=copy_accounts[1:], homes=[str(homes[1])])


# -- the environment, the server, the clients ------------------------------------------------------------------
#: A task whose checker reads the home: each copy is scored on its own home.
TASK = {"id": "fork-answer", "instruction": "write the answer",
        "start_state": {"width": SIZE[0], "height": SIZE[1], "apps": [{"command": ["mousepad"]}]},
        "home_files": {".config/gtk-3.0/settings.ini": GTK_SETTINGS},
        "checker": {"type": "file", "path": "answer.txt", "matches": "^right$"}}


def shown(client) -> np.ndarray:
    """The screen a client's screenshot tool shows, as pixels."""
    return np.asarray(client.call_tool("screenshot").screenshot.to_pil().convert("RGB"))


def still(client, timeout: float = 30.0) -> np.ndarray:
    """The screen once two screenshots half a second apart agree (the apps have drawn what they were given)."""
    deadline = time.monotonic() + timeout
    last = shown(client)
    while time.monotonic() < deadline:
        time.sleep(0.5)
        now = shown(client)
        if differing(last, now) == 0:
            return now
        last = now
    raise AssertionError("the screen did not hold still")


def watch(server, vnc_url: str):
    """A viewer of a session's desktop, through the server's VNC relay (the page's WebSocket path)."""
    import urllib.parse

    from rfb_client import RfbClient

    path = urllib.parse.parse_qs(urllib.parse.urlsplit(vnc_url).query)["path"][0]
    viewer = RfbClient.websocket(server.base_url.replace("http", "ws", 1) + "/" + path)
    assert (viewer.width, viewer.height) == SIZE
    return viewer


def test_a_workstation_on_a_forkable_desktop_passes_check_env(forkable):
    from hci_envs.env.env_checker import check_env
    from hci_envs.traits import WorkstationEnv

    assert check_env(WorkstationEnv, desktop="forkable")["ok"]


def _conformance() -> dict[str, type]:
    """Each trait's conformance mixin on a forkable desktop: its tools work as on any desktop."""
    from hci_envs.traits import WorkstationEnv
    from hci_envs.traits.testing import conformance_classes

    return {f"{name}OnAForkableDesktop": pytest.mark.fork(cls)
            for name, cls in conformance_classes(WorkstationEnv, desktop="forkable").items()}


globals().update(_conformance())


def test_an_environment_forks_into_environments_of_their_own(forkable):
    from hci_envs.traits import WorkstationEnv

    env = WorkstationEnv(start_state={"width": SIZE[0], "height": SIZE[1], "apps": [MOUSEPAD.model_dump()]},
                         desktop="forkable")
    copies: list = []
    try:
        env.reset(task=TASK)
        env.call_tool("bash", {"command": "echo kept > kept.txt; cd /tmp && echo in-tmp > t"})
        env.call_tool("type_text", {"text": "typed before the fork"})
        # what the agent's tools keep between calls: the shell's folder, variables and jobs, Python's, CodeAct's
        env.call_tool("bash", {"command": "cd /tmp && MARK=set-in-the-source; sleep 600 &", "persistent": True})
        # a job that prints after its call returned: that is in the pipes at the fork, for the next call to show
        env.call_tool("bash", {"command": "{ sleep 0.2; echo from-the-job; echo job-err >&2; touch ~/printed; } &",
                               "persistent": True})
        assert wait_until((env.homes.path / "printed").exists, 30)
        env.call_tool("python", {"code": "import os\nanswer = 6 * 7\nworker = os.getpid()"})
        env.run_code("noted = 'in the worker'")
        copies = env.fork(2)
        for i, copy in enumerate(copies):
            # the same processes, with their memory, as the copy's account; then each goes its own way
            shell = copy.call_tool("bash", {"command": "echo $MARK $PWD $(jobs -r | grep -c 'sleep 600'); MARK=copy-"
                                            + str(i), "persistent": True})
            assert shell.data["stdout"] == "from-the-job\nset-in-the-source /tmp 1\n", shell.text  # its jobs too
            assert shell.data["stderr"] == "job-err\n", shell.text
            said = copy.call_tool("python", {"code": "print(answer, worker == os.getpid())\nanswer = " + str(i)})
            assert said.data["stdout"] == "42 True\n" and not said.data["restarted"], said.text
            assert copy.run_code("print(noted)").stdout == "in the worker\n"
            carried = {copy.desktop.lasting_process(pid) for pid in
                       (copy.lasting_state()["bash_shell"], copy.lasting_state()["python"]["pid"],
                        copy.code.lasting_state()["pid"])}
            assert None not in carried and {os.stat(f"/proc/{p.pid}").st_uid for p in carried} == {copy.account.uid}
            # each copy's agent in its own session's control groups (its limits), none in the source's
            groups = copy.desktop.groups
            assert groups is not None, "no control groups here: the copies' limits cannot be checked"
            listed = {int(p) for f in groups.procs_files() for p in Path(f).read_text().split()}
            agents = {pid for pid in copy.desktop.processes_inside().values()
                      if os.stat(f"/proc/{pid}").st_uid == copy.account.uid}
            assert agents and agents <= listed, (agents, listed)
            source_listed = {int(p) for f in env.desktop.groups.procs_files() for p in Path(f).read_text().split()}
            assert not agents & source_listed
            assert copy.state.task == "fork-answer" and copy.state.episode_id != env.state.episode_id
            assert copy.account is not None and copy.account.uid not in (env.account.uid,)
            assert copy.call_tool("bash", {"command": "cat kept.txt /tmp/t"}).data["stdout"] == "kept\nin-tmp\n"
        copies[0].call_tool("bash", {"command": "echo right > answer.txt"})
        copies[1].call_tool("bash", {"command": "echo wrong > answer.txt"})
        assert [c.score().passed for c in copies] == [True, False]
        assert not env.score().passed  # the source wrote nothing
        # a copy's tools signal the copy's processes: an interrupted run leaves its interpreter (and state) there
        said = copies[0].call_tool("python", {"code": "import time\ntime.sleep(30)", "timeout": 1})
        assert said.data["timed_out"] and not said.data["restarted"], said.text
        # none saw the others' changes
        for i, copy in enumerate(copies):
            assert copy.call_tool("python", {"code": "print(answer)"}).data["stdout"] == f"{i}\n"
            assert copy.call_tool("bash", {"command": "echo $MARK", "persistent": True}).data["stdout"] == f"copy-{i}\n"
        assert env.call_tool("python", {"code": "print(answer)"}).data["stdout"] == "42\n"
        assert env.call_tool("bash", {"command": "echo $MARK", "persistent": True}).data["stdout"] == \
            "from-the-job\nset-in-the-source\n"  # the source's next call shows what its job printed as well
        # a copy forks in its turn: its copy's tools go on with the copy's state (the pipes it was handed)
        grandchild = copies[0].fork(1)[0]
        copies.append(grandchild)
        said = grandchild.call_tool("python", {"code": "print(answer)"})
        assert said.data["stdout"] == "0\n" and not said.data["restarted"], said.text
        assert grandchild.call_tool("bash", {"command": "echo $MARK", "persistent": True}).data["stdout"] == \
            "copy-0\n"
        assert grandchild.run_code("print(noted)").stdout == "in the worker\n"
        # a warm reset leaves nothing of the agent's in the desktop's own /tmp
        env.reset()
        assert env.call_tool("bash", {"command": "cat /tmp/t"}).data["exit_code"] != 0
    finally:
        for copy in copies:
            copy.close()
        env.close()


def test_without_agent_accounts_a_desktop_forks_too(forkable):
    """isolation="none": the tree's agent is a host uid leased for it, and owns the home the environment made."""
    from hci_envs.traits import WorkstationEnv

    env = WorkstationEnv(start_state={"apps": [XTERM.model_dump()]}, desktop="forkable", isolation="none")
    copies: list = []
    try:
        env.reset()
        assert env.account is None
        assert env.call_tool("bash", {"command": "echo mine > f; cat f"}).data["stdout"] == "mine\n"
        copies = env.fork(2)
        uids = {env.desktop.tree.agent_uid, *(c.desktop.tree.agent_uid for c in copies)}
        assert len(uids) == 3
        for copy in copies:
            assert copy.call_tool("bash", {"command": "cat f; echo $HOME"}).data["stdout"] == "mine\n/home/agent\n"
    finally:
        for copy in copies:
            copy.close()
        env.close()


def test_a_checkpoint_is_a_moment_to_return_to_again_and_again(forkable):
    from hci_envs.errors import ConfigError as Refused
    from hci_envs.traits import WorkstationEnv

    env = WorkstationEnv(start_state={"width": SIZE[0], "height": SIZE[1], "apps": [MOUSEPAD.model_dump()]},
                         desktop="forkable")
    try:
        env.reset(task=TASK)
        env.call_tool("type_text", {"text": "the moment"})
        env.call_tool("bash", {"command": "echo then > answer.txt"})
        env.call_tool("mouse_move", {"x": 200, "y": 300})
        env.call_tool("python", {"code": "value = 'then'"})
        env.call_tool("bash", {"command": "cd /tmp; WHEN=then", "persistent": True})
        settled(env.desktop)
        then = screen(env.desktop)
        kept = env.checkpoint("then")
        assert kept["name"] == "then" and kept["bytes"] > 0 and kept["frozen_seconds"] <= kept["seconds"]
        for round_ in range(2):
            env.call_tool("type_text", {"text": f" and more, round {round_}"})
            env.call_tool("bash", {"command": "echo right > answer.txt; touch later.txt"})
            env.call_tool("python", {"code": "value = 'later'"})
            env.call_tool("bash", {"command": "cd ~; WHEN=later", "persistent": True})
            assert env.score().passed
            settled(env.desktop)
            assert differing(then, screen(env.desktop)) > 0
            env.reset(checkpoint="then")
            settled(env.desktop)
            assert differing(then, screen(env.desktop)) == 0, f"round {round_}: not the moment's screen"
            assert env.desktop.input.pointer() == (200, 300)
            assert env.call_tool("bash", {"command": "cat answer.txt; ls"}).data["stdout"].split() == \
                ["then", "answer.txt"]
            assert env.state.task == "fork-answer" and not env.score().passed
            assert env.call_tool("python", {"code": "print(value)"}).data["stdout"] == "then\n"
            assert env.call_tool("bash", {"command": "echo $WHEN $PWD", "persistent": True}).data["stdout"] == \
                "then /tmp\n"
        # a desktop returned to forks too, its tools' state with it
        [again] = env.fork(1)
        try:
            said = again.call_tool("python", {"code": "print(value)"})
            assert said.data["stdout"] == "then\n" and not said.data["restarted"], said.text
        finally:
            again.close()
        with pytest.raises(Refused):
            env.reset(checkpoint="never taken")
    finally:
        env.close()


def test_a_server_session_forks_over_the_websocket_and_http(forkable, tmp_path):
    import httpx
    from helpers import McpClient, ServerProcess

    from hci_envs.client import HciEnvClient

    with ServerProcess("--env", "workstation", "--desktop", "forkable", "--app", "mousepad",
                       "--episodes-dir", str(tmp_path / "episodes"),
                       "--max-sessions", "4", "--agent-tokens", "--size", f"{SIZE[0]}x{SIZE[1]}") as server:
        with HciEnvClient(server.base_url) as client:
            client.reset(task=TASK)
            client.call_tool("type_text", text="typed before the fork")
            before = still(client)
            viewer = watch(server, client.state().vnc_url)  # a person watches the source over VNC
            copies = client.fork(2)
            try:
                # the viewer's relay ended with the source's x11vnc (it cannot be in the dump); it comes back
                with pytest.raises(Exception):
                    for _ in range(100):
                        viewer.io.recv_exact(1)
                frames = []
                for url in (client.state().vnc_url, *(c.session["vnc_url"] for c in copies)):
                    again = watch(server, url)
                    frames.append(np.asarray(again.full_frame()))  # x11vnc draws the pointer in: frames alike
                    again.io.close()
                assert all(differing(frames[0], frame) == 0 for frame in frames[1:])
                assert differing(before, frames[0]) < 32 * 32, "the source's viewer sees another screen"
                sessions = {c["session_id"] for c in httpx.get(f"{server.base_url}/sessions").json()}
                assert {c.session["session_id"] for c in copies} <= sessions
                tokens = {c.session["agent_token"] for c in copies}
                assert len(tokens) == 2 and None not in tokens
                for copy in copies:
                    assert differing(before, still(copy)) == 0
                    with McpClient(copy.session["mcp_url"], token=copy.session["agent_token"]) as mcp:
                        names = {t.name for t in mcp.list_tools()}
                        assert "bash" in names and not {"fork", "reset", "snapshot"} & names
                # a copy records like any session: its agent's actions, in the same format
                recording = f"{server.base_url}/sessions/{copies[1].session['session_id']}/recording"
                assert httpx.post(recording, json={"command": "start", "source": "agent", "video": False},
                                  timeout=60).status_code == 200
                copies[1].call_tool("type_text", text=" recorded in a copy")
                stopped = httpx.post(recording, json={"command": "stop"}, timeout=60).json()
                steps = [json.loads(line) for line in
                         (Path(stopped["path"]) / "actions.jsonl").read_text().splitlines()]
                assert [s["action"]["type"] for s in steps] == ["type_text"], steps
                copies[0].call_tool("bash", command="echo right > answer.txt")
                assert [c.score()["success"] for c in copies] == [True, False]
                assert client.score()["success"] is False

                # bad requests are typed errors, over HTTP and the WebSocket; a fork past capacity forks nothing
                for n in (0, 17, "two", None):
                    reply = httpx.post(f"{server.base_url}/sessions/{client.state().session_id}/fork", json={"n": n})
                    assert reply.status_code in (400, 422), reply.text
                assert httpx.post(f"{server.base_url}/sessions/nope/fork", json={"n": 1}).status_code == 404
                from hci_envs.errors import CapacityError

                with pytest.raises(CapacityError):
                    client.fork(1)  # the default session, this one and two copies: four of four
                with pytest.raises(ConfigError):
                    client.fork(0)
                assert len(httpx.get(f"{server.base_url}/sessions").json()) == 4
            finally:
                for copy in copies:
                    copy.close()
            assert not {c.session["session_id"] for c in copies} & \
                {c["session_id"] for c in httpx.get(f"{server.base_url}/sessions").json()}
            # and over plain HTTP, after the copies were closed
            reply = httpx.post(f"{server.base_url}/sessions/{client.state().session_id}/fork", json={"n": 1})
            assert reply.status_code == 200, reply.text
            [made] = reply.json()["sessions"]
            assert made["agent_token"] and f"/sessions/{made['session_id']}/mcp" in made["mcp_url"]
            assert httpx.delete(f"{server.base_url}/sessions/{made['session_id']}").status_code == 200
            # a checkpoint over HTTP, returned to over the WebSocket
            client.checkpoint("here")
            client.call_tool("bash", command="echo right > answer.txt")
            assert client.score()["success"]
            client.reset(checkpoint="here")
            assert not client.score()["success"]


def test_todays_agents_go_on_in_the_copies(forkable):
    """Claude's computer tool (the anthropic SDK's tool runner, with hci-envs' toolset) drives one copy and
    OpenAI's (a Responses API computer call, its actions batched) another, each from the moment of the fork,
    without a reset: each sees and types into the source's editor, and none sees the others' text."""
    import anthropic
    import openai
    from helpers import ServerProcess
    from model_stand_ins import MessagesStandIn, ResponsesStandIn

    from hci_envs.adapters.anthropic_toolset import HciComputerToolset, fit_scale
    from hci_envs.adapters.openai_computer import computer_tool, run_computer_call
    from hci_envs.client import HciEnvClient

    def editor_text(session) -> list[str]:
        nodes = session.call_tool("accessibility_tree", app="mousepad").observation.data["nodes"]
        return [n["text"] for n in nodes if n.get("role") == "text" and "text" in n]

    with ServerProcess("--env", "workstation", "--desktop", "forkable", "--app", "mousepad", "--max-sessions", "4",
                       "--size", f"{SIZE[0]}x{SIZE[1]}") as server, HciEnvClient(server.base_url) as client:
        client.reset()
        client.call_tool("type_text", text="the moment")
        assert wait_until(lambda: editor_text(client) == ["the moment"], 15), editor_text(client)
        claude, gpt = client.fork(2)
        try:
            use = {"type": "tool_use", "toolset_name": "computer"}
            turns = [[{**use, "name": "screenshot", "input": {}}],
                     [{**use, "name": "type", "input": {"text": ", then Claude ✓"}}],
                     [{"type": "text", "text": "Done."}]]
            with MessagesStandIn(turns) as api:
                state = claude.state()
                toolset = HciComputerToolset(claude, scale=fit_scale(state.screen_width, state.screen_height),
                                             confirm=lambda context: True)
                sdk = anthropic.Anthropic(api_key="sk-ant-test", base_url=api.base_url)
                runner = sdk.beta.messages.tool_runner(model="claude-test", max_tokens=1024, max_iterations=5,
                                                       tools=[toolset],
                                                       messages=[{"role": "user", "content": "Go on from here."}])
                assert [message.stop_reason for message in runner] == ["tool_use", "tool_use", "end_turn"]
            answered = api.exchanges[1].body["messages"][-1]["content"][0]
            assert answered["type"] == "tool_result" and answered["content"][0]["type"] == "image"
            turns = [[{"type": "computer_call", "pending_safety_checks": [],
                       "actions": [{"type": "type", "text": ", then GPT ✓"}, {"type": "screenshot"}]}]]
            with ResponsesStandIn(turns) as api:
                response = openai.OpenAI(api_key="sk-test", base_url=f"{api.base_url}/v1").responses.create(
                    model="gpt-test", tools=[computer_tool()], input="Go on from here.")
                [call] = [item for item in response.output if item.type == "computer_call"]
                result = run_computer_call(call, gpt.step)
            assert result.output is not None and [o["status"] for o in result.outcomes] == ["ok", "ok"]
            for session, text in ((claude, "the moment, then Claude ✓"), (gpt, "the moment, then GPT ✓"),
                                  (client, "the moment")):
                assert wait_until(lambda: editor_text(session) == [text], 15), (text, editor_text(session))
        finally:
            claude.close()
            gpt.close()


def test_a_browser_task_on_its_own_web_site_forks_and_each_copy_is_scored_on_its_own(forkable):
    """The suite's browser world in a forkable desktop: its web site (``{python} -m hci_envs.tasks.apps.website``,
    the server's package read-only in the tree) and chromium talking to it over TCP. Forked once the page is up,
    the oracle solves the task in one copy: that copy scores 1, the other copy and the source 0."""
    need_programs("chromium")
    from hci_envs.tasks.suite import oracle_script, template_task
    from hci_envs.tasks.world import AgentContext
    from hci_envs.traits import WorkstationEnv

    task = template_task("browser-contact-form.3")
    env = WorkstationEnv(desktop="forkable")
    copies: list = []
    try:
        env.reset(task=task)
        copies = env.fork(2)
        solver = copies[0]
        for step, action in enumerate(oracle_script(task)(AgentContext(task, 0, solver))):
            assert step < 30, "the oracle did not finish"
            solver.step(action)
        assert [copy.score().passed for copy in copies] == [True, False]
        assert not env.score().passed
    finally:
        for copy in copies:
            copy.close()
        env.close()
