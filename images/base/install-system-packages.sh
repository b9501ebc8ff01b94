#!/bin/sh
# Install the Debian packages given as arguments that the image does not have yet. On the base made by
# debootstrap they are all there already, so this needs no network; on a public Debian image it uses apt.
set -eu
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
