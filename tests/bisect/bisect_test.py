#!/usr/bin/env python3
"""Tests of scripts/retain-bisect on a real server under the real libretain.so.

The server is tests/bisect/tiny_server.c. The bisection tests build a git
repository of it in a temporary directory, 12 commits (fixed dates and author,
so the same hashes and the same bisection path every time):

  commit 4   does not compile (fixed by commit 5): the step is skipped
  commit 7   keeps a 64 KiB context per request: the leak to find
  commit 9   adds a cache of 3 slots of 48 KiB: grows for 3 requests, then
             flat; a bounded cache must never be flagged

Each commit is built by the test's --build command (`cc ... -o server
server.c`, well under a second). Failure paths (a server never ready, one that
crashes, a bad threshold, a dirty repository, an interrupt) must end with one
line on stderr, a non-zero status and no server left running (checked by the
pid the server writes to a file, or the pids retain-bisect reports).

Environment: RETAIN_LIB (libretain.so) and RETAIN_DIFF (retain-diff), set by
CTest (tests/bisect/CMakeLists.txt); RETAIN_SOURCE_DIR, the repository root
(default: two levels up from here). Run one test: python3 bisect_test.py
BisectTest.test_builds_table.
"""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.realpath(__file__))
SOURCE_DIR = os.environ.get("RETAIN_SOURCE_DIR", os.path.dirname(os.path.dirname(HERE)))
SCRIPT = os.path.join(SOURCE_DIR, "scripts", "retain-bisect")
SERVER_SOURCE = os.path.join(HERE, "tiny_server.c")
CC = os.environ.get("CC", "cc")
BUILD = f"{CC} -O1 -g -o server server.c"
LEAK_BYTES = 64 * 1024

# (subject, regions kept, broken) of commits 1..12.
HISTORY = [
    ("tiny server: answer every request with 200", (), False),
    ("print the version when listening", (), False),
    ("read Content-Length case-insensitively", (), False),
    ("parser: start a refactoring", (), True),
    ("parser: finish the refactoring (builds again)", (), False),
    ("docs: describe --crash-after", (), False),
    ("keep a context per request", ("leak",), False),
    ("tidy the response writer", ("leak",), False),
    ("cache the last 3 bodies", ("leak", "cache"), False),
    ("docs: the cache", ("leak", "cache"), False),
    ("bump the version", ("leak", "cache"), False),
    ("bump the version again", ("leak", "cache"), False),
]


def source_at(number, regions, broken):
    """tiny_server.c as it is at commit `number`: regions kept or dropped."""
    out = []
    dropping = None
    with open(SERVER_SOURCE) as source:
        for line in source:
            marker = re.match(r"^\s*// @(begin|end) (\w+)$", line.rstrip("\n"))
            if marker and marker.group(1) == "begin" and marker.group(2) not in regions:
                dropping = marker.group(2)
            if dropping is None:
                if line.startswith('#define TINY_VERSION "0"'):
                    line = f'#define TINY_VERSION "{number}"\n'
                out.append(line)
            if marker and marker.group(1) == "end" and marker.group(2) == dropping:
                dropping = None
            if broken and line.startswith("#define NOINLINE"):
                out.append("static int refactored_parser = ;\n")
    return "".join(out)


def make_repository(directory):
    """Creates the 12-commit repository; returns the commit hashes (index 1..12)."""
    env = dict(os.environ, GIT_AUTHOR_NAME="retain", GIT_AUTHOR_EMAIL="retain@example.invalid",
               GIT_COMMITTER_NAME="retain", GIT_COMMITTER_EMAIL="retain@example.invalid",
               GIT_CONFIG_NOSYSTEM="1", HOME=directory)

    def git(*args, **extra):
        return subprocess.run(["git", "-C", os.path.join(directory, "repo")] + list(args),
                              env=dict(env, **extra), check=True, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE).stdout.decode().strip()

    repo = os.path.join(directory, "repo")
    os.makedirs(repo)
    git("init", "-q", "-b", "main")
    with open(os.path.join(repo, ".gitignore"), "w") as ignore:
        ignore.write("server\n")
    hashes = [None]
    for number, (subject, regions, broken) in enumerate(HISTORY, start=1):
        with open(os.path.join(repo, "server.c"), "w") as out:
            out.write(source_at(number, regions, broken))
        git("add", "server.c", ".gitignore")
        date = f"2025-01-{number:02d}T12:00:00Z"
        git("commit", "-q", "-m", f"{subject} (commit {number})", GIT_AUTHOR_DATE=date,
            GIT_COMMITTER_DATE=date)
        hashes.append(git("rev-parse", "HEAD"))
    return repo, hashes


