#!/usr/bin/env python3
"""Workloads of bench/memory-soak on a mounted tarn dataset (see that script).

usage: memory-soak-helper.py mixed DIR SECONDS [--workers N] [--data-max BYTES] [--seed S]
       memory-soak-helper.py fill DIR BYTES [--file-size BYTES]
       memory-soak-helper.py readall DIR
       memory-soak-helper.py small DIR COUNT

mixed: N worker processes, each in DIR/w<i>, loop until SECONDS pass over a random choice of
  create (0 B to 1 MiB of random bytes, a quarter of them small), overwrite at a random
  offset, append, read a whole file, truncate, unlink, setxattr/getxattr/removexattr, mkdir
  with a few empty files and rmdir of it, rename, stat of a missing name, fsync; a worker
  whose files pass DATA_MAX / N bytes unlinks before it creates. Prints one line of
  operation counts at the end.
fill: writes BYTES of random-ish (incompressible) data as files of FILE_SIZE under DIR/fill.
readall: reads every file under DIR once and prints the bytes read.
small: creates COUNT files of 0 to 4 KiB in directories of 1000 under DIR/small, stats
  every one, then unlinks them all and removes the directories (metadata-heavy).
"""
import os
import random
import sys
import time


def mixed_worker(root, seconds, data_max, seed):
    rng = random.Random(seed)
    os.makedirs(root, exist_ok=True)
    files = {}  # name -> size
    used = 0
    counts = {}
    serial = 0
    end = time.monotonic() + seconds
    blob = os.urandom(1 << 20)

    def payload(n):
        start = rng.randrange(0, len(blob) - n + 1) if n < len(blob) else 0
        return blob[start:start + n]

    def count(op):
        counts[op] = counts.get(op, 0) + 1

    while time.monotonic() < end:
        op = rng.random()
        names = list(files)
        try:
            if op < 0.25 or not names:
                if used > data_max and names:
                    name = rng.choice(names)
                    os.unlink(os.path.join(root, name))
                    used -= files.pop(name)
                    count("unlink")
                    continue
                serial += 1
                name = f"f{serial}"
                size = rng.randrange(0, 8192) if rng.random() < 0.25 else rng.randrange(0, 1 << 20)
                with open(os.path.join(root, name), "wb") as f:
                    f.write(payload(size))
                files[name] = size
                used += size
                count("create")
            elif op < 0.40:
                name = rng.choice(names)
                size = files[name]
                off = rng.randrange(0, size + 1)
                n = rng.randrange(1, 65536)
                with open(os.path.join(root, name), "r+b") as f:
                    f.seek(off)
                    f.write(payload(n))
                grown = max(size, off + n)
                used += grown - size
                files[name] = grown
                count("overwrite")
            elif op < 0.60:
                name = rng.choice(names)
                with open(os.path.join(root, name), "rb") as f:
                    while f.read(1 << 20):
                        pass
                count("read")
            elif op < 0.65:
                name = rng.choice(names)
                size = rng.randrange(0, files[name] + 1)
                os.truncate(os.path.join(root, name), size)
                used += size - files[name]
                files[name] = size
                count("truncate")
            elif op < 0.75:
                name = rng.choice(names)
                os.unlink(os.path.join(root, name))
                used -= files.pop(name)
                count("unlink")
            elif op < 0.85:
                name = rng.choice(names)
                path = os.path.join(root, name)
                key = f"user.k{rng.randrange(8)}"
                os.setxattr(path, key, payload(rng.randrange(1, 2048)))
                os.getxattr(path, key)
                if rng.random() < 0.3:
                    os.removexattr(path, key)
                count("xattr")
            elif op < 0.90:
                serial += 1
                d = os.path.join(root, f"d{serial}")
                os.mkdir(d)
                for i in range(rng.randrange(1, 20)):
                    open(os.path.join(d, f"e{i}"), "wb").close()
                for i in os.listdir(d):
                    os.unlink(os.path.join(d, i))
                os.rmdir(d)
                count("mkdir")
            elif op < 0.95:
                name = rng.choice(names)
                serial += 1
                new = f"f{serial}"
                os.rename(os.path.join(root, name), os.path.join(root, new))
                files[new] = files.pop(name)
                count("rename")
            elif op < 0.98:
                try:
                    os.stat(os.path.join(root, f"missing{rng.randrange(1 << 30)}"))
                except FileNotFoundError:
                    pass
                count("stat")
            else:
                name = rng.choice(names)
                fd = os.open(os.path.join(root, name), os.O_RDWR)
                try:
                    os.write(fd, payload(4096))
                    os.fsync(fd)
                finally:
                    os.close(fd)
                files[name] = max(files[name], 4096)
                count("fsync")
        except OSError as e:
            # Which kind of operation failed, from the branch the draw took.
            kind = ("create" if op < 0.25 or not names else "overwrite" if op < 0.40
                    else "read" if op < 0.60 else "truncate" if op < 0.65
                    else "unlink" if op < 0.75 else "xattr" if op < 0.85
                    else "mkdir" if op < 0.90 else "rename" if op < 0.95
                    else "stat" if op < 0.98 else "fsync")
            key = f"error:{kind}:{e.errno}"
            counts[key] = counts.get(key, 0) + 1
    return counts


