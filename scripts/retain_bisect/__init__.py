"""retain_bisect: the library behind scripts/retain-bisect.

Finds the commit (or the build) that started a per-request retention: each
step builds a program, runs it under libretain.so with a snapshot after every
request, sends it a fixed HTTP workload and asks `retain-diff --trend --json`
how many bytes each owner keeps per request, and whether that growth is a
leak (linear) or a bounded cache (plateau).

Modules, one job each:
  errors     the exceptions the main turns into exit codes
  units      sizes ("64KiB", "1MiB/request") in and out
  locate     where libretain.so and retain-diff are
  processes  servers started in their own process group, always stopped
  workload   the built-in HTTP request driver (loopback only)
  trend      retain-diff --trend --json, read into a verdict
  measure    one measurement: run a program, send the workload, judge it
  gitdriver  git bisect start / run (the step) / reset
  report     tables and the JSON result

Python 3.9+ standard library only.
"""
