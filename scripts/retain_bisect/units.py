"""Sizes: parsed from the command line ("64KiB", "1MiB/request") and printed."""

import re

from .errors import UsageError

# Binary units, as the shim's RETAIN_MAX_MEMORY reads them: K, KB and KiB are
# all 1024.
_UNITS = {"": 1, "b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
_SIZE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([kmgt]?)(i?b)?\s*$", re.IGNORECASE)


def parse_size(text, what):
    """Returns bytes for "4096", "64K", "64KiB", "1.5MiB", "2GB"; raises UsageError."""
    match = _SIZE.match(text)
    if not match or (match.group(2) == "" and (match.group(3) or "").lower() == "ib"):
        raise UsageError(f"{what} must be a size such as 65536, 64KiB or 1MiB, not '{text}'")
    value = float(match.group(1)) * _UNITS[match.group(2).lower()]
    return int(round(value))


def parse_rate(text, what):
    """Returns bytes per request for "1MiB/request" (the "/request" is optional)."""
    body = text.strip()
    for suffix in ("/request", "/req", "/r"):
        if body.lower().endswith(suffix):
            body = body[: -len(suffix)]
            break
    if "/" in body:
        raise UsageError(f"{what} must be SIZE or SIZE/request, not '{text}'")
    value = parse_size(body, what)
    if value <= 0:
        raise UsageError(f"{what} must be more than 0 bytes per request, not '{text}'")
    return value


def format_size(value):
    """'64.0 KiB', '-1.5 MiB', '12 B': binary units, one decimal above 1 KiB."""
    if value is None:
        return "-"
    sign = "-" if value < 0 else ""
    value = abs(value)
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if value >= scale:
            return f"{sign}{value / scale:.1f} {unit}"
    return f"{sign}{value:.0f} B"


def format_rate(value):
    return "-" if value is None else format_size(value) + "/req"
