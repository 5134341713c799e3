"""Pictures as files: heat map, machine diagram and activity time series (SVG, PNG)."""

from __future__ import annotations

import asyncio
import builtins
import json
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from statekeeper import StateStore
from statekeeper.cli import app
from statekeeper.errors import ConfigurationError, InvalidArgument
from statekeeper.observability.analysis.markov import TransitionMatrix, estimate
from statekeeper.observability.analysis.series import activity_from_events, activity_series
from statekeeper.observability.pictures import (
    write_heat_map,
    write_machine_diagram,
    write_time_series,
)

from ..conftest import FakeClock

pytest.importorskip("matplotlib")

SVG = "{http://www.w3.org/2000/svg}"


def _matrix() -> TransitionMatrix:
    # idle→processing ×3, processing→completed ×2, processing→tool_call ×1,
    # tool_call→processing ×1
    pairs = [("idle", "processing")] * 3 + [("processing", "completed")] * 2
    pairs += [("processing", "tool_call"), ("tool_call", "processing")]
    return estimate(pairs)


def _svg_texts(path: Path) -> list[str]:
    root = ET.parse(path).getroot()  # well-formed XML, or this raises
    assert root.tag == f"{SVG}svg"
    return ["".join(t.itertext()).strip() for t in root.iter(f"{SVG}text") if "".join(t.itertext())]


def _png_size(path: Path) -> tuple[int, int]:
    from matplotlib import image

    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    pixels: Any = image.imread(path)  # decodes the whole file (a truncated one raises)
    height, width = pixels.shape[:2]
    return int(width), int(height)


def test_heat_map_svg_names_every_state_and_probability(tmp_path: Path) -> None:
    m = _matrix()
    path = write_heat_map(m, tmp_path / "p.svg")
    texts = _svg_texts(path)
    for state in m.states:
        assert state in texts
    joined = "\n".join(texts)
    # processing: →completed 2/3, →tool_call 1/3; idle→processing 3/3
    assert "0.67\n(n=2)" in joined or "0.67(n=2)" in joined.replace("\n", "")
    assert "0.33(n=1)" in joined.replace("\n", "")
    assert "1.00(n=3)" in joined.replace("\n", "")
    assert "1.00(absorbing)" in joined.replace("\n", "")  # completed: never left
    assert "n = 7 transitions" in joined
    # the same input makes the same bytes (no date, stable ids)
    again = write_heat_map(m, tmp_path / "q.svg")
    assert again.read_bytes() == path.read_bytes()


def test_machine_diagram_svg_puts_the_probabilities_on_the_edges(tmp_path: Path) -> None:
    m = _matrix()
    texts = _svg_texts(write_machine_diagram(m, tmp_path / "m.svg"))
    assert set(m.states) <= set(texts)
    edges = sorted(t for t in texts if t.endswith(")") and t[0].isdigit())
    assert edges == ["0.33 (1)", "0.67 (2)", "1.00 (1)", "1.00 (3)"]
    few = _svg_texts(write_machine_diagram(m, tmp_path / "f.svg", min_probability=0.5))
    assert "0.33 (1)" not in few and "0.67 (2)" in few


def test_a_self_loop_is_drawn_with_its_probability(tmp_path: Path) -> None:
    m = estimate([("busy", "busy"), ("busy", "idle"), ("idle", "busy")])
    texts = _svg_texts(write_machine_diagram(m, tmp_path / "loop.svg"))
    assert "0.50 (1)" in texts and texts.count("0.50 (1)") == 2  # busy→busy, busy→idle


def test_png_files_decode_with_their_dimensions(tmp_path: Path) -> None:
    m = _matrix()
    width, height = _png_size(write_heat_map(m, tmp_path / "p.png"))
    assert width > 200 and height > 200
    width, height = _png_size(write_machine_diagram(m, tmp_path / "m.png"))
    assert width > 200 and height > 200
    series = activity_from_events([("a", float(t), "idle") for t in range(0, 100, 7)], step=10)
    width, height = _png_size(write_time_series(series, tmp_path / "t.png"))
    assert width > 500 and height > 500


def test_bad_picture_paths_are_refused_before_anything_is_written(tmp_path: Path) -> None:
    m = _matrix()
    with pytest.raises(InvalidArgument, match=r"\.svg or \.png files, not 'p\.jpg'"):
        write_heat_map(m, tmp_path / "p.jpg")
    with pytest.raises(InvalidArgument, match="no such directory"):
        write_heat_map(m, tmp_path / "nope" / "p.svg")
    (tmp_path / "d.svg").mkdir()
    with pytest.raises(InvalidArgument, match="is a directory"):
        write_machine_diagram(m, tmp_path / "d.svg")
    with pytest.raises(InvalidArgument, match="min_probability"):
        write_machine_diagram(m, tmp_path / "m.svg", min_probability=2.0)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d.svg"]


