"""A local web site inside the desktop, and a browser on it: the browser tasks' app (no network needed).

    python -m hci_envs.tasks.apps.website SITE_FOLDER -- chromium ... {url}/index.html

Serves SITE_FOLDER over HTTP on a free port of 127.0.0.1, writes ``{"url": ...}`` to SITE_FOLDER/../.site.json
(the scripted oracles read it), starts the command with ``{url}`` filled in, and lives as long as it does: a
SIGTERM is passed on to it (chromium writes its profile before it exits) and waited for. Files under
``/downloads/`` are sent as attachments, so that the browser saves them rather than shows them.

It runs as the agent, like every app: the site is the task's data, public to the session. The port is
chosen by the kernel, so sessions on one machine never share one; another session's agent could still
connect to it (loopback is one network), which gives it nothing but these public pages.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


class _Handler(SimpleHTTPRequestHandler):
    def end_headers(self) -> None:
        if self.path.split("?")[0].startswith("/downloads/"):
            name = Path(self.path.split("?")[0]).name
            self.send_header("Content-Disposition", f'attachment; filename="{name}"')
        self.send_header("Cache-Control", "no-store")
        super().end_headers()

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the base class's name
        pass


def main(argv: list[str]) -> int:
    if "--" not in argv or argv.index("--") != 1 or len(argv) < 3:
        print("usage: python -m hci_envs.tasks.apps.website SITE_FOLDER -- COMMAND... ({url} is filled in)",
              file=sys.stderr)
        return 2
    root = Path(argv[0]).resolve()
    server = ThreadingHTTPServer(("127.0.0.1", 0), partial(_Handler, directory=str(root)))
    url = f"http://127.0.0.1:{server.server_address[1]}"
    threading.Thread(target=server.serve_forever, daemon=True).start()
    (root.parent / ".site.json").write_text(json.dumps({"url": url}), encoding="utf-8")
    command = [part.replace("{url}", url) for part in argv[2:]]
    child = subprocess.Popen(command)

    def pass_on(signum: int, _frame: object) -> None:
        try:
            child.send_signal(signum)
        except ProcessLookupError:
            pass

    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, pass_on)
    status = child.wait()
    server.shutdown()
    return status if status >= 0 else 128 - status


if __name__ == "__main__":
    os.umask(0o077)
    sys.exit(main(sys.argv[1:]))
