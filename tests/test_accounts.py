"""Agent accounts' names (hci_envs.sandbox.accounts, hci_envs.ops.bootstrap): one name per account in the machine's
files, so that the tools that look accounts up by name tell them apart, while every agent's programs see their
user as ``hci-agent``, whichever account runs them."""

from __future__ import annotations

import os
import pwd
import subprocess
from pathlib import Path

import pytest
from conftest import need

from hci_envs.ops.bootstrap import distinct_account_names

#: An earlier installation's files: three accounts and their groups all named hci-agent, among other users.
PASSWD = ("root:x:0:0:root:/root:/bin/bash\nhci-agent:x:999:995:hci-envs agent:/nonexistent:/usr/sbin/nologin\n"
          "alice:x:1000:1000::/home/alice:/bin/bash\n"
          "hci-agent:x:998:994:hci-envs agent:/nonexistent:/usr/sbin/nologin\n"
          "hci-agent-0:x:990:990:someone else's:/nonexistent:/usr/sbin/nologin\n"
          "hci-agent:x:997:993:hci-envs agent:/nonexistent:/usr/sbin/nologin\n")
SHADOW = ("root:*:1::::::\nhci-agent:!:2::::::\nalice:!:3::::::\nhci-agent:!:4::::::\nhci-agent-0:!:5::::::\n"
          "hci-agent:!:6::::::\n")
GROUP = ("root:x:0:\nhci-agent:x:993:\nalice:x:1000:\nhci-agent:x:995:\nhci-agent:x:994:\nhci-agent-0:x:990:\n"
         "audio:x:29:alice\n")
GSHADOW = "root:*::\nhci-agent:!::\nalice:!::\nhci-agent:!::\nhci-agent:!::\nhci-agent-0:!::\naudio:*::alice\n"


@pytest.mark.fake
def test_an_earlier_installations_shared_name_becomes_one_name_per_account(tmp_path: Path):
    for name, text in (("passwd", PASSWD), ("shadow", SHADOW), ("group", GROUP), ("gshadow", GSHADOW)):
        (tmp_path / name).write_text(text)
    os.chmod(tmp_path / "shadow", 0o640)
    assert distinct_account_names(tmp_path) == 3
    users = [line.split(":") for line in (tmp_path / "passwd").read_text().splitlines()]
    agents = {fields[0]: (fields[2], fields[3]) for fields in users if fields[0].startswith("hci-agent")}
    # distinct names, none taken from an account that had it already; uids and groups as they were
    assert agents == {"hci-agent-1": ("999", "995"), "hci-agent-2": ("998", "994"), "hci-agent-3": ("997", "993"),
                      "hci-agent-0": ("990", "990")}, agents
    # each private group bears its account's name; the shadow files follow their files' order
    groups = {fields[2]: fields[0] for fields in (line.split(":") for line in (tmp_path / "group").read_text()
                                                  .splitlines())}
    assert groups["995"] == "hci-agent-1" and groups["994"] == "hci-agent-2" and groups["993"] == "hci-agent-3"
    shadow = [line.split(":")[0] for line in (tmp_path / "shadow").read_text().splitlines()]
    assert shadow == ["root", "hci-agent-1", "alice", "hci-agent-2", "hci-agent-0", "hci-agent-3"]
    gshadow = [line.split(":")[0] for line in (tmp_path / "gshadow").read_text().splitlines()]
    assert sorted(n for n in gshadow if n.startswith("hci-agent")) == [f"hci-agent-{i}" for i in range(4)]
    assert "audio:*::alice" in (tmp_path / "gshadow").read_text()
    assert oct(os.stat(tmp_path / "shadow").st_mode & 0o777) == "0o640"
    assert distinct_account_names(tmp_path) == 0  # nothing left to rename


@pytest.mark.x11
def test_accounts_have_names_of_their_own_and_agents_see_one_user():
    need(os.geteuid() == 0, "root: the agent's view of the account files is a mount a root server makes")
    from helpers import McpClient, ServerProcess

    import httpx

    names = [entry.pw_name for entry in pwd.getpwall() if entry.pw_name.startswith("hci-agent")]
    assert len(names) >= 8 and len(set(names)) == len(names), names
    control = "accounts-control-token-0123456789abcdef"
    with ServerProcess("--env", "workstation", "--agent-tokens", "--max-sessions", "3", "--app", "xterm",
                       env={"HCI_ENVS_CONTROL_TOKEN": control}) as server:
        seen = []
        for _ in range(2):
            info = httpx.post(f"{server.base_url}/sessions", headers={"authorization": f"Bearer {control}"},
                              timeout=120).json()
            assert "mcp_tools_url" in info, info
            with McpClient(info["mcp_tools_url"], info["agent_token"]) as mcp:
                out = mcp.call("bash", {"command": "id -u; id -un; id -gn; echo $USER; stat -c %U:%G ~; "
                                                   "getent passwd $(id -u) | cut -d: -f1; touch ~/f; ls -l ~/f"}
                               ).structured_content["stdout"].split()
            uid = int(out[0])
            seen.append(uid)
            assert out[1:6] == ["hci-agent", "hci-agent", "hci-agent", "hci-agent:hci-agent", "hci-agent"], out
            assert out[8:10] == ["hci-agent", "hci-agent"], out  # the file's owner, as ls shows it
            # the machine's own files name the account as itself
            assert pwd.getpwuid(uid).pw_name != "hci-agent" and pwd.getpwuid(uid).pw_name in names
            assert subprocess.run(["id", "-u", pwd.getpwuid(uid).pw_name], capture_output=True,
                                  text=True).stdout.strip() == str(uid)
        assert seen[0] != seen[1]  # two accounts, one name to their programs


