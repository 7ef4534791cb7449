"""Trajectory records: what an RL iteration or an evaluation played, token by token, on disk.

The format (version 1) is JSON Lines, gzip-compressed when the file name ends in `.gz`.
The first line is a header, every other line is one episode::

    {"format": "tripod-trajectories", "version": 1}
    {"iteration": 3, "source": "train", "env_id": "toy/letters-2", "split": "train",
     "game_index": 5, "group_id": 1, "episode_id": 6, "sample_seed": 42, "end": "won",
     "won": true, "lost": false, "error": null, "max_score": 1.0, "objective": "...",
     "first_observation": "...",
     "turns": [{"observation": "...", "action": "apple", "status": "ok", "reward": 0.5,
                "score": 0.5, "progress": 0.5, "expert_action": "apple",
                "tokens": {"ids": [...], "text": [...], "logprobs": [...],
                           "loss_mask": [...], "trainer_logprobs": [...],
                           "advantages": [...]}}]}

Per agent token (the columns of `tokens`, all the same length as the turn's sampled ids):
`ids` (the sampled ids, exactly the training ids), `text` (each token's piece of the decoded
action; a token that only completes a multi-byte character together with the next one has
the empty piece and the character goes on the last of them), `logprobs` (sampling
logprobs), `loss_mask` (1 where the trainer's loss covers the token), and, when the writer
was given them, `trainer_logprobs` (the trainer's logprobs at update time) and `advantages`.
Floats are rounded to 4 decimals; non-finite numbers are written as `null` and read back as
NaN, so every line is strict JSON a browser can parse. Text is ASCII-escaped JSON, so lone
surrogates (invalid UTF-8 from a model or an env) survive the round trip.

`source` says where the episodes come from (`train` for RL iterations, `eval/<stage>` for
evaluations, `rollout` for `tripod rollout --out`); `iteration` is the RL iteration whose
policy played them (0 before any update). A run keeps its files under
`RUN_DIR/trajectories/` (see `iteration_path` and `eval_path`); `tripod report` reads
every `*.jsonl` / `*.jsonl.gz` there.
"""

from __future__ import annotations

import gzip
import json
import math
import re
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Any, Protocol

from tripod.core.types import Trajectory, Turn

FORMAT = "tripod-trajectories"
VERSION = 1
TRAJECTORY_DIR = "trajectories"

OUTCOMES = ("won", "lost", "env_error", "truncated", "context_limit")
"""Outcome categories of the viewers' filters, in display order (see `outcome`)."""


class RecordError(ValueError):
    """A trajectory file that cannot be read; the message names the file and the line."""


class Tokenizer(Protocol):
    def batch_decode(self, sequences: list[list[int]], **kwargs: Any) -> list[str]: ...


@dataclass
class TokenStats:
    """Trainer-side numbers for one episode, one list per turn aligned with that turn's
    `action_ids` (the layout `token_stats_from_batch` produces from a training batch)."""

    advantages: list[list[float]] | None = None
    trainer_logprobs: list[list[float]] | None = None
    """The trainer's teacher-forced logprobs at update time (compare with sampling's)."""
    loss_masks: list[list[int]] | None = None
    """The trainer's loss mask; without it the mask is derived from the trajectory
    (`Turn.trainable`, and 0 everywhere for an env-error episode, which is excluded)."""


@dataclass
class TurnTokens:
    """The agent tokens of one turn, column by column (all lists have the same length)."""

    ids: list[int]
    text: list[str]
    logprobs: list[float]
    loss_mask: list[int]
    trainer_logprobs: list[float] | None = None
    advantages: list[float] | None = None


@dataclass
class TurnRecord:
    observation: str
    action: str
    status: str
    reward: float
    tokens: TurnTokens
    score: float = 0.0
    progress: float = 0.0
    expert_action: str | None = None


@dataclass
class EpisodeRecord:
    """One episode as recorded; `end` is the `EpisodeEnd` value (kept as text, so files
    written by newer code with new end reasons still load)."""

    iteration: int
    source: str
    env_id: str
    split: str
    game_index: int
    group_id: int
    episode_id: int
    sample_seed: int
    end: str
    won: bool
    lost: bool
    objective: str
    first_observation: str
    turns: list[TurnRecord] = field(default_factory=list)
    error: str | None = None
    max_score: float = 1.0

    @property
    def outcome(self) -> str:
        return outcome(self.end)

    @property
    def total_reward(self) -> float:
        return sum(t.reward for t in self.turns)


