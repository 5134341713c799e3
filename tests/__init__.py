"""statekeeper test suite."""
