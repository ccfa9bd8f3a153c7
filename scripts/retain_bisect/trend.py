"""retain-diff --trend --json, read into what a step decides on.

`retain-diff --trend` fits, for every owner (and for the total of tracked
bytes), live bytes against requests served: a slope in bytes per request and
a verdict (docs/retain-diff.md): linear (still growing: memory kept per
request), plateau (grew, then stopped: bounded), warm-up (one step),
flat, noise. retain-bisect calls a step bad only for a `linear` verdict whose
slope reaches the threshold: a cache filling up to its bound is not a leak.
"""

import fnmatch
import json
import re
import statistics
import subprocess

from .errors import ToolError

# Owners are matched across builds and commits by their function: a site's
# display is "function (file:line)", and the line moves from commit to commit.
_LOCATION = re.compile(r"\s+\([^()]*\)$")

# When two sites of one function are summed, the combined verdict is the most
# alarming one.
_VERDICT_RANK = {"linear": 4, "noise": 3, "plateau": 2, "warm-up": 1, "flat": 0}


# Owners kept per run in the results (the ones growing most, linear first).
MAX_OWNERS = 50


def _rank(series):
    return (series["verdict"] != "linear", -abs(series["bytes_per_request"]))


def owner_name(owner):
    """The owner's name without its file:line ("RememberRequest")."""
    return _LOCATION.sub("", owner.get("display") or owner.get("key") or "?")


def owner_matches(owner, pattern):
    """True when the glob matches the owner's site, its name or its category."""
    candidates = [owner.get("key"), owner.get("display"), owner_name(owner), owner.get("category")]
    return any(c and fnmatch.fnmatchcase(c, pattern) for c in candidates)


def run_trend(retain_diff, snapshots, by=None, rules=None):
    """Runs retain-diff --trend --json on the snapshot files; returns the parsed JSON."""
    argv = [retain_diff, "--trend", "--json", "--top", "1000000"]
    if by:
        argv += ["--by", by]
    if rules:
        argv += ["--rules", rules]
    argv += list(snapshots)
    try:
        result = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=600)
    except (OSError, subprocess.TimeoutExpired) as error:
        raise ToolError(f"retain-diff --trend failed: {error}") from None
    if result.returncode != 0:
        message = result.stderr.decode(errors="replace").strip().splitlines()
        raise ToolError(message[-1] if message else f"retain-diff exited {result.returncode}")
    try:
        trend = json.loads(result.stdout)
    except ValueError as error:
        raise ToolError(f"retain-diff --trend --json printed no JSON: {error}") from None
    if trend.get("schema") != "retain-trend/1":
        raise ToolError(f"retain-diff printed schema {trend.get('schema')!r}, not retain-trend/1")
    return trend


def increments(requests, live_bytes):
    """Bytes added per request between consecutive snapshots."""
    steps = []
    for i in range(1, min(len(requests), len(live_bytes))):
        dx = requests[i] - requests[i - 1]
        if dx > 0:
            steps.append((live_bytes[i] - live_bytes[i - 1]) / dx)
    return steps


def _series(series, requests, name, key=None):
    steps = increments(requests, series.get("live_bytes", []))
    return {
        "owner": name,
        "key": key or name,
        "verdict": series.get("verdict", "noise"),
        "bytes_per_request": float(series.get("bytes_per_request", 0.0)),
        "fit": series.get("fit"),
        "level": series.get("level"),
        "increments": steps,
    }


def owners_by_name(trend):
    """Every owner of the trend, sites of one function summed: {name: series dict}."""
    requests = trend.get("requests", [])
    merged = {}
    for row in trend.get("rows", []):
        name = owner_name(row["owner"])
        series = _series(row, requests, name, row["owner"].get("key"))
        if name not in merged:
            merged[name] = series
            continue
        into = merged[name]
        into["bytes_per_request"] += series["bytes_per_request"]
        if _VERDICT_RANK.get(series["verdict"], 0) > _VERDICT_RANK.get(into["verdict"], 0):
            into["verdict"] = series["verdict"]
        into["increments"] = [a + b for a, b in zip(into["increments"], series["increments"])]
    return merged


def measure(trend, owner_glob=None):
    """The measured quantity of one run.

    Without a glob: the total of tracked bytes (all kinds). With a glob: the
    owners it matches; their slopes are summed, the verdict is linear when one
    of them is, else the most alarming of theirs. Returns a dict with owner,
    verdict, bytes_per_request, spread (the standard deviation of the
    per-request increments), the top owner still growing (`grew`) and every
    owner (`owners`, name -> slope and verdict).
    """
    requests = trend.get("requests", [])
    owners = owners_by_name(trend)
    growing = sorted((o for o in owners.values() if o["verdict"] == "linear"),
                     key=lambda o: -o["bytes_per_request"])
    if owner_glob is None:
        chosen = _series(trend.get("tracked", {}), requests, "tracked (host)")
        candidates = growing
    else:
        matched = [row for row in trend.get("rows", []) if owner_matches(row["owner"], owner_glob)]
        if not matched:
            chosen = {"owner": owner_glob, "key": owner_glob, "verdict": "flat",
                      "bytes_per_request": 0.0, "fit": None, "level": 0,
                      "increments": [0.0] * max(0, len(requests) - 1)}
            candidates = []
        else:
            parts = [_series(row, requests, owner_name(row["owner"]), row["owner"].get("key"))
                     for row in matched]
            verdict = max((p["verdict"] for p in parts), key=lambda v: _VERDICT_RANK.get(v, 0))
            chosen = {"owner": parts[0]["owner"] if len(parts) == 1 else owner_glob,
                      "key": owner_glob, "verdict": verdict,
                      "bytes_per_request": sum(p["bytes_per_request"] for p in parts),
                      "fit": parts[0]["fit"] if len(parts) == 1 else None,
                      "level": sum(p["level"] or 0 for p in parts),
                      "increments": [sum(x) for x in zip(*(p["increments"] for p in parts))]}
            names = {owner_name(row["owner"]) for row in matched}
            candidates = [o for o in growing if o["owner"] in names]
    steps = chosen["increments"]
    return {
        "owner": chosen["owner"],
        "verdict": chosen["verdict"],
        "bytes_per_request": chosen["bytes_per_request"],
        "fit": chosen["fit"],
        "spread": statistics.pstdev(steps) if len(steps) > 1 else 0.0,
        "grew": candidates[0]["owner"] if candidates else None,
        "grew_bytes_per_request": candidates[0]["bytes_per_request"] if candidates else None,
        "owners": {o["owner"]: {"bytes_per_request": o["bytes_per_request"],
                                "verdict": o["verdict"]}
                   for o in sorted(owners.values(), key=_rank)[:MAX_OWNERS]},
        "requests": requests,
    }
