"""fleet_test: two servers under the shim in continuous mode, retain-exporter
and a real Prometheus (Debian's prometheus), all on 127.0.0.1.

Two llama-server look-alikes (examples/llm-server-sim) run under libretain.so
with RETAIN_SNAPSHOT_INTERVAL and RETAIN_KEEP, each writing to its own
directory: one leaks (--leak-trie: 16 trie nodes of 256 KiB per request, no
prompt cache), the other has only its bounded prompt cache (32 MiB, 8 MiB
states: full from request 4). retain-exporter watches both directories;
Prometheus scrapes it every second (its own temporary storage). The test
sends requests to both servers, one at a time, a few interval snapshots
apart, then asks Prometheus's HTTP API (/api/v1/query):

  - the leaking server's trie owner is `linear` at 4 MiB per request (within
    2%);
  - a third server, leaking the same way under RETAIN_SAMPLE=512KiB, has its
    trie `linear` at 4 MiB per request within 25% (estimates);
  - those are the only linear owners above 64 KiB/request;
  - the other server's prompt cache is `plateau` at 32 MiB resident;
  - each directory holds at most RETAIN_KEEP snapshots (disk stays bounded)
    although many more were written (the sequence numbers say how many).

Environment (tests/prometheus/CMakeLists.txt): RETAIN_LIB, RETAIN_SIM,
RETAIN_EXPORTER, RETAIN_DUMP, RETAIN_PROMETHEUS.
"""

import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.parse
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "examples", "llm-server-sim"))
from send_requests import make_prompt  # noqa: E402

LIB = os.environ.get("RETAIN_LIB", "")
SIM = os.environ.get("RETAIN_SIM", "")
EXPORTER = os.environ.get("RETAIN_EXPORTER", "")
DUMP = os.environ.get("RETAIN_DUMP", "")
PROMETHEUS = os.environ.get("RETAIN_PROMETHEUS", "prometheus")

