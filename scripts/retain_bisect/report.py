"""What retain-bisect prints and writes: the step table, the result, JSON."""

import json
import os
import tempfile

from .units import format_rate, format_size

SCHEMA = "retain-bisect/1"


def _table(header, rows):
    """Left-aligned columns, two spaces apart; the last column is not padded."""
    widths = [max(len(str(row[i])) for row in [header] + rows) for i in range(len(header))]
    lines = []
    for row in [header] + rows:
        cells = [str(cell).ljust(widths[i]) if i + 1 < len(row) else str(cell)
                 for i, cell in enumerate(row)]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)


def _rate_with_spread(step):
    if step.get("bytes_per_request") is None:
        return "-"
    return f"{format_rate(step['bytes_per_request'])} ± {format_size(step.get('spread') or 0)}"


def _measured_label(owner):
    """What a step measured: all tracked bytes, or the owners --owner matched."""
    if owner is None or owner == "tracked (host)":
        return "total (tracked)"
    return owner


def steps_table(steps):
    """Every step tried, in the order tried: the ends first."""
    rows = []
    for step in steps:
        if step["result"] in ("skip", "error"):
            detail = step.get("reason", "")
        else:
            detail = step.get("grew") or "-"
        rows.append([step.get("step", "?"), step["commit"][:10], step["result"],
                     _rate_with_spread(step), step.get("verdict") or "-",
                     str(step.get("runs") or "-"), detail, step.get("subject", "")])
    header = ["step", "commit", "result", "measured (per request)", "verdict", "runs",
              "growing owner / reason", "subject"]
    return _table(header, rows)


def bisect_summary(result):
    """The lines after the table: the first bad commit and the owner that grew."""
    lines = []
    first = result.get("first_bad")
    if first:
        lines.append(f"first bad commit: {first['commit']} {first['subject']}")
        if first.get("owner"):
            before = first.get("before")
            before_text = ("absent" if before is None or before.get("bytes_per_request") is None
                           else f"{format_rate(before['bytes_per_request'])} "
                                f"{before.get('verdict', '')}".strip())
            where = f" at {before['commit'][:10]}" if before and before.get("commit") else ""
            lines.append(f"owner that grew: {first['owner']}: {before_text}{where} -> "
                         f"{format_rate(first['bytes_per_request_after'])} "
                         f"{first.get('verdict_after', '')} at {first['commit'][:10]}")
        if first["step"].get("bytes_per_request") is None:
            return "\n".join(lines)
        lines.append(f"measured: {_measured_label(first['step'].get('owner'))} "
                     f"{_rate_with_spread(first['step'])} {first['step'].get('verdict')} "
                     f"(threshold {format_rate(result['threshold'])})")
    elif result.get("candidates"):
        lines.append("no single first bad commit: only skipped commits are left; it is one of:")
        lines += [f"  {c['commit']} {c['subject']}" for c in result["candidates"]]
    return "\n".join(lines)


def builds_table(builds, top=5):
    """Per-request growth by build (columns) and by top owner (rows)."""
    # Owners ranked by their largest slope in any build, linear ones first.
    best = {}
    for build in builds:
        for name, owner in build.get("owners", {}).items():
            if owner["verdict"] == "flat" and abs(owner["bytes_per_request"]) < 1:
                continue  # unchanged: not worth a row
            score = (owner["verdict"] == "linear", owner["bytes_per_request"])
            best[name] = max(best.get(name, score), score)
    ranked = sorted(best, key=lambda name: best[name], reverse=True)[:top]
    header = ["owner"] + [build["label"] for build in builds]
    rows = [[_measured_label(builds[0].get("owner"))] +
            [f"{_rate_with_spread(b)} {b.get('verdict', '')}".strip() for b in builds]]
    for name in ranked:
        row = [_shorten(name)]
        for build in builds:
            owner = build.get("owners", {}).get(name)
            row.append("absent" if owner is None else
                       f"{format_rate(owner['bytes_per_request'])} {owner['verdict']}")
        rows.append(row)
    rows.append(["result"] + [b["result"] for b in builds])
    return _table(header, rows), ranked


def _shorten(name, width=60):
    """A long (C++ template) owner name cut in the middle; JSON keeps it whole."""
    if len(name) <= width:
        return name
    keep = (width - 3) // 2
    return name[:keep] + "..." + name[-(width - 3 - keep):]


def write_json(path, document):
    """Writes the JSON result atomically (a temp file renamed), or to stdout for '-'."""
    text = json.dumps(document, indent=2, sort_keys=False) + "\n"
    if path == "-":
        print(text, end="")
        return
    directory = os.path.dirname(os.path.abspath(path))
    fd, temp = tempfile.mkstemp(prefix=".retain-bisect.", dir=directory)
    with os.fdopen(fd, "w") as out:
        out.write(text)
    os.replace(temp, path)
