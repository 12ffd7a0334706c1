#!/usr/bin/env bash
# Checks the chart: `helm lint`, `helm template` with the default values and each
# ci/*-values.yaml, the security settings of every rendered container (security.py), that
# the CRD it ships is the generated one and appVersion is Cargo.toml's version, and that
# values the schema must refuse are refused.
# HELM names the helm binary (default: helm on PATH). Run from anywhere.
set -euo pipefail
helm="${HELM:-helm}"
chart="$(cd "$(dirname "$0")/.." && pwd)"
repo="$(cd "$chart/../.." && pwd)"
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT

"$helm" lint --strict "$chart"
for values in "" "$chart"/ci/*-values.yaml; do
    args=()
    label=default
    if [[ -n "$values" ]]; then
        args=(-f "$values")
        label="$(basename "$values")"
        "$helm" lint --strict "$chart" "${args[@]}" >/dev/null
    fi
    "$helm" template t "$chart" --namespace goodput-system --include-crds "${args[@]}" \
        >"$out/rendered.yaml" 2>"$out/stderr" || { cat "$out/stderr" >&2; exit 1; }
    echo "== $label: $(grep -c '^kind:' "$out/rendered.yaml") objects"
    python3 "$chart/ci/security.py" <"$out/rendered.yaml"
done

# The chart's CRD is the generated file (a symlink to it; helm follows it).
if ! cmp -s "$chart/crds/capacitybenchmark.yaml" "$repo/crds/capacitybenchmark.yaml"; then
    echo "charts/goodput/crds/capacitybenchmark.yaml differs from crds/capacitybenchmark.yaml" >&2
    exit 1
fi

# appVersion is the goodput release: Cargo.toml's package version.
cargo_version="$(sed -n '/^\[package\]/,/^\[/s/^version = "\(.*\)"/\1/p' "$repo/Cargo.toml")"
app_version="$(sed -n 's/^appVersion: "\(.*\)"/\1/p' "$chart/Chart.yaml")"
if [[ "$cargo_version" != "$app_version" ]]; then
    echo "Chart.yaml appVersion $app_version is not Cargo.toml's version $cargo_version" >&2
    exit 1
fi

# Values the schema (or the templates) must refuse.
refused() {
    if "$helm" template t "$chart" "$@" >/dev/null 2>"$out/stderr"; then
        echo "accepted, but must be refused: $*" >&2
        exit 1
    fi
    echo "refused as expected ($*): $(grep -m1 -E '^- at |execution error' "$out/stderr")"
}
refused --set-string replicas=two
refused --set replicas=0
refused --set logFormat=xml
refused --set image.tag=latest
refused --set image.digest=sha256:abc
refused --set runAsUser=0
refused --set 'watchNamespaces={a,b}'
refused --set 'watchNamespaces={Not_A_Namespace}'
refused --set leaderElection.renewSeconds=20
refused --set resources.limits.memory=lots
refused --set unknownKey=1
echo "chart checks passed"
