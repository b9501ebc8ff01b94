"""OSWorld's guest API on a real desktop (``serve --osworld-port``), called as OSWorld's harness calls it: form
posts and JSON bodies, the keys its client reads, commands run as the session's agent in its home, refusals
as JSON; and the agent itself is refused."""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from conftest import need, need_programs
from helpers import ServerProcess, free_port

pytestmark = pytest.mark.x11

HERE = Path(__file__).resolve().parent
TK_PROBE = f"{sys.executable} {HERE / 'apps' / 'slow_save.py'}"


@pytest.fixture(scope="module")
def guest(x11) -> Iterator[httpx.Client]:
    need_programs("xterm")
    port = free_port()
    need(os.geteuid() == 0, "root: the agent sees its home at /home/user through a mount namespace")
    # the network open, as OSWorld's provider runs it (OSWorld's machine has one): the API's own refusals are
    # what is tried here, not the policy that refuses an agent's connections first (tests/test_network.py)
    server = ServerProcess("--osworld-port", str(port), "--app", TK_PROBE, "--size", "1024x768",
                           "--home-view", "/home/user", "--network", "open")
    server.start(60)
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60, trust_env=False) as http:
            http.port = port  # type: ignore[attr-defined]
            http.server = server  # type: ignore[attr-defined]
            yield http
    finally:
        server.stop()


def execute(http: httpx.Client, command, shell=False, path="/execute") -> dict:
    response = http.post(path, json={"command": command, "shell": shell})
    assert response.status_code == 200, response.text
    return response.json()


def test_commands_run_as_the_agent_in_its_home(guest):
    answer = execute(guest, ["python", "-c", "import os, sys; print(os.getuid(), os.getcwd(), os.environ['HOME'])"])
    uid, cwd, home = answer["output"].split()
    assert answer["status"] == "success" and answer["returncode"] == 0 and answer["error"] == ""
    assert int(uid) != os.getuid()  # the agent's account, not the server's
    assert cwd == home == "/home/user"  # where OSWorld's tasks expect it, whatever the session's home is
    # a list's "~/" items are the agent's home; a shell string as the shell has it; "true" as a string is a shell
    assert execute(guest, ["echo", "~/x"])["output"].strip() == f"{home}/x"
    assert execute(guest, "echo $HOME; exit 3", shell="true") == {"status": "success", "output": f"{home}\n",
                                                                   "error": "", "returncode": 3}
    assert execute(guest, "printf 'a b' 'c'")["output"] == "a b"  # without a shell: split as a shell would
    assert execute(guest, ["sh", "-c", "echo oops >&2"], path="/setup/execute")["error"] == "oops\n"


def test_pyautogui_code_as_osworld_sends_it_drives_the_desktop(guest):
    prefix = "import pyautogui; import time; pyautogui.FAILSAFE = False; "
    answer = execute(guest, ["python", "-c", prefix + "pyautogui.moveTo(321, 234); print(pyautogui.size())"])
    assert answer["returncode"] == 0, answer
    assert "1024" in answer["output"] and "768" in answer["output"]
    assert guest.get("/cursor_position").json() == [321, 234]
    assert execute(guest, ["python", "-c", "import platform; print(platform.system())"])["output"].strip() == "Linux"


