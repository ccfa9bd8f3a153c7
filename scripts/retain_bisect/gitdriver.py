"""git bisect, driven: the ends checked, `git bisect run` of the step, reset.

retain-bisect works in --repo itself (not in a separate worktree), so that an
incremental build directory there is reused from step to step. It refuses a
repository with uncommitted changes to tracked files (untracked files, such
as a build directory, are fine) or with a bisection already in progress, and
leaves the repository checked out as it found it.

Order of work:
  1. the --good and --bad commits are checked out and measured first (a good
     end that is already bad, or a bad end that is not, leaves nothing to
     bisect; a failure there is an error, not a skip);
  2. `git bisect start BAD GOOD`, then `git bisect run retain-bisect step
     --state FILE`: the step builds HEAD and measures it (exit 0 good, 1 bad,
     125 skip when the build or the server fails, 128 aborts);
  3. the result is read from git's output, every step from the records the
     steps appended to a file, and `git bisect reset` ends the bisection.
"""

import json
import os
import re
import signal
import subprocess
import sys
import time

from . import measure
from .errors import (STEP_ABORT, STEP_BAD, STEP_GOOD, STEP_SKIP, BuildError, Interrupted, RunError,
                     ToolError)

_FIRST_BAD = re.compile(r"^([0-9a-f]{40}) is the first bad commit", re.MULTILINE)
_HASH_LINE = re.compile(r"^([0-9a-f]{40})\s*$", re.MULTILINE)


