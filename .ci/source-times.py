#!/usr/bin/env python3
"""Gives each tracked file of a fresh clone the modification time it had when CI last built
it, if its content is the same, so that cargo reuses what did not change.

    source-times.py RECORD

Cargo decides that a crate of this checkout is fresh by comparing its files' modification
times with those of its last build's outputs, and a fresh clone makes every file new. The
record (kept inside the target directory, so it goes wherever the outputs go) holds, per
tracked file, its content's git blob id and the time it was given in the run that built
from it. A file whose blob id is the recorded one gets the recorded time back: what was
built from exactly that content is older than the outputs. Any other file keeps its new
time, so cargo rebuilds what depends on it. The record is then rewritten with every file's
time as it now stands, before the build: a build that fails leaves outputs older than the
times it recorded, so the next run rebuilds them.

Sound only for a target directory that CI alone builds into: outputs built from another
working tree's edits would look fresh beside a clone whose content matches the record.
"""

import os
import subprocess
import sys


def tracked():
    """(blob id, path) of every file in the index."""
    out = subprocess.run(
        ["git", "ls-files", "-s", "-z"], check=True, capture_output=True
    ).stdout
    for entry in out.split(b"\0"):
        if not entry:
            continue
        meta, path = entry.split(b"\t", 1)
        _mode, blob, _stage = meta.split(b" ")
        yield blob.decode(), os.fsdecode(path)


def main(record_path):
    recorded = {}
    try:
        with open(record_path, encoding="utf-8") as f:
            for line in f:
                blob, ns, path = line.rstrip("\n").split(" ", 2)
                recorded[path] = (blob, int(ns))
    except FileNotFoundError:
        pass
    restored = changed = 0
    lines = []
    for blob, path in tracked():
        if not os.path.isfile(path) or os.path.islink(path):
            continue
        was = recorded.get(path)
        if was is not None and was[0] == blob:
            os.utime(path, ns=(was[1], was[1]))
            restored += 1
        else:
            changed += 1
        lines.append(f"{blob} {os.stat(path).st_mtime_ns} {path}\n")
    os.makedirs(os.path.dirname(record_path) or ".", exist_ok=True)
    tmp = record_path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.writelines(lines)
    os.replace(tmp, record_path)
    print(
        f"source times: {restored} files as last built, {changed} new or changed"
        + ("" if recorded else " (no record: a first build)")
    )


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: source-times.py RECORD")
    main(sys.argv[1])