def test_files_go_up_and_come_back_as_the_agent_writes_and_reads_them(guest):
    data = bytes(range(256)) * 1000
    response = guest.post("/setup/upload", data={"file_path": "~/deep/er/data.bin"},
                          files={"file_data": ("data.bin", data)})
    assert response.status_code == 200 and response.text == f"File Uploaded: {len(data)} bytes"
    fetched = guest.post("/file", data={"file_path": "~/deep/er/data.bin"})
    assert fetched.status_code == 200 and fetched.content == data
    owner = execute(guest, ["stat", "-c", "%u", "~/deep/er/data.bin"])["output"].strip()
    assert int(owner) != os.getuid()
    home = execute(guest, "echo $HOME", shell=True)["output"].strip()
    tree = guest.post("/list_directory", json={"path": f"{home}/deep"}).json()["directory_tree"]
    assert tree == {"type": "directory", "name": "deep", "children": [
        {"type": "directory", "name": "er", "children": [{"type": "file", "name": "data.bin"}]}]}

    # the home is where it is and at /home/user for the agent's processes only: this server's /home/user is not it
    real = execute(guest, ["findmnt", "-n", "-o", "SOURCE", "/home/user"])["output"]
    assert "hci-envs-home" in real or "hci-envs-agent" in real or real.strip() == "tmpfs", real  # (its disk limit)
    assert not Path("/home/user/deep").exists()
    assert guest.post("/file", data={"file_path": "/home/user/deep/er/data.bin"}).content == data

    missing = guest.post("/file", data={"file_path": "~/nothing.txt"})
    assert missing.status_code == 404 and missing.json()["message"] == "File not found"
    # the server's own files are not the agent's to read, and so not the harness's through the agent either
    secret = guest.post("/file", data={"file_path": "/proc/1/environ"})
    assert secret.status_code == 404


def test_screen_windows_and_screenshots(guest):
    assert guest.post("/screen_size").json() == {"width": 1024, "height": 768}
    shot = guest.get("/screenshot")
    assert shot.status_code == 200 and shot.content[:8] == b"\x89PNG\r\n\x1a\n"
    size = guest.post("/window_size", data={"app_class_name": "Tk"}).json()
    assert size == {"width": 500, "height": 300}  # the probe's geometry
    assert guest.post("/window_size", data={"app_class_name": "nosuchapp"}).status_code == 404
    assert "desktop-frame" in guest.get("/accessibility").json()["AT"]
    assert guest.get("/terminal").json()["status"] == "success"
    assert guest.get("/platform").text == "Linux"


def test_open_file_waits_for_its_window_and_windows_close_by_name(guest):
    response = guest.post("/setup/open_file", json={"path": "xterm"})
    assert response.status_code == 200, response.text
    titles = lambda: execute(guest, ["python", "-c", _TITLES])["output"]  # noqa: E731
    assert "xterm" in titles()
    assert guest.post("/setup/activate_window", json={"window_name": "XTERM"}).status_code == 200
    assert guest.post("/setup/close_window", json={"window_name": "xterm", "strict": True}).status_code == 200
    for _ in range(100):
        if "xterm" not in titles():
            break
        time.sleep(0.1)
    assert "xterm" not in titles()
    assert guest.post("/setup/open_file", json={"path": "/no/such/file.odt"}).status_code == 404


def test_execute_with_verification_waits_for_what_it_names(guest):
    answer = guest.post("/setup/execute_with_verification", json={
        "command": "(sleep 1; xterm -title verify-me) >/dev/null 2>&1 &", "shell": True,
        "verification": {"window_exists": "VERIFY-ME", "command_success": "true"}, "max_wait_time": 20,
        "check_interval": 0.2})
    assert answer.status_code == 200 and answer.json()["verification"] == "passed", answer.text
    assert answer.json()["wait_time"] >= 0.5  # it waited for the window
    failed = guest.post("/setup/execute_with_verification", json={
        "command": ["true"], "verification": {"command_success": "test -e ~/never"}, "max_wait_time": 0.5,
        "check_interval": 0.1})
    assert failed.status_code == 500 and failed.json()["verification"] == "failed"
    assert "verify-me" in failed.json()["windows"], failed.text  # the windows it saw: a failed set-up says why
    # and what became of the programs launched before it: one that gave up says its status and its last words
    assert guest.post("/setup/launch", json={"command": "echo no display for me >&2; exit 3", "shell": True},
                      ).status_code == 200
    gone = guest.post("/setup/execute_with_verification", json={
        "command": ["true"], "verification": {"window_exists": "never-shown"}, "max_wait_time": 1,
        "check_interval": 0.1}).json()
    assert {"command": "echo no display for me >&2; exit 3", "exit": 3, "output": "no display for me"} \
        in gone["launched"], gone
    guest.post("/setup/close_window", json={"window_name": "verify-me"})


