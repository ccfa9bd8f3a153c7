"""retain-bisect's command line: options, the three modes, exit codes."""

import argparse
import collections
import json
import os
import shutil
import signal
import sys
import tempfile

from . import gitdriver, locate, measure, processes, report, workload
from .errors import (EXIT_FAILED, EXIT_INTERRUPTED, EXIT_NO_VERDICT, EXIT_OK, EXIT_USAGE,
                     STEP_ABORT, Interrupted, RunError, UsageError)
from .units import parse_rate

USAGE = """\
retain-bisect --repo DIR --good REV --bad REV [--build CMD] --serve CMD [options]
       retain-bisect --builds BIN [BIN...] --serve CMD [options]
       retain-bisect step [--build CMD] --serve CMD [options]   (for `git bisect run`)"""

DESCRIPTION = """\
Finds the commit (or the build) that started a per-request memory retention.

Each step builds the program (--build, run with sh -c in the repository),
starts it (--serve, also run in the repository) under libretain.so with a snapshot after every HTTP
request, waits until it is ready, sends --count requests, stops it by pid and
reads `retain-diff --trend --json`: the bytes kept per request after the
warm-up, and the verdict. A step is bad when the verdict is `linear` (still
growing) and the slope reaches --threshold; a cache that fills up and stops
(`plateau`, `warm-up`) is never bad. A step whose build or server fails is
skipped. A borderline step (within 25 % of the threshold, `noise`, or runs
that disagree) is run again, up to --repeat runs; the median decides.

Bisect mode checks out commits in --repo itself (uncommitted changes to
tracked files are refused): the --good and --bad ends are measured first,
then `git bisect run` runs the step, then `git bisect reset` puts the
repository back. It prints every step tried, the first bad commit, the owner
that grew and its bytes per request before and after.

--builds mode runs the same workload on each binary ({bin} in --serve) and
prints one table of per-request growth by build and by top owner.

In --serve and --ready, {port} is a free port on 127.0.0.1 chosen for each
run and {bin} the binary of --builds; --serve is split into words like a
shell would (quotes), but run without a shell."""

EPILOG = """\
exit status:
  0    found the first bad commit (bisect); measured every build (--builds)
  1    no single answer: the --good end is already bad, the --bad end is not,
       or only skipped commits are left between them
  2    usage error (one line on stderr)
  3    a run failed: a server not ready or crashed, an end that does not
       build, git or retain-diff failed (one line on stderr)
  130  interrupted (SIGINT, SIGTERM, SIGHUP): every server stopped, the
       bisection reset
  step: 0 good, 1 bad, 125 skip (build or server failed), 128 abort

Every server is started in its own process group and stopped by pid (SIGTERM,
then SIGKILL after --stop-timeout), also on Ctrl-C and on a failing step.
libretain.so is found as retain-run finds it ($RETAIN_LIB, <scripts>/../build,
an installed lib/); retain-diff as $RETAIN_DIFF, <scripts>/../build/bin,
an installed bin/, $PATH.

example:
  retain-bisect --repo ~/llama.cpp --good b9722 --bad b10673 \\
    --build 'cmake --build build -t llama-server' \\
    --serve 'build/bin/llama-server -m tiny.gguf --port {port}' \\
    --ready 'http://127.0.0.1:{port}/health' \\
    --requests prompts.txt --count 16 --threshold 1MiB/request --json result.json"""


class _Parser(argparse.ArgumentParser):
    """argparse that reports a usage error as one line (UsageError), not usage + exit."""

    def error(self, message):
        raise UsageError(message)


def _positive_int(name, minimum=1):
    def parse(text):
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} must be a whole number, not '{text}'")
        if value < minimum:
            raise argparse.ArgumentTypeError(f"{name} must be at least {minimum}, not {value}")
        return value
    return parse


def _seconds(name):
    def parse(text):
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} must be a number of seconds, not '{text}'")
        if value <= 0:
            raise argparse.ArgumentTypeError(f"{name} must be more than 0 seconds, not '{text}'")
        return value
    return parse


