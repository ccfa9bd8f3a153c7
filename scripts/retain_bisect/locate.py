"""Finds libretain.so and retain-diff, as scripts/retain-run finds the library.

libretain.so: $RETAIN_LIB, then <scripts>/../build/libretain.so (a source
tree), then <prefix>/lib, lib64, lib/<multiarch> (an installed tree).
retain-diff: $RETAIN_DIFF, then <scripts>/../build/bin/retain-diff, then
<prefix>/bin/retain-diff next to an installed retain-bisect, then $PATH.
"""

import glob
import os
import shutil

from .errors import RunError


def _script_dir():
    # scripts/retain_bisect/locate.py -> scripts/ (or <prefix>/share/retain/python
    # when installed, whose prefix is three levels up).
    return os.path.dirname(os.path.dirname(os.path.realpath(__file__)))


def _prefixes(script_dir):
    """The directories a build/ or an installed lib/ may sit under."""
    here = os.path.realpath(script_dir)
    yield os.path.dirname(here)  # <repo>/scripts -> <repo>; <prefix>/bin -> <prefix>
    # Installed: the package lives in <prefix>/share/retain/python.
    yield os.path.dirname(os.path.dirname(os.path.dirname(here)))


def find_library(script_dir=None):
    """The absolute path of libretain.so; raises RunError when there is none."""
    env = os.environ.get("RETAIN_LIB")
    if env:
        if not os.path.isfile(env):
            raise RunError(f"RETAIN_LIB={env} does not exist")
        return os.path.realpath(env)
    script_dir = script_dir or _script_dir()
    for prefix in _prefixes(script_dir):
        candidates = [os.path.join(prefix, "build", "libretain.so"),
                      os.path.join(prefix, "lib", "libretain.so"),
                      os.path.join(prefix, "lib64", "libretain.so")]
        candidates += sorted(glob.glob(os.path.join(prefix, "lib", "*-linux-gnu*", "libretain.so")))
        for candidate in candidates:
            if os.path.isfile(candidate):
                path = os.path.realpath(candidate)
                if ":" in path or " " in path:
                    raise RunError(f"the path of libretain.so ({path}) contains ':' or a space, "
                                   "which LD_PRELOAD cannot carry")
                return path
    raise RunError("libretain.so not found (build it with scripts/build.sh, or set RETAIN_LIB)")


def find_retain_diff(script_dir=None):
    """The path of retain-diff; raises RunError when there is none."""
    env = os.environ.get("RETAIN_DIFF")
    if env:
        if not os.access(env, os.X_OK):
            raise RunError(f"RETAIN_DIFF={env} is not an executable")
        return os.path.realpath(env)
    script_dir = script_dir or _script_dir()
    for prefix in _prefixes(script_dir):
        for candidate in (os.path.join(prefix, "build", "bin", "retain-diff"),
                          os.path.join(prefix, "bin", "retain-diff")):
            if os.access(candidate, os.X_OK):
                return os.path.realpath(candidate)
    found = shutil.which("retain-diff")
    if found:
        return found
    raise RunError("retain-diff not found (build it with scripts/build.sh, or set RETAIN_DIFF)")
