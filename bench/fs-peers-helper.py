#!/usr/bin/env python3
"""Helpers for bench/fs-peers (no third-party modules).

  fs-peers-helper.py meta DIR COUNT      create COUNT empty files in DIR, then unlink them;
                                         prints "creates SECONDS" and "unlinks SECONDS"
  fs-peers-helper.py missing DIR COUNT   COUNT stats of names absent from DIR (COUNT / 10
                                         names, each asked 10 times); prints
                                         "missing SECONDS" (bench/fs-meta)
  fs-peers-helper.py xattr FILE ROUNDS  ROUNDS of: set 50 attributes user.var_N (16-byte
                                         values), get each, list, remove each, on FILE
                                         (created); prints "xattr CALLS SECONDS" (the
                                         per-call rate, bench/fs-stress; 50 stays under
                                         ext4's one-block limit)
  fs-peers-helper.py fio JSON            prints "ios RUNTIME_S IOPS" of the one fio job in JSON
  fs-peers-helper.py table RESULTS       renders the comparison table from RESULTS lines:
                                         "val SYSTEM FIGURE NUMBER" | "why SYSTEM TEXT..." |
                                         "note TEXT..."
"""

import json
import os
import sys
import time


def meta(directory, count):
    os.makedirs(directory, exist_ok=True)
    names = [os.path.join(directory, "f%06d" % i) for i in range(count)]
    flags = os.O_CREAT | os.O_EXCL | os.O_WRONLY
    start = time.monotonic()
    for name in names:
        os.close(os.open(name, flags, 0o644))
    created = time.monotonic()
    for name in names:
        os.unlink(name)
    unlinked = time.monotonic()
    os.rmdir(directory)
    print("creates %.6f" % (created - start))
    print("unlinks %.6f" % (unlinked - created))


