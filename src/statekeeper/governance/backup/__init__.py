"""Encrypted, compressed, chunked backups with a signed manifest, restorable into any
backend (:mod:`.writer`, :mod:`.restore`; the file layout is :mod:`.fileformat`)."""

from .fileformat import ENV_BACKUP_KEY, BackupKey
from .restore import RestoreResult, restore
from .writer import BackupResult, backup

__all__ = ["ENV_BACKUP_KEY", "BackupKey", "BackupResult", "RestoreResult", "backup", "restore"]
