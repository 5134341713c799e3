"""Data governance commands: ``backup``, ``restore`` and ``forget``.

The backup key comes from ``--backup-key FILE`` (a key file, or one base64 line), else
``$STATEKEEPER_BACKUP_KEY``; it must not be one of the store's keys. The store's own
keys come from ``--key-file`` / the environment as for every command.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from ..errors import ConfigurationError, InvalidArgument, RestoredPartWay, ThreadStillRunning
from . import render
from ._markup import escape
from .app import (
    DbOption,
    JsonOption,
    app,
    handled,
    ignore_stops,
    masked,
    out_console,
    resolve_url,
    run,
    stop_signal,
)
from .stores import KeyFileOption, open_store, refuse_in_memory

if TYPE_CHECKING:
    from ..governance.backup import BackupKey, BackupResult, RestoreResult
    from ..governance.shredding import ForgetResult
    from ..store import StateStore

__all__ = ["backup_cmd", "forget_cmd", "restore_cmd"]

BackupKeyOption = Annotated[
    Path | None,
    typer.Option(
        "--backup-key",
        metavar="FILE",
        help="Backup key file (a key file or one base64 line) [default: $STATEKEEPER_BACKUP_KEY]."
        " Not a store key.",
        show_default=False,
    ),
]


def _backup_key(path: Path | None, *, create: bool = False) -> BackupKey:
    from ..governance.backup import ENV_BACKUP_KEY, BackupKey

    if create and path is not None and not path.exists():
        import os

        from ..codec.keys import generate_key

        if not path.parent.is_dir():
            raise ConfigurationError(f"cannot write backup key {path}: no such folder")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w", encoding="ascii") as fh:
            fh.write(generate_key() + "\n")
    if path is not None:
        key: BackupKey | None = BackupKey.from_file(path)
    else:
        try:
            key = BackupKey.from_env()
        except ConfigurationError:
            import os

            if not os.path.exists(os.environ.get(ENV_BACKUP_KEY, "").strip()):
                raise  # (its message names no value)
            raise ConfigurationError(  # an easy mistake: --backup-key is the one taking files
                f"${ENV_BACKUP_KEY} names a file, but it holds the key itself (one base64"
                " line): pass the key file with --backup-key FILE instead"
            ) from None
    if key is None:
        raise ConfigurationError(
            f"a backup needs its own key: pass --backup-key FILE or set ${ENV_BACKUP_KEY}"
        )
    return key


@app.command("backup")
@handled
def backup_cmd(
    ctx: typer.Context,
    url: Annotated[
        str | None,
        typer.Argument(
            metavar="[URL]", help="Store to back up [default: --db / $STATEKEEPER_URL]."
        ),
    ] = None,
    to: Annotated[
        str,
        typer.Option("--to", metavar="FILE_OR_S3_URL", help="Where to write the backup."),
    ] = "",
    incremental: Annotated[
        str | None,
        typer.Option(
            "--incremental",
            metavar="PREVIOUS",
            help="Only what changed since the backup PREVIOUS (a file or S3 URL).",
        ),
    ] = None,
    backup_key: BackupKeyOption = None,
    create_backup_key: Annotated[
        bool,
        typer.Option(
            "--create-backup-key",
            help="Write a new random backup key to the --backup-key FILE if it does not exist.",
        ),
    ] = False,
    overwrite: Annotated[
        bool,
        typer.Option(
            "--overwrite",
            help="Replace a backup already at --to (else refused: it may be the parent"
            " of incrementals).",
        ),
    ] = False,
    db: DbOption = None,
    key_file: KeyFileOption = None,
    json_out: JsonOption = False,
) -> None:
    """Write an encrypted, compressed point-in-time backup of a live store.

    Writers may keep writing while it runs; --incremental stores only what changed.
    """
    from ..governance.backup import backup
    from .progress import bar

    if not to:
        raise ConfigurationError("backup needs --to FILE_OR_S3_URL")
    if to == "-":  # not a file named - (export -o - is stdout: a user expects the same)
        raise InvalidArgument(
            "--to",
            "--to -: a backup cannot go to standard output (it is written to a file and"
            " moved into place; an incremental one names its parent by path): give a file"
            " (./- for a file named -) or an s3:// URL",
        )
    if incremental and create_backup_key and backup_key is not None and not backup_key.exists():
        raise InvalidArgument(  # (was: a new key written, then refused by the parent)
            "--create-backup-key",
            f"--create-backup-key with --incremental: {backup_key} does not exist, and an"
            " incremental backup is sealed with its parent's backup key, which a new key"
            " cannot be: pass the parent's key file",
        )
    if not to.startswith("s3://"):
        from .files import check_output_file

        check_output_file(Path(to), "backup file", _is_backup)
    from ..governance.backup.location import Location

    Location(to, overwrite=overwrite).check_free()  # before the store is opened
    target = url or resolve_url(ctx, db)

    async def go() -> BackupResult:
        async with open_store(target, key_file=key_file) as store:
            await _given_keys_open(store)
            key = _backup_key(backup_key, create=create_backup_key)
            with bar("backing up", disable=json_out) as progress:
                task = progress.add_task("backing up", total=None)
                seen = 0

                def step(done: int, total: int) -> None:
                    nonlocal seen
                    progress.advance(task, done - seen)
                    seen = done

                return await backup(
                    store, to, key, since=incremental, progress=step, overwrite=overwrite
                )

    got: list[BackupResult] = []

    async def kept() -> BackupResult:
        try:
            got.append(await go())
        except ThreadStillRunning as exc:  # Ctrl-C twice: one line, not asyncio's traceback
            from .exits import print_warning

            print_warning(masked(str(exc)))
            raise asyncio.CancelledError from None
        return got[0]

    try:
        try:
            run(kept())
        finally:  # written, or stopped: no later signal changes the outcome
            ignore_stops()
    except (KeyboardInterrupt, SystemExit) as exc:
        stop = stop_signal(exc)
        if stop is None or not (got or _placed(to)):
            raise  # stopped before the backup was in place: nothing left
        if not got:  # in place, its report lost with the stop
            _say_placed(to, json_out)
            return
    _say_backup(got[0], json_out)


def _placed(to: str) -> bool:
    from ..governance.backup.location import placed_here

    return not to.startswith("s3://") and placed_here(to)


def _say_placed(to: str, json_out: bool) -> None:
    """A backup placed by a run stopped before it could report (the counts lost)."""
    if json_out:
        render.print_json({"backup": to, "stopped_after_written": True})
        return
    out_console().print(f"[green]✓[/] backup written to {escape(to)} (stopped just after)")


def _say_backup(result: BackupResult, json_out: bool) -> None:
    summary = {
        "backup": result.location,
        "backup_id": result.backup_id,
        "parent": result.parent,
        "agents": result.agents,
        "agents_copied": result.copied,
        "internal_streams": result.internal,
        "internal_stream_names": _stream_names(result.internal_streams),
        "events": result.events,
        "snapshots": result.snapshots,
        "deleted_since_parent": result.deleted,
        "vanished": result.vanished,
        "bytes": result.bytes_written,
    }
    if json_out:
        render.print_json(summary)
        return
    kind = "incremental backup" if result.parent else "backup"
    out_console().print(
        f"[green]✓[/] {kind} of {result.agents:,} agent(s) ({result.copied:,} copied,"
        f" {result.events:,} event(s), {result.snapshots:,} snapshot(s))"
        f"{_with_streams(result.internal_streams)}{',' if result.internal_streams else ''}"
        " written to"
        f" {escape(result.location)} ({result.bytes_written:,} bytes)"
    )


@app.command("restore")
@handled
def restore_cmd(
    ctx: typer.Context,
    backups: Annotated[
        list[str],
        typer.Argument(
            metavar="BACKUP...",
            help="A full backup, then its incrementals in order (files or S3 URLs).",
        ),
    ],
    to: Annotated[
        str | None,
        typer.Option(
            "--to",
            metavar="URL",
            help="Store to restore into (created by statekeeper init) [default: --db].",
        ),
    ] = None,
    backup_key: BackupKeyOption = None,
    skip_existing: Annotated[
        bool,
        typer.Option(
            "--skip-existing",
            help="Leave out agents the target already holds (else refuse); one a restore"
            " stopped part-way left (older than the backup) is refused.",
        ),
    ] = False,
    db: DbOption = None,
    key_file: KeyFileOption = None,
    json_out: JsonOption = False,
) -> None:
    """Restore a backup into any store after verifying all of it.

    A damaged, truncated or edited backup, or a wrong key, restores nothing.
    """
    from ..governance.backup import restore

    target = to or resolve_url(ctx, db)
    refuse_in_memory(target, "restore")
    _check_backup_files(backups)

    async def go() -> RestoreResult:
        async with open_store(target, key_file=key_file, readonly=False) as store:
            key = _backup_key(backup_key)
            return await restore(store, backups, key, skip_existing=skip_existing)

    try:
        result = run(go())
    except RestoredPartWay as exc:
        if json_out:  # each of them, for a script to delete (the line on stderr)
            render.print_json(
                {
                    "error": "restored_part_way",
                    "count": len(exc.agents),
                    "agents": [
                        {"agent_id": a, "held_seq": held, "backup_head": head}
                        for a, (held, head) in sorted(exc.agents.items())
                    ],
                }
            )
        raise
    summary = {
        "agents": result.agents,
        "events": result.events,
        "snapshots": result.snapshots,
        "skipped_existing": result.skipped,
        "forgotten": result.forgotten,
        "backups": result.backup_ids,
        "internal_streams": result.internal,
        "internal_stream_names": _stream_names(result.internal_streams),
        "holds_placed": result.holds_placed,
    }
    if json_out:
        render.print_json(summary)
        return
    console = out_console()
    console.print(
        f"[green]✓[/] restored and verified {result.agents:,} agent(s), {result.events:,}"
        f" event(s), {result.snapshots:,} snapshot(s){_with_streams(result.internal_streams)}"
        + (f"; {len(result.forgotten):,} forgotten agent(s) left out" if result.forgotten else "")
    )
    for pattern in result.holds_placed:  # the backup's holds the target lacked
        console.print(f"placed a legal hold on {escape(repr(pattern))} (held in the backup)")
    if result.skipped:  # (as import --skip-existing says it)
        console.print(
            f"skipped {result.skipped:,} existing agent(s): the target's own version kept"
        )


def _check_backup_files(backups: list[str]) -> None:
    """Each local file given for a backup that is plainly something else (a folder, an
    empty file, a store, an export...), refused before the target is opened."""
    from pathlib import Path

    from .file_kinds import check_input_file

    for spec in backups:
        if not spec.startswith("s3://") and Path(spec).exists():  # (missing: said by restore)
            check_input_file(Path(spec), "backup")


@app.command("forget")
@handled
def forget_cmd(
    ctx: typer.Context,
    agent_id: Annotated[str, typer.Argument(metavar="AGENT", help="Agent to forget.")],
    purge: Annotated[
        bool, typer.Option("--purge", help="Also delete its (now unreadable) records.")
    ] = False,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask.")] = False,
    db: DbOption = None,
    key_file: KeyFileOption = None,
    json_out: JsonOption = False,
) -> None:
    """Crypto-shred an agent: destroy its data key, so no copy of its records opens.

    Every tier, replica and backup of the agent becomes unreadable at once. Exit code 1
    when it is declined.
    """
    from ..governance.shredding import forget

    url = resolve_url(ctx, db)
    if not yes and not typer.confirm(
        f"Destroy the data key of {agent_id!r}? This cannot be undone.", err=True
    ):
        raise typer.Exit(1)

    async def go() -> ForgetResult:
        async with open_store(url, key_file=key_file, readonly=False, need_key=True) as store:
            return await forget(store, agent_id, purge=purge)

    result = run(go())
    if json_out:
        render.print_json(
            {
                "agent_id": result.agent_id,
                "key_destroyed": result.destroyed,
                "records_purged": result.purged,
                "head": result.head,
                "key_scopes": list(result.scopes),
            }
        )
        return
    if result.destroyed:
        scopes = ", ".join(result.scopes)  # (the store's key family, "legacy"...)
        out_console().print(
            f"[green]✓[/] {escape(repr(agent_id))} forgotten: its data key is destroyed"
            + f" (key family {escape(scopes)})"
            + (", its records deleted" if result.purged else "")
        )
    else:
        out_console().print(
            f"{escape(repr(agent_id))} had no data key (already forgotten); a tombstone is kept"
        )


async def _given_keys_open(store: StateStore) -> None:
    """A key given (``--key-file``, the environment) that does not open the store's
    records is refused before anything is done, as every command that reads one
    refuses it (:func:`~statekeeper.governance.keycheck.check_keys`): ``backup``
    copies records as stored and a retention dry run plans from clear headers, so
    neither would say it on its own."""
    if store.codec.keyring is not None:
        from ..governance.keycheck import check_keys

        await check_keys(store)


def _stream_names(stream_ids: Sequence[str]) -> list[str]:
    """The store's own streams a backup or restore copied, in words (``audit log``)."""
    from ..arguments import internal_stream_words

    return [internal_stream_words(s) for s in stream_ids]


def _with_streams(stream_ids: Sequence[str]) -> str:
    """``, with the store's audit log and legal holds`` (counted apart from the
    agents), or nothing."""
    names = _stream_names(stream_ids)
    if not names:
        return ""
    listed = names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]
    return f", with the store's {escape(listed)}"


def _is_backup(path: Path) -> bool:
    """The file is a statekeeper backup (so a new backup may replace it, with
    ``--overwrite``)."""
    from ..governance.backup.fileformat import MAGIC

    try:
        with path.open("rb") as fh:
            return fh.read(len(MAGIC) - 1) == MAGIC[:-1]
    except OSError:
        return False
