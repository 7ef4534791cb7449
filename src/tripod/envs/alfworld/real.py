"""The published ALFWorld games, when a user has downloaded them (`alfworld-download`).

Layout (ALFWorld's own): ``$ALFWORLD_DATA/json_2.1.1/{train,valid_seen,valid_unseen}/
<task_type>-<Object>-<Mrecep>-<Receptacle>-<scene>/<trial>/game.tw-pddl``, with the trial's
``traj_data.json`` beside it. Games are filtered as ALFWorld's ``AlfredTWEnv`` filters them:
no movable-receptacle or sliced-object tasks, only the requested task types, only files
marked ``solvable``. tripod's splits map to ALFWorld's: train and sft -> train,
valid -> valid_seen, test -> valid_unseen (the "unseen" evaluation games).
"""

from __future__ import annotations

import json
import os
from functools import cache
from pathlib import Path

from tripod.core.paths import cache_root
from tripod.envs.base import EnvError

DATA_VERSION = "json_2.1.1"
REAL_SPLITS = {"train": "train", "sft": "train", "valid": "valid_seen", "test": "valid_unseen"}


def alfworld_data() -> str:
    """``$ALFWORLD_DATA``, else ``$TRIPOD_CACHE/alfworld/data`` (read at call time). Also
    given to each game's child process, so that importing the `alfworld` wheel there (which
    creates this folder) does not create ``~/.cache/alfworld``."""
    return os.environ.get("ALFWORLD_DATA") or str(cache_root() / "alfworld" / "data")


def data_root(data_dir: str | os.PathLike | None = None) -> Path:
    """``<data_dir or alfworld_data()>/json_2.1.1``."""
    base = data_dir if data_dir is not None else alfworld_data()
    return Path(base).expanduser() / DATA_VERSION


def _missing(root: Path, sub: str, why: str) -> EnvError:
    return EnvError(
        f"ALFWorld data not found ({why}). alfworld/real expects "
        f"{root}/{sub}/<task_type>-<Object>-<Mrecep>-<Receptacle>-<scene>/<trial>/game.tw-pddl "
        "with traj_data.json beside it. Set ALFWORLD_DATA to the folder that holds "
        f"{DATA_VERSION}/ (now {os.environ.get('ALFWORLD_DATA', 'unset')!r}) or pass "
        "data_dir=...; `alfworld-download` fetches the data (needs internet access). "
        "Without it, use alfworld/generated.")


def _playable(trial: Path, task_types: tuple[str, ...]) -> bool:
    """ALFWorld's own filter (alfworld/agents/environment/alfred_tw_env.py)."""
    if "movable" in trial.parent.name or "Sliced" in trial.parent.name:
        return False
    game_file = trial / "game.tw-pddl"
    if not game_file.exists():
        return False
    traj = json.loads((trial / "traj_data.json").read_text())
    if traj.get("task_type") not in task_types:
        return False
    return bool(json.loads(game_file.read_text()).get("solvable"))


def list_games(split: str, task_types: tuple[str, ...],
               data_dir: str | os.PathLike | None = None) -> tuple[Path, ...]:
    """The sorted ``game.tw-pddl`` paths of `split` (a tripod split) for `task_types`."""
    return _list_games(split, task_types, data_root(data_dir))


@cache
def _list_games(split: str, task_types: tuple[str, ...], root: Path) -> tuple[Path, ...]:
    sub = REAL_SPLITS[split]
    folder = root / sub
    if not folder.is_dir():
        raise _missing(root, sub, f"no folder {folder}")
    trials = sorted(p.parent for p in folder.rglob("traj_data.json"))
    games = tuple(t / "game.tw-pddl" for t in trials if _playable(t, task_types))
    if not games:
        raise _missing(root, sub, f"no solvable game of types {', '.join(task_types)} "
                                  f"under {folder}")
    return games
