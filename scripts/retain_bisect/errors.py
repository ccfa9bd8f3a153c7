"""The errors retain-bisect reports as one line and an exit code."""

# Exit codes of scripts/retain-bisect (README, --help).
EXIT_OK = 0
EXIT_NO_VERDICT = 1  # bisect: no single first bad commit; the ends disagree
EXIT_USAGE = 2
EXIT_FAILED = 3  # a server, a build of an end, git or retain-diff failed
EXIT_INTERRUPTED = 130

# Exit codes of the step (`retain-bisect step`), as `git bisect run` reads them.
STEP_GOOD = 0
STEP_BAD = 1
STEP_SKIP = 125  # cannot be tested: the build failed, the server failed
STEP_ABORT = 128  # stops the bisection: the tool itself cannot work


class UsageError(Exception):
    """A bad command line: exit 2."""


class RunError(Exception):
    """A step could not be measured (server, build, tool): exit 3 or a skip."""


class ToolError(RunError):
    """retain-diff failed on the snapshots: the tool, not the step, is broken."""


class BuildError(RunError):
    """The build command failed: the step is skipped (125)."""


class Interrupted(Exception):
    """SIGINT, SIGTERM or SIGHUP arrived: clean up, exit 130."""