def test_screenshots_show_the_pointer_as_osworlds_do(guest):
    from io import BytesIO

    from PIL import Image, ImageChops

    def shot_with_pointer_at(x: int, y: int) -> Image.Image:
        execute(guest, ["python", "-c", f"import pyautogui; pyautogui.moveTo({x}, {y})"])
        return Image.open(BytesIO(guest.get("/screenshot").content)).convert("RGB")

    here, away = shot_with_pointer_at(900, 700), shot_with_pointer_at(20, 700)
    box = (895, 695, 925, 730)  # where the pointer was, on the bare desktop
    assert ImageChops.difference(here.crop(box), away.crop(box)).getbbox() is not None


def test_python_and_bash_scripts(guest):
    answer = guest.post("/run_python", json={"code": "import sys\nprint('out')\nsys.exit(4)"}).json()
    assert answer["status"] == "error" and answer["output"] == "out\n" and answer["return_code"] == 4
    assert answer["error"] == "Process exited with code 4"
    bash = guest.post("/run_bash_script", json={"script": "cd ~; pwd; echo err >&2", "timeout": 10}).json()
    assert bash["returncode"] == 0 and bash["output"].endswith("err\n") and bash["status"] == "success"
    slow = guest.post("/run_bash_script", json={"script": "sleep 30", "timeout": 1})
    assert slow.status_code == 500 and slow.json()["returncode"] == -1
    nowhere = guest.post("/run_bash_script", json={"script": "true", "working_dir": "~/not-here"})
    assert nowhere.status_code == 400 and "does not exist" in nowhere.json()["output"]


def test_bad_requests_get_json_refusals(guest):
    assert guest.post("/execute", content=b"not json", headers={"content-type": "application/json"}).status_code == 400
    assert guest.post("/execute", json={"command": []}).status_code == 400
    assert guest.post("/execute", json={"command": ["/no/such/program"]}).json()["status"] == "error"
    assert guest.post("/file", data={}).status_code == 400
    assert guest.post("/setup/upload", data={"file_path": "~/x"}).status_code == 400
    unsupported = guest.post("/start_recording")
    assert unsupported.status_code == 501 and unsupported.json()["code"] == "UNSUPPORTED"
    assert guest.get("/no/such/route").status_code == 404


def test_a_forwarded_for_header_names_no_other_connection(guest):
    """The agent names a live connection of the owner's in X-Forwarded-For (uvicorn believes the header from a
    loopback client unless told not to): the guard asks about the connection the request came on, and refuses."""
    import socket

    with socket.create_connection(("127.0.0.1", guest.port)) as owner:  # kept open: the owner's connection
        owner.sendall(b"GET /platform HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        assert b"200 OK" in owner.recv(4096)
        named = f"127.0.0.1:{owner.getsockname()[1]}"
        script = (f"import urllib.request, urllib.error\n"
                  f"r = urllib.request.Request('http://127.0.0.1:{guest.port}/platform', "
                  f"headers={{'X-Forwarded-For': {named!r}}})\n"
                  f"try:\n    urllib.request.urlopen(r)\n    print('open')\n"
                  f"except urllib.error.HTTPError as e:\n    print(e.code)\n")
        assert execute(guest, ["python3", "-c", script])["output"].strip() == "403"


def test_the_agent_cannot_call_the_guest_api(guest):
    """The agent's own processes reach the port (it is loopback), and are refused: the API is its owner's."""
    script = (f"import urllib.request, urllib.error\n"
              f"try:\n    urllib.request.urlopen('http://127.0.0.1:{guest.port}/platform')\n    print('open')\n"
              f"except urllib.error.HTTPError as e:\n    print(e.code, e.read().decode())\n")
    answer = execute(guest, ["python3", "-c", script])
    code, body = answer["output"].split(" ", 1)
    assert code == "403" and json.loads(body)["code"] == "NOT_OWNER", answer
    need(os.getuid() == 0, "root, to call the API as another local user")
    import subprocess

    other = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "/usr/bin/python3", "-c", script],
                           capture_output=True, text=True, timeout=30)
    assert other.stdout.startswith("403 "), other


