"""Where each top-level command lives, so the CLI imports only the one it runs.

``statekeeper --help`` lists every command from this table without importing the
modules that define them; ``statekeeper agents`` imports :mod:`.commands` and nothing
else of the CLI. Adding a command: define it in a module of this package with
``@app.command()`` (or a ``typer.Typer`` sub-app added with ``app.add_typer``), then add
one row here. ``tests/cli/test_cli_registry.py`` checks that every row names the module
that really defines the command and carries its real help line, and that no command is
missing from the table.
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["COMMANDS", "Entry"]


class Entry(NamedTuple):
    """One top-level command."""

    #: the module of :mod:`statekeeper.cli` that registers it (imported on first use)
    module: str
    #: the first paragraph of its help (what ``statekeeper --help`` shows, shortened)
    help: str
    #: for a command group: the module attribute holding its ``typer.Typer``, which
    #: the loader adds to the root app (None: the module registers itself)
    group: str | None = None


#: command name -> where it lives, in the order ``statekeeper --help`` lists them
COMMANDS: dict[str, Entry] = {
    "init": Entry(
        "init",
        "Create an empty statekeeper store (a SQLite file, a PostgreSQL schema, a Redis "
        "prefix), or upgrade the layout of one an older statekeeper made (processes of "
        "the older version refuse it then: upgrade when none runs). Nothing happens when "
        "a current one is already there.",
    ),
    "agents": Entry(
        "commands", "List agents (ordered by id) with head seq, state and last update."
    ),
    "show": Entry(
        "commands",
        "Show an agent's state and data (latest, or as of --at SEQ / --at-time TIME).",
    ),
    "history": Entry(
        "commands", "Show an agent's events, oldest first (or its states on a timeline)."
    ),
    "diff": Entry(
        "diff", "Show how an agent's state changed between two seqs, or how two agents differ."
    ),
    "tail": Entry("tail", "Show the newest events of an agent or the store; -f follows new ones."),
    "stats": Entry("commands", "Summarise the store: agents, events, states, size."),
    "verify": Entry(
        "commands", "Check every stored record: checksums, gap-free seqs, heads, snapshots."
    ),
    "repair": Entry(
        "repair",
        "Rebuild damaged snapshots from the verified events (dry run unless --apply).",
    ),
    "feed-intents": Entry(
        "intents",
        "List the change feed's pending delete intents; --settle ends those no process can.",
    ),
    "migrate": Entry(
        "schema",
        "Rewrite stored states to a model's schema version, in batches, while the store stays "
        "in use. Each agent's migration is one atomic event: interrupt at any time and run it "
        "again to resume. The pre-migration records stay in the stream until --finalize; "
        "--rollback restores them.",
    ),
    "delete": Entry(
        "delete_cmd", "Delete an agent's events and snapshots (asks first unless --yes)."
    ),
    "export": Entry("transfer", "Write agents (events and head state) as JSON Lines."),
    "import": Entry("transfer", "Import agents from a JSON Lines export, then verify them."),
    "schema": Entry("schema", "State models: versions, casters, stored versions."),
    "audit": Entry(
        "audit", "List and verify the audit log: who did what to which agent, and when."
    ),
    "keys": Entry("security", "Create keys and see which keys the stored records use."),
    "rekey": Entry(
        "security", "Re-encrypt every stored record under the active key (online; resumable)."
    ),
    "witness": Entry(
        "security",
        "Export stream digests to a file kept outside the store; check them later "
        "(detects a rollback of the whole store).",
    ),
    "backup": Entry(
        "governance_data",
        "Write an encrypted, compressed point-in-time backup of a live store.",
    ),
    "restore": Entry(
        "governance_data",
        "Restore a backup into any store after verifying all of it.",
    ),
    "forget": Entry(
        "governance_data",
        "Crypto-shred an agent: destroy its data key, so no copy of its records opens.",
    ),
    "hold": Entry(
        "holds",
        "Legal holds kept in the store: agents or namespaces exempt from every purge.",
        group="hold_app",
    ),
    "retention": Entry(
        "retention",
        "Apply retention policies: TTL, keep the last N events, thin snapshots, legal holds.",
        group="retention_app",
    ),
    "diagram": Entry(
        "diagram", "Draw a state machine; with --db, overlay what the store observed."
    ),
    "serve": Entry(
        "serve",
        "Serve the web inspector: agents, history, time travel, machines, LangGraph threads.",
    ),
    "langgraph": Entry(
        "langgraph",
        "Maintain LangGraph threads stored by the statekeeper checkpointer; move them in "
        "from (and out to) LangGraph's SqliteSaver / PostgresSaver.",
        group="langgraph_app",
    ),
    "demo": Entry(
        "demo_cmd",
        "Crash a tool-calling agent with SIGKILL mid-run, resume it, prove nothing ran twice.",
    ),
    "bench": Entry("bench", "Measure save/load latency per storage strategy vs the seed's claims."),
    "health": Entry(
        "observe",
        "State health: agents by state, stuck agents, largest and fastest-growing streams, "
        "streams due a snapshot, stale leases (and, with --verify, damage).",
    ),
    "analyze": Entry(
        "observe",
        "The seed's mathematics from recorded history: transition matrix P with confidence "
        "intervals, stationary distribution, entropies, measured and predicted recovery "
        "time, consistency score, optimal snapshot interval (Young/Daly).",
    ),
    "metrics": Entry("observe_metrics", "Prometheus metrics of a store.", group="metrics_app"),
    "projections": Entry(
        "projections",
        "Read models kept from the change feed: status, rebuild, run.",
        group="projections_app",
    ),
}
