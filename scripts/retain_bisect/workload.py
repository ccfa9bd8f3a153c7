"""The built-in request driver: N HTTP requests to a server on loopback.

Bodies come from a file, one per line (blank lines skipped), used in turn. A
line that is not a JSON object is sent as {"prompt": LINE}, so a plain list of
prompts drives llama-server's /completion; JSON lines are sent as they are.
Without a file every body is {"prompt": "request N"}. Requests go out one
after another, or from `concurrency` threads (each with its own keep-alive
connection), each with a timeout. Only 127.0.0.1 is ever contacted.
"""

import http.client
import json
import socket
import threading
import time
import urllib.parse

from .errors import RunError, UsageError


def load_bodies(path):
    """The request bodies from `path` (bytes each); raises UsageError."""
    if path is None:
        return None
    try:
        with open(path, "r", encoding="utf-8") as text:
            lines = [line.rstrip("\n") for line in text if line.strip()]
    except (OSError, UnicodeDecodeError) as error:
        raise UsageError(f"--requests {path}: {getattr(error, 'strerror', None) or error}")
    if not lines:
        raise UsageError(f"--requests {path} holds no request body (one per line)")
    bodies = []
    for line in lines:
        try:
            is_object = isinstance(json.loads(line), dict)
        except ValueError:
            is_object = False
        bodies.append(line.encode() if is_object else json.dumps({"prompt": line}).encode())
    return bodies


def check_loopback_url(url, what):
    """Refuses a URL that is not http:// on loopback; returns it parsed."""
    parsed = urllib.parse.urlsplit(url)
    if parsed.scheme != "http" or parsed.hostname not in ("127.0.0.1", "localhost", "::1"):
        raise UsageError(f"{what} must be an http:// URL on 127.0.0.1 or localhost, not '{url}'")
    return parsed


class WorkloadFailed(RunError):
    """A request failed (connection refused or reset, timeout, HTTP error)."""

    def __init__(self, number, message):
        super().__init__(f"request {number}: {message}")
        self.number = number


def http_ready(url, timeout):
    """True when GET url answers 2xx within `timeout` seconds."""
    parsed = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(parsed.hostname, parsed.port or 80, timeout=timeout)
    try:
        conn.request("GET", parsed.path or "/")
        return 200 <= conn.getresponse().status < 300
    except (OSError, http.client.HTTPException):
        return False
    finally:
        conn.close()


def port_ready(port, timeout):
    """True when 127.0.0.1:port accepts a TCP connection (closed at once, no bytes sent)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout):
            return True
    except OSError:
        return False


def send(port, count, path="/completion", method="POST", bodies=None, concurrency=1,
         timeout=60.0, headers=None, should_stop=None):
    """Sends `count` requests to 127.0.0.1:port; raises WorkloadFailed on the first failure.

    Request n (1-based) carries X-Request-Id: retain-bisect-n and body
    bodies[(n-1) % len(bodies)]. With concurrency > 1 the requests are handed
    out in order to that many threads. `should_stop()` (optional) is checked
    before each request: a server that died ends the workload at once.
    Returns the seconds taken.
    """
    started = time.monotonic()
    lock = threading.Lock()
    state = {"next": 1, "error": None}

    def body_of(number):
        if bodies is None:
            return json.dumps({"prompt": f"request {number}"}).encode()
        return bodies[(number - 1) % len(bodies)]

    def worker():
        conn = None
        try:
            while True:
                with lock:
                    if state["error"] is not None or state["next"] > count:
                        return
                    number = state["next"]
                    state["next"] += 1
                if should_stop is not None and should_stop():
                    raise WorkloadFailed(number, "the server is gone")
                if conn is None:
                    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
                body = body_of(number) if method in ("POST", "PUT", "PATCH") else None
                request_headers = {"X-Request-Id": f"retain-bisect-{number}"}
                if body is not None:
                    request_headers["Content-Type"] = "application/json"
                request_headers.update(headers or {})
                try:
                    conn.request(method, path, body=body, headers=request_headers)
                    response = conn.getresponse()
                    response.read()
                except socket.timeout:
                    raise WorkloadFailed(number, f"no answer within {timeout:g} s") from None
                except (OSError, http.client.HTTPException) as error:
                    reason = getattr(error, "strerror", None) or str(error) or type(error).__name__
                    raise WorkloadFailed(number, reason) from None
                if not 200 <= response.status < 300:
                    raise WorkloadFailed(number, f"HTTP {response.status} {response.reason}")
                if response.will_close:
                    conn.close()
                    conn = None
        except WorkloadFailed as error:
            with lock:
                if state["error"] is None or error.number < state["error"].number:
                    state["error"] = error
        finally:
            if conn is not None:
                conn.close()

    threads = [threading.Thread(target=worker, name=f"request-driver-{i}", daemon=True)
               for i in range(max(1, min(concurrency, count)))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if state["error"] is not None:
        raise state["error"]
    return time.monotonic() - started
