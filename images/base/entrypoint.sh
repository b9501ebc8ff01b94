#!/bin/sh
# The container starts as root only to hand the server, as the non-root user hci, exactly the capabilities it
# needs to run each session's agent side as an account of its own (hci-agent-N), as ambient capabilities.
# setpriv then execs tini, which runs the server: no process of the container stays root.
#
#   CAP_SETUID, CAP_SETGID  start the agent's processes as its account, with no supplementary groups
#   CAP_KILL                stop and interrupt them (reset, timeouts, session end)
#   CAP_CHOWN               hand the restored home directory to the agent's account
#   CAP_DAC_OVERRIDE        read and remove the agent's files whatever their modes (snapshots, checkers, reset)
#   CAP_FOWNER              set modes and times on the agent's files, remove them from sticky /tmp
#   CAP_NET_ADMIN           (where given) the agents' network policy: rules in the container's own namespace
#
# Without them (a container started with --cap-drop ALL and no --cap-add, or with --user), the server runs
# without isolation, says so, and refuses to listen off loopback unless HCI_ENVS_ALLOW_NO_ISOLATION=1.
set -eu
export HOME=/home/hci USER=hci LOGNAME=hci
if [ "$(id -u)" = 0 ]; then
    bounding=$(awk '/^CapBnd:/ {print $2}' /proc/self/status)
    # CHOWN 0, DAC_OVERRIDE 1, FOWNER 3, KILL 5, SETGID 6, SETUID 7: mask 0xeb
    if [ $(( 0x$bounding & 0xeb )) -eq $(( 0xeb )) ]; then
        caps=+chown,+dac_override,+fowner,+kill,+setgid,+setuid
        # NET_ADMIN 12: without it the agents' network is not confined here, and /metadata says so
        if [ $(( 0x$bounding & 0x1000 )) -ne 0 ]; then caps="$caps,+net_admin"; fi
        exec setpriv --reuid hci --regid hci --init-groups --inh-caps "$caps" --ambient-caps "$caps" \
            -- /usr/bin/tini -- "$@"
    fi
    echo "hci-envs: the container lacks the capabilities to isolate agents; running without them" >&2
    exec setpriv --reuid hci --regid hci --init-groups -- /usr/bin/tini -- "$@"
fi
# Started as another user (--user, as OpenEnv's validator starts images: uid 65532, the image's nonroot
# account), perhaps on a read-only root: the home, the runtime folder and the episodes go where that user may
# write, a folder of its own under /tmp.
if [ ! -w "$HOME" ]; then
    mine=$(mktemp -d /tmp/hci-envs-home.XXXXXX)
    export HOME="$mine" USER="$(id -un 2>/dev/null || id -u)" LOGNAME="$(id -un 2>/dev/null || id -u)"
    export XDG_RUNTIME_DIR="$mine/.run" HCI_ENVS_EPISODES_DIR="$mine/episodes"
    mkdir -m 0700 "$XDG_RUNTIME_DIR"
fi
exec /usr/bin/tini -- "$@"