def build_parser():
    parser = _Parser(prog="retain-bisect", usage=USAGE, description=DESCRIPTION, epilog=EPILOG,
                     formatter_class=argparse.RawDescriptionHelpFormatter)
    mode = parser.add_argument_group("what to compare")
    mode.add_argument("--repo", default=".", metavar="DIR",
                      help="git repository to bisect (default: the working directory)")
    mode.add_argument("--good", metavar="REV", help="a commit without the retention")
    mode.add_argument("--bad", metavar="REV", help="a commit with it")
    mode.add_argument("--build", metavar="CMD",
                      help="shell command that builds the checked-out commit, run in --repo "
                           "(failure: the step is skipped); none: nothing is built")
    mode.add_argument("--build-timeout", type=_seconds("--build-timeout"), metavar="S",
                      help="seconds a build may take (default: no limit)")
    mode.add_argument("--builds", nargs="+", metavar="BIN",
                      help="compare these binaries instead of bisecting (no git)")

    server = parser.add_argument_group("the server")
    server.add_argument("--serve", metavar="CMD",
                        help="command that starts the server, with {port} (and {bin} for --builds)")
    server.add_argument("--port", type=_positive_int("--port"), metavar="N",
                        help="use this port instead of a free one (then {port} is optional)")
    server.add_argument("--ready", metavar="URL",
                        help="ready when GET URL answers 2xx (http://127.0.0.1:{port}/...); "
                             "default: when the port accepts a connection")
    server.add_argument("--ready-timeout", type=_seconds("--ready-timeout"), default=60.0,
                        metavar="S", help="seconds to wait for readiness (default 60)")
    server.add_argument("--stop-timeout", type=_seconds("--stop-timeout"), default=5.0,
                        metavar="S", help="seconds between SIGTERM and SIGKILL (default 5)")
    server.add_argument("--snapshot-timeout", type=_seconds("--snapshot-timeout"), default=30.0,
                        metavar="S",
                        help="seconds to wait for the last request's snapshot (default 30)")

    load = parser.add_argument_group("the workload (HTTP requests to 127.0.0.1 only)")
    load.add_argument("--requests", metavar="FILE",
                      help="request bodies, one per line, used in turn; a line that is not a "
                           "JSON object is sent as {\"prompt\": LINE} (default: "
                           "{\"prompt\": \"request N\"})")
    load.add_argument("--count", type=_positive_int("--count"), default=16, metavar="N",
                      help="requests per run (default 16)")
    load.add_argument("--warmup", type=_positive_int("--warmup", 0), default=2, metavar="N",
                      help="first requests left out of the trend (default 2)")
    load.add_argument("--concurrency", type=_positive_int("--concurrency"), default=1,
                      metavar="N", help="requests in flight at once (default 1: sequential)")
    load.add_argument("--path", default="/completion",
                      help="request path (default /completion); only it opens request tags")
    load.add_argument("--method", default="POST", help="request method (default POST)")
    load.add_argument("--header", action="append", default=[], metavar="'NAME: VALUE'",
                      help="an extra request header (repeatable)")
    load.add_argument("--request-timeout", type=_seconds("--request-timeout"), default=60.0,
                      metavar="S", help="seconds each request may take (default 60)")

    verdict = parser.add_argument_group("the verdict")
    verdict.add_argument("--threshold", default="1MiB/request", metavar="SIZE[/request]",
                         help="bytes kept per request from which a step is bad "
                              "(default 1MiB/request)")
    verdict.add_argument("--owner", metavar="GLOB",
                         help="judge the owners matching GLOB (site, function or category, "
                              "e.g. 'server_prompt_cache::*') instead of all tracked bytes")
    verdict.add_argument("--by", choices=["site", "function", "module", "kind", "category"],
                         help="how retain-diff groups owners (default: site)")
    verdict.add_argument("--rules", metavar="FILE",
                         help="retain-diff category rules (with --by category)")
    verdict.add_argument("--repeat", type=_positive_int("--repeat"), default=3, metavar="N",
                         help="runs of a borderline step, at most (default 3; 1: never repeat)")

    out = parser.add_argument_group("output")
    out.add_argument("--json", metavar="FILE", help="also write the result as JSON ('-': stdout)")
    out.add_argument("--top", type=_positive_int("--top"), default=5, metavar="N",
                     help="owners in the --builds table (default 5)")
    out.add_argument("--keep", action="store_true",
                     help="keep the snapshots and logs (the directory is printed)")
    out.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    out.add_argument("--state", help=argparse.SUPPRESS)  # step: set by the bisect driver
    return parser


