#!/usr/bin/env bash
# Builds llama.cpp's `llama-server` (continuous batching over slots, `--metrics`) from the
# C++ tree vendored in PyPI's `llama-cpp-python` sdist (pinned) into DIR (default:
# target/engines/llama-cpp) and prints DIR: DIR/bin/llama-server, and DIR/gguf-py (the
# vendored GGUF writer, for make-tiny-gguf.py). cmake and ninja come from their PyPI wheels.
# Skips the build when that version is already there (CI caches the folder). About 6
# minutes on 2 cores.
#
# Built without the web UI (its prebuilt copy would be fetched from a model hub) and
# without OpenSSL: the server listens on loopback only. The Python package's own server
# handles one request at a time and is not what is served.
set -euo pipefail
dir="${1:-$(cd "$(dirname "$0")/../.." && pwd)/target/engines/llama-cpp}"
version="0.3.36"
stamp="$dir/.llama-cpp-python-$version"
if [[ -x "$dir/bin/llama-server" && -f "$stamp" ]]; then
    echo "$dir"
    exit 0
fi
rm -rf "$dir"
mkdir -p "$dir/bin"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
python3 -m venv "$tmp/tools" >&2
"$tmp/tools/bin/python" -m pip install --quiet --disable-pip-version-check cmake ninja >&2
# --no-binary for this package alone: `:all:` would compile cmake itself.
"$tmp/tools/bin/python" -m pip download --quiet --disable-pip-version-check --no-deps \
    --no-binary llama-cpp-python -d "$tmp" "llama-cpp-python==$version" >&2
tar xzf "$tmp"/llama_cpp_python-"$version".tar.gz -C "$tmp"
src="$tmp/llama_cpp_python-$version/vendor/llama.cpp"
PATH="$tmp/tools/bin:$PATH" cmake -S "$src" -B "$tmp/build" -G Ninja \
    -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DBUILD_SHARED_LIBS=OFF \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=ON \
    -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF \
    -DLLAMA_OPENSSL=OFF >&2
PATH="$tmp/tools/bin:$PATH" cmake --build "$tmp/build" --target llama-server \
    -j "$(nproc)" >&2
cp "$tmp/build/bin/llama-server" "$dir/bin/"
cp -r "$src/gguf-py" "$dir/gguf-py"
touch "$stamp"
echo "$dir"
