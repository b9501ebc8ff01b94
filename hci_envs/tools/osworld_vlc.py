"""VLC with its HTTP interface for OSWorld's tasks, reached by the harness through the guest API.

OSWorld's machine runs VLC with its HTTP interface on port 8080 and the password ``password``, and its getter
(``vlc_playing_info``) reads ``/requests/status.xml`` there. A known password on a port of the machine would let
any local process drive the player. So here ``vlc`` on the agent's PATH (:data:`SHIM`, see
:mod:`.osworld_apps`) starts Debian's VLC with the interface on a free loopback port and a password of its own
(a task's ``--http-*`` options give way), and writes both to :data:`STATE_NAME` in the agent's private runtime
folder; the guest API, asked on its own port (the harness's VLC port, its owner only), reads that file as the
agent and forwards ``/requests/...`` there (:mod:`hci_envs.server.osworld_guest`).
"""

from __future__ import annotations

import json
import os

#: Where the player's port and password are kept, in the agent's XDG_RUNTIME_DIR.
STATE_NAME = "hci-envs-vlc.json"

#: ``vlc`` as the agent runs it (standard library only, -I: nothing of the agent's own Python path).
SHIM = r'''#!/usr/bin/python3 -I
"""vlc for OSWorld's tasks on hci-envs: Debian's VLC with its HTTP interface on a free loopback port and a password
of its own, both written to the agent's private runtime folder (see hci_envs.tools.osworld_vlc)."""
import json, os, secrets, socket, sys

STATE = os.path.join(os.environ.get("XDG_RUNTIME_DIR") or "/nonexistent", __STATE__)
OURS = ("--http-password", "--http-port", "--http-host")
args, skip = [], False
for arg in sys.argv[1:]:
    if skip:
        skip = False
    elif arg in OURS:
        skip = True
    elif not arg.startswith(tuple(o + "=" for o in OURS)):
        args.append(arg)
probe = socket.socket()
probe.bind(("127.0.0.1", 0))
port = probe.getsockname()[1]
probe.close()
password = secrets.token_urlsafe(18)
old = os.umask(0o177)
with open(STATE + ".new", "w") as out:
    json.dump({"port": port, "password": password}, out)
os.umask(old)
os.replace(STATE + ".new", STATE)
os.execv("/usr/bin/vlc", ["vlc", "--extraintf", "http", "--http-host", "127.0.0.1", "--http-port", str(port),
                          "--http-password", password, *args])
'''


def shims() -> dict[str, str]:
    """``vlc``, as a file to put on the agent's PATH; none where VLC is not installed (it is then missing, as
    a program is)."""
    if not os.path.exists("/usr/bin/vlc"):
        return {}
    return {"vlc": SHIM.replace("__STATE__", json.dumps(STATE_NAME))}