class Options(argparse.Namespace):
    """The parsed options, checked, with the derived values the runs need."""

    STATE_FIELDS = ("repo", "build", "build_timeout", "serve", "port", "ready", "ready_timeout",
                    "stop_timeout", "snapshot_timeout", "requests", "count", "warmup",
                    "concurrency", "path", "method", "header", "request_timeout", "threshold_text",
                    "owner", "by", "rules", "repeat", "keep", "quiet")

    def to_state(self):
        return {name: getattr(self, name) for name in self.STATE_FIELDS}


def parse(argv):
    """Parses and checks the command line; returns (mode, Options); raises UsageError."""
    mode = "bisect"
    if argv and argv[0] == "step":
        mode, argv = "step", argv[1:]
    opts = build_parser().parse_args(argv, namespace=Options())
    if mode == "step" and opts.state:
        try:
            with open(opts.state) as text:
                state = json.load(text)
        except (OSError, ValueError) as error:
            raise UsageError(f"--state {opts.state}: {error}")
        for name, value in state["options"].items():
            setattr(opts, name, value)
        opts.threshold = opts.threshold_text
        opts.state_data = state
    else:
        opts.state_data = None
        opts.threshold_text = opts.threshold
    if opts.builds:
        if mode == "step":
            raise UsageError("step and --builds do not go together")
        mode = "builds"
        if opts.good or opts.bad or opts.build:
            raise UsageError("--builds compares binaries: --good, --bad and --build do not apply")
    elif mode == "bisect":
        if not opts.good or not opts.bad:
            raise UsageError("give --good REV and --bad REV (bisect), or --builds BIN... "
                             "(see --help)")
    if not opts.serve:
        raise UsageError("--serve CMD is required (see --help)")
    if opts.port is None and "{port}" not in opts.serve:
        raise UsageError("--serve must contain {port} (the free port chosen for each run), "
                         "or give --port N")
    if mode == "builds" and "{bin}" not in opts.serve:
        raise UsageError("--serve must contain {bin} with --builds")
    if opts.port is not None and opts.port > 65535:
        raise UsageError(f"--port must be 1..65535, not {opts.port}")
    if opts.ready:
        workload.check_loopback_url(opts.ready.replace("{port}", "1"), "--ready")
    if not opts.path.startswith("/"):
        raise UsageError(f"--path must start with '/', not '{opts.path}'")
    opts.method = opts.method.upper()
    if opts.count < opts.warmup + 3:
        raise UsageError(f"--count {opts.count} leaves fewer than 3 requests after --warmup "
                         f"{opts.warmup}: a trend needs 3")
    opts.header_dict = {}
    for header in opts.header:
        name, sep, value = header.partition(":")
        if not sep or not name.strip():
            raise UsageError(f"--header must be 'NAME: VALUE', not '{header}'")
        opts.header_dict[name.strip()] = value.strip()
    opts.threshold = parse_rate(str(opts.threshold), "--threshold")
    if opts.rules and not os.path.isfile(opts.rules):
        raise UsageError(f"--rules {opts.rules} does not exist")
    opts.bodies = workload.load_bodies(opts.requests)
    if mode == "builds":
        for binary in opts.builds:
            if not os.path.isfile(binary) or not os.access(binary, os.X_OK):
                raise UsageError(f"--builds {binary} is not an executable file")
    elif not opts.state_data:
        if not os.path.isdir(opts.repo):
            raise UsageError(f"--repo {opts.repo} is not a directory")
    if not opts.state_data:
        # Absolute: the steps run in the repository's top directory.
        for name in ("repo", "requests", "rules"):
            if getattr(opts, name):
                setattr(opts, name, os.path.abspath(getattr(opts, name)))
    return mode, opts


Tools = collections.namedtuple("Tools", "library retain_diff")


def _log_to_stderr(quiet):
    def log(line):
        if not quiet:
            print(line, file=sys.stderr, flush=True)
    return log