_TITLES = r"""
from Xlib import display, X
d = display.Display()
root = d.screen().root
names = []
for w in root.query_tree().children:
    stack = [w]
    while stack:
        c = stack.pop()
        try:
            n = c.get_wm_name()
        except Exception:
            n = None
        if n:
            names.append(str(n))
        try:
            stack.extend(c.query_tree().children)
        except Exception:
            pass
print("\n".join(names))
"""


def _listening_ports(uid: int) -> set[int]:
    """The TCP ports a user's processes listen on (the kernel's socket tables)."""
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and int(fields[7]) == uid:  # LISTEN
                ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


def test_chrome_s_devtools_reach_the_owner_through_the_guest_api_and_nobody_else(guest):
    """OSWorld's tasks start google-chrome with a DevTools port and its harness drives it over that port: here
    the browser's DevTools are on a pipe, served on the guest API's port (its owner only). No port is opened on
    the machine for the browser, two clients talk to it at once, and the agent is refused."""
    from websockets.sync.client import connect

    need_programs("chromium")
    agent = int(execute(guest, "id -u", shell=True)["output"])
    before = guest.get("/json/version")
    assert before.status_code == 503 and "google-chrome" in before.json()["message"]
    page = "data:text/html,<title>devtools here</title>hello"
    launched = guest.post("/setup/launch", json={"command": ["google-chrome", "--remote-debugging-port=1337", page]})
    assert launched.status_code == 200, launched.text
    forward = guest.post("/setup/launch",
                         json={"command": "socat tcp-listen:9222,fork tcp:localhost:1337", "shell": True})
    assert forward.status_code == 200 and "not needed" in forward.text  # as OSWorld's tasks forward the port
    deadline = time.monotonic() + 60
    while (version := guest.get("/json/version")).status_code != 200:
        assert time.monotonic() < deadline, version.text
        time.sleep(0.5)
    assert version.json()["Browser"].startswith("Chrome/")
    url = version.json()["webSocketDebuggerUrl"]
    assert url.startswith(f"ws://127.0.0.1:{guest.port}/devtools/browser/")

    def call(ws, message_id: int, method: str) -> dict:
        ws.send(json.dumps({"id": message_id, "method": method}))
        while True:
            answer = json.loads(ws.recv(timeout=30))
            if answer.get("id") == message_id:
                return answer

    with connect(url, max_size=None) as first, connect(url, max_size=None) as second:
        deadline = time.monotonic() + 30
        while "devtools here" not in [t["title"] for t in
                                      call(first, 1, "Target.getTargets")["result"]["targetInfos"]]:
            assert time.monotonic() < deadline
            time.sleep(0.3)
        assert call(second, 1, "Browser.getVersion")["result"]["product"].startswith("Chrome/")  # ids kept apart
    assert not _listening_ports(agent), "the browser opened a port on the machine"
    # the agent's browser (this one: other desktops on the machine may run chromium too)
    ps = execute(guest, "ps -o uid=,args= -C chromium", shell=True)["output"].splitlines()
    ours = {int(line.split()[0]) for line in ps if "devtools here" in line}
    assert ours == {agent}, ps
    # the agent reaches the port and is refused, the WebSocket as the rest
    script = (f"import socket\ns = socket.create_connection(('127.0.0.1', {guest.port}))\n"
              f"s.sendall(b'GET /devtools/browser/hci-envs HTTP/1.1\\r\\nHost: 127.0.0.1\\r\\nUpgrade: websocket\\r\\n"
              f"Connection: Upgrade\\r\\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\\r\\n"
              f"Sec-WebSocket-Version: 13\\r\\n\\r\\n')\nprint(s.recv(100).split(b'\\r\\n')[0].decode())\n")
    assert execute(guest, ["python3", "-c", script])["output"].strip() == "HTTP/1.1 403 Forbidden"
    execute(guest, "pkill -u $(id -u) chromium; true", shell=True)


