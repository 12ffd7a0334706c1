#!/usr/bin/env python3
"""Reads `helm template` output on stdin; fails unless every container and init container
of every rendered workload runs non-root with a read-only root filesystem, no privilege
escalation, all capabilities dropped and the RuntimeDefault seccomp profile (set on the
container or inherited from the pod). Needs PyYAML."""
import sys

try:
    import yaml
except ImportError:
    sys.exit("security.py needs PyYAML (pip install pyyaml)")

WORKLOADS = {"Deployment", "StatefulSet", "DaemonSet", "Job", "ReplicaSet"}


def pod_specs(doc):
    kind = doc.get("kind")
    if kind in WORKLOADS:
        yield doc["spec"]["template"]["spec"]
    elif kind == "CronJob":
        yield doc["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    elif kind == "Pod":
        yield doc["spec"]


def problems(name, pod):
    psc = pod.get("securityContext") or {}
    containers = (pod.get("initContainers") or []) + (pod.get("containers") or [])
    if not containers:
        yield f"{name}: no containers"
    for c in containers:
        sc = c.get("securityContext") or {}
        where = f"{name}/{c.get('name')}"

        def setting(key):
            return sc.get(key, psc.get(key))

        if setting("runAsNonRoot") is not True:
            yield f"{where}: runAsNonRoot is not true"
        if setting("runAsUser") == 0:
            yield f"{where}: runAsUser is 0"
        if sc.get("readOnlyRootFilesystem") is not True:
            yield f"{where}: readOnlyRootFilesystem is not true"
        if sc.get("allowPrivilegeEscalation") is not False:
            yield f"{where}: allowPrivilegeEscalation is not false"
        if sc.get("privileged"):
            yield f"{where}: privileged"
        if "ALL" not in ((sc.get("capabilities") or {}).get("drop") or []):
            yield f"{where}: capabilities do not drop ALL"
        if (sc.get("capabilities") or {}).get("add"):
            yield f"{where}: capabilities added"
        if (setting("seccompProfile") or {}).get("type") != "RuntimeDefault":
            yield f"{where}: seccompProfile is not RuntimeDefault"
        image = c.get("image", "")
        if image.endswith(":latest") or ("@" not in image and ":" not in image.rsplit("/", 1)[-1]):
            yield f"{where}: image {image!r} is untagged or latest"


def main():
    found, bad = 0, []
    for doc in yaml.safe_load_all(sys.stdin):
        if not doc:
            continue
        for pod in pod_specs(doc):
            found += 1
            bad.extend(problems(f"{doc['kind']}/{doc['metadata']['name']}", pod))
    if not found:
        bad.append("no workload rendered")
    for b in bad:
        print(b, file=sys.stderr)
    print(f"{found} workload(s) checked, {len(bad)} problem(s)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
