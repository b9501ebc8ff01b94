"""OSWorld's harness reaching a desktop in a container (``placement="docker"``, the hci-envs/osworld image): the
guest API answers through the relay, the gate only with its secret, and the relay only its owner."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from conftest import need
from test_osworld_harness import osworld_python
from test_tunnel import ASK_PLATFORM, EXCHANGE

pytestmark = pytest.mark.docker

OSWORLD_IMAGE = "hci-envs/osworld:latest"


@pytest.fixture(scope="module")
def osworld_image():
    """The osworld image, built here (Docker's cache makes that quick when nothing changed): the set-up command
    leaves it to this tier, which runs beside the tiers that run desktops, where its build costs no time."""
    from hci_envs.ops import images

    try:
        images.docker_client()
    except Exception as exc:  # noqa: BLE001
        need(False, f"the Docker daemon ({exc})")
    need(images.image_exists(images.docker_client(), images.APPS), f"the image {images.APPS}; "
         "`python3 -m hci_envs install --test` builds it")
    images.build_osworld()
    osworld_python()


GATE_CHECK = ASK_PLATFORM + r'''
import json, os, socket, sys, time, urllib.request
from hci_envs.osworld import HciEnvsProvider
from hci_envs.osworld.provider import GATE_PORT

provider = HciEnvsProvider(placement="docker", screen_size=(800, 600))
provider.start_emulator("hci-envs", True)
try:
    relay = provider.guest_port
    gate = provider.server.host_port(GATE_PORT)
    seen = {}
    with urllib.request.urlopen(f"http://127.0.0.1:{relay}/platform", timeout=30) as answer:
        seen["relay"] = answer.read().decode()

    seen["gate_without_secret"] = ask_platform(gate).decode(errors="replace")
    seen["gate_wrong_secret"] = ask_platform(gate, b"hci-envs-osworld-gate not-the-secret\n").decode(errors="replace")
    print(json.dumps({"seen": seen, "relay": relay}), flush=True)
    sys.stdin.readline()  # the test tries the relay as another user meanwhile
finally:
    provider.stop_emulator("hci-envs")
'''


def test_the_gate_wants_its_secret_and_the_relay_its_owner(osworld_image):
    import json
    import pwd

    other_uid = pwd.getpwnam("nobody").pw_uid  # another user (not an agent account: their network is none)

    proc = subprocess.Popen([osworld_python(), "-c", GATE_CHECK], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, "HCI_ENVS_PYTHON": sys.executable})
    try:
        line = proc.stdout.readline()
        assert line, proc.stderr.read()[-3000:]
        report = json.loads(line)
        seen = report["seen"]
        assert seen["relay"] == "Linux"
        assert seen["gate_without_secret"] == "" and seen["gate_wrong_secret"] == ""  # closed, nothing answered
        # another uid gets nothing through the relay
        request = b"GET /platform HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
        other = subprocess.run(
            ["setpriv", "--reuid", str(other_uid), "--regid", str(other_uid), "--clear-groups", "/usr/bin/python3", "-c",
             EXCHANGE + f"print(repr(exchange({report['relay']}, {request!r})))"],
            capture_output=True, text=True, timeout=60)
        assert other.returncode == 0 and other.stdout.strip() == "b''", (other.stdout, other.stderr)
    finally:
        if proc.poll() is None:
            proc.stdin.write("\n")
            proc.stdin.flush()
            proc.wait(120)
    assert proc.returncode == 0, proc.stderr.read()[-3000:]


@pytest.mark.timeout(1500)  # a pass over every task, each in a fresh container desktop (the report gives the times)
def test_every_task_scores_zero_untouched_and_one_solved_in_a_container(osworld_image, tmp_path):
    """The whole OSWorld-format set, as in tests/test_osworld_harness.py, with the desktop in a container of the
    osworld image: its set-up steps (office documents opened by xdg-open, scripts run from the home), getters
    and metrics through the relay and the gate."""
    from test_osworld_harness import SOLUTIONS, run_harness, task_files

    run = run_harness(tmp_path, solutions=True, placement="docker", score_untouched=True)
    assert len(run["tasks"]) == len(task_files())
    assert {t["id"]: t["untouched_score"] for t in run["tasks"]} == {t["id"]: 0.0 for t in run["tasks"]}
    assert {t["id"]: t["score"] for t in run["tasks"]} == {t: 1.0 for t in SOLUTIONS}