def missing(directory, count):
    names = [os.path.join(directory, "absent%06d" % i) for i in range(max(count // 10, 1))]
    start = time.monotonic()
    for _ in range(10):
        for name in names:
            try:
                os.stat(name)
            except FileNotFoundError:
                pass
            else:
                sys.exit("missing: %s exists" % name)
    print("missing %.6f" % (time.monotonic() - start))


def fio(path):
    with open(path) as f:
        text = f.read()
    # fio may print notices before the JSON object.
    data = json.loads(text[text.index("{"):])
    job = data["jobs"][0]
    for ddir in ("read", "write"):
        part = job[ddir]
        if part["total_ios"] > 0:
            runtime = part["runtime"] / 1000.0
            print("%d %.3f %.1f" % (part["total_ios"], runtime, part["iops"]))
            return
    print("0 0 0")


# (key, label, unit, format); a key ending in _s is a time (no ratio)
FIGURES = [
    ("write_mbs", "seq write {size} + fsync", "MB/s", "%.0f"),
    ("write_s", "  time to durable", "s", "%.2f"),
    ("read_mbs", "cold seq read {size}", "MB/s", "%.0f"),
    ("create_ps", "creates ({files} empty files)", "files/s", "%.0f"),
    ("unlink_ps", "unlinks ({files} files)", "files/s", "%.0f"),
    ("randread_iops", "fio 4K randread (psync, 1 job)", "IOPS", "%.0f"),
    ("randwrite_iops", "fio 4K randwrite (psync, 1 job, +fsync)", "IOPS", "%.0f"),
]

# Rows after the concurrency step: the tarn daemon's memory.
LAST_FIGURES = [
    ("peak_rss_mib", "daemon peak RSS (whole run)", "MiB", "%.0f"),
]

# The concurrency step's rows (bench/fs-peers step 6), for each job count in param "jobs".
CONC_FIGURES = [
    ("conc_seqwrite_%s", "seq write, %s jobs (1M, +fsync)", "MB/s", "%.0f"),
    ("conc_seqread_%s", "cold seq read, %s jobs (1M)", "MB/s", "%.0f"),
    ("conc_randread_%s", "4K randread, %s jobs", "IOPS", "%.0f"),
    ("conc_randwrite_%s", "4K randwrite, %s jobs (+fsync)", "IOPS", "%.0f"),
]

# figure -> list of (peer, factor): tarn >= factor x peer.  Lower-is-better rows have none.
TARGETS = {
    "write_mbs": [("zfs-fuse", 2.0), ("btrfs", 1.0), ("raw", 0.56)],
    "read_mbs": [("btrfs", 1.0), ("raw", 0.64)],
    "create_ps": [("zfs-fuse", 2.0)],
    "randread_iops": [("zfs-fuse", 2.0)],
    "conc_randread_16": [("btrfs", 1.0)],
    "conc_randwrite_16": [("btrfs", 1.0)],
}

# figure -> the figure of the same system it must not exceed (tarn <= bound).
BOUNDS = {"peak_rss_mib": ("rss_bound_mib", "ARC max + 512 MiB")}

# `raw` is the device files written and read with dd (no filesystem): only the seq write and
# cold read rows have it.
SYSTEMS = ["tarn", "zfs-fuse", "btrfs", "raw"]
PEERS = ["zfs-fuse", "btrfs", "raw"]


def table(path):
    vals, why, notes, params = {}, {}, [], {}
    with open(path) as f:
        for line in f:
            parts = line.rstrip("\n").split(" ", 3)
            if parts[0] == "val":
                vals[(parts[1], parts[2])] = float(parts[3])
            elif parts[0] == "why":
                why.setdefault(parts[1], []).append(" ".join(parts[2:]))
            elif parts[0] == "note":
                notes.append(" ".join(parts[1:]))
            elif parts[0] == "param":
                params[parts[1]] = " ".join(parts[2:])

    def cell(system, key, fmt):
        if (system, key) in vals:
            return fmt % vals[(system, key)]
        return "-"

    def ratio(key, peer):
        if key.endswith("_s"):
            return "-"  # a time: lower is better, the MB/s row above carries the ratio
        a, b = vals.get(("tarn", key)), vals.get((peer, key))
        if a is None or b is None or b == 0:
            return "-"
        return "%.2f" % (a / b)

    def target(key):
        if key.endswith("_scaling"):
            # Issue 18: 16 jobs >= 1.5 x 1 job wherever btrfs scales so.
            a, b = vals.get(("tarn", key)), vals.get(("btrfs", key))
            if b is None or b < 1.5:
                return "-", "-"
            return ">= 1.5 (btrfs scales)", "n/a" if a is None else (
                "met" if a >= 1.5 else "NOT met")
        if key in BOUNDS:
            bound, words = BOUNDS[key]
            a, b = vals.get(("tarn", key)), vals.get(("tarn", bound))
            if a is None or b is None:
                return "<= " + words, "n/a"
            return "<= %s (%.0f)" % (words, b), "met" if a <= b else "NOT met"
        if key not in TARGETS:
            return "-", "-"
        words, verdicts = [], []
        for peer, factor in TARGETS[key]:
            words.append(">= %s x %s" % (("%g" % factor), peer))
            a, b = vals.get(("tarn", key)), vals.get((peer, key))
            if a is None or b is None:
                verdicts.append("n/a")
            else:
                verdicts.append("met" if a >= factor * b else "NOT met")
        return "; ".join(words), "; ".join(verdicts)

    # --tarn-base: a second tarn build measured in the same run, and tarn's ratio to it.
    base = ["tarn-base"] if "tarn_base" in params else []
    systems = SYSTEMS[:1] + base + SYSTEMS[1:]
    header = ["figure", "unit"] + systems + ["tarn/" + s for s in base + PEERS] + [
        "target (tarn)", "target status"]
    jobs = [j for j in params.get("jobs", "none").split(",") if j.isdigit()]
    figures = list(FIGURES)
    for key, label, unit, fmt in CONC_FIGURES:
        figures += [(key % j, label % j, unit, fmt) for j in jobs]
    for key, label, unit, _ in CONC_FIGURES:
        if len(jobs) > 1:
            # Scaling: the most jobs over one job, per system (issue 18: >= 1.5 where btrfs
            # scales so).
            first, last = key % jobs[0], key % jobs[-1]
            for s in systems:
                if (s, first) in vals and (s, last) in vals and vals[(s, first)] > 0:
                    vals[(s, key % "scaling")] = vals[(s, last)] / vals[(s, first)]
            name = label.split(",")[0]
            figures.append((key % "scaling", "%s: %s / %s jobs" % (name, jobs[-1], jobs[0]),
                            "x", "%.2f"))
    figures += LAST_FIGURES
    rows = []
    for key, label, unit, fmt in figures:
        label = label.format(**params)
        want, status = target(key)
        rows.append([label, unit] + [cell(s, key, fmt) for s in systems]
                    + [ratio(key, s) for s in base + PEERS] + [want, status])
    print("| " + " | ".join(header) + " |")
    print("| " + " | ".join("---" for _ in header) + " |")
    for row in rows:
        print("| " + " | ".join(row) + " |")
    print()
    for system in systems:
        for text in why.get(system, []):
            print("%s: %s" % (system, text))
    for text in notes:
        print(text)


def xattr(path, rounds):
    open(path, "w").close()
    names = ["user.var_%d" % i for i in range(50)]
    value = b"0123456789abcdef"
    calls = 0
    start = time.monotonic()
    for _ in range(rounds):
        for name in names:
            os.setxattr(path, name, value)
        for name in names:
            if os.getxattr(path, name) != value:
                sys.exit("xattr: %s read back wrong" % name)
        if len(os.listxattr(path)) < len(names):
            sys.exit("xattr: listxattr lost names")
        for name in names:
            os.removexattr(path, name)
        calls += 3 * len(names) + 1
    elapsed = time.monotonic() - start
    os.unlink(path)
    print("xattr %d %.6f" % (calls, elapsed))


def main():
    if len(sys.argv) < 3:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    cmd = sys.argv[1]
    if cmd == "meta":
        meta(sys.argv[2], int(sys.argv[3]))
    elif cmd == "missing":
        missing(sys.argv[2], int(sys.argv[3]))
    elif cmd == "xattr":
        xattr(sys.argv[2], int(sys.argv[3]))
    elif cmd == "fio":
        fio(sys.argv[2])
    elif cmd == "table":
        table(sys.argv[2])
    else:
        print(__doc__, file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
