#!/usr/bin/env python3
"""check_rooms: the shim's folders are its layers; a lower room never includes a higher one.

shim/src is split into rooms (README, "Architecture"). A file may include headers of
its own room and of rooms below it, never above; from outside the rooms only the public
header and proto/'s dependency-free tables (kinds.h, health_fields.h); and the tools never
include the shim. Run by CTest (test `style.rooms`); prints each offending include and exits 1.
"""
import pathlib
import re
import sys

# Lowest first. Rooms of equal rank (net, gpu) may not include each other.
RANKS = {
    "base": 0,     # arena, locks, log, config, files, threads, the real functions
    "unwind": 1,   # stack capture, CFI walker, eh_frame, stack and module tables
    "record": 2,   # recorder, live/mmap/GPU tables, tags, kinds, sampler, hook shape
    "snapshot": 3, # writer, wire encoder, triggers, request events
    "net": 4,      # HTTP sniffer, socket table, control endpoint
    "gpu": 4,      # HIP, CUDA and Vulkan hooks
    "hooks": 5,    # libc interposition, init, public API, Darwin
}
# What the shim may include from outside its rooms (with quotes).
OUTSIDE_ALLOWED = {"retain/retain.h", "proto/kinds.h", "proto/health_fields.h"}
INCLUDE = re.compile(r'^\s*#\s*(?:include|import)\s+"([^"]+)"', re.MULTILINE)
SOURCES = ("*.h", "*.cc", "*.mm")


def main(root: pathlib.Path) -> int:
    shim = root / "shim" / "src"
    problems = []
    for path in sorted(p for pattern in SOURCES for p in shim.rglob(pattern)):
        rel = path.relative_to(shim)
        room = rel.parts[0]
        if len(rel.parts) < 2 or room not in RANKS:
            problems.append(f"shim/src/{rel}: not in a room ({', '.join(RANKS)})")
            continue
        for target in INCLUDE.findall(path.read_text(encoding="utf-8")):
            other = target.split("/")[0]
            if other not in RANKS:
                # The public header, and the tables shared with the tools
                # (dependency-free; never the generated protobuf code).
                if target not in OUTSIDE_ALLOWED:
                    problems.append(f"shim/src/{rel}: includes \"{target}\", outside the shim's rooms")
                continue
            if other != room and RANKS[other] >= RANKS[room]:
                problems.append(f"shim/src/{rel}: {room} includes \"{target}\" ({other} is not below {room})")
    for path in sorted(p for pattern in SOURCES for p in (root / "tools").rglob(pattern)):
        for target in INCLUDE.findall(path.read_text(encoding="utf-8")):
            if target.startswith("shim/") or target.split("/")[0] in RANKS:
                problems.append(f"{path.relative_to(root)}: the tools include the shim (\"{target}\")")
    for line in problems:
        print(line)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ".").resolve()))
