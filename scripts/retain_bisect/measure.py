"""One measurement: build, run the server under the shim, send the workload, judge.

A run starts the --serve command (split like a shell would, run without one,
in its own process group) with libretain.so preloaded, a snapshot after
every request (RETAIN_SNAPSHOT_EVERY=1) and HTTP request tags limited to the
workload's path (RETAIN_HTTP_PATHS), so that readiness probes are not counted.
It waits until the server is ready, sends the workload, waits for the last
request's snapshot, stops the server by pid and hands the snapshots after the
warm-up to `retain-diff --trend --json`.

A step is one or more runs of the same program: a borderline run (a slope
within 25 % of the threshold, a `noise` verdict, or runs that disagree) is run
again, up to --repeat runs, and the step is decided by the median slope and
the most common verdict.
"""

import collections
import os
import re
import shlex
import shutil
import statistics
import subprocess
import time

from . import processes, trend, workload
from .errors import BuildError, RunError
from .units import format_rate, format_size

_SNAPSHOT_NAME = re.compile(r"^(?P<exe>.+)\.(?P<pid>[0-9]+)\.(?P<seq>[0-9]+)\.pb$")
BORDERLINE = 0.25  # relative distance to the threshold below which a step is run again


def run_build(command, cwd, log_path, timeout=None):
    """Runs the --build command with sh -c in `cwd`; raises BuildError when it fails."""
    with open(log_path, "wb") as log:
        try:
            result = subprocess.run(["sh", "-c", command], cwd=cwd, stdin=subprocess.DEVNULL,
                                    stdout=log, stderr=subprocess.STDOUT, timeout=timeout,
                                    start_new_session=True)
        except subprocess.TimeoutExpired:
            raise BuildError(f"the build did not finish within {timeout:g} s") from None
    if result.returncode != 0:
        raise BuildError(f"the build failed ({processes.describe_exit(result.returncode)})"
                         f"{_first_error(log_path)}")


def _first_error(log_path):
    """': <the build's first error line>' (else its last line), shortened; '' if none."""
    with open(log_path, "rb") as log:
        lines = [line.strip() for line in log.read().decode(errors="replace").splitlines()
                 if line.strip()]
    errors = [line for line in lines if re.search(r"\berror\b", line, re.IGNORECASE)]
    line = errors[0] if errors else (lines[-1] if lines else "")
    return f": {line[:160]}" if line else ""


def serve_argv(template, port, binary):
    """The --serve command with {port} and {bin} filled in, split like a shell."""
    text = template.replace("{port}", str(port))
    if binary is not None:
        text = text.replace("{bin}", shlex.quote(binary))
    try:
        argv = shlex.split(text)
    except ValueError as error:
        raise RunError(f"--serve cannot be split into words: {error}") from None
    if not argv:
        raise RunError("--serve is empty")
    return argv


def server_env(opts, library, snapshot_dir):
    env = dict(os.environ)
    preload = env.get("LD_PRELOAD", "")
    if library not in preload.split(":"):
        env["LD_PRELOAD"] = library + (":" + preload if preload else "")
    env["RETAIN_DIR"] = snapshot_dir
    env["RETAIN_SNAPSHOT_EVERY"] = "1"
    env["RETAIN_HTTP"] = "on"
    env["RETAIN_SIGNAL"] = "none"  # SIGUSR2 stays the server's; snapshots come per request
    env["RETAIN_HTTP_PATHS"] = opts.path.split("?", 1)[0]
    return env


def snapshots_of(directory):
    """{pid: [path, ...] in sequence order} of the complete snapshots in `directory`."""
    found = collections.defaultdict(list)
    try:
        names = os.listdir(directory)
    except OSError:
        return {}
    for name in names:
        match = _SNAPSHOT_NAME.match(name)
        if match:
            found[int(match["pid"])].append((int(match["seq"]), os.path.join(directory, name)))
    return {pid: [path for _, path in sorted(files)] for pid, files in found.items()}


def _server_files(directory, pid):
    """The server's snapshots: its own pid's, else (a wrapper that forked) the most numerous."""
    found = snapshots_of(directory)
    if pid in found:
        return found[pid]
    return max(found.values(), key=len) if found else []


def _wait_ready(server, opts, port):
    deadline = time.monotonic() + opts.ready_timeout
    url = opts.ready.replace("{port}", str(port)) if opts.ready else None
    while True:
        status = server.poll()
        if status is not None:
            tail = server.log_tail()
            raise RunError(f"the server exited ({processes.describe_exit(status)}) before it was "
                           f"ready{': ' + tail if tail else ''}")
        ready = workload.http_ready(url, 2.0) if url else workload.port_ready(port, 2.0)
        if ready:
            return
        if time.monotonic() > deadline:
            what = url if url else f"127.0.0.1:{port} to accept connections"
            raise RunError(f"the server was not ready within {opts.ready_timeout:g} s "
                           f"(waited for {what})")
        time.sleep(0.1)