_TONE = ("import math, struct, sys, wave\n"
         "w = wave.open(sys.argv[1], 'wb'); w.setnchannels(1); w.setsampwidth(2); w.setframerate(8000)\n"
         "w.writeframes(b''.join(struct.pack('<h', int(8000 * math.sin(i / 5))) for i in range(8000 * 30)))\n")


def test_vlc_s_http_interface_answers_the_owner_through_the_guest_api_behind_a_password_of_its_own(guest):
    """OSWorld's getter reads VLC's /requests/status.xml with the password its VM has ("password"): here the
    player's interface has a password of its own, and the guest API (its owner only) forwards to it."""
    need_programs("vlc")
    before = guest.get("/requests/status.xml", auth=("", "password"))
    assert before.status_code == 503 and "start vlc" in before.json()["message"]
    execute(guest, ["python3", "-c", _TONE, "/home/user/tone.wav"])
    launched = guest.post("/setup/launch", json={"command": ["vlc", "--http-password", "password", "~/tone.wav"]})
    assert launched.status_code == 200, launched.text
    deadline = time.monotonic() + 60
    while "<state>playing</state>" not in (status := guest.get("/requests/status.xml")).text:
        assert time.monotonic() < deadline, status.text
        time.sleep(0.5)
    assert "tone.wav" in status.text
    state = json.loads(execute(guest, "cat $XDG_RUNTIME_DIR/hci-envs-vlc.json", shell=True)["output"])
    assert state["password"] != "password"  # the one OSWorld's tasks give is not the player's
    direct = httpx.get(f"http://127.0.0.1:{state['port']}/requests/status.xml", auth=("", "password"))
    assert direct.status_code == 401
    paused = guest.get("/requests/status.xml", params={"command": "pl_pause"})
    assert paused.status_code == 200
    deadline = time.monotonic() + 30
    while "<state>paused</state>" not in guest.get("/requests/status.xml").text:
        assert time.monotonic() < deadline
        time.sleep(0.3)
    execute(guest, "pkill -u $(id -u) vlc; true", shell=True)
    # the agent writes the file that says where its player is: a port of someone else's is not called for it
    forged = json.dumps({"port": guest.server.port, "password": "x"})  # the server's own port: root's
    execute(guest, f"echo '{forged}' > $XDG_RUNTIME_DIR/hci-envs-vlc.json", shell=True)
    other = guest.get("/requests/status.xml")
    assert other.status_code == 503 and "not the agent's" in other.json()["message"], other.text


