#!/usr/bin/env bash
# Usage: localstack/with-dynamodb.sh COMMAND [ARG...]
#
# Runs COMMAND with DYNAMODB_ENDPOINT set. When the environment already names
# an endpoint, COMMAND just runs against it. Otherwise one local dynalite is
# started for COMMAND's lifetime and always stopped afterwards, whether
# COMMAND passes, fails or is interrupted; the script exits with COMMAND's
# status.
#
# COMMAND runs in the foreground, so it keeps the terminal and Ctrl-C reaches
# it directly; a signal sent to this script alone takes effect once COMMAND
# returns. Only SIGKILL of this script can leave the server running.
#
# DYNALITE_PATH=DIR keeps the data on disk in DIR (default: in memory).
# DYNALITE_PORT=N   listens on port N (default: a free port).
# DYNALITE_INDEX_LAG=D makes global secondary indexes trail writes by D
#                   ("500ms"; default: none), as DynamoDB's may.
set -euo pipefail

if [ $# -eq 0 ]; then
	echo "usage: $0 COMMAND [ARG...]" >&2
	exit 2
fi
if [ -n "${DYNAMODB_ENDPOINT:-}" ]; then
	exec "$@"
fi

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bin="$root/bin/dynalite"
# Build first (a no-op when cached), so the server starts in well under a second.
(cd "$root" && go build -o "$bin" ./cmd/dynalite)

tmp=$(mktemp -d)
args=(-v --endpoint-file "$tmp/endpoint")
[ -n "${DYNALITE_PATH:-}" ] && args+=(--path "$DYNALITE_PATH")
[ -n "${DYNALITE_PORT:-}" ] && args+=(--port "$DYNALITE_PORT")
[ -n "${DYNALITE_INDEX_LAG:-}" ] && args+=(--index-lag "$DYNALITE_INDEX_LAG")
"$bin" "${args[@]}" >"$tmp/log" 2>&1 &
pid=$!

stop() {
	status=$?
	if ! kill -0 "$pid" 2>/dev/null; then
		echo "with-dynamodb: dynalite exited before the command finished; its log:" >&2
		tail -n 50 "$tmp/log" >&2 || true
	elif [ "$status" -ne 0 ] && [ -s "$tmp/log" ]; then
		echo "with-dynamodb: the command failed; the last lines of dynalite's log:" >&2
		tail -n 20 "$tmp/log" >&2 || true
	fi
	kill -TERM "$pid" 2>/dev/null || true
	wait "$pid" 2>/dev/null || true
	rm -rf "$tmp"
}
trap stop EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# The first start may install dynalite with npm ci; allow for that.
for _ in $(seq 1 2400); do
	[ -s "$tmp/endpoint" ] && break
	if ! kill -0 "$pid" 2>/dev/null; then
		echo "with-dynamodb: dynalite failed to start:" >&2
		cat "$tmp/log" >&2
		exit 1
	fi
	sleep 0.05
done
if [ ! -s "$tmp/endpoint" ]; then
	echo "with-dynamodb: dynalite not ready after 120s:" >&2
	cat "$tmp/log" >&2
	exit 1
fi
DYNAMODB_ENDPOINT=$(cat "$tmp/endpoint")
export DYNAMODB_ENDPOINT
echo "with-dynamodb: DYNAMODB_ENDPOINT=$DYNAMODB_ENDPOINT" >&2

set +e
"$@"
status=$?
set -e
exit "$status"
