# server_common.sh: what the server benches share (sourced, not run): a
# scratch directory ($dir), the PID of the one server a script starts at a
# time ($server_pid, stopped on exit: that PID only), a free loopback port,
# and the 256-character prompt body they send.

dir=$(mktemp -d)
server_pid=
cleanup() {  # stops the server this script started (that PID only)
  if [[ -n "$server_pid" ]] && kill -0 "$server_pid" 2>/dev/null; then
    kill -TERM "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
  fi
  rm -rf "$dir"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

prompt=$(python3 -c 'print("the quick brown fox jumps over the lazy dog. " * 6)')
body="{\"prompt\": \"${prompt:0:256}\"}"
