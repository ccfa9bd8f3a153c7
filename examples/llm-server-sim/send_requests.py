#!/usr/bin/env python3
"""send_requests.py: drive llm-server-sim (or any llama-server) for demos and tests.

Sends --count POST /completion requests with distinct prompts, each with an
X-Request-Id header "<id-prefix>-<n>" (n from 1), over one keep-alive
connection (or a new connection per request with --new-connection), and
prints one line per response: the request id, the HTTP status and the body.

Each prompt is exactly --prompt-chars characters (default 256, i.e. 16 trie
chunks of 16 characters) and starts with an 8-hex-digit hash of its request
id, so no two requests share their first 16-character chunk: with --leak-trie
every request adds exactly prompt-chars/16 trie nodes.

    python3 send_requests.py --port 8080 --count 16 --id-prefix req

Exit status: 0 if every response was 200, 1 otherwise, 2 on a bad command line
or a connection failure. Python 3 standard library only.
"""

import argparse
import hashlib
import http.client
import json
import sys

FILLER = ("The quick brown fox jumps over the lazy dog while the server keeps "
          "its prompt cache warm and its trie, alas, forever. ")


def make_prompt(request_id: str, chars: int) -> str:
    head = hashlib.sha1(request_id.encode()).hexdigest()[:8] + " " + request_id + ": "
    text = head + FILLER * (chars // len(FILLER) + 1)
    return text[:chars]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--count", type=int, default=16)
    parser.add_argument("--id-prefix", default="req")
    parser.add_argument("--prompt-chars", type=int, default=256)
    parser.add_argument("--new-connection", action="store_true",
                        help="one connection per request instead of keep-alive")
    parser.add_argument("--timeout", type=float, default=60.0)
    args = parser.parse_args()
    if args.count < 0 or args.prompt_chars < 1:
        parser.error("--count must be >= 0 and --prompt-chars >= 1")

    failures = 0
    conn = None
    try:
        for n in range(1, args.count + 1):
            if conn is None or args.new_connection:
                if conn is not None:
                    conn.close()
                conn = http.client.HTTPConnection(args.host, args.port, timeout=args.timeout)
            request_id = f"{args.id_prefix}-{n}"
            body = json.dumps({"prompt": make_prompt(request_id, args.prompt_chars)})
            conn.request("POST", "/completion", body=body, headers={
                "Content-Type": "application/json",
                "X-Request-Id": request_id,
            })
            response = conn.getresponse()
            payload = response.read().decode(errors="replace")
            print(f"{request_id} {response.status} {payload}", flush=True)
            if response.status != 200:
                failures += 1
    except (OSError, http.client.HTTPException) as error:
        print(f"send_requests.py: {args.host}:{args.port}: {error}", file=sys.stderr)
        return 2
    finally:
        if conn is not None:
            conn.close()
    return 0 if failures == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
