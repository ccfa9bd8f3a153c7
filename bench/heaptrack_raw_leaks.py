#!/usr/bin/env python3
"""heaptrack_raw_leaks.py: leaked bytes per function from a heaptrack *raw* file.

    python3 bench/heaptrack_raw_leaks.py FILE.raw.zst FUNCTION_SUBSTRING

Reads what heaptrack's preload library recorded (`heaptrack --raw`, heaptrack
1.4 text format: `m` module, `t ip parent` trace node, `+ size trace ptr`
allocation, `- ptr` free; numbers in hex, strings length-prefixed), without
heaptrack_interpret, which cannot process bench_alloc_workload's data (see
bench/README.md). Prints one line

    leaked_bytes N leaked_count M matched_bytes B matched_count C

where N/M are all allocations never freed and B/C those whose stack has a
frame inside a function of the main executable whose (demangled) name
contains FUNCTION_SUBSTRING (symbol ranges from `nm -C -S`). Exit status 0,
or 1 with a one-line message when the file cannot be read.

Used by bench/overhead_bench.sh outside the timed region: it answers "did
heaptrack's recording capture the leak exactly?", independently of whether
heaptrack's own interpreter survives.
"""

import subprocess
import sys


def open_text(path):
    if path.endswith(".zst"):
        proc = subprocess.Popen(["zstd", "-dc", path], stdout=subprocess.PIPE)
    elif path.endswith(".gz"):
        proc = subprocess.Popen(["gzip", "-dc", path], stdout=subprocess.PIPE)
    else:
        return open(path, "rb"), None
    return proc.stdout, proc


def take_string(fields, i):
    """A length-prefixed string starting at fields[i] (hex length, then text
    that may hold spaces). Returns (string, next index)."""
    length = int(fields[i], 16)
    text = fields[i + 1]
    j = i + 2
    while len(text) < length and j < len(fields):
        text += " " + fields[j]
        j += 1
    return text, j


def function_ranges(exe, needle):
    out = subprocess.run(["nm", "-C", "-S", "--defined-only", exe], capture_output=True,
                         text=True, check=True).stdout
    ranges = []
    for line in out.splitlines():
        parts = line.split(None, 3)
        if len(parts) == 4 and parts[2] in "tTwW" and needle in parts[3]:
            start, size = int(parts[0], 16), int(parts[1], 16)
            ranges.append((start, start + size))
    return ranges


def main():
    if len(sys.argv) != 3:
        print(__doc__.splitlines()[2].strip(), file=sys.stderr)
        return 2
    path, needle = sys.argv[1], sys.argv[2]
    stream, proc = open_text(path)
    exe = None
    exe_base = None
    parents = [0]  # trace index -> parent index; index 0 is the root
    ips = [0]
    live = {}  # ptr -> (size, trace index)
    in_module_list = False
    for raw in stream:
        line = raw.decode("utf-8", "replace").rstrip("\n")
        if not line:
            continue
        mode = line[0]
        if mode == "+":
            _, size, trace, ptr = line.split()
            live[ptr] = (int(size, 16), int(trace, 16))
        elif mode == "-":
            live.pop(line[2:], None)
        elif mode == "t":
            _, ip, parent = line.split()
            ips.append(int(ip, 16))
            parents.append(int(parent, 16))
        elif mode == "x":
            exe, _ = take_string(line.split(" "), 1)
        elif mode == "m":
            fields = line.split(" ")
            name, j = take_string(fields, 1)
            if name == "-":  # a new module list follows
                in_module_list = True
                continue
            # The first module after "m 1 -" is the executable ("x").
            if in_module_list and name == "x" and j < len(fields):
                exe_base = int(fields[j], 16)
            in_module_list = False
    if proc is not None and proc.wait() != 0:
        print(f"heaptrack_raw_leaks.py: {path}: decompression failed", file=sys.stderr)
        return 1
    if exe is None or exe_base is None:
        print(f"heaptrack_raw_leaks.py: {path}: no executable or module list", file=sys.stderr)
        return 1
    ranges = [(exe_base + a, exe_base + b) for a, b in function_ranges(exe, needle)]

    matched_cache = {0: False}

    def matches(trace):
        chain = []
        while trace not in matched_cache:
            chain.append(trace)
            trace = parents[trace]
        hit = matched_cache[trace]
        for t in reversed(chain):
            ip = ips[t]
            # Return addresses point after the call: test ip - 1.
            hit = hit or any(a <= ip - 1 < b for a, b in ranges)
            matched_cache[t] = hit
        return hit

    leaked_bytes = sum(size for size, _ in live.values())
    matched = [size for size, trace in live.values() if matches(trace)]
    print(f"leaked_bytes {leaked_bytes} leaked_count {len(live)} "
          f"matched_bytes {sum(matched)} matched_count {len(matched)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
