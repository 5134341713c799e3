"""The backend contract in parts of one job each; :mod:`statekeeper.backends.base`
assembles :class:`~statekeeper.backends.base.Backend` from them and re-exports every
name."""
