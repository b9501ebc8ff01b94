"""Runs the VNC proxy alone in its own process, in front of an x11vnc Unix socket, for bench_vnc.py.

    python proxy_process.py SOCKET_PATH PORT_FILE
Writes the TCP port and the control password to PORT_FILE, then serves until killed. Its notice (the viewers'
title, see VncSession.set_notice) changes twice a second, as a hand-over's would, only much more often.
"""

import asyncio
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from helpers import serve_vnc_proxy  # noqa: E402

from hci_envs.vnc.proxy import VncSession  # noqa: E402


async def main() -> None:
    socket_path = Path(sys.argv[1])

    async def path() -> Path:
        return socket_path

    session = VncSession(path)

    async def notices() -> None:
        n = 0
        while True:
            await asyncio.sleep(0.5)
            n += 1
            session.set_notice(f"notice {n}" if n % 2 else None)

    asyncio.ensure_future(notices())
    server = await serve_vnc_proxy(session)
    port = server.sockets[0].getsockname()[1]
    Path(sys.argv[2]).write_text(f"{port} {session.control_password}")
    await server.serve_forever()


asyncio.run(main())
