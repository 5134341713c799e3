"""Governance: who may touch which agents, what happened to them, how long their data
lives, how it is forgotten and how it is backed up.

Retention (:mod:`statekeeper.governance.retention`), crypto-shredding
(:mod:`statekeeper.governance.shredding`) and encrypted backups
(:mod:`statekeeper.governance.backup`) are tools that drive a store.
"""
