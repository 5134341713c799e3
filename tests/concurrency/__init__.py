"""Tests of statekeeper.concurrency: locking, leases and fencing, merges, steps."""
