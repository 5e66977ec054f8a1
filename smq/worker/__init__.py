"""The worker runner: receive, run a handler, heartbeat, delete."""
