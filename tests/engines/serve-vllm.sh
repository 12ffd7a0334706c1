#!/usr/bin/env bash
# Serves MODEL_DIR (make-tiny-model.py's output) with vLLM's CPU build from VENV
# (install-vllm.sh's output) on 127.0.0.1:PORT (GOODPUT_ENGINE_HOST:PORT when set: a test
# cluster's pod binds its own loopback address) as model NAME, until it is stopped
# (SIGTERM/SIGINT to this script's process, which becomes the server's).
#
#   serve-vllm.sh VENV MODEL_DIR PORT [NAME]
#
# Settings for a 2-core machine: the whole engine (its API server, engine core and worker)
# runs on the CPUs in GOODPUT_ENGINE_CPUS (default: the last one), so a client pinned to the
# others (GOODPUT_CLIENT_CPUS in the tests, `taskset` by hand) never shares a core with
# vLLM's worker, which polls its core even between requests. Without that, the kernel's
# per-session scheduling groups put a client started in its own session (a detached shell,
# CI, a pod) level with the engine, and the client falls behind its schedule. The KV cache
# is 1 GiB (262,144 tokens of the tiny model), prefix caching on, 4,096 tokens at most per
# request, float32 (bfloat16 runs its prefill five times slower on this CPU build). Its
# development endpoints are on (VLLM_SERVER_DEV_MODE=1) for `POST /reset_prefix_cache`,
# which a cold point calls before its load; it listens on a loopback address only. Nothing leaves the
# machine: no hub, no usage report.
set -euo pipefail
venv="$1" model="$2" port="$3" name="${4:-tiny-llama}"
cpus="${GOODPUT_ENGINE_CPUS:-$(($(nproc --all) - 1))}"
host="${GOODPUT_ENGINE_HOST:-127.0.0.1}"
case "$host" in 127.*) ;; *) echo "serve-vllm.sh: $host is not a loopback address" >&2; exit 2 ;; esac
export VLLM_TARGET_DEVICE=cpu VLLM_CPU_KVCACHE_SPACE="${VLLM_CPU_KVCACHE_SPACE:-1}" \
    HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1 \
    VLLM_CPU_OMP_THREADS_BIND="$cpus" PYTHONWARNINGS=ignore VLLM_SERVER_DEV_MODE=1
# `vllm serve` looks its version up under the distribution name `vllm`, which this build
# does not have (it is `vllm-cpu`); the module entry point works.
exec taskset -c "$cpus" "$venv/bin/python" -m vllm.entrypoints.openai.api_server \
    --model "$model" --served-model-name "$name" --host "$host" --port "$port" \
    --max-model-len 4096 --dtype float32 --enable-prefix-caching