CLAIMER = r"""
import sys, time
from pathlib import Path
from hci_envs.sandbox.accounts import claim_account
folder, start = Path(sys.argv[1]), float(sys.argv[2])
while time.time() < start:  # every claimer begins at the same moment
    pass
got = [claim_account(list(range(3000, 3016)), folder) for _ in range(4)]
print(" ".join(str(c[0]) for c in got if c), flush=True)
time.sleep(3)  # holding what it claimed while the others claim
"""


@pytest.mark.fake
def test_servers_claiming_accounts_at_once_never_hold_the_same_one(tmp_path):
    """Eight processes claim four accounts each, at once, of sixteen: sixteen claims succeed and no account is
    held twice (a claim's exclusive-then-shared lock is not atomic on its own: two servers converting at once
    both held one account, which a loaded test run found)."""
    import subprocess
    import sys
    import time

    start = time.time() + 1.5
    claimers = [subprocess.Popen([sys.executable, "-c", CLAIMER, str(tmp_path), str(start)], stdout=subprocess.PIPE,
                                 text=True) for _ in range(8)]
    claimed = []
    for claimer in claimers:
        out, _ = claimer.communicate(timeout=60)
        claimed += [int(uid) for uid in out.split()]
    assert sorted(claimed) == list(range(3000, 3016)), sorted(claimed)


LEFT_BEHIND = r"""
import os, signal
from hci_envs.sandbox.accounts import account_pool
from hci_envs.sandbox.homes import HomeStore
lease = account_pool().lease()
home = HomeStore(lease.account, disk=16 << 20)  # a tmpfs, as a server's homes are under its default disk limit
runtime = lease.account.private_dir("hci-envs-agent-")
(home.path / "secret.txt").write_text("the earlier session's")
print(lease.account.uid, home.path, runtime, flush=True)
with open(f"/proc/self/task/{os.getpid()}/children") as f:  # the watchdog: killed first, so nothing cleans up
    for child in f.read().split():
        os.kill(int(child), signal.SIGKILL)
os.kill(os.getpid(), signal.SIGKILL)
"""


@pytest.mark.fake
def test_an_accounts_next_lease_removes_the_folders_an_earlier_holder_left_mounted(tmp_path):
    """A process that held an account is killed with its watchdog, its session's home (a tmpfs) and runtime folder
    left behind in its own temporary directory: the account's next lease, by a process whose temporary directory
    is another (whoever takes it), removes both, so that the next session of that uid cannot read them (a loaded
    test run found an earlier session's home readable to a new one: the sweep removed the files but not the
    mount, and a mounted folder cannot be removed)."""
    import sys
    import time

    from hci_envs.errors import CapacityError
    from hci_envs.sandbox.accounts import AccountPool, agent_accounts

    need(os.geteuid() == 0 and bool(agent_accounts()), "root and agent accounts (python3 -m hci_envs install)")
    done = subprocess.run([sys.executable, "-c", LEFT_BEHIND], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "TMPDIR": str(tmp_path)})
    assert done.returncode == -9, done.stderr
    uid, home, runtime = done.stdout.split()
    left = [Path(home), Path(runtime)]
    assert all(path.is_relative_to(tmp_path) for path in left)
    assert all(path.is_dir() for path in left) and os.path.ismount(home)
    account = next(a for a in agent_accounts() if a.uid == int(uid))
    deadline = time.monotonic() + 60
    while any(path.parent.exists() for path in left):  # another server's lease of the account sweeps it as well
        try:
            AccountPool([account]).lease().release()
        except CapacityError:
            assert time.monotonic() < deadline, f"the account stayed leased, and {left} stayed"
            time.sleep(0.1)
            continue
        break
    assert not any(path.parent.exists() for path in left), f"left for the account's next session: {left}"
    assert not os.path.ismount(home)