MIB = 1 << 20
KEEP = 6
INTERVAL_S = 0.2
REQUESTS = 12
TRIE = "retain::examples::PrefixTrie::Insert (inference.cc:140)"
CACHE = "retain::examples::PromptCache::Save (inference.cc:115)"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(predicate, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError("timed out waiting for " + what)


def http_get(url, timeout=5):
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return response.read().decode()


def http_ok(url):
    try:
        http_get(url, timeout=1)
        return True
    except OSError:
        return False


def post_completion(port, request_id):
    body = json.dumps({"prompt": make_prompt(request_id, 256), "n_predict": 4}).encode()
    request = urllib.request.Request("http://127.0.0.1:%d/completion" % port, data=body,
                                     headers={"Content-Type": "application/json",
                                              "X-Request-Id": request_id})
    with urllib.request.urlopen(request, timeout=30) as response:
        assert response.status == 200, response.status
        response.read()


class FleetTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory(prefix="retain_fleet_")
        self.processes = []  # (name, Popen), stopped by pid in tearDown

    def tearDown(self):
        for name, process in reversed(self.processes):
            if process.poll() is None:
                os.kill(process.pid, signal.SIGTERM)
                try:
                    process.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    os.kill(process.pid, signal.SIGKILL)
                    process.wait()
        self.tmp.cleanup()

    def start(self, name, argv, env=None):
        with open(os.path.join(self.tmp.name, name + ".log"), "w") as log:
            process = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT,
                                       stdin=subprocess.DEVNULL)
        self.processes.append((name, process))
        return process

    def start_server(self, name, flags, extra_env=None):
        directory = os.path.join(self.tmp.name, name)
        os.mkdir(directory)
        port = free_port()
        env = dict(os.environ, LD_PRELOAD=LIB, RETAIN_DIR=directory,
                   RETAIN_SNAPSHOT_INTERVAL="%dms" % (INTERVAL_S * 1000),
                   RETAIN_KEEP=str(KEEP), RETAIN_HTTP_PATHS="/completion", **(extra_env or {}))
        process = self.start(name, [SIM, "--port", str(port)] + flags, env)
        wait_for(lambda: http_ok("http://127.0.0.1:%d/health" % port), 20, name + " to listen")
        return directory, port, process.pid

    def query(self, prom_port, promql):
        url = "http://127.0.0.1:%d/api/v1/query?%s" % (
            prom_port, urllib.parse.urlencode({"query": promql}))
        answer = json.loads(http_get(url))
        self.assertEqual(answer["status"], "success", answer)
        return answer["data"]["result"]

    def test_prometheus_names_the_leak_and_the_plateau(self):
        leaky_dir, leaky_port, leaky_pid = self.start_server(
            "leaky", ["--leak-trie", "--cache-mib", "0"])
        cache_dir, cache_port, cache_pid = self.start_server("cache", ["--cache-mib", "32"])
        # The same leak, sampled (a trie node of 256 KiB is recorded with
        # probability 1 - e^-0.5: the owner's bytes are estimates).
        sampled_dir, sampled_port, sampled_pid = self.start_server(
            "sampled", ["--leak-trie", "--cache-mib", "0"],
            {"RETAIN_SAMPLE": "512KiB", "RETAIN_SAMPLE_SEED": "7"})

        exporter = self.start("exporter", [EXPORTER, "--port", "0", "--interval", "200ms",
                                           "--window", "30", leaky_dir, cache_dir, sampled_dir])
        log = os.path.join(self.tmp.name, "exporter.log")
        def listening():
            with open(log) as f:
                return re.search(r"listening on 127\.0\.0\.1:(\d+)", f.read())
        line = wait_for(listening, 20, "the exporter to listen")
        exporter_port = int(line.group(1))
        self.assertIsNone(exporter.poll())

        prom_port = free_port()
        config = os.path.join(self.tmp.name, "prometheus.yml")
        with open(config, "w") as f:
            f.write("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
                    "scrape_configs:\n  - job_name: retain\n    static_configs:\n"
                    "      - targets: ['127.0.0.1:%d']\n" % exporter_port)
        self.start("prometheus", [PROMETHEUS, "--config.file=" + config,
                                  "--storage.tsdb.path=" + os.path.join(self.tmp.name, "tsdb"),
                                  "--web.listen-address=127.0.0.1:%d" % prom_port])
        wait_for(lambda: http_ok("http://127.0.0.1:%d/-/ready" % prom_port), 30,
                 "Prometheus to be ready")

        # One request at a time to each server, each followed by a few interval
        # snapshots: every request count gets its snapshot.
        for n in range(1, REQUESTS + 1):
            post_completion(leaky_port, "leak-%d" % n)
            post_completion(cache_port, "cache-%d" % n)
            post_completion(sampled_port, "sampled-%d" % n)
            time.sleep(3 * INTERVAL_S)

        trie_query = ('retain_owner_bytes_per_request{job="retain",verdict="linear",'
                      'owner="%s",pid="%d"}' % (TRIE, leaky_pid))
        cache_query = ('retain_owner_resident_bytes{job="retain",verdict="plateau",'
                       'owner="%s",pid="%d"}' % (CACHE, cache_pid))
        trie = wait_for(lambda: self.query(prom_port, trie_query), 30,
                        "Prometheus to have the trie as linear: " + trie_query)
        cache = wait_for(lambda: self.query(prom_port, cache_query), 30,
                         "Prometheus to have the cache as plateau: " + cache_query)

        # The trie: 16 nodes of 256 KiB per request.
        self.assertEqual(len(trie), 1, trie)
        self.assertEqual(trie[0]["metric"]["dir"], leaky_dir)
        per_request = float(trie[0]["value"][1])
        self.assertAlmostEqual(per_request / (4 * MIB), 1.0, delta=0.02, msg=per_request)
        # The cache: full at 32 MiB (four 8 MiB states).
        self.assertEqual(len(cache), 1, cache)
        self.assertEqual(cache[0]["metric"]["dir"], cache_dir)
        self.assertEqual(float(cache[0]["value"][1]), 32 * MIB)

        # Sampled: still linear, at about its rate (the estimate's standard
        # error over 12 requests is about 10% of it).
        sampled_query = ('retain_owner_bytes_per_request{job="retain",verdict="linear",'
                         'owner="%s",pid="%d"}' % (TRIE, sampled_pid))
        sampled = wait_for(lambda: self.query(prom_port, sampled_query), 30,
                           "Prometheus to have the sampled trie as linear: " + sampled_query)
        self.assertAlmostEqual(float(sampled[0]["value"][1]) / (4 * MIB), 1.0, delta=0.25,
                               msg=sampled)

        # No other owner of any server grows by more than 64 KiB a request.
        linear = self.query(prom_port, 'retain_owner_bytes_per_request{verdict="linear"} > 65536')
        self.assertEqual(sorted((r["metric"]["pid"], r["metric"]["owner"]) for r in linear),
                         sorted([(str(leaky_pid), TRIE), (str(sampled_pid), TRIE)]))
        # Both processes are seen, healthy.
        rss = self.query(prom_port, "retain_process_rss_bytes")
        self.assertEqual(sorted(int(r["metric"]["pid"]) for r in rss),
                         sorted([leaky_pid, cache_pid, sampled_pid]))
        degraded = self.query(prom_port, "retain_shim_degraded == 1")
        self.assertEqual(degraded, [])

        # Disk stays bounded: at most KEEP snapshots in each directory, of many
        # more written.
        for directory in (leaky_dir, cache_dir, sampled_dir):
            snapshots = [f for f in os.listdir(directory) if f.endswith(".pb")]
            self.assertLessEqual(len(snapshots), KEEP, snapshots)
            self.assertGreaterEqual(len(snapshots), KEEP - 1, snapshots)
            newest = max(int(f.split(".")[-2]) for f in snapshots)
            self.assertGreater(newest, 3 * KEEP, snapshots)
            # Written by the timer (retain-dump reads the header of the newest:
            # the oldest may be deleted meanwhile, the servers still run).
            newest_file = max(snapshots, key=lambda f: int(f.split(".")[-2]))
            header = json.loads(subprocess.run(
                [DUMP, "--json", os.path.join(directory, newest_file)],
                check=True, capture_output=True, text=True).stdout)["header"]
            self.assertEqual((header["trigger"], header["label"]), ("interval", "interval"))


if __name__ == "__main__":
    unittest.main()
