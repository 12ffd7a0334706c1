#!/usr/bin/env bash
# Installs moto's S3-compatible server (PyPI package moto[server], pinned) into a virtual
# environment in DIR (default: target/moto) and prints the path of its `moto_server`; the
# operator tests that keep results in a bucket run it on loopback (GOODPUT_MOTO_SERVER).
# Skips the install when that version is already there (CI caches the folder).
set -euo pipefail
dir="${1:-$(cd "$(dirname "$0")/../.." && pwd)/target/moto}"
version="5.2.5"
server="$dir/bin/moto_server"
if [[ -x "$server" && -f "$dir/.moto-$version" ]]; then
    echo "$server"
    exit 0
fi
rm -rf "$dir"
python3 -m venv "$dir" >&2
"$dir/bin/python" -m pip install --quiet --disable-pip-version-check "moto[server]==$version" >&2
touch "$dir/.moto-$version"
echo "$server"