def mixed(args):
    root, seconds = args[0], float(args[1])
    workers, data_max, seed = 4, 1 << 30, 1
    rest = args[2:]
    while rest:
        flag, value, rest = rest[0], rest[1], rest[2:]
        if flag == "--workers":
            workers = int(value)
        elif flag == "--data-max":
            data_max = int(value)
        elif flag == "--seed":
            seed = int(value)
    pids = []
    for i in range(workers):
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(r)
            counts = mixed_worker(os.path.join(root, f"w{i}"), seconds, data_max // workers,
                                  seed * 1000 + i)
            os.write(w, repr(counts).encode())
            os._exit(0)
        os.close(w)
        pids.append((pid, r))
    total = {}
    for pid, r in pids:
        text = b""
        while True:
            chunk = os.read(r, 65536)
            if not chunk:
                break
            text += chunk
        os.waitpid(pid, 0)
        if text:
            for k, v in eval(text.decode()).items():  # our own child's repr of a dict
                total[k] = total.get(k, 0) + v
    print(" ".join(f"{k}={v}" for k, v in sorted(total.items())))


def fill(args):
    root, total = args[0], int(args[1])
    file_size = 64 << 20
    if len(args) > 3 and args[2] == "--file-size":
        file_size = int(args[3])
    d = os.path.join(root, "fill")
    os.makedirs(d, exist_ok=True)
    blob = os.urandom(1 << 20)
    written, n = 0, 0
    while written < total:
        size = min(file_size, total - written)
        with open(os.path.join(d, f"x{n}"), "wb") as f:
            left = size
            i = 0
            while left > 0:
                chunk = blob[: min(left, len(blob))]
                # every MiB differs (first 8 bytes), so nothing deduplicates or compresses away
                f.write((n * 100003 + i).to_bytes(8, "little") + chunk[8:])
                left -= len(chunk)
                i += 1
        written += size
        n += 1
    print(written)


def readall(args):
    total = 0
    for base, _, names in os.walk(args[0]):
        for name in names:
            try:
                with open(os.path.join(base, name), "rb") as f:
                    while True:
                        chunk = f.read(1 << 20)
                        if not chunk:
                            break
                        total += len(chunk)
            except OSError:
                pass
    print(total)


def small(args):
    root, count = os.path.join(args[0], "small"), int(args[1])
    blob = os.urandom(4096)
    paths = []
    for i in range(count):
        d = os.path.join(root, f"d{i // 1000}")
        if i % 1000 == 0:
            os.makedirs(d, exist_ok=True)
        path = os.path.join(d, f"s{i}")
        with open(path, "wb") as f:
            f.write(blob[: i % 4097])
        paths.append(path)
    for path in paths:
        os.stat(path)
    for path in paths:
        os.unlink(path)
    for i in range((count + 999) // 1000):
        os.rmdir(os.path.join(root, f"d{i}"))
    print(count)


if __name__ == "__main__":
    {"mixed": mixed, "fill": fill, "readall": readall, "small": small}[sys.argv[1]](sys.argv[2:])