def _builds(opts, tools, work_dir, registry, log):
    builds = []
    labels = _build_labels(opts.builds)
    for index, (binary, label) in enumerate(zip(opts.builds, labels), start=1):
        log(f"build {index}: {binary}")
        summary = measure.measure_step(opts, tools, os.getcwd(), os.path.abspath(binary),
                                       work_dir, f"build{index}", registry, log)
        log(f"  {summary['result']}: {measure.trend_line(summary)} ({summary['owner']})")
        summary.update(label=label, binary=binary)
        builds.append(summary)
    return builds


def _build_labels(binaries):
    """Short, distinct column names: the shortest trailing path parts that differ."""
    parts = [os.path.normpath(b).split(os.sep) for b in binaries]
    for depth in range(1, max(len(p) for p in parts) + 1):
        labels = [os.sep.join(p[-depth:]) for p in parts]
        if len(set(labels)) == len(labels):
            return labels
    return list(binaries)


def main(argv, script):
    """Runs retain-bisect; returns the exit status."""
    try:
        mode, opts = parse(argv)
    except UsageError as error:
        print(f"retain-bisect: {error}", file=sys.stderr)
        # Under `git bisect run`, 2 would read as "bad": a broken step aborts.
        return STEP_ABORT if argv and argv[0] == "step" else EXIT_USAGE
    log = _log_to_stderr(opts.quiet)
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, gitdriver.interrupted_handler)
    try:
        tools = Tools(locate.find_library(), locate.find_retain_diff())
    except RunError as error:
        print(f"retain-bisect: {error}", file=sys.stderr)
        return STEP_ABORT if mode == "step" else EXIT_FAILED

    if mode == "step" and opts.state_data:
        try:
            return gitdriver.step_main(opts, tools, opts.state_data, log)
        except Interrupted:
            return STEP_ABORT
        except Exception as error:  # a bug must not read as "bad" (exit 1) to git
            print(f"retain-bisect step: {type(error).__name__}: {error}", file=sys.stderr)
            return STEP_ABORT

    work_dir = tempfile.mkdtemp(prefix="retain-bisect.")
    registry = os.path.join(work_dir, "servers")
    code = EXIT_FAILED
    try:
        if mode == "step":  # by hand: `git bisect run retain-bisect step ...`
            record, code = gitdriver.run_step(opts, tools, os.getcwd(), work_dir, 1, log,
                                              registry)
            return code
        if mode == "builds":
            builds = _builds(opts, tools, work_dir, registry, log)
            table, ranked = report.builds_table(builds, opts.top)
            print(table)
            if opts.json:
                report.write_json(opts.json, {
                    "schema": report.SCHEMA, "mode": "builds",
                    "threshold": opts.threshold, "owner_glob": opts.owner,
                    "top_owners": ranked, "builds": builds})
            code = EXIT_OK
            return code
        result = gitdriver.bisect(opts, tools, work_dir, registry, log, script)
        print(report.steps_table(result["steps"]))
        summary = report.bisect_summary(dict(result, threshold=opts.threshold))
        if summary:
            print(summary)
        if opts.json:
            report.write_json(opts.json, dict(
                {"schema": report.SCHEMA, "mode": "bisect", "repo": os.path.abspath(opts.repo),
                 "good": opts.good, "bad": opts.bad, "threshold": opts.threshold,
                 "owner_glob": opts.owner}, **result))
        if result.get("problem"):
            print(f"retain-bisect: {result['problem']}", file=sys.stderr)
        code = EXIT_OK if result["first_bad"] else EXIT_NO_VERDICT
        return code
    except RunError as error:
        print(f"retain-bisect: {error}", file=sys.stderr)
        code = STEP_ABORT if mode == "step" else EXIT_FAILED
        return code
    except Interrupted as error:
        print(f"retain-bisect: interrupted ({error}); servers stopped", file=sys.stderr)
        code = STEP_ABORT if mode == "step" else EXIT_INTERRUPTED
        return code
    finally:
        # Ignore further signals while cleaning up: cleanup must finish.
        for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(signum, signal.SIG_IGN)
        left = processes.sweep_registry(registry)
        if left:
            print(f"retain-bisect: killed servers left behind: {left}", file=sys.stderr)
        if opts.keep:
            print(f"retain-bisect: snapshots and logs kept in {work_dir}", file=sys.stderr)
        else:
            shutil.rmtree(work_dir, ignore_errors=True)
