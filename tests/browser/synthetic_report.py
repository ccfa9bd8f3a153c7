"""synthetic_report: large documents of retain-diff's JSON schemas, and report.html around them.

report_browser_test.py's LargeReportTest opens them to time the page: a trend of 1,000
snapshots with 300 host owners and a GPU with two (retain-trend/1), and a live view whose
icicle has 5,000 nodes with 400 owners and a GPU's (retain-diff/1), the sizes the page must
stay responsive at. The figures are made up (no run makes 300 owners cheaply); the shapes are
the schema's (docs/retain-diff.md), and embed() assembles the page as retain-diff does: each
marker of report.html replaced by report.css, report.js and the JSON with every '<' written
\\u003c.
"""

import json
import os


def synthetic_trend(snapshots=1000, owners=300):
    xs = list(range(1, snapshots + 1))

    def series(values, verdict="linear"):
        return {"verdict": verdict, "bytes_per_request": 4096.0, "fit": 0.99, "level": float(values[-1]),
                "flat_from_request": 0, "band_low": 0, "band_high": 0, "request_counts": snapshots,
                "bytes_per_request_error": 1.0, "growth": float(values[-1] - values[0]), "live_bytes": values,
                "allocated_bytes": values, "estimated": False, "live_bytes_error": []}
    rows = []
    for k in range(owners):
        slope = (owners - k) * 64
        values = [slope * x + (k * 7919) % 4096 for x in xs]
        row = series(values, ["linear", "plateau", "flat", "noise", "warm-up"][k % 5])
        name = "ns::Owner%03d::Alloc (file%d.cc:%d)" % (k, k % 9, 10 + k)
        row["owner"] = {"key": name, "display": name, "domain": "host", "category": None, "bounded": False,
                        "chain": ["main (main.cc:1)"], "frames": ["operator new", name, "main (main.cc:1)"]}
        rows.append(row)
    # Two owners of GPU memory, drawn in the device's own panel.
    for k in range(2):
        values = [(k + 1) * (1 << 20) * min(x, 100) for x in xs]
        row = series(values, "plateau")
        name = "ggml_backend_cuda_buffer_alloc%d (ggml-cuda.cu:%d)" % (k, 100 + k)
        row["owner"] = {"key": name + " @device:cuda:0", "display": name, "domain": "device:cuda:0",
                        "category": None, "bounded": False, "chain": [], "frames": [name]}
        rows.append(row)
    device_total = [sum(r["live_bytes"][i] for r in rows[owners:]) for i in range(snapshots)]
    rows_host = rows[:owners]
    total = [sum(r["live_bytes"][i] for r in rows_host) for i in range(snapshots)]
    ref = {"pid": 1, "exe": "/bin/synthetic", "sequence": 1, "label": "", "trigger": "every-n-requests",
           "time_unix_ns": 1700000000000000000, "sample_interval_bytes": 0, "degraded": False,
           "dropped_records": 0, "dropped_bytes": 0}
    tags = [{"tag_id": x, "request_id": "r-%d" % x, "method": "POST", "path": "/completion", "end_ordinal": x,
             "aborted": False, "allocated_bytes": 1 << 20, "live_bytes": 4096, "snapshot": x - 1} for x in xs]
    return {"schema": "retain-trend/1", "group_by": "site", "measure": "resident", "measure_requested": "resident",
            "residency_measured": True, "measure_fallback": None,
            "snapshots": [dict(ref, sequence=x) for x in xs], "requests": xs, "requests_from_tags": True,
            "degraded": False, "estimated": False, "min_request_counts": 4,
            "trims": {"count": 0, "returned_bytes": 0, "after_trim": []},
            "rss": series([t + (64 << 20) for t in total]), "anon_swap": series([t + (32 << 20) for t in total]),
            "tracked": series(total), "allocator_free": series([1 << 20] * snapshots, "flat"),
            "devices": [{"domain": "device:cuda:0", "name": "NVIDIA H200", "uuid": "GPU-00000000-0000-0000-0000-000000000000",
                         "series": series(device_total, "plateau")}],
            "owner_count": len(rows), "rows": rows, "request_tags": tags, "request_tags_truncated": False,
            "warnings": []}


