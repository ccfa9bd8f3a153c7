"""cdp: headless Chromium driven over the DevTools protocol, standard library only.

Chromium is started with --remote-debugging-pipe: it reads the protocol's
JSON messages from its file descriptor 3 and writes its own to 4, each
ended by a NUL byte. No port is opened, so nothing else on the machine can
talk to it. The browser runs with a fresh profile in a temporary directory,
with every background service that could reach the network off.

A Browser gives one page (a target, attached in flat mode) and:
  - blocks the network: Fetch intercepts every request of the page and
    fails all but the allowed URLs; Network.emulateNetworkConditions is
    offline; a dead proxy and a resolver that resolves nothing catch what
    else the browser itself might try;
  - records every request the page makes (Network.requestWillBeSent,
    Fetch.requestPaused, WebSocket creation), console messages
    (Runtime.consoleAPICalled), exceptions (Runtime.exceptionThrown) and
    log entries (Log.entryAdded: CSP violations, failed loads).

Not thread-safe: one caller at a time. Used by report_browser_test.py.
"""

import base64
import fcntl
import json
import os
import shutil
import subprocess
import tempfile
import time


def find_chromium():
    """The path of Debian's chromium (or another Chromium), or None."""
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


class ProtocolError(Exception):
    pass


class Browser:
    """One headless Chromium, one page. Use as a context manager."""

    def __init__(self, chromium, width=1280, height=900, allowed_urls=()):
        self.chromium = chromium
        self.width = width
        self.height = height
        self.allowed_urls = set(allowed_urls)
        self.requests = []  # every URL the page asked for
        self.console = []  # console messages (any level)
        self.exceptions = []  # uncaught exceptions
        self.log_entries = []  # Log.entryAdded (CSP, network errors...)
        self._events = []
        self._buffer = b""
        self._next_id = 0
        self.proc = None
        self.profile = None
        self.session = None

    # -- process ---------------------------------------------------------

    def __enter__(self):
        self.profile = tempfile.mkdtemp(prefix="retain-chromium-")
        to_browser_r, to_browser_w = os.pipe()
        from_browser_r, from_browser_w = os.pipe()
        # The browser's ends, moved above 3 and 4 so that the shell below can
        # put them there without closing one it still needs.
        to_browser_r = self._move_up(to_browser_r)
        from_browser_w = self._move_up(from_browser_w)
        args = [
            self.chromium,
            "--headless",
            "--remote-debugging-pipe",
            "--user-data-dir=" + self.profile,
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-default-apps",
            "--disable-extensions",
            "--disable-domain-reliability",
            "--disable-client-side-phishing-detection",
            "--no-first-run",
            "--no-default-browser-check",
            "--disable-gpu",
            "--metrics-recording-only",
            "--mute-audio",
            # Anything the browser itself tries goes nowhere: a proxy on a
            # closed loopback port and a resolver that resolves no name.
            "--proxy-server=127.0.0.1:9",
            "--host-resolver-rules=MAP * ~NOTFOUND",
            "--window-size=%d,%d" % (self.width, self.height),
            "about:blank",
        ]
        if os.geteuid() == 0:
            args.insert(1, "--no-sandbox")  # Chromium refuses to run as root with its sandbox
        # The protocol's descriptors must be 3 and 4 in the browser: bash moves
        # the pipe ends there and closes the originals (dash, /bin/sh, takes
        # one-digit descriptors only).
        script = 'exec "$@" 3<&%d 4>&%d %d<&- %d>&-' % (
            to_browser_r, from_browser_w, to_browser_r, from_browser_w)
        self.proc = subprocess.Popen(
            ["bash", "-c", script, "bash"] + args,
            pass_fds=(to_browser_r, from_browser_w),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=open(os.path.join(self.profile, "stderr.log"), "wb"),
        )
        os.close(to_browser_r)
        os.close(from_browser_w)
        self._write_fd = to_browser_w
        self._read_fd = from_browser_r
        try:
            self._attach()
        except BaseException:
            self.close()  # the browser and its profile, also when it never answered
            raise
        return self

    @staticmethod
    def _move_up(fd):
        high = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 20)
        os.close(fd)
        return high

    def __exit__(self, *exc):
        self.close()

    def close(self):
        if self.proc is not None:
            try:
                self._send("Browser.close", {}, session=False, wait=False)
            except OSError:
                pass
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()  # this browser, by its PID
                self.proc.wait()
            for fd in (self._write_fd, self._read_fd):
                try:
                    os.close(fd)
                except OSError:
                    pass
            self.proc = None
        if self.profile:
            shutil.rmtree(self.profile, ignore_errors=True)
            self.profile = None

    def stderr_tail(self):
        try:
            with open(os.path.join(self.profile, "stderr.log"), "rb") as f:
                return f.read()[-4000:].decode(errors="replace")
        except OSError:
            return ""

    # -- protocol ---------------------------------------------------------

    def _read_message(self, deadline):
        while b"\0" not in self._buffer:
            if time.monotonic() > deadline:
                raise ProtocolError("no answer from Chromium in time")
            chunk = os.read(self._read_fd, 1 << 20)
            if not chunk:
                raise ProtocolError("Chromium closed the pipe: " + self.stderr_tail())
            self._buffer += chunk
        message, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(message)

    def _send(self, method, params=None, session=True, wait=True, timeout=60):
        self._next_id += 1
        message = {"id": self._next_id, "method": method, "params": params or {}}
        if session and self.session:
            message["sessionId"] = self.session
        data = json.dumps(message).encode() + b"\0"
        while data:
            written = os.write(self._write_fd, data)
            data = data[written:]
        if not wait:
            return None
        deadline = time.monotonic() + timeout
        while True:
            reply = self._read_message(deadline)
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise ProtocolError("%s: %s" % (method, reply["error"]))
                return reply.get("result", {})
            self._event(reply)

    def call(self, method, params=None, timeout=60):
        """One command on the page's session; returns its result."""
        return self._send(method, params, timeout=timeout)

    def _event(self, message):
        method = message.get("method")
        params = message.get("params", {})
        if method == "Network.requestWillBeSent":
            self.requests.append(params["request"]["url"])
        elif method == "Network.webSocketCreated":
            self.requests.append(params["url"])
        elif method == "Fetch.requestPaused":
            url = params["request"]["url"]
            self.requests.append(url)
            if url in self.allowed_urls:
                self._send("Fetch.continueRequest", {"requestId": params["requestId"]}, wait=False)
            else:
                self._send("Fetch.failRequest", {"requestId": params["requestId"],
                                                 "errorReason": "BlockedByClient"}, wait=False)
        elif method == "Runtime.consoleAPICalled":
            self.console.append({"type": params.get("type"),
                                 "text": " ".join(str(a.get("value", a.get("description", "")))
                                                  for a in params.get("args", []))})
        elif method == "Runtime.exceptionThrown":
            details = params.get("exceptionDetails", {})
            self.exceptions.append(details.get("exception", {}).get("description") or details.get("text"))
        elif method == "Log.entryAdded":
            entry = params.get("entry", {})
            self.log_entries.append("%s %s: %s %s" % (entry.get("level"), entry.get("source"),
                                                       entry.get("text"), entry.get("url", "")))
        self._events.append(message)

    def wait_event(self, method, timeout=30):
        """Waits for an event (one already received counts); returns its params."""
        for i, message in enumerate(self._events):
            if message.get("method") == method:
                del self._events[i]
                return message.get("params", {})
        deadline = time.monotonic() + timeout
        while True:
            message = self._read_message(deadline)
            if "id" in message:
                continue  # an answer to a command sent without waiting
            self._event(message)
            if message.get("method") == method:
                self._events.remove(message)
                return message.get("params", {})

    def _attach(self):
        targets = self._send("Target.getTargets", session=False)["targetInfos"]
        pages = [t for t in targets if t["type"] == "page"]
        if pages:
            target = pages[0]["targetId"]
        else:
            target = self._send("Target.createTarget", {"url": "about:blank"}, session=False)["targetId"]
        self.session = self._send("Target.attachToTarget", {"targetId": target, "flatten": True},
                                  session=False)["sessionId"]
        for domain in ("Page", "Runtime", "Log", "Network"):
            self.call(domain + ".enable")
        self.call("Network.emulateNetworkConditions", {"offline": True, "latency": 0,
                                                       "downloadThroughput": -1, "uploadThroughput": -1})
        self.call("Fetch.enable", {"patterns": [{"urlPattern": "*"}]})
        self.call("Emulation.setDeviceMetricsOverride", {"width": self.width, "height": self.height,
                                                         "deviceScaleFactor": 1, "mobile": False})

    # -- page ---------------------------------------------------------------

    def open(self, url, timeout=30):
        """Navigates and waits for the load event; `url` becomes the one allowed request."""
        self.allowed_urls.add(url)
        self._events.clear()
        self.call("Page.navigate", {"url": url})
        self.wait_event("Page.loadEventFired", timeout)

    def evaluate(self, expression, timeout=30):
        """The value of a JavaScript expression in the page (awaited if a promise)."""
        result = self.call("Runtime.evaluate", {"expression": expression, "returnByValue": True,
                                                "awaitPromise": True}, timeout=timeout)
        if "exceptionDetails" in result:
            raise ProtocolError("evaluate: " + json.dumps(result["exceptionDetails"])[:2000])
        return result["result"].get("value")

    def mouse(self, kind, x, y):
        """A mouse event at page coordinates: kind is mouseMoved, mousePressed or mouseReleased."""
        params = {"type": kind, "x": x, "y": y}
        if kind != "mouseMoved":
            params.update({"button": "left", "clickCount": 1})
        self.call("Input.dispatchMouseEvent", params)

    def click(self, x, y):
        self.mouse("mouseMoved", x, y)
        self.mouse("mousePressed", x, y)
        self.mouse("mouseReleased", x, y)

    def screenshot(self, path, full_page=True):
        """Saves a PNG of the page (all of it when full_page) to `path`."""
        params = {"format": "png"}
        if full_page:
            metrics = self.call("Page.getLayoutMetrics")
            size = metrics.get("cssContentSize") or metrics["contentSize"]
            params["captureBeyondViewport"] = True
            params["clip"] = {"x": 0, "y": 0, "width": self.width,
                              "height": max(1, int(size["height"])), "scale": 1}
        data = self.call("Page.captureScreenshot", params)["data"]
        with open(path, "wb") as f:
            f.write(base64.b64decode(data))
        return path

    def screenshot_element(self, selector, path, margin=8):
        """Saves a PNG of one element (its bounding box plus a margin)."""
        box = self.evaluate("(() => { const r = document.querySelector(%s).getBoundingClientRect();"
                            " return {x: r.left + window.scrollX, y: r.top + window.scrollY,"
                            " w: r.width, h: r.height}; })()" % json.dumps(selector))
        clip = {"x": max(0, box["x"] - margin), "y": max(0, box["y"] - margin),
                "width": box["w"] + 2 * margin, "height": box["h"] + 2 * margin, "scale": 1}
        # Beyond the viewport only when it must: that resizes the page for
        # the capture, and a page that redraws on resize loses its hover.
        beyond = clip["y"] + clip["height"] > self.height or clip["x"] + clip["width"] > self.width
        data = self.call("Page.captureScreenshot", {"format": "png", "clip": clip,
                                                    "captureBeyondViewport": beyond})["data"]
        with open(path, "wb") as f:
            f.write(base64.b64decode(data))
        return path
