"""Pictures as files for ``statekeeper analyze --out/--diagram-out`` and
``statekeeper metrics plot`` (drawn by :mod:`statekeeper.observability.pictures`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["check_picture_paths", "group_path", "write_matrix_pictures"]


def check_picture_paths(*paths: Path | None) -> None:
    """Refuse a bad ``--out`` before any work: a suffix other than .svg/.png, a missing
    folder, or matplotlib not installed."""
    from ..observability import pictures

    given = [p for p in paths if p is not None]
    for path in given:
        pictures.check_path(path)
    if given:
        pictures.require_matplotlib()


def group_path(path: Path, group: str, groups: int) -> Path:
    """``path`` for one group's picture: as given for a single group, else with the
    group's name before the suffix (``heat.svg`` -> ``heat.billing.svg``)."""
    if groups <= 1:
        return path
    safe = "".join(c if c.isalnum() or c in "-_" else "_" for c in group) or "_"
    return path.with_name(f"{path.stem}.{safe}{path.suffix}")


def write_matrix_pictures(
    matrices: dict[str, dict[str, Any]], out: Path | None, diagram_out: Path | None
) -> list[Path]:
    """Write the heat map and/or machine diagram of every group's matrix."""
    if out is None and diagram_out is None:
        return []
    from ..observability.analysis.markov import TransitionMatrix
    from ..observability.pictures import write_heat_map, write_machine_diagram

    written: list[Path] = []
    for name, d in matrices.items():
        m = TransitionMatrix.from_dict(d)
        label = "all agents" if name == "all" else f"group {name!r}"
        if out is not None:
            path = group_path(out, name, len(matrices))
            written.append(
                write_heat_map(
                    m, path, title=f"{label}: P(from → to), n = {m.transitions} transitions"
                )
            )
        if diagram_out is not None:
            path = group_path(diagram_out, name, len(matrices))
            written.append(
                write_machine_diagram(
                    m, path, title=f"{label}: observed transitions (n = {m.transitions})"
                )
            )
    return written