def test_gnome_terminal_starts_stops_and_reads_as_osworlds_tasks_expect(guest):
    """gnome-terminal as OSWorld's set-ups start it (a shell string, returning at once), the window class and
    process name its checks and post-set-ups look for, and /terminal giving the focused terminal's text."""
    execute(guest, ["mkdir", "-p", "/home/user/Documents"])
    started = time.monotonic()
    answer = execute(guest, "gnome-terminal --maximize --working-directory=/home/user/Documents", shell=True)
    assert answer["returncode"] == 0 and time.monotonic() - started < 30, answer
    waited = guest.post("/setup/execute_with_verification", json={
        "command": ["true"], "verification": {"command_success": "xdotool search --onlyvisible --class Gnome-terminal"},
        "max_wait_time": 60, "check_interval": 0.5})
    assert waited.status_code == 200, waited.text
    assert guest.post("/setup/activate_window", json={"window_name": "Terminal"}).status_code == 200
    typed = ("import pyautogui; pyautogui.FAILSAFE = False; "
             "pyautogui.typewrite('pwd; echo $((6 * 7))', interval=0.01); pyautogui.press('enter')")
    execute(guest, ["python", "-c", typed])
    deadline = time.monotonic() + 30
    while "42" not in ((output := guest.get("/terminal").json()["output"]) or ""):
        assert time.monotonic() < deadline, output
        time.sleep(0.3)
    assert "/home/user/Documents\n" in output and "\x1b" not in output, output
    # a terminal that has shown more than is read back gives its end (its log is read from the end)
    from hci_envs.tools.osworld_terminal import MAX_LOG

    flood = ("import pyautogui; pyautogui.FAILSAFE = False; "
             "pyautogui.typewrite('seq 1 250000; echo FLOODED', interval=0.01); pyautogui.press('enter')")
    execute(guest, ["python", "-c", flood])
    deadline = time.monotonic() + 60
    while "\nFLOODED" not in ((output := guest.get("/terminal").json()["output"]) or ""):
        assert time.monotonic() < deadline, (output or "")[-300:]
        time.sleep(0.5)
    assert "\n250000\n" in output and len(output.encode()) <= MAX_LOG and "\n1\n2\n" not in output
    assert guest.post("/setup/close_window", json={"window_name": "nothing-of-that-name"}).status_code in (200, 404)
    execute(guest, ["killall", "gnome-terminal-server"])  # OSWorld's post-set-ups end the terminal so
    deadline = time.monotonic() + 30
    while execute(guest, "xdotool search --onlyvisible --class Gnome-terminal", shell=True)["returncode"] == 0:
        assert time.monotonic() < deadline, "killall gnome-terminal-server left the terminal"
        time.sleep(0.3)
    assert guest.get("/terminal").json() == {"output": None, "status": "success"}  # no terminal has the focus


def test_the_wallpaper_is_gnomes_background_setting(guest):
    picture = bytes(range(256)) * 64
    assert guest.post("/setup/upload", data={"file_path": "~/Pictures/sea.png"},
                      files={"file_data": ("sea.png", picture)}).status_code == 200
    changed = guest.post("/setup/change_wallpaper", json={"path": "~/Pictures/sea.png"})
    assert changed.status_code == 200, changed.text
    setting = execute(guest, ["gsettings", "get", "org.gnome.desktop.background", "picture-uri"])["output"]
    assert setting.strip() == "'file:///home/user/Pictures/sea.png'"
    assert guest.post("/wallpaper").content == picture
    missing = guest.post("/setup/change_wallpaper", json={"path": "~/Pictures/none.png"})
    assert missing.status_code == 404 and "none.png" in missing.json()["message"]
    assert guest.post("/setup/change_wallpaper", json={}).status_code == 400


def test_what_the_harness_does_is_undone_by_the_next_reset(guest):
    """OSWorld's revert is a reset: what the harness started or wrote through the API counts as a used desktop."""
    tag = f"{os.getpid()}{len(guest.headers)}"
    assert guest.post("/setup/launch", json={"command": ["sleep", f"43{tag}"]}).status_code == 200
    execute(guest, f"echo leaked > /tmp/episode-{tag}; echo mine > ~/episode.txt", shell=True)
    with guest.server.http() as control:
        assert control.post("/reset", json={}).status_code == 200
    left = execute(guest, f"pgrep -f '[s]leep 43{tag}'; cat /tmp/episode-{tag} ~/episode.txt 2>&1", shell=True)
    lines = left["output"].splitlines()
    assert len(lines) == 2 and all("No such file" in line for line in lines), left  # no process, no file


