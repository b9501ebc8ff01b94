#!/bin/sh
# Install the Debian packages given as arguments that the image does not have yet. On the base made by
# debootstrap they are all there already, so this needs no network; on a public Debian image it uses apt.
#
# With --files-only, the arguments are PACKAGE:FILE pairs: where FILE is missing, only the package's files
# are unpacked (its dependencies are not wanted; noVNC's would bring nodejs and numpy for a page).
set -eu
if [ "${1:-}" = "--files-only" ]; then
    shift
    for pair in "$@"; do
        package="${pair%%:*}"
        marker="${pair#*:}"
        if [ -e "$marker" ]; then
            echo "$package: files present"
            continue
        fi
        echo "$package: unpacking its files only"
        work="$(mktemp -d)"
        apt-get update
        (cd "$work" && apt-get download "$package" && dpkg-deb -x ./*.deb /)
        rm -rf "$work" /var/lib/apt/lists/*
    done
    exit 0
fi
missing=""
for package in "$@"; do
    dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing="$missing $package"
done
if [ -n "$missing" ]; then
    echo "installing:$missing"
    apt-get update
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $missing
    rm -rf /var/lib/apt/lists/* /var/cache/apt/archives/*.deb
else
    echo "all system packages present"
fi