@pytest.mark.parametrize("suffix", ["svg", "png"])
def test_a_file_statekeeper_did_not_write_is_never_overwritten(tmp_path: Path, suffix: str) -> None:
    """Drawing again over one of our pictures is fine (a re-run); a hand-made picture,
    any other file, or a link by that name is refused and left byte for byte."""
    m = _matrix()
    ours = write_heat_map(m, tmp_path / f"ours.{suffix}")
    first = ours.read_bytes()
    write_machine_diagram(m, ours)  # ours: drawn over
    assert ours.read_bytes() != first
    theirs = tmp_path / f"theirs.{suffix}"
    theirs.write_bytes(b"<svg>hand-drawn</svg>" if suffix == "svg" else b"\x89PNG not ours")
    elsewhere = tmp_path / "elsewhere.txt"
    elsewhere.write_text("someone's notes")
    link = tmp_path / f"link.{suffix}"
    link.symlink_to(elsewhere)
    for path in (theirs, link):
        before = path.read_bytes()
        with pytest.raises(InvalidArgument, match="is not a picture statekeeper wrote"):
            write_heat_map(m, path)
        assert path.read_bytes() == before
    assert elsewhere.read_text() == "someone's notes"
    assert link.is_symlink()
    leftovers = {p.name for p in tmp_path.iterdir()} - {
        f"ours.{suffix}",
        theirs.name,
        link.name,
        elsewhere.name,
    }
    assert not leftovers, leftovers


def test_without_matplotlib_the_error_names_the_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = builtins.__import__

    def no_matplotlib(name: str, *args: Any, **kwargs: Any) -> Any:
        if name == "matplotlib" or name.startswith("matplotlib."):
            raise ImportError(f"No module named {name!r}")
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_matplotlib)
    with pytest.raises(ConfigurationError, match=r"pip install 'statekeeper\[plots\]'"):
        write_heat_map(_matrix(), tmp_path / "p.svg")
    assert not (tmp_path / "p.svg").exists()


def test_activity_series_hand_counted() -> None:
    events = [
        ("a", 0.0, "idle"),
        ("b", 1.0, "idle"),
        ("a", 12.0, "busy"),
        ("b", 15.0, "busy"),
        ("a", 18.0, None),  # data only
        ("a", 25.0, "idle"),
    ]
    s = activity_from_events(events, step=10.0)
    assert s.starts == (0.0, 10.0, 20.0)
    assert s.events == (2, 3, 1)
    assert s.transitions == (0, 2, 1)
    assert s.active_agents == (2, 2, 1)
    assert s.entropy == (0.0, 0.0, 0.0)
    assert s.agents_by_state == {"busy": (0, 2, 1), "idle": (2, 0, 1)}
    # a period starting later: earlier events only place the agents
    later = activity_from_events(events, step=10.0, since=10.0, until=30.0)
    assert later.events == (3, 1) and later.agents_by_state["busy"] == (2, 1)
    with pytest.raises(InvalidArgument, match="step must be a positive"):
        activity_from_events(events, step=0)
    with pytest.raises(InvalidArgument, match="buckets"):
        activity_from_events(events, step=0.0001)
    assert activity_from_events([], step=1.0).starts == ()


def test_time_series_svg_has_its_panels_and_states(tmp_path: Path) -> None:
    events = [(f"a{i % 3}", float(t), ("idle", "busy")[t % 2]) for i, t in enumerate(range(60))]
    s = activity_from_events(events, step=5.0)
    texts = _svg_texts(write_time_series(s, tmp_path / "t.svg", title="fleet"))
    for label in ("fleet", "events appended / s", "transitions / s", "active agents"):
        assert label in texts
    assert "busy" in texts and "idle" in texts  # the agents-by-state legend


async def _store_with_moves(url: str) -> None:
    clock = FakeClock(1_700_000_000.0, step=30.0)
    async with StateStore(url, witness=False, clock=clock) as store:
        for agent_id in ("team:a", "team:b", "solo:c"):
            await store.create(agent_id, {}, fsm_state="idle")
            for state in ("processing", "tool_call", "processing", "completed"):
                await store.append(agent_id, "transition", fsm_state=state)


async def test_activity_series_from_a_store(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    await _store_with_moves(url)
    async with StateStore(url, witness=False) as store:
        s = await activity_series(store, 60.0)
    assert sum(s.events) == 15 and sum(s.transitions) == 12
    assert [v[-1] for v in s.agents_by_state.values()] == [3, 0, 0, 0]  # completed first


def test_cli_analyze_and_metrics_plot_write_pictures(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    asyncio.run(_store_with_moves(url))
    runner = CliRunner()
    heat, machine = tmp_path / "heat.svg", tmp_path / "machine.png"
    result = runner.invoke(
        app,
        ["analyze", "--db", url, "--out", str(heat), "--diagram-out", str(machine), "--json"],
    )
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["pictures"] == [str(heat), str(machine)]
    assert "processing" in _svg_texts(heat) and "1.00 (6)" not in _svg_texts(heat)
    assert _png_size(machine)[0] > 200
    # one picture per group, the group's name before the suffix
    result = runner.invoke(
        app, ["analyze", "--db", url, "--group", "namespace", "--out", str(heat)]
    )
    assert result.exit_code == 0, result.output
    assert (tmp_path / "heat.team.svg").exists() and (tmp_path / "heat.solo.svg").exists()
    assert "n = 8 transitions" in "".join(_svg_texts(tmp_path / "heat.team.svg"))
    plot = tmp_path / "activity.svg"
    result = runner.invoke(
        app, ["metrics", "plot", "--db", url, "--out", str(plot), "--step", "60"]
    )
    assert result.exit_code == 0, result.output
    assert "15 events, 12 transitions" in result.stdout
    assert "agents by state" in _svg_texts(plot)
    result = runner.invoke(app, ["metrics", "plot", "--db", url, "--out", str(tmp_path / "x.gif")])
    assert result.exit_code == 2 and "x.gif" in result.output
    assert not (tmp_path / "x.gif").exists()