def compile_at(directory, number, name):
    """Builds commit `number`'s server into directory/name; returns its path."""
    subject, regions, broken = HISTORY[number - 1]
    source = os.path.join(directory, name + ".c")
    with open(source, "w") as out:
        out.write(source_at(number, regions, broken))
    binary = os.path.join(directory, name)
    subprocess.run([CC, "-O1", "-g", "-o", binary, source], check=True)
    return binary


def alive(pid):
    """True while the pid exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def read_pid(path):
    with open(path) as text:
        return int(text.read().strip())


class BisectTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="retain-bisect-test.")
        self.started = time.monotonic()

    def tearDown(self):
        shutil.rmtree(self.dir, ignore_errors=True)
        print(f"{self.id()}: {time.monotonic() - self.started:.1f} s", file=sys.stderr)

    def run_tool(self, *args, timeout=120):
        result = subprocess.run([sys.executable, SCRIPT] + list(args), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, timeout=timeout, cwd=self.dir)
        return result.returncode, result.stdout.decode(), result.stderr.decode()

    def assert_one_line_error(self, stderr, pattern):
        lines = stderr.strip().splitlines()
        self.assertEqual(len(lines), 1, stderr)
        self.assertRegex(lines[0], r"^retain-bisect: " + pattern)

    def assert_stopped(self, pids):
        for pid in pids:
            self.assertFalse(alive(pid), f"server pid {pid} is still running")

    # -- bisection -----------------------------------------------------------

    def test_bisect_names_the_leak_commit(self):
        # Good is commit 2: git then tries 7 first, then 4 (with good at 1 it
        # would try 6 first and never reach the broken commit).
        repo, hashes = make_repository(self.dir)
        out_json = os.path.join(self.dir, "result.json")
        code, out, err = self.run_tool(
            "--repo", repo, "--good", hashes[2], "--bad", hashes[12], "--build", BUILD,
            "--serve", "./server --port {port}", "--count", "10", "--warmup", "0",
            "--threshold", "32KiB/request", "--json", out_json, timeout=180)
        self.assertEqual(code, 0, out + err)
        with open(out_json) as text:
            result = json.load(text)
        first = result["first_bad"]
        self.assertEqual(first["commit"], hashes[7], out + err)
        self.assertEqual(first["subject"], "keep a context per request (commit 7)")
        self.assertEqual(first["owner"], "RememberRequest")
        self.assertAlmostEqual(first["bytes_per_request_after"], LEAK_BYTES, delta=LEAK_BYTES / 20)
        self.assertEqual(first["verdict_after"], "linear")
        self.assertIsNone(first["before"]["bytes_per_request"])  # absent before commit 7
        self.assertIn(first["before"]["commit"], hashes[2:7])

        steps = {step["commit"]: step for step in result["steps"]}
        # Commit 4 does not compile: tried, skipped, never called good or bad.
        self.assertIn(hashes[4], steps, out)
        self.assertEqual(steps[hashes[4]]["result"], "skip")
        self.assertEqual(steps[hashes[4]]["error"], "build")
        for number in range(2, 13):
            step = steps.get(hashes[number])
            if step is None or number == 4:
                continue
            self.assertEqual(step["result"], "bad" if number >= 7 else "good", step)
        # The bounded cache (commits 9..12) is seen and not called a leak.
        cache = steps[hashes[12]]["owners"]["CacheStore"]
        self.assertIn(cache["verdict"], ("plateau", "warm-up"))
        self.assertEqual(steps[hashes[12]]["grew"], "RememberRequest")

        # The printed report: the table of steps and the result.
        self.assertRegex(out, r"(?m)^step\s+commit\s+result")
        self.assertIn(f"first bad commit: {hashes[7]} keep a context per request (commit 7)", out)
        self.assertRegex(out, r"owner that grew: RememberRequest: absent at \w+ -> "
                              r"64\.0 KiB/req linear")
        # Every server stopped; the repository as it was: on main, clean, not bisecting.
        self.assert_stopped(pid for step in result["steps"] for pid in step.get("server_pids", []))
        git = ["git", "-C", repo]
        self.assertEqual(subprocess.check_output(git + ["symbolic-ref", "--short", "HEAD"])
                         .decode().strip(), "main")
        self.assertEqual(subprocess.check_output(git + ["status", "--porcelain",
                                                        "--untracked-files=no"]), b"")
        self.assertNotEqual(subprocess.run(git + ["bisect", "log"], stdout=subprocess.DEVNULL,
                                           stderr=subprocess.DEVNULL).returncode, 0)

    def test_bounded_cache_is_not_a_leak(self):
        # Judged by the cache's owner alone, the bad end is not bad: nothing to bisect.
        repo, hashes = make_repository(self.dir)
        code, out, err = self.run_tool(
            "--repo", repo, "--good", hashes[1], "--bad", hashes[12], "--build", BUILD,
            "--serve", "./server --port {port}", "--count", "10", "--warmup", "0",
            "--threshold", "1KiB", "--owner", "CacheStore", "--quiet")
        self.assertEqual(code, 1, out + err)
        self.assert_one_line_error(err, r"the --bad commit \w+ measures .* (plateau|warm-up) "
                                        r"against a threshold of 1\.0 KiB/req: it is not bad")

    def test_dirty_repository_is_refused(self):
        repo, hashes = make_repository(self.dir)
        with open(os.path.join(repo, "server.c"), "a") as out:
            out.write("/* local change */\n")
        code, out, err = self.run_tool("--repo", repo, "--good", hashes[1], "--bad", hashes[12],
                                       "--serve", "./server --port {port}", "--quiet")
        self.assertEqual(code, 3, out + err)
        self.assert_one_line_error(err, r".* has uncommitted changes")

    def test_interrupt_during_bisect_resets_everything(self):
        # git bisect's first step (commit 7) runs a server that never listens;
        # SIGINT then must stop it, stop git, reset the bisection and leave main.
        repo, hashes = make_repository(self.dir)
        pid_file = os.path.join(self.dir, "pid")
        serve = (f"sh -c 'if [ \"$(git rev-parse HEAD)\" = {hashes[7]} ]; then exec ./server "
                 f"--port {{port}} --never-listen --pid-file {pid_file}; else exec ./server "
                 f"--port {{port}}; fi'")
        tool = subprocess.Popen(
            [sys.executable, SCRIPT, "--repo", repo, "--good", hashes[2], "--bad", hashes[12],
             "--build", BUILD, "--serve", serve, "--count", "6", "--warmup", "0",
             "--threshold", "32KiB", "--ready-timeout", "60", "--quiet"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=self.dir)
        deadline = time.monotonic() + 60
        while not os.path.exists(pid_file) and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.2)
        pid = read_pid(pid_file)
        self.assertTrue(alive(pid))
        tool.send_signal(signal.SIGINT)
        out, err = tool.communicate(timeout=60)
        self.assertEqual(tool.returncode, 130, err)
        self.assertIn("retain-bisect: interrupted (SIGINT); servers stopped", err.decode())
        self.assert_stopped([pid])
        git = ["git", "-C", repo]
        self.assertEqual(subprocess.check_output(git + ["symbolic-ref", "--short", "HEAD"])
                         .decode().strip(), "main")
        self.assertNotEqual(subprocess.run(git + ["bisect", "log"], stdout=subprocess.DEVNULL,
                                           stderr=subprocess.DEVNULL).returncode, 0)

    def test_step_exit_codes(self):
        # `git bisect run retain-bisect step ...` by hand: 0 good, 1 bad, 125 skip.
        repo, hashes = make_repository(self.dir)
        expected = {6: 0, 12: 1, 4: 125}
        for number, status in expected.items():
            with self.subTest(commit=number):
                subprocess.run(["git", "-C", repo, "checkout", "-q", hashes[number]], check=True)
                result = subprocess.run(
                    [sys.executable, SCRIPT, "step", "--build", BUILD, "--serve",
                     "./server --port {port}", "--count", "6", "--threshold", "32KiB"],
                    cwd=repo, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60)
                self.assertEqual(result.returncode, status, result.stderr.decode())
        result = subprocess.run([sys.executable, SCRIPT, "step", "--serve", "x", "--bogus"],
                                cwd=repo, stderr=subprocess.PIPE)
        self.assertEqual(result.returncode, 128)  # never 2: git bisect would read "bad"

    # -- --builds --------------------------------------------------------------

    def test_builds_table(self):
        old = compile_at(self.dir, 6, "old-server")
        new = compile_at(self.dir, 12, "new-server")
        out_json = os.path.join(self.dir, "builds.json")
        code, out, err = self.run_tool(
            "--builds", old, new, "--serve", "{bin} --port {port}", "--count", "10",
            "--warmup", "0", "--threshold", "32KiB", "--json", out_json)
        self.assertEqual(code, 0, out + err)
        lines = out.splitlines()
        self.assertRegex(lines[0], r"^owner\s+old-server\s+new-server$")
        self.assertRegex(out, r"(?m)^total \(tracked\)\s+0 B/req .*flat\s+"
                              r"64\.0 KiB/req .*linear$")
        self.assertRegex(out, r"(?m)^RememberRequest\s+absent\s+64\.0 KiB/req linear$")
        self.assertRegex(out, r"(?m)^CacheStore\s+absent\s+[0-9.]+ KiB/req (plateau|warm-up)$")
        self.assertRegex(out, r"(?m)^result\s+good\s+bad$")
        with open(out_json) as text:
            result = json.load(text)
        self.assertEqual(result["mode"], "builds")
        self.assertEqual([b["result"] for b in result["builds"]], ["good", "bad"])
        self.assertEqual(result["builds"][1]["grew"], "RememberRequest")
        leak = result["builds"][1]["owners"]["RememberRequest"]
        self.assertAlmostEqual(leak["bytes_per_request"], LEAK_BYTES, delta=LEAK_BYTES / 20)
        self.assertEqual(result["top_owners"][0], "RememberRequest")
        self.assert_stopped(pid for b in result["builds"] for pid in b["server_pids"])

    def test_borderline_step_is_repeated(self):
        # 64 KiB/request against a 60 KiB threshold: within 25 %, run 3 times.
        new = compile_at(self.dir, 12, "new-server")
        out_json = os.path.join(self.dir, "builds.json")
        code, out, err = self.run_tool(
            "--builds", new, "--serve", "{bin} --port {port}", "--count", "8", "--owner",
            "Remember*", "--threshold", "60KiB", "--repeat", "3", "--json", out_json)
        self.assertEqual(code, 0, out + err)
        with open(out_json) as text:
            build = json.load(text)["builds"][0]
        self.assertEqual(build["runs"], 3)
        self.assertEqual(len(build["slopes"]), 3)
        self.assertEqual(build["owner"], "RememberRequest")
        self.assertEqual(build["result"], "bad")
        self.assertAlmostEqual(build["bytes_per_request"], LEAK_BYTES, delta=LEAK_BYTES / 20)
        self.assertLess(build["spread"], LEAK_BYTES / 20)
        self.assertEqual(err.count("borderline"), 2, err)
        self.assert_stopped(build["server_pids"])

    # -- failure paths -----------------------------------------------------------

    def test_server_never_ready(self):
        server = compile_at(self.dir, 12, "server")
        pid_file = os.path.join(self.dir, "pid")
        code, out, err = self.run_tool(
            "--builds", server, "--serve", f"{{bin}} --port {{port}} --never-listen "
            f"--pid-file {pid_file}", "--ready-timeout", "1.5", "--quiet")
        self.assertEqual(code, 3, out + err)
        self.assert_one_line_error(err, r"the server was not ready within 1\.5 s "
                                        r"\(waited for 127\.0\.0\.1:\d+ to accept connections\)$")
        self.assert_stopped([read_pid(pid_file)])

    def test_server_crashes_mid_workload(self):
        server = compile_at(self.dir, 12, "server")
        pid_file = os.path.join(self.dir, "pid")
        code, out, err = self.run_tool(
            "--builds", server, "--serve", f"{{bin}} --port {{port}} --crash-after 4 "
            f"--pid-file {pid_file}", "--count", "10", "--quiet")
        self.assertEqual(code, 3, out + err)
        self.assert_one_line_error(err, r"the server exited \(killed by SIGABRT\) during "
                                        r"request \d+ of 10")
        self.assert_stopped([read_pid(pid_file)])

    def test_server_ignoring_sigterm_is_killed(self):
        server = compile_at(self.dir, 6, "server")
        pid_file = os.path.join(self.dir, "pid")
        code, out, err = self.run_tool(
            "--builds", server, "--serve", f"sh -c 'trap \"\" TERM; exec {{bin}} --port {{port}} "
            f"--pid-file {pid_file}'", "--count", "5", "--stop-timeout", "0.5", "--quiet")
        self.assertEqual(code, 0, out + err)
        self.assertRegex(out, r"(?m)^result\s+good$")
        self.assert_stopped([read_pid(pid_file)])

    def test_server_exits_before_ready(self):
        server = compile_at(self.dir, 12, "server")
        code, out, err = self.run_tool("--builds", server, "--serve", "{bin} --port {port} --bad",
                                       "--quiet")
        self.assertEqual(code, 3, out + err)
        self.assert_one_line_error(err, r"the server exited \(exit status 2\) before it was "
                                        r"ready: tiny_server: usage")

    def test_bad_usage(self):
        server = compile_at(self.dir, 12, "server")
        cases = [
            (["--threshold", "lots"], r"--threshold must be a size such as"),
            (["--threshold", "0"], r"--threshold must be more than 0 bytes per request"),
            (["--threshold", "1MiB/second"], r"--threshold must be SIZE or SIZE/request"),
            (["--count", "3", "--warmup", "2"], r"--count 3 leaves fewer than 3 requests"),
            (["--ready", "http://example.com/health"], r"--ready must be an http:// URL on"),
            (["--frobnicate"], r"unrecognized arguments: --frobnicate"),
        ]
        for extra, pattern in cases:
            with self.subTest(extra=extra):
                code, out, err = self.run_tool("--builds", server, "--serve",
                                               "{bin} --port {port}", *extra)
                self.assertEqual(code, 2, out + err)
                self.assert_one_line_error(err, pattern)
        code, out, err = self.run_tool("--serve", "x {port}")
        self.assertEqual(code, 2)
        self.assert_one_line_error(err, r"give --good REV and --bad REV")
        code, out, err = self.run_tool("--builds", server, "--serve", "{bin}")
        self.assertEqual(code, 2)
        self.assert_one_line_error(err, r"--serve must contain \{port\}")
        code, out, err = self.run_tool("--help")
        self.assertEqual(code, 0)
        self.assertIn("exit status:", out)

    def test_interrupt_stops_the_server(self):
        server = compile_at(self.dir, 12, "server")
        pid_file = os.path.join(self.dir, "pid")
        tool = subprocess.Popen(
            [sys.executable, SCRIPT, "--builds", server, "--serve",
             f"{{bin}} --port {{port}} --never-listen --pid-file {pid_file}",
             "--ready-timeout", "60", "--quiet"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=self.dir)
        deadline = time.monotonic() + 30
        while not os.path.exists(pid_file) and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.2)
        pid = read_pid(pid_file)
        self.assertTrue(alive(pid))
        tool.send_signal(signal.SIGINT)
        out, err = tool.communicate(timeout=30)
        self.assertEqual(tool.returncode, 130, err)
        self.assert_one_line_error(err.decode(), r"interrupted \(SIGINT\); servers stopped")
        self.assert_stopped([pid])


if __name__ == "__main__":
    unittest.main()
