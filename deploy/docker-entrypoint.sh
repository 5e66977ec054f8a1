#!/bin/sh
# The image's entrypoint: runs `smq ARGS...` (default `smq serve`), in one of two modes.
#
# Development: `serve` with no Redis given (no SMQ_REDIS_URL, SMQ_SENTINELS, --redis-url or
# --sentinel) runs the embedded Valkey server with its data in /data (a volume). Unless access
# keys or --no-auth are given, authentication is off, as in a local SQS emulator; this says so.
# Production: given a Redis, nothing is changed: `smq serve` on 0.0.0.0 then refuses to start
# without SMQ_ACCESS_KEYS (or an explicit SMQ_NO_AUTH=1).
set -eu
[ "$#" -gt 0 ] || set -- serve
if [ "$1" = serve ] && [ -z "${SMQ_REDIS_URL:-}" ] && [ -z "${SMQ_SENTINELS:-}" ]; then
  given_redis=no
  given_auth=no
  for arg in "$@"; do
    case "$arg" in
      --redis-url | --redis-url=* | --sentinel | --sentinel=*) given_redis=yes ;;
      --access-key | --access-key=* | --no-auth) given_auth=yes ;;
    esac
  done
  if [ "$given_redis" = no ]; then
    if [ "$given_auth" = no ] && [ -z "${SMQ_ACCESS_KEYS:-}" ] && [ -z "${SMQ_NO_AUTH:-}" ]; then
      export SMQ_NO_AUTH=1
      auth="authentication is off (set SMQ_ACCESS_KEYS=ID:SECRET to require signed requests)"
    else
      auth="access keys as given"
    fi
    echo "smq image: development mode: an embedded Valkey server keeps the queues in ${SMQ_DATA_DIR:-/data}" \
      "(mount a volume there to keep them); ${auth}. For production set SMQ_REDIS_URL to your Redis" \
      "and SMQ_ACCESS_KEYS." >&2
  fi
fi
exec smq "$@"