def test_hostile_input_gets_json_refusals_not_crashes(guest):
    execute(guest, "rm -f ~/fifo; mkfifo ~/fifo; ln -sf /dev/zero ~/zero.xlsx", shell=True)
    for target in ("~/fifo", "~/zero.xlsx"):  # a file that never ends is no file to hand over
        answer = guest.post("/file", data={"file_path": target})
        assert answer.status_code == 400 and "not a regular file" in answer.json()["message"], answer.text
    bad = [("/execute", {"command": ["echo"], "timeout": "abc"}), ("/execute", {"command": ["echo"], "timeout": 1e308}),
           ("/execute", {"command": ["echo", "a\u0000b"]}), ("/execute", {"command": "echo 'unclosed"}),
           ("/run_python", {"code": "print(1)\ud800"}), ("/run_bash_script", {"script": "true", "timeout": -1}),
           ("/setup/execute_with_verification", {"command": ["true"], "max_wait_time": "x"}),
           ("/list_directory", {"path": "/tmp\u0000"}), ("/setup/open_file", {"path": 5})]
    for route, body in bad:
        answer = guest.post(route, content=json.dumps(body).encode(), headers={"content-type": "application/json"})
        assert answer.status_code == 400 and answer.json()["status"] == "error", (route, body, answer.text)
    deep = b"[" * 100_000 + b"]" * 100_000
    assert guest.post("/execute", content=deep, headers={"content-type": "application/json"}).status_code == 400
    # a web page in the owner's browser is refused, and so is a foreign Host name (DNS rebinding)
    assert guest.post("/execute", json={"command": ["true"]}, headers={"Origin": "http://evil.example"}).status_code == 403
    assert guest.post("/execute", json={"command": ["true"]}, headers={"Host": "rebind.example"}).status_code == 403
    assert guest.get("/platform").text == "Linux"  # and the API still answers


def test_working_folders_are_entered_as_the_agent_and_relative_to_its_home(guest):
    execute(guest, "mkdir -p ~/sub", shell=True)
    inside = guest.post("/run_bash_script", json={"script": "pwd", "working_dir": "sub"}).json()
    assert inside["output"].strip() == "/home/user/sub", inside
    outside = guest.post("/run_bash_script", json={"script": "pwd", "working_dir": "etc"})
    assert outside.status_code == 400  # /home/user/etc, not /etc
    closed = guest.post("/run_bash_script", json={"script": "pwd", "working_dir": "/root"}).json()
    assert closed["returncode"] != 0 and "/root" not in closed["output"].splitlines()[-1:], closed


def test_the_home_view_is_a_home_and_nowhere_else():
    from hci_envs.protocol import StartState

    assert StartState(home_view="/home/user").home_view == "/home/user"
    for wrong in ("/var/tmp/x", "/etc", "/home", "/home/a/b", "/home/..", "/home/a\nb", "home/user", "/root/x"):
        with pytest.raises(ValueError):
            StartState(home_view=wrong)


def test_the_gate_answers_only_with_its_secret_and_a_server_without_one_refuses_to_start(x11):
    """``serve --osworld-gate-port`` (a container's way in): its secret comes from the environment only, and a
    connection that does not open with it gets nothing; one that does reaches the guest API."""
    import re

    from test_tunnel import ask_platform

    from hci_envs.providers.tunnel import greeting

    refused = ServerProcess("--osworld-gate-port", "0", "--app", "xterm")
    with pytest.raises(AssertionError, match="HCI_ENVS_OSWORLD_TOKEN"):
        refused.start(30)
    server = ServerProcess("--osworld-gate-port", "0", "--app", "xterm", env={"HCI_ENVS_OSWORLD_TOKEN": "gate-secret"})
    server.start(60)
    try:
        (line,) = [line for line in server.output if "OSWorld guest gate:" in line]
        port = int(re.search(r":(\d+)\s", line.split("gate:", 1)[1]).group(1))

        assert ask_platform(port, greeting("gate-secret")).endswith(b"\r\n\r\nLinux")
        assert ask_platform(port) == b"" and ask_platform(port, greeting("guessed")) == b""
        assert "gate-secret" not in "".join(server.output)  # the secret is never printed
    finally:
        server.stop()
