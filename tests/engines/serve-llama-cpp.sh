#!/usr/bin/env bash
# Serves MODEL.gguf (make-tiny-gguf.py's output) with llama.cpp's server from DIR
# (install-llama-cpp.sh's output) on 127.0.0.1:PORT as model NAME, until it is stopped.
#
#   serve-llama-cpp.sh DIR MODEL.gguf PORT [NAME]
#
# Like serve-vllm.sh: the whole server runs on the CPUs in GOODPUT_ENGINE_CPUS (default:
# the last one), one compute thread, apart from the client's. Eight slots share a
# 16,384-token context (2,048 each), continuous batching over them, `--metrics` on,
# the model's chat template through `--jinja`.
set -euo pipefail
dir="$1" model="$2" port="$3" name="${4:-tiny-llama}"
host="${GOODPUT_ENGINE_HOST:-127.0.0.1}"
cpus="${GOODPUT_ENGINE_CPUS:-$(($(nproc --all) - 1))}"
exec taskset -c "$cpus" "$dir/bin/llama-server" -m "$model" -a "$name" \
    --host "$host" --port "$port" -c 16384 -np 8 --metrics --jinja -t 1 -tb 1 \
    --no-webui