def outcome(end: str) -> str:
    """The filter category of an episode end: won, lost, env_error, context_limit, or
    truncated (the turn cap, an action without its end-of-turn token, or the env's own
    time limit: the episode stopped before the game decided it)."""
    if end in ("won", "lost", "env_error"):
        return end
    if "context" in end:
        return "context_limit"
    return "truncated"


# -- writing ---------------------------------------------------------------------------------
def token_pieces(tokenizer: Tokenizer, ids: Sequence[int]) -> list[str]:
    """Each token's piece of the decoded text, so that the pieces join to the decoded text.

    Decoding tokens one by one breaks characters split across byte-level tokens (each half
    decodes to U+FFFD); decoding growing prefixes and taking the difference does not.
    """
    ids = list(ids)
    if not ids:
        return []
    prefixes = tokenizer.batch_decode([ids[: i + 1] for i in range(len(ids))],
                                      skip_special_tokens=False,
                                      clean_up_tokenization_spaces=False)
    pieces, done = [], ""
    for i, text in enumerate(prefixes):
        last = i == len(ids) - 1
        if not text.startswith(done):  # the decoder rewrote earlier text: fall back
            pieces.append(tokenizer.batch_decode([[ids[i]]], skip_special_tokens=False)[0])
            done = text
        elif text.endswith("\ufffd") and not last:  # an incomplete character: wait for it
            pieces.append("")
        else:
            pieces.append(text[len(done):])
            done = text
    return pieces


def _num(x: float) -> float | None:
    x = float(x)
    return round(x, 4) if math.isfinite(x) else None


def _column(stats: list[list[Any]] | None, k: int, turn: Turn, name: str,
            episode_id: int) -> list[Any] | None:
    if stats is None:
        return None
    values = stats[k] if k < len(stats) else ([] if not turn.action_ids else None)
    if values is None or len(values) != len(turn.action_ids):
        got = "none" if values is None else len(values)
        raise ValueError(f"episode {episode_id} turn {k}: {got} {name} for "
                         f"{len(turn.action_ids)} sampled tokens")
    return list(values)


def _turn_json(turn: Turn, k: int, traj: Trajectory, tokenizer: Tokenizer,
               stats: TokenStats | None) -> dict[str, Any]:
    eid = traj.episode_id
    masks = _column(stats.loss_masks if stats else None, k, turn, "loss-mask values", eid)
    if masks is None:
        masks = [int(turn.trainable and not traj.failed)] * len(turn.action_ids)
    tokens: dict[str, Any] = {
        "ids": list(turn.action_ids), "text": token_pieces(tokenizer, turn.action_ids),
        "logprobs": [_num(x) for x in turn.logprobs], "loss_mask": [int(m) for m in masks]}
    for key, values in (("trainer_logprobs", stats.trainer_logprobs if stats else None),
                        ("advantages", stats.advantages if stats else None)):
        column = _column(values, k, turn, key.replace("_", " "), eid)
        if column is not None:
            tokens[key] = [_num(x) for x in column]
    return {"observation": turn.observation, "action": turn.action_text,
            "status": turn.status.value, "reward": _num(turn.reward), "score": _num(turn.score),
            "progress": _num(turn.progress), "expert_action": turn.expert_action,
            "tokens": tokens}


def episode_json(traj: Trajectory, tokenizer: Tokenizer, iteration: int, source: str = "train",
                 stats: TokenStats | None = None) -> dict[str, Any]:
    """One episode line of the format (a plain dict, ready for `json.dumps`)."""
    return {"iteration": iteration, "source": source, "env_id": traj.env_id,
            "split": traj.split, "game_index": traj.game_index, "group_id": traj.group_id,
            "episode_id": traj.episode_id, "sample_seed": traj.sample_seed,
            "end": traj.end.value, "won": traj.won, "lost": traj.lost, "error": traj.error,
            "max_score": _num(traj.max_score), "objective": traj.objective,
            "first_observation": traj.first_observation,
            "turns": [_turn_json(t, k, traj, tokenizer, stats) for k, t in enumerate(traj.turns)]}


def _open_text(path: Path, mode: str) -> IO[str]:
    if path.name.endswith(".gz"):
        return gzip.open(path, mode + "t", encoding="ascii")
    return path.open(mode, encoding="ascii")


