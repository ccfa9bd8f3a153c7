#!/usr/bin/env python3
"""Instructions executed at each instruction of one function, from callgrind.

    callgrind_instructions.py OUT OBJECT FUNCTION_REGEX [PER=1]

OUT is a callgrind output file written with
    --dump-instr=yes --compress-pos=no --compress-strings=no
OBJECT the shared object or executable as callgrind names it (e.g.
build/libretain.so), FUNCTION_REGEX a Python regular expression matched
against callgrind's (demangled) function names, PER a divisor (e.g. the
number of captures) so the counts read per call. Prints the function's self
cost, then its disassembly (objdump -d) with each instruction's count.

callgrind_annotate gives counts per source line; under LTO and inlining a
line's count mixes several places of the machine code. This shows which
instructions a loop really runs, and how often (bench/README.md, "Seeing the
profile yourself").
"""
import collections
import re
import signal
import subprocess
import sys


def self_costs(path, object_name, function_pattern):
    """Self Ir per instruction address of the matching functions."""
    costs = collections.Counter()
    current_object = current_function = None
    after_call = False  # the next cost line is a call's inclusive cost
    for line in open(path, encoding="utf-8", errors="replace"):
        if line.startswith("ob="):
            current_object = line[3:].strip()
        elif line.startswith("fn="):
            current_function = line[3:].strip()
        elif line.startswith("calls="):
            after_call = True
        elif line[:2] == "0x":
            fields = line.split()
            if after_call:
                after_call = False
                continue
            if (current_object and object_name in current_object and current_function
                    and function_pattern.search(current_function) and len(fields) >= 3):
                costs[int(fields[0], 16)] += int(fields[2])
    return costs


def main():
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # | head: stop quietly
    if len(sys.argv) not in (4, 5):
        sys.exit(__doc__)
    path, object_name = sys.argv[1], sys.argv[2]
    pattern = re.compile(sys.argv[3])
    per = float(sys.argv[4]) if len(sys.argv) == 5 else 1.0
    costs = self_costs(path, object_name, pattern)
    if not costs:
        sys.exit(f"no cost for /{sys.argv[3]}/ in {object_name} (was callgrind run with "
                 "--dump-instr=yes --compress-pos=no --compress-strings=no?)")
    total = sum(costs.values())
    print(f"self: {total} instructions, {total / per:.1f} per {per:g}")
    listing = subprocess.run(
        ["objdump", "-d", "--no-show-raw-insn", "-C", f"--start-address={min(costs)}",
         f"--stop-address={max(costs) + 16}", object_name],
        capture_output=True, text=True, check=True).stdout
    for line in listing.splitlines():
        match = re.match(r"^\s*([0-9a-f]+):\s*(.*)$", line)
        if match:
            address = int(match.group(1), 16)
            print(f"{costs.get(address, 0) / per:9.2f}  {address:x}: {match.group(2)}")


if __name__ == "__main__":
    main()