def run_once(opts, tools, cwd, binary, work_dir, label, registry=None, log=None):
    """Runs the server once under the shim and measures it; returns a run dict.

    Raises RunError when the server fails to start, to become ready or to
    answer, and when there are too few snapshots. The server is stopped in
    every case, and the snapshot directory is left for the caller to remove.
    """
    snapshot_dir = os.path.join(work_dir, label)
    os.makedirs(snapshot_dir, exist_ok=True)
    port = opts.port or processes.free_loopback_port()
    argv = serve_argv(opts.serve, port, binary)
    server = processes.Server(argv, server_env(opts, tools.library, snapshot_dir), cwd,
                              os.path.join(work_dir, label + ".server.log"), registry)
    if log:
        log(f"  server pid {server.pid} on 127.0.0.1:{port}: {' '.join(argv)}")
    started = time.monotonic()
    try:
        _wait_ready(server, opts, port)
        try:
            workload.send(port, opts.count, path=opts.path, method=opts.method,
                          bodies=opts.bodies, concurrency=opts.concurrency,
                          timeout=opts.request_timeout, headers=opts.header_dict,
                          should_stop=lambda: server.poll() is not None)
        except workload.WorkloadFailed as error:
            # A connection reset is often the first sign of a crash: give the
            # server a moment to be seen dead.
            for _ in range(25):
                if server.poll() is not None:
                    break
                time.sleep(0.02)
            status = server.poll()
            if status is not None:
                tail = server.log_tail()
                raise RunError(f"the server exited ({processes.describe_exit(status)}) during "
                               f"request {error.number} of {opts.count}"
                               f"{': ' + tail if tail else ''}") from None
            raise RunError(f"{error} (the server is still running)") from None
        # The snapshot of request N is written after its response: wait for it.
        deadline = time.monotonic() + opts.snapshot_timeout
        files = _server_files(snapshot_dir, server.pid)
        while len(files) < opts.count and time.monotonic() < deadline:
            if server.poll() is not None:
                break
            time.sleep(0.05)
            files = _server_files(snapshot_dir, server.pid)
    finally:
        server.stop(opts.stop_timeout)
    seconds = time.monotonic() - started
    files = files[:opts.count]  # never the exit snapshot
    if len(files) < opts.count:
        if not files:
            raise RunError("the server wrote no snapshot: is it an HTTP/1.x server that "
                           f"accept()s its connections, serving {opts.path}?")
        if len(files) - opts.warmup < 3:
            raise RunError(f"the server wrote {len(files)} snapshots for {opts.count} requests: "
                           "too few for a trend")
    warnings = []
    if len(files) < opts.count:
        warnings.append(f"{len(files)} snapshots for {opts.count} requests (some requests "
                        "were not seen as HTTP/1.x, or their snapshot came late)")
    measured = files[opts.warmup:]
    data = trend.run_trend(tools.retain_diff, measured, by=opts.by, rules=opts.rules)
    result = trend.measure(data, opts.owner)
    result.update({"server_pid": server.pid, "server_status": server.status,
                   "snapshots": len(measured), "seconds": round(seconds, 3),
                   "snapshot_dir": snapshot_dir, "warnings": warnings})
    return result


def summarize(runs, threshold):
    """Decides a step from its runs: median slope, most common verdict."""
    slopes = [r["bytes_per_request"] for r in runs]
    slope = statistics.median(slopes)
    counts = collections.Counter(r["verdict"] for r in runs)
    top = max(counts.values())
    tied = [v for v, n in counts.items() if n == top]
    if len(tied) == 1:
        verdict = tied[0]
    else:  # the verdict of the run whose slope is nearest the median
        verdict = min(runs, key=lambda r: abs(r["bytes_per_request"] - slope))["verdict"]
    # One run: the spread of its per-request increments; several: of their slopes.
    spread = statistics.pstdev(slopes) if len(runs) > 1 else runs[0]["spread"]
    middle = min(runs, key=lambda r: abs(r["bytes_per_request"] - slope))
    bad = verdict == "linear" and slope >= threshold
    return {
        "result": "bad" if bad else "good",
        "verdict": verdict,
        "bytes_per_request": slope,
        "spread": spread,
        "slopes": slopes,
        "owner": middle["owner"],
        "grew": middle["grew"],
        "grew_bytes_per_request": middle["grew_bytes_per_request"],
        "owners": middle["owners"],
        "runs": len(runs),
        "server_pids": [r["server_pid"] for r in runs],
        "warnings": sorted({w for r in runs for w in r.get("warnings", [])}),
    }


def borderline(runs, threshold):
    """True when one more run could change the decision."""
    summary = summarize(runs, threshold)
    if summary["verdict"] == "noise":
        return True
    if len({r["verdict"] == "linear" and r["bytes_per_request"] >= threshold for r in runs}) > 1:
        return True
    return abs(summary["bytes_per_request"] - threshold) < BORDERLINE * threshold


def measure_step(opts, tools, cwd, binary, work_dir, label, registry=None, log=None):
    """Runs a step (repeated while borderline, up to opts.repeat runs); returns its summary."""
    runs = []
    while True:
        run_label = f"{label}-run{len(runs) + 1}"
        runs.append(run_once(opts, tools, cwd, binary, work_dir, run_label, registry, log))
        if not opts.keep:
            shutil.rmtree(runs[-1]["snapshot_dir"], ignore_errors=True)
        if len(runs) >= opts.repeat or not borderline(runs, opts.threshold):
            break
        if log:
            log(f"  borderline ({trend_line(summarize(runs, opts.threshold))}): running again")
    return summarize(runs, opts.threshold)


def trend_line(summary):
    """'64.0 KiB/req ± 0 B linear'."""
    return (f"{format_rate(summary['bytes_per_request'])} ± {format_size(summary['spread'])} "
            f"{summary['verdict']}")