def write_trajectories(path: str | Path, trajs: list[Trajectory], tokenizer: Tokenizer,
                       iteration: int, stats: dict[int, TokenStats] | None = None,
                       source: str = "train", append: bool = False) -> Path:
    """Write `trajs` (with token pieces from `tokenizer`) to `path`; gzip if it ends in .gz.

    `stats` maps an episode id to its trainer numbers (advantages, trainer logprobs, loss
    masks); episodes without an entry are written without them. A list whose length does
    not match its turn's sampled ids is an error (a misaligned record would show wrong
    colours silently). With `append`, episodes are added to an existing file (a gzip file
    gets a new member, which readers handle); the header is written only to a new file.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [json.dumps(episode_json(t, tokenizer, iteration, source,
                                     (stats or {}).get(t.episode_id)),
                        separators=(",", ":"), allow_nan=False) for t in trajs]
    fresh = not (append and path.exists() and path.stat().st_size > 0)
    if fresh:
        lines.insert(0, json.dumps({"format": FORMAT, "version": VERSION}))
    with _open_text(path, "w" if fresh else "a") as f:
        f.writelines(line + "\n" for line in lines)
    return path


def iteration_path(run_dir: str | Path, iteration: int) -> Path:
    """Where a run keeps the trajectories of RL iteration `iteration`."""
    return Path(run_dir) / TRAJECTORY_DIR / f"iter_{iteration:06d}.jsonl.gz"


def eval_path(run_dir: str | Path, stage: str, env_id: str) -> Path:
    """Where a run keeps the trajectories of an evaluation (`stage` as in results.json)."""
    return Path(run_dir) / TRAJECTORY_DIR / f"eval_{stage}_{env_id.replace('/', '_')}.jsonl.gz"


def sample_groups(trajs: list[Trajectory], groups: int) -> list[Trajectory]:
    """The episodes of the first `groups` groups (whole groups, so a viewer can compare the
    episodes a group baseline compared): the default sample an iteration saves."""
    keep = sorted({t.group_id for t in trajs})[:groups]
    return [t for t in trajs if t.group_id in keep]


def token_stats_from_batch(batch: Any, trainer_logprobs: Any | None = None
                           ) -> dict[int, TokenStats]:
    """Per-episode, per-turn advantages and loss masks from a training batch.

    `batch` is a `tripod.train.batch.TrainBatch`: [B, T] `turn_ids` (the turn index on agent
    tokens, -1 elsewhere), `loss_mask` and `advantages` (None before the advantage step), and
    [B] `episode_ids`; `trainer_logprobs` is a [B, T] tensor
    aligned with `input_ids`. Agent tokens are found by `turn_ids`, not the loss mask, so
    masked-out agent tokens keep their place.
    """
    turn_ids = batch.turn_ids.tolist()
    columns = {"loss_masks": batch.loss_mask.tolist()}
    if batch.advantages is not None:
        columns["advantages"] = batch.advantages.tolist()
    if trainer_logprobs is not None:
        columns["trainer_logprobs"] = trainer_logprobs.tolist()
    found: dict[int, dict[str, dict[int, list]]] = {}
    for row, episode in enumerate(batch.episode_ids.tolist()):
        per_name = found.setdefault(int(episode), {name: {} for name in columns})
        for pos, k in enumerate(turn_ids[row]):
            if k < 0:
                continue
            for name, values in columns.items():
                per_name[name].setdefault(k, []).append(values[row][pos])
    out = {}
    for episode, per_name in found.items():
        n = max((max(turns, default=-1) for turns in per_name.values()), default=-1) + 1
        lists = {name: [turns.get(k, []) for k in range(n)] for name, turns in per_name.items()}
        lists["loss_masks"] = [[int(m) for m in turn] for turn in lists["loss_masks"]]
        out[episode] = TokenStats(**lists)
    return out


# -- reading ---------------------------------------------------------------------------------
def _lines(path: Path) -> Iterator[tuple[int, bytes]]:
    """Numbered raw lines; a truncated or corrupt gzip stream is an error naming the line."""
    opener = gzip.open if path.name.endswith(".gz") else open
    lineno = 0
    try:
        with opener(path, "rb") as f:
            for lineno, raw in enumerate(f, start=1):  # noqa: B007 (used after the loop)
                yield lineno, raw
    except (EOFError, OSError, zlib.error) as exc:
        raise RecordError(f"{path}: line {lineno + 1}: cannot read the file "
                          f"(truncated or corrupt: {exc})") from exc


def _tokens(data: dict[str, Any]) -> TurnTokens:
    def floats(values: list | None) -> list[float] | None:
        return None if values is None else [math.nan if v is None else float(v) for v in values]

    tokens = TurnTokens(ids=[int(i) for i in data["ids"]], text=list(data["text"]),
                        logprobs=floats(data["logprobs"]),
                        loss_mask=[int(m) for m in data["loss_mask"]],
                        trainer_logprobs=floats(data.get("trainer_logprobs")),
                        advantages=floats(data.get("advantages")))
    n = len(tokens.ids)
    for name in ("text", "logprobs", "loss_mask", "trainer_logprobs", "advantages"):
        values = getattr(tokens, name)
        if values is not None and len(values) != n:
            raise ValueError(f"tokens.{name} has {len(values)} values for {n} ids")
    return tokens


def _episode(data: dict[str, Any]) -> EpisodeRecord:
    turns = [TurnRecord(observation=t["observation"], action=t["action"], status=t["status"],
                        reward=math.nan if t["reward"] is None else float(t["reward"]),
                        tokens=_tokens(t["tokens"]), score=float(t.get("score") or 0.0),
                        progress=float(t.get("progress") or 0.0),
                        expert_action=t.get("expert_action")) for t in data["turns"]]
    keys = ("iteration", "source", "env_id", "split", "game_index", "group_id", "episode_id",
            "sample_seed", "end", "won", "lost", "objective", "first_observation")
    return EpisodeRecord(**{k: data[k] for k in keys}, turns=turns, error=data.get("error"),
                         max_score=float(data.get("max_score") or 1.0))


def _check_header(data: dict[str, Any]) -> None:
    if data.get("format") != FORMAT:
        raise ValueError(f"not a {FORMAT} header: format={data.get('format')!r}")
    if int(data.get("version", 0)) > VERSION:
        raise ValueError(f"format version {data['version']} is newer than this tripod "
                         f"reads ({VERSION}); upgrade tripod")


def iter_trajectories(path: str | Path) -> Iterator[EpisodeRecord]:
    """Episodes of one file, in order. Any unreadable line raises `RecordError` naming
    the file and the line (a truncated last line included: it is never skipped silently)."""
    path = Path(path)
    if not path.is_file():
        raise RecordError(f"{path}: no such file")
    for lineno, raw in _lines(path):
        if not raw.strip():
            continue
        try:
            data = json.loads(raw.decode("utf-8"))
            if not isinstance(data, dict):
                raise ValueError(f"expected a JSON object, got {type(data).__name__}")
            if "format" in data:
                _check_header(data)
                continue
            yield _episode(data)
        except KeyError as exc:
            raise RecordError(f"{path}: line {lineno}: missing field {exc.args[0]!r}") from exc
        except (ValueError, TypeError, AttributeError) as exc:  # JSONDecodeError included
            raise RecordError(f"{path}: line {lineno}: {exc}") from exc
        except (OverflowError, RecursionError) as exc:  # a number too big, nesting too deep
            raise RecordError(f"{path}: line {lineno}: {type(exc).__name__}: "
                              f"{str(exc)[:200]}") from None


def read_trajectories(path: str | Path) -> list[EpisodeRecord]:
    return list(iter_trajectories(path))


_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def well_formed(text: str) -> str:
    """`text` with lone surrogates (undecodable bytes of a model or env) as U+FFFD."""
    return _LONE_SURROGATE.sub("\ufffd", text)


def _strict(value: Any) -> Any:
    """NaN and infinities as null (JSON.parse rejects them) and well-formed strings (a lone
    surrogate in a page's DOM crashes Chromium's --dump-dom), recursively."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, str):
        return well_formed(value)
    if isinstance(value, list):
        return [_strict(v) for v in value]
    if isinstance(value, dict):
        return {k: _strict(v) for k, v in value.items()}
    return value


def episode_records_json(episodes: list[EpisodeRecord]) -> list[dict[str, Any]]:
    """Records back in the file's episode layout as strict JSON with well-formed text
    (for the HTML viewer; the file itself keeps lone surrogates as they were)."""
    return [_strict(asdict(e)) for e in episodes]


def trajectory_files(run_dir: str | Path) -> list[Path]:
    """The trajectory files of a run, in name order (iterations, then evaluations)."""
    root = Path(run_dir) / TRAJECTORY_DIR
    if not root.is_dir():
        return []
    return sorted(p for p in root.rglob("*") if p.is_file()
                  and (p.name.endswith(".jsonl") or p.name.endswith(".jsonl.gz")))
