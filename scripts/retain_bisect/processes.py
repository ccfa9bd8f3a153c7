"""Servers started in their own process group, and always stopped by pid.

Every server retain-bisect starts is the leader of a new session (so a
Ctrl-C in the terminal reaches retain-bisect, which then stops it, and so
the server's own children are stopped with it). It is written to a registry
file ("PID START_TICKS" per line) as soon as it starts, so that the process
that runs the bisection can stop a server a step left behind even when that
step was killed. Stopping is SIGTERM to the group, a grace period, then
SIGKILL to the group.
"""

import os
import signal
import socket
import subprocess
import time

from .errors import RunError


def free_loopback_port():
    """A TCP port free on 127.0.0.1 now (the kernel's choice)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def start_ticks(pid):
    """Field 22 of /proc/PID/stat (start time), or None when the pid is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            text = stat.read().decode(errors="replace")
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: split after it.
    fields = text[text.rfind(")") + 2:].split()
    return fields[19] if len(fields) > 19 else None


def group_alive(pgid):
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def signal_name(status):
    try:
        return signal.Signals(-status).name
    except ValueError:
        return f"signal {-status}"


def describe_exit(status):
    return f"exit status {status}" if status >= 0 else f"killed by {signal_name(status)}"


class Server:
    """One server process: started under the shim, stopped by pid.

    Not thread-safe; one owner. `stop()` is idempotent and safe to call from a
    finally block or after the process has died.
    """

    def __init__(self, argv, env, cwd, log_path, registry=None):
        self.argv = argv
        self.log_path = log_path
        self._log = open(log_path, "wb")
        try:
            # start_new_session: the server leads its own process group.
            self.process = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                                            stdout=self._log, stderr=subprocess.STDOUT,
                                            start_new_session=True)
        except OSError as error:
            self._log.close()
            raise RunError(f"cannot start the server ({argv[0]}): {error.strerror}") from None
        self.pid = self.process.pid
        self.status = None  # exit status once reaped (negative: a signal)
        if registry:
            with open(registry, "a") as out:
                out.write(f"{self.pid} {start_ticks(self.pid)}\n")

    def poll(self):
        """The exit status if the server has exited, else None."""
        if self.status is None:
            self.status = self.process.poll()
        return self.status

    def log_tail(self, lines=3):
        """The last lines of the server's output, joined with ' | ', for an error."""
        try:
            self._log.flush()
            with open(self.log_path, "rb") as log:
                log.seek(max(0, os.path.getsize(self.log_path) - 4096))
                text = log.read().decode(errors="replace")
        except OSError:
            return ""
        tail = [line.strip() for line in text.splitlines() if line.strip()][-lines:]
        return " | ".join(tail)

    def stop(self, grace=5.0):
        """SIGTERM to the group, wait up to `grace` seconds, then SIGKILL; reaps."""
        try:
            if group_alive(self.pid):
                try:
                    os.killpg(self.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
                deadline = time.monotonic() + grace
                while time.monotonic() < deadline:
                    self.poll()
                    if not group_alive(self.pid):
                        break
                    time.sleep(0.02)
                if group_alive(self.pid):
                    try:
                        os.killpg(self.pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
            try:
                self.status = self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        finally:
            if not self._log.closed:
                self._log.close()


def sweep_registry(registry):
    """Kills (SIGKILL, by group) every registered server still running.

    A line's pid is only signalled when the process is the one registered
    (same start time) or, if its leader is gone, when its group still has
    members (a group id is not reused while the group exists). Returns the
    pids it had to kill.
    """
    killed = []
    try:
        with open(registry) as lines:
            entries = [line.split() for line in lines if line.strip()]
    except OSError:
        return killed
    for entry in entries:
        pid = int(entry[0])
        ticks = entry[1] if len(entry) > 1 else "None"
        now = start_ticks(pid)
        if now is not None and ticks != "None" and now != ticks:
            continue  # the pid belongs to another process now
        if group_alive(pid):
            try:
                os.killpg(pid, signal.SIGKILL)
                killed.append(pid)
            except ProcessLookupError:
                pass
    return killed