def synthetic_diff(node_limit=5000):
    nodes = [{"id": 0, "parent": -1, "name": "all"}, {"id": 1, "parent": 0, "name": "host"}]
    frontier = [1]
    while len(nodes) < node_limit:
        parent = frontier.pop(0)
        for k in range(4):
            if len(nodes) >= node_limit:
                break
            nodes.append({"id": len(nodes), "parent": parent, "name": "fn_%d_%d (x.cc:%d)" % (parent, k, k)})
            frontier.append(len(nodes) - 1)
    children = {}
    for n in nodes[1:]:
        children.setdefault(n["parent"], []).append(n["id"])
    for n in reversed(nodes):  # leaves hold bytes; parents sum them
        kids = children.get(n["id"], [])
        b = sum(nodes[c]["bytes"] for c in kids) if kids else 4096 * (1 + n["id"] % 13)
        n.update({"bytes": b, "allocated_bytes": 2 * b, "resident_bytes": b, "swapped_bytes": 0, "count": 1})
    total = nodes[0]["bytes"]
    level = {"anon_swap": total + 300, "tracked_anon": total, "allocator_free_held": 100, "untracked": 200,
             "shim_own": 0, "allocator_free_trimmed": 0}
    ref = {"pid": 1, "exe": "/bin/synthetic", "sequence": 2, "label": "", "trigger": "signal",
           "time_unix_ns": 1700000000000000000, "sample_interval_bytes": 0, "degraded": False,
           "dropped_records": 0, "dropped_bytes": 0}
    zero = {"retained_bytes": 0, "retained_count": 0, "released_bytes": 0, "released_count": 0,
            "retained_allocated_bytes": 0, "retained_resident_bytes": 0, "retained_swapped_bytes": 0,
            "released_allocated_bytes": 0, "released_resident_bytes": 0, "released_swapped_bytes": 0}
    rows = []
    for n in nodes[2:402]:
        rows.append(dict(zero, owner={"key": n["name"], "display": n["name"], "domain": "host", "category": None,
                                      "bounded": False, "chain": [], "frames": [n["name"]]},
                         retained_bytes=n["bytes"], retained_count=1, net_bytes=n["bytes"],
                         retained_allocated_bytes=2 * n["bytes"], retained_resident_bytes=n["bytes"]))
    gpu = "cudaMalloc (libcudart.so.12+0x1234)"
    rows.append(dict(zero, owner={"key": gpu + " @device:cuda:0", "display": gpu, "domain": "device:cuda:0",
                                  "category": None, "bounded": False, "chain": [], "frames": [gpu]},
                     retained_bytes=1 << 30, retained_count=1, net_bytes=1 << 30,
                     retained_allocated_bytes=1 << 30, retained_resident_bytes=1 << 30))
    devices = [{"domain": "device:cuda:0", "name": "NVIDIA H200", "uuid": None, "retained_bytes": 1 << 30,
                "retained_count": 1, "released_bytes": 0, "released_count": 0}]
    return {"schema": "retain-diff/1", "mode": "live", "mode_reason": "one snapshot", "group_by": "stack",
            "before": None, "after": ref, "seconds_between": 0, "requests_between": None, "estimated": False,
            "degraded": False, "measure": "resident", "measure_requested": "resident", "residency_measured": True,
            "measure_fallback": None,
            "rss": {"vm_rss_growth": total, "anon_swap_growth": total + 300, "tracked": [], "tracked_anon_growth": total,
                    "allocator_retained_growth": 100, "shim_own_growth": 0, "untracked_growth": 200,
                    "explained_share": 0.99, "after_level": level, "before_level": None, "adds_up": True},
            "total": dict(zero, retained_bytes=total, retained_count=len(nodes)), "devices": devices,
            "categories": None,
            "owner_count": len(rows), "rows": rows, "warnings": [],
            "stacks": {"measure": "resident", "node_limit": node_limit, "pruned_bytes": 0, "nodes": nodes}}


def embed(document, path, source=None):
    """report.html with its assets and `document`, as retain-diff embeds them (docs/retain-diff.md)."""
    source = source or os.environ.get("RETAIN_SOURCE_DIR") or os.path.join(os.path.dirname(__file__), "..", "..")
    report = os.path.join(source, "tools", "report")
    with open(os.path.join(report, "report.html")) as f:
        page = f.read()
    with open(os.path.join(report, "report.css")) as f:
        page = page.replace("<!--RETAIN_STYLE-->", "<style>" + f.read() + "</style>", 1)
    with open(os.path.join(report, "report.js")) as f:
        page = page.replace("<!--RETAIN_SCRIPT-->", "<script>" + f.read() + "</script>", 1)
    data = json.dumps(document).replace("<", "\\u003c")
    page = page.replace("<!--RETAIN_DATA-->", '<script type="application/json" id="retain-data">' + data +
                        "</script>", 1)
    with open(path, "w") as f:
        f.write(page)
