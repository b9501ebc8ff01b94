"""Chrome with its DevTools for OSWorld's tasks, without a DevTools port anyone on the machine could drive.

OSWorld's tasks start ``google-chrome --remote-debugging-port=1337`` and its harness drives the browser over the
DevTools protocol (Playwright's ``connect_over_cdp``) to open tabs and to read them when scoring. A DevTools
port on the machine's loopback would let every local process, other sessions' agents among them, drive the
browser without credentials. So here:

* ``google-chrome`` (and ``google-chrome-stable``, ``chrome``) on the agent's PATH (:mod:`.osworld_apps`) is
  :data:`SHIM`: it starts Debian's chromium with its DevTools on a pipe (``--remote-debugging-pipe``, never a
  port: a ``--remote-debugging-port`` asked for is dropped), with OSWorld's profile folder
  (``~/.config/google-chrome``) unless another is given, and relays the pipe to a Unix socket in the agent's
  private runtime folder (:data:`SOCKET_NAME`), to several clients at once (their message ids kept apart).
  A second ``google-chrome`` hands its URLs to the running browser, as Chrome does.
* The guest API serves the DevTools protocol on its own port, which only the desktop's owner may call
  (:mod:`hci_envs.server.osworld_guest`): each connection runs :data:`CONNECTOR` on the agent's side (as the
  agent, so that it reaches the agent's socket locally and in containers alike), which joins the socket to its
  standard input and output. Messages travel as the pipe carries them: JSON, each ended by a NUL byte.
"""

from __future__ import annotations

import json
import shutil

from ..sandbox.accounts import AGENT_PATH

#: The relay's socket, in the agent's XDG_RUNTIME_DIR.
SOCKET_NAME = "hci-envs-devtools.sock"
#: The names OSWorld's tasks and getters start Chrome by.
CHROME_NAMES = ("google-chrome", "google-chrome-stable", "chrome")
#: chromium's flags under the shim: as the task suite starts chromium (no sandbox: the agent's account is the
#: boundary; no first-run page, sync or background traffic), and no window size (OSWorld's tasks give theirs).
CHROMIUM_FLAGS = ["--no-sandbox", "--test-type", "--no-first-run", "--no-default-browser-check",
                  "--password-store=basic", "--disable-gpu", "--disable-dev-shm-usage",
                  "--force-renderer-accessibility", "--disable-sync", "--disable-background-networking",
                  "--disable-component-update", "--hide-crash-restore-bubble",
                  "--disable-features=Translate,MediaRouter,OptimizationHints"]