def git(repo, *args, check=True):
    """Runs git in `repo`; returns its stripped stdout; raises RunError on failure."""
    try:
        result = subprocess.run(["git", "-C", repo] + list(args), stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    except OSError as error:
        raise RunError(f"cannot run git: {error.strerror}") from None
    if check and result.returncode != 0:
        message = result.stderr.decode(errors="replace").strip().splitlines()
        raise RunError(f"git {args[0]}: {message[-1] if message else 'failed'}")
    return result.stdout.decode(errors="replace").strip()


def subject(repo, commit):
    return git(repo, "log", "-1", "--format=%s", commit)


def check_repository(repo):
    """The work tree's top directory; raises RunError if it is dirty or mid-bisect."""
    top = git(repo, "rev-parse", "--show-toplevel")
    if git(top, "status", "--porcelain", "--untracked-files=no"):
        raise RunError(f"{top} has uncommitted changes: commit or stash them first "
                       "(retain-bisect checks out other commits)")
    bisect_start = git(top, "rev-parse", "--git-path", "BISECT_START")
    if os.path.exists(os.path.join(top, bisect_start)):
        raise RunError(f"{top} is already bisecting: finish with `git bisect reset` first")
    return top


def resolve(repo, revision, what):
    try:
        return git(repo, "rev-parse", "--verify", "--quiet", revision + "^{commit}")
    except RunError:
        raise RunError(f"{what} {revision} is not a commit in {repo}") from None


def is_ancestor(repo, older, newer):
    return subprocess.run(["git", "-C", repo, "merge-base", "--is-ancestor", older, newer],
                          stdin=subprocess.DEVNULL).returncode == 0


def current_checkout(repo):
    """What to check out again at the end: the branch name, or the commit."""
    branch = git(repo, "symbolic-ref", "-q", "--short", "HEAD", check=False)
    return branch or git(repo, "rev-parse", "HEAD")


def run_step(opts, tools, repo, work_dir, number, log, registry):
    """Builds and measures HEAD of `repo`; returns (record, step exit code)."""
    commit = git(repo, "rev-parse", "HEAD")
    record = {"step": number, "commit": commit, "subject": subject(repo, commit)}
    log(f"step {number}: {commit[:10]} {record['subject']}")
    label = f"step{number}-{commit[:10]}"
    started = time.monotonic()
    try:
        if opts.build:
            measure.run_build(opts.build, repo, os.path.join(work_dir, label + ".build.log"),
                              opts.build_timeout)
        summary = measure.measure_step(opts, tools, repo, None, work_dir, label, registry, log)
    except BuildError as error:
        record.update(result="skip", reason=str(error), error="build")
        code = STEP_SKIP
    except ToolError as error:  # not the commit's fault: stop the bisection
        record.update(result="error", reason=str(error), error="tool")
        code = STEP_ABORT
    except RunError as error:
        record.update(result="skip", reason=str(error), error="server")
        code = STEP_SKIP
    else:
        record.update(summary)
        code = STEP_BAD if summary["result"] == "bad" else STEP_GOOD
    record["seconds"] = round(time.monotonic() - started, 2)
    if code in (STEP_SKIP, STEP_ABORT):
        log(f"  {record['result']}: {record['reason']}")
    else:
        log(f"  {record['result']}: {measure.trend_line(record)} ({record['owner']}, "
            f"{record['runs']} run{'s' if record['runs'] > 1 else ''})")
    return record, code


def step_main(opts, tools, state, log):
    """`retain-bisect step`: one step of `git bisect run`; returns its exit code."""
    repo = os.getcwd()
    work_dir = state["work_dir"]
    records = state["records"]
    number = 1
    if os.path.exists(records):
        with open(records) as lines:
            number = 1 + sum(1 for line in lines if line.strip())
    record, code = run_step(opts, tools, repo, work_dir, number, log, state["registry"])
    with open(records, "a") as out:
        out.write(json.dumps(record) + "\n")
    return code


def _run_git_bisect(repo, argv, out_path, log):
    """Runs `git bisect run` in its own process group; stops it on an interrupt."""
    with open(out_path, "wb") as out:
        process = subprocess.Popen(["git", "-C", repo, "bisect", "run"] + argv,
                                   stdin=subprocess.DEVNULL, stdout=out, start_new_session=True)
        try:
            return process.wait()
        except BaseException:
            # SIGTERM reaches git and the step, whose handler stops its server.
            try:
                os.killpg(process.pid, signal.SIGTERM)
                process.wait(timeout=15)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                try:
                    os.killpg(process.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                process.wait()
            raise


def bisect(opts, tools, work_dir, registry, log, script):
    """The whole bisection; returns the result document (report.py prints it)."""
    repo = check_repository(opts.repo)
    good = resolve(repo, opts.good, "--good")
    bad = resolve(repo, opts.bad, "--bad")
    if good == bad:
        raise RunError("--good and --bad name the same commit")
    original = current_checkout(repo)
    steps = []
    result = {"first_bad": None, "candidates": [], "steps": steps}
    records = os.path.join(work_dir, "steps.jsonl")
    state_path = os.path.join(work_dir, "state.json")
    started = False
    try:
        # 1. The ends.
        for end, commit in (("good", good), ("bad", bad)):
            git(repo, "checkout", "-q", "--detach", commit)
            record, code = run_step(opts, tools, repo, work_dir, end, log, registry)
            record["step"] = end
            steps.append(record)
            if code in (STEP_SKIP, STEP_ABORT):
                raise RunError(f"the --{end} commit {commit[:10]} cannot be measured: "
                               f"{record['reason']}")
            if record["result"] != end:
                result["problem"] = (
                    f"the --{end} commit {commit[:10]} measures {measure.trend_line(record)} "
                    f"against a threshold of {measure.format_rate(opts.threshold)}: "
                    + ("it is already bad" if end == "good" else "it is not bad")
                    + ", nothing to bisect")
                return result
        git(repo, "checkout", "-q", original)

        # 2. git bisect run.
        with open(state_path, "w") as out:
            json.dump({"options": opts.to_state(), "work_dir": work_dir, "records": records,
                       "registry": registry}, out)
        git(repo, "bisect", "start", bad, good)
        started = True
        status = _run_git_bisect(repo, [sys.executable, script, "step", "--state", state_path],
                                 os.path.join(work_dir, "git-bisect-run.log"), log)
        with open(os.path.join(work_dir, "git-bisect-run.log"), "rb") as out:
            output = out.read().decode(errors="replace")
        if os.path.exists(records):
            with open(records) as lines:
                steps += [json.loads(line) for line in lines if line.strip()]

        # 3. The result.
        match = _FIRST_BAD.search(output)
        if match:
            result["first_bad"] = _first_bad(repo, match.group(1), steps, opts)
        elif "could be any of" in output:
            tail = output[output.index("could be any of"):]
            result["candidates"] = [{"commit": c, "subject": subject(repo, c)}
                                    for c in _HASH_LINE.findall(tail)]
        else:
            failed = [s for s in steps if s["result"] == "error"]
            if failed:
                raise RunError(f"step {failed[-1]['step']} ({failed[-1]['commit'][:10]}) failed: "
                               f"{failed[-1]['reason']}")
            lines = [line for line in output.splitlines() if line.strip()]
            raise RunError(f"git bisect run ended without a result (exit status {status})"
                           f"{': ' + lines[-1] if lines else ''}")
        return result
    finally:
        if started:
            git(repo, "bisect", "reset", check=False)
        else:
            git(repo, "checkout", "-q", original, check=False)


def _first_bad(repo, commit, steps, opts):
    """The first bad commit, its growing owner and that owner before (nearest good step)."""
    measured = [s for s in steps if s["commit"] == commit and s["result"] == "bad"]
    step = measured[-1] if measured else {"commit": commit, "result": "bad"}
    owner = step.get("grew") or (step.get("owner") if opts.owner else None)
    after = step.get("owners", {}).get(owner, {}) if owner else {}
    # The good step nearest to the first bad commit: its ancestor with the most history.
    before = None
    best = -1
    for good in (s for s in steps if s["result"] == "good"):
        if not is_ancestor(repo, good["commit"], commit):
            continue
        depth = int(git(repo, "rev-list", "--count", good["commit"]))
        if depth > best:
            best = depth
            owned = good.get("owners", {}).get(owner) if owner else None
            before = {"commit": good["commit"],
                      "bytes_per_request": owned["bytes_per_request"] if owned else None,
                      "verdict": owned["verdict"] if owned else None}
    return {
        "commit": commit,
        "subject": subject(repo, commit),
        "owner": owner,
        "bytes_per_request_after": after.get("bytes_per_request",
                                             step.get("grew_bytes_per_request")),
        "verdict_after": after.get("verdict"),
        "before": before,
        "step": step,
    }


def interrupted_handler(signum, frame):
    raise Interrupted(signal.Signals(signum).name)