#: ``google-chrome`` as the agent runs it (standard library only; run with -I, so nothing of the agent's own
#: Python path is imported). Exit code: chromium's.
SHIM = r'''#!/usr/bin/python3 -I
"""google-chrome for OSWorld's tasks on hci-envs: chromium with its DevTools on a pipe, relayed to a Unix socket
in the agent's private runtime folder (see hci_envs.tools.osworld_chrome)."""
import json, os, selectors, signal, socket, subprocess, sys, urllib.parse

FLAGS = __FLAGS__
SOCKET = os.path.join(os.environ.get("XDG_RUNTIME_DIR") or "/nonexistent", __SOCKET__)


def running():
    probe = socket.socket(socket.AF_UNIX)
    try:
        probe.connect(SOCKET)
        return True
    except OSError:
        return False
    finally:
        probe.close()


def as_url(arg):
    """A file named by its path, as a file: URL of that path: chromium resolves the symlinks of a path it is
    given (a home seen through a link would show in the tab under its real path), not those of a URL."""
    if arg.startswith("-") or "://" in arg or not os.path.exists(arg):
        return arg
    return "file://" + urllib.parse.quote(os.path.abspath(arg))


def main():
    args = [as_url(a) for a in sys.argv[1:] if not a.startswith(("--remote-debugging-port", "--remote-debugging-address",
                                                                 "--remote-debugging-pipe"))]
    if not any(a.startswith("--user-data-dir") for a in args):
        args.insert(0, "--user-data-dir=" + os.path.expanduser("~/.config/google-chrome"))
    if running():  # the browser runs: it takes these URLs, as Chrome hands them to its running instance
        os.execvp("chromium", ["chromium", *FLAGS, *args])
    to_chrome, from_relay = os.pipe()
    to_relay, from_chrome = os.pipe()

    def pipes():
        # chromium reads commands on fd 3 and writes answers and events on fd 4
        a, b = os.dup(to_chrome), os.dup(from_chrome)
        os.dup2(a, 3)
        os.dup2(b, 4)

    chrome = subprocess.Popen(["chromium", "--remote-debugging-pipe", *FLAGS, *args], preexec_fn=pipes,
                              close_fds=False)
    os.close(to_chrome)
    os.close(from_chrome)
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda *_: chrome.terminate())
    try:
        os.unlink(SOCKET)
    except OSError:
        pass
    listener = socket.socket(socket.AF_UNIX)
    old = os.umask(0o177)
    listener.bind(SOCKET)
    os.umask(old)
    listener.listen(8)
    listener.setblocking(False)
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ, "listener")
    selector.register(to_relay, selectors.EVENT_READ, "chrome")
    clients = {}  # socket -> bytes not yet ended by a NUL
    owners = {}  # the id chromium sees -> (client, the id the client sent)
    next_id = [0]
    sessions = set()  # the sessions clients have attached, while any is connected
    from_browser = b""

    def send(client, message):
        try:
            client.setblocking(True)
            client.sendall(json.dumps(message).encode() + b"\0")
            client.setblocking(False)
        except OSError:
            drop(client)

    def to_chrome(method, params):
        next_id[0] += 1  # an id no client owns: the answer is dropped
        os.write(from_relay, json.dumps({"id": next_id[0], "method": method, "params": params}).encode() + b"\0")

    def drop(client):
        if client in clients:
            selector.unregister(client)
            del clients[client]
            client.close()
            for key in [k for k, (c, _) in owners.items() if c is client]:
                del owners[key]
        if not clients:
            # The last client has gone, as a WebSocket's close would tell chromium: let go of what they attached
            # (the next client's auto-attach reports those pages again) and stop holding new pages for a
            # debugger that is not there.
            for session in sorted(sessions):
                to_chrome("Target.detachFromTarget", {"sessionId": session})
            sessions.clear()
            to_chrome("Target.setAutoAttach", {"autoAttach": False, "waitForDebuggerOnStart": False,
                                               "flatten": True})
            to_chrome("Target.setDiscoverTargets", {"discover": False})

    try:
        while chrome.poll() is None:
            for key, _ in selector.select(1.0):
                if key.data == "listener":
                    try:
                        client, _ = listener.accept()
                    except OSError:
                        continue
                    client.setblocking(False)
                    clients[client] = b""
                    selector.register(client, selectors.EVENT_READ, "client")
                elif key.data == "chrome":
                    chunk = os.read(to_relay, 1 << 20)
                    if not chunk:
                        chrome.wait()
                        break
                    from_browser += chunk
                    *messages, from_browser = from_browser.split(b"\0")
                    for raw in messages:
                        message = json.loads(raw)
                        if message.get("method") == "Target.attachedToTarget" and clients:
                            sessions.add(message["params"]["sessionId"])
                        elif message.get("method") == "Target.detachedFromTarget":
                            sessions.discard(message["params"].get("sessionId"))
                        if "id" in message:
                            owner = owners.pop(message["id"], None)
                            if owner is not None:
                                message["id"] = owner[1]
                                send(owner[0], message)
                        else:  # an event: every client (Playwright ignores sessions it did not attach)
                            for client in list(clients):
                                send(client, message)
                else:
                    client = key.fileobj
                    try:
                        chunk = client.recv(1 << 20)
                    except OSError:
                        chunk = b""
                    if not chunk:
                        drop(client)
                        continue
                    clients[client] += chunk
                    *messages, clients[client] = clients[client].split(b"\0")
                    for raw in messages:
                        try:
                            message = json.loads(raw)
                            sent_id = message["id"]
                        except (ValueError, KeyError, TypeError):
                            drop(client)
                            break
                        next_id[0] += 1
                        owners[next_id[0]] = (client, sent_id)
                        message["id"] = next_id[0]
                        os.write(from_relay, json.dumps(message).encode() + b"\0")
    finally:
        try:
            os.unlink(SOCKET)
        except OSError:
            pass
    sys.exit(chrome.wait())


if __name__ == "__main__":
    main()
'''

#: Joins the agent's DevTools socket to standard input and output (run as the agent with -I); exit code 2 when
#: no browser runs.
CONNECTOR = r"""
import os, selectors, socket, sys
path = os.path.join(os.environ.get("XDG_RUNTIME_DIR") or "/nonexistent", sys.argv[1])
conn = socket.socket(socket.AF_UNIX)
try:
    conn.connect(path)
except OSError as exc:
    sys.stderr.write(f"no browser with DevTools runs ({exc})")
    sys.exit(2)
sys.stdout.write("\0"); sys.stdout.flush()  # connected
selector = selectors.DefaultSelector()
selector.register(sys.stdin.fileno(), selectors.EVENT_READ)
selector.register(conn, selectors.EVENT_READ)
while True:
    for key, _ in selector.select():
        if key.fileobj is conn:
            chunk = conn.recv(1 << 20)
            if not chunk:
                sys.exit(0)
            os.write(1, chunk)
        else:
            chunk = os.read(0, 1 << 20)
            if not chunk:
                sys.exit(0)
            conn.sendall(chunk)
"""


def shims() -> dict[str, str]:
    """``google-chrome`` and its other names, as files to put on the agent's PATH; none where chromium is not
    installed (they are then missing, as a program is)."""
    if shutil.which("chromium", path=AGENT_PATH) is None:
        return {}
    text = SHIM.replace("__FLAGS__", json.dumps(CHROMIUM_FLAGS)).replace("__SOCKET__", json.dumps(SOCKET_NAME))
    return {name: text for name in CHROME_NAMES}
