"""TextWorld games as tripod envs: custom quests, tw-simple and tw-cooking.

Env ids (see PAPER.md, "Environments"):

- ``textworld/w{W}-o{O}-q{Q}``: a custom game with W rooms, O objects and a quest of Q
  actions (e.g. ``textworld/w2-o3-q4``). The objective gives step-by-step instructions.
- ``textworld/simple-{dense,balanced,sparse}``: TextWorld's tw-simple challenge (a fixed
  house; find the food and put it on the stove) at three reward densities. Eating the food
  is a losing event: ``lost=True, won=False``.
- ``textworld/cooking``: TextWorld's tw-cooking challenge (the FTWP games); its options are
  overrides, e.g. ``make("textworld/cooking", recipe=3, go=9)`` (see `CookingGame`).

Games are generated offline and deterministically: game ``index`` of ``split`` is generated
from ``game_seed(split, index)``, compiled once with Inform 7, and cached on disk under
``cache_dir("textworld", <textworld version>, <all generation parameters>, <seed>)``.
`prepare_games` generates many games in parallel; `reset` generates a missing game itself.

What the agent sees (`TextWorldObsConfig`). By default the first observation is the game's
introduction (the objective and the starting room, ASCII-art banner removed) and every later
observation is the game's feedback to the last command, without the status line. Flags
append the room description (``look``), the inventory (``inventory``) and the valid
commands (``admissible_actions``). The first observation of a w2-o3-q4 game::

    Hey, thanks for coming over to the TextWorld today, there is something I need you to
    do for me. First of all, go north. Following that, take the broom from the stand. If
    you have taken the broom, venture south. Then, sit the broom on the counter inside the
    cellar. And once you've done that, you win!

    -= Cellar =-
    You are in a cellar. An ordinary kind of place.
    ...
    There is an unblocked exit to the north.

and with ``make("textworld/w2-o3-q4", inventory=True)``, after ``open fridge``::

    You open the fridge, revealing a teacup.

    Inventory: You are carrying nothing.

Invalid actions. An action is flagged ``invalid_action=True`` when, after `clean_action`,
it is empty; or it is an interpreter meta-command (``quit``, ``restart``, ``undo``,
``save``, ``restore``, ``script``, ``tw-...``), which is not sent to the game because it
would desynchronise TextWorld's state tracking; or the game's parser rejected it (the
feedback is one of Inform 7's parser errors such as "That's not a verb I recognise." or
"You can't see any such thing.", or an incomplete command such as "What do you want to
take?"). A command the game understood but that fails in the world ("You can't go that
way.") is valid: the agent learns from that feedback. Whether the command was among
TextWorld's admissible commands is reported separately in ``info.extra["admissible"]``;
it is not the validity test because that list omits commands the game understands and
answers sensibly (``jump``, ``wait``, abbreviations such as ``x trunk``).

The game runs in a child process (Jericho, the Z-machine interpreter, is a C library that
can hang or crash the whole process on odd input, e.g. a NUL byte). A crash, a hang past
``step_timeout_s`` or an exception inside TextWorld raises `EnvError`; the next `reset`
starts a fresh process.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import asdict, dataclass, fields
from multiprocessing import get_context
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any, Protocol

from tripod.core.paths import cache_dir
from tripod.envs.base import EnvError, Step, StepInfo, clean_action, game_seed
from tripod.envs.registry import register

CUSTOM_PATTERN = r"textworld/w(\d+)-o(\d+)-q(\d+)"
SIMPLE_PATTERN = r"textworld/simple-(dense|balanced|sparse)"
COOKING_PATTERN = r"textworld/cooking"

# ----------------------------------------------------------------------------------------
# Game generation: one small config per family, each knows its cache key and how to build.
# ----------------------------------------------------------------------------------------


class GameConfig(Protocol):
    """What is needed to generate a game from a seed."""

    @property
    def key(self) -> str:
        """A folder name made of every generation parameter (the cache key)."""
        ...

    def build(self, options: Any) -> Any:
        """Build the `textworld.Game` for `options` (a seeded `textworld.GameOptions`)."""
        ...


@dataclass(frozen=True)
class CustomGame:
    """A custom TextWorld game (``tw-make custom``): rooms, objects, quest length."""

    world_size: int
    """Number of rooms."""
    nb_objects: int
    """Number of objects (quest objects plus distractors)."""
    quest_length: int
    """Number of actions in the winning walkthrough."""

    def __post_init__(self) -> None:
        if self.world_size < 1 or self.nb_objects < 0 or self.quest_length < 1:
            raise ValueError(f"invalid custom game sizes: {self}")

    @property
    def key(self) -> str:
        return f"custom-w{self.world_size}-o{self.nb_objects}-q{self.quest_length}"

    def build(self, options: Any) -> Any:
        from textworld.generator import make_game

        options.nb_rooms = self.world_size
        options.nb_objects = self.nb_objects
        options.quest_length = self.quest_length
        return make_game(options)


@dataclass(frozen=True)
class SimpleGame:
    """TextWorld's tw-simple challenge (see `textworld.challenges.tw_simple`)."""

    rewards: str = "dense"
    """Reward density: ``dense``, ``balanced`` or ``sparse`` (sparse: only the final goal)."""
    goal: str = "detailed"
    """Objective shown: ``detailed`` (step by step), ``brief`` or ``none``."""
    test_foods: bool = False
    """Draw the food from TextWorld's held-out food names (garlic, kiwi, carrot)."""

    def __post_init__(self) -> None:
        if self.rewards not in ("dense", "balanced", "sparse"):
            raise ValueError(f"rewards must be dense, balanced or sparse, got {self.rewards!r}")
        if self.goal not in ("detailed", "brief", "none"):
            raise ValueError(f"goal must be detailed, brief or none, got {self.goal!r}")

    @property
    def key(self) -> str:
        return f"simple-{self.rewards}-goal_{self.goal}-testfoods_{int(self.test_foods)}"

    def build(self, options: Any) -> Any:
        from textworld.challenges import CHALLENGES

        settings = {"rewards": self.rewards, "goal": self.goal, "test": self.test_foods}
        return CHALLENGES["tw-simple"][1](settings, options)


@dataclass(frozen=True)
class CookingGame:
    """TextWorld's tw-cooking challenge (the First TextWorld Problems games)."""

    recipe: int = 2
    """Number of ingredients in the recipe."""
    take: int = 1
    """How many ingredients must be found (at most `recipe`); the others are in hand."""
    go: int = 6
    """Number of rooms: 1, 6, 9 or 12."""
    open: bool = True
    """Containers and doors must be opened."""
    cook: bool = True
    """Some ingredients must be cooked (roasted, fried, grilled)."""
    cut: bool = True
    """Some ingredients must be cut (sliced, diced, chopped)."""
    drop: bool = False
    """The inventory has a limited capacity."""
    recipe_seed: int = 0
    """Fixed recipe seed (0: the recipe varies with the game seed)."""
    food_split: str = "train"
    """TextWorld's own food distribution: ``train``, ``valid`` or ``test`` (by default the
    env's split decides: ``valid`` and ``test`` use unseen foods, the others ``train``)."""

    def __post_init__(self) -> None:
        if self.go not in (1, 6, 9, 12):
            raise ValueError(f"go must be 1, 6, 9 or 12, got {self.go}")
        if self.recipe < 1 or not 0 <= self.take <= self.recipe:
            raise ValueError(f"need recipe >= 1 and 0 <= take <= recipe, got {self}")
        if self.food_split not in ("train", "valid", "test"):
            raise ValueError(f"food_split must be train, valid or test, got {self.food_split!r}")

    @property
    def key(self) -> str:
        flags = "".join(name for name in ("open", "cook", "cut", "drop") if getattr(self, name))
        return (f"cooking-recipe{self.recipe}-take{self.take}-go{self.go}-{flags or 'none'}"
                f"-rseed{self.recipe_seed}-{self.food_split}")

    def build(self, options: Any) -> Any:
        from textworld.challenges import CHALLENGES

        settings = {"recipe": self.recipe, "take": self.take, "go": self.go, "open": self.open,
                    "cook": self.cook, "cut": self.cut, "drop": self.drop,
                    "recipe_seed": self.recipe_seed, "split": self.food_split}
        return CHALLENGES["tw-cooking"][1](settings, options)


def _tw_version() -> str:
    import textworld

    return textworld.__version__


def game_dir(game: GameConfig, seed: int) -> Path:
    """The cache folder of one game: every generation parameter, the seed, the TextWorld
    version (a new generator may build a different game from the same seed)."""
    return cache_dir("textworld", f"tw{_tw_version()}", game.key) / f"seed{seed}"


def _is_complete(folder: Path) -> bool:
    return (folder / "game.z8").is_file() and (folder / "game.json").is_file()


def generate_game(game: GameConfig, seed: int) -> Path:
    """Generate and compile one game unless cached; returns its folder.

    Written atomically: the game is built in a private temporary folder next to the final
    one and renamed into place, so a crash or a concurrent generator never leaves a
    half-written game under the final name.
    """
    folder = game_dir(game, seed)
    if _is_complete(folder):
        return folder
    from textworld import GameOptions
    from textworld.generator import compile_game

    tmp = folder.parent / f".tmp-{folder.name}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    tmp.mkdir(parents=True)
    try:
        options = GameOptions()
        options.seeds = seed
        options.path = str(tmp / "game.z8")
        options.force_recompile = True
        compile_game(game.build(options), options)
        try:
            os.rename(tmp, folder)
        except OSError:  # another process finished the same game first
            if not _is_complete(folder):
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return folder


def _generate_task(game: GameConfig, seed: int) -> str:
    return str(generate_game(game, seed))


def prepare_games(env_id: str, split: str, indices: Sequence[int], workers: int = 2,
                  progress: bool = True, **overrides: Any) -> list[Path]:
    """Generate (or find cached) games ``indices`` of `split` for `env_id`, in parallel.

    Returns the game folders in the order of `indices`. Workers are separate processes
    (``spawn``, safe next to threads and CUDA); a progress bar shows while games are built.
    """
    game, _, _ = _parse(env_id, split, dict(overrides))
    seeds = [game_seed(split, i) for i in indices]
    todo = sorted({s for s in seeds if not _is_complete(game_dir(game, s))})
    if todo and workers > 1 and len(todo) > 1:
        _generate_parallel(game, todo, workers, progress, env_id)
    else:
        for seed in _track(todo, progress, f"generating {env_id}"):
            generate_game(game, seed)
    return [game_dir(game, s) for s in seeds]


def _track(items: list[int], show: bool, label: str) -> Iterable[int]:
    if not show or not items:
        return items
    from rich.progress import track

    return track(items, description=label)


def _generate_parallel(game: GameConfig, seeds: list[int], workers: int, show: bool,
                       label: str) -> None:
    from rich.progress import Progress

    with Progress(disable=not show) as bar, ProcessPoolExecutor(
            max_workers=min(workers, len(seeds)), mp_context=get_context("spawn")) as pool:
        task = bar.add_task(f"generating {label}", total=len(seeds))
        futures = [pool.submit(_generate_task, game, seed) for seed in seeds]
        for future in as_completed(futures):
            future.result()  # re-raise a generation error here
            bar.advance(task)


# ----------------------------------------------------------------------------------------
# Observation config and text clean-up.
# ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TextWorldObsConfig:
    """What the agent sees besides the game's feedback to its last command."""

    objective: bool = True
    """Make sure the objective is in the first observation (TextWorld's introduction
    already contains it; it is prepended when it does not)."""
    look: bool = False
    """Append the current room description after every feedback."""
    inventory: bool = False
    """Append the inventory after every feedback."""
    admissible_actions: bool = False
    """Append TextWorld's admissible commands (the paper trains without these hints)."""


_BANNER_LINE = re.compile(r"^[\s_|\\/$<>()\-]*$")
_STATUS_LINE = re.compile(r"\n>[^\n]*\Z")
_END_PROMPT = re.compile(r"Would you like to RESTART, RESTORE a saved game, QUIT or UNDO[^\n]*")


def _strip_banner(text: str) -> str:
    """Drop the leading ASCII-art "TextWorld" banner (lines of only drawing characters)."""
    lines = text.split("\n")
    start = 0
    while start < len(lines) and _BANNER_LINE.match(lines[start]):
        start += 1
    return "\n".join(lines[start:])


def clean_feedback(text: str) -> str:
    """The game's text without the interpreter's status line, the end-of-game prompt and
    runs of blank lines."""
    text = _STATUS_LINE.sub("", text or "")
    text = _END_PROMPT.sub("", text)
    text = "\n".join(line.strip() for line in text.split("\n"))
    return re.sub(r"\n{3,}", "\n\n", text).strip()


# Inform 7 parser errors and incomplete commands: nothing happened in the world.
_PARSER_ERRORS = re.compile(
    r"^(That's not a verb I recognise|I didn't understand|I only understood you as far as"
    r"|You can't see any such thing|I beg your pardon|You seem to have said too little"
    r"|What do you want to |Whom do you want to |You'll have to say which compass direction"
    r"|You have to be more specific|You can't use multiple objects|You can only use multiple"
    r"|That noun did not make sense|You excepted something not included|I'm not sure what"
    r"|There are none at all available|You must name something|You must supply a"
    r"|That's not something you need to refer to|To talk to someone, try"
    r"|Please give one of the answers above|Please answer yes or no)")

# Interpreter meta-commands: they would quit, rewind or desynchronise TextWorld's tracker.
_META_VERBS = frozenset({"quit", "q", "restart", "restore", "save", "undo", "script",
                         "transcript", "unscript", "noscript", "verify"})


def is_parser_error(feedback: str) -> bool:
    """True when the game's reply says its parser did not understand the command."""
    return bool(_PARSER_ERRORS.match(feedback.strip()))


def _is_meta_command(action: str) -> bool:
    first = action.split(" ", 1)[0].lower()
    return first in _META_VERBS or first.startswith("tw-")


# ----------------------------------------------------------------------------------------
# The game process: TextWorld + Jericho in a child, plain dicts over a pipe.
# ----------------------------------------------------------------------------------------


def _serve(read_fd: int, write_fd: int) -> None:
    """Child process main loop: load / step requests in, plain state dicts out."""
    os.dup2(2, 1)  # stray prints from the interpreter must not reach the protocol pipe
    inbox, outbox = Connection(read_fd, writable=False), Connection(write_fd, readable=False)
    import traceback

    import textworld

    env = None
    while True:
        try:
            op, arg = inbox.recv()
        except EOFError:  # parent gone
            break
        if op == "close":
            break
        try:
            if op == "load":
                if env is not None:
                    env.close()
                path, request = arg
                env = textworld.start(path, textworld.EnvInfos(**request))
                outbox.send(("ok", _state_dict(env.reset())))
            else:
                outbox.send(("ok", _state_dict(env.step(arg)[0])))
        except Exception:
            outbox.send(("error", traceback.format_exc()))


def _state_dict(state: Any) -> dict[str, Any]:
    """The parts of a TextWorld `GameState` the env uses, as plain picklable values."""
    return {
        "feedback": state.feedback or "",
        "won": bool(state.won),
        "lost": bool(state.lost),
        "score": float(state.score or 0),
        "max_score": float(state.max_score or 0),
        "objective": state.objective or "",
        "policy_commands": list(state.policy_commands or []),
        "admissible_commands": list(state.admissible_commands or []),
        "description": state.description,
        "inventory": state.inventory,
        "walkthrough": list(state.get("extra.walkthrough") or []),
    }


class _GameProcess:
    """Parent side of one game process (started lazily, restarted after a failure)."""

    def __init__(self) -> None:
        self._proc: subprocess.Popen | None = None
        self._to_child: Connection | None = None
        self._from_child: Connection | None = None
        self._log: Any = None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def _start(self) -> None:
        import tripod

        r_in, w_in = os.pipe()
        r_out, w_out = os.pipe()
        src = str(Path(tripod.__file__).resolve().parent.parent)
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(
            p for p in (src, os.environ.get("PYTHONPATH")) if p)}
        code = f"from tripod.envs.textworld import _serve; _serve({r_in}, {w_out})"
        self._log = tempfile.TemporaryFile()  # noqa: SIM115 (lives as long as the child)
        # Own session: a Ctrl-C in the terminal reaches the parent only, which then closes us.
        self._proc = subprocess.Popen([sys.executable, "-c", code], pass_fds=(r_in, w_out),
                                      stdin=subprocess.DEVNULL, stdout=self._log,
                                      stderr=self._log, env=env, start_new_session=True)
        os.close(r_in)
        os.close(w_out)
        self._to_child = Connection(w_in, readable=False)
        self._from_child = Connection(r_out, writable=False)

    def call(self, op: str, arg: Any, timeout_s: float) -> dict[str, Any]:
        """Send one request and wait for the reply; any failure becomes `EnvError`."""
        if self._proc is None:
            self._start()
        assert self._to_child is not None and self._from_child is not None
        try:
            self._to_child.send((op, arg))
            if not self._from_child.poll(timeout_s):
                raise self._fail(f"did not answer {op!r} within {timeout_s:.0f} s (hung)")
            status, payload = self._from_child.recv()
        except (EOFError, OSError) as exc:
            raise self._fail(f"crashed during {op!r} ({type(exc).__name__})") from exc
        if status == "error":
            raise self._fail(f"raised during {op!r}:\n{payload}")
        return payload

    def _fail(self, what: str) -> EnvError:
        code = self._proc.poll() if self._proc is not None else None
        self.close()
        tail = self._log_tail()
        return EnvError(f"TextWorld game process {what}; exit code {code}."
                        + (f"\nIts last output:\n{tail}" if tail else ""))

    def _log_tail(self, chars: int = 2000) -> str:
        if self._log is None:
            return ""
        self._log.seek(0)
        return self._log.read().decode(errors="replace")[-chars:].strip()

    def close(self) -> None:
        if self._proc is not None:
            try:
                if self._to_child is not None:
                    self._to_child.send(("close", None))
                self._proc.wait(timeout=2)
            except (OSError, subprocess.TimeoutExpired):
                self._proc.kill()
                self._proc.wait()
        for conn in (self._to_child, self._from_child):
            if conn is not None:
                conn.close()
        self._proc = self._to_child = self._from_child = None
        self._log = None


# ----------------------------------------------------------------------------------------
# The env.
# ----------------------------------------------------------------------------------------


class TextWorldEnv:
    """One TextWorld game at a time behind the tripod `Env` protocol.

    `reset(seed)` plays game number `seed` of the split (generated on first use);
    `step` sends one command. `Step.reward` is the game's score gain on that step (the
    reward pillar turns it into sparse or dense rewards).
    """

    def __init__(self, env_id: str, split: str, game: GameConfig,
                 obs: TextWorldObsConfig | None = None, max_steps: int | None = None,
                 step_timeout_s: float = 30.0, load_timeout_s: float = 120.0) -> None:
        self.env_id = env_id
        self.split = split
        self.game = game
        self.obs = obs or TextWorldObsConfig()
        self.max_steps = max_steps
        self.step_timeout_s = step_timeout_s
        self.load_timeout_s = load_timeout_s
        self._process = _GameProcess()
        self._info: StepInfo | None = None
        self._steps = 0
        self._over = False

    def _request(self) -> dict[str, Any]:
        """The `textworld.EnvInfos` fields to ask for (policy commands for the expert)."""
        return {"feedback": True, "won": True, "lost": True, "score": True,
                "max_score": True, "objective": True, "policy_commands": True,
                "admissible_commands": True, "description": self.obs.look,
                "inventory": self.obs.inventory, "extras": ["walkthrough"]}

    def reset(self, seed: int) -> tuple[str, StepInfo]:
        generator_seed = game_seed(self.split, seed)
        try:
            folder = generate_game(self.game, generator_seed)
        except Exception as exc:  # a generator or Inform 7 failure: say which game
            raise EnvError(f"could not generate {self.game.key} seed {generator_seed}: "
                           f"{type(exc).__name__}: {exc}") from exc
        state = self._process.call("load", (str(folder / "game.z8"), self._request()),
                                   self.load_timeout_s)
        self._steps, self._over = 0, False
        info = self._make_info(state, game_id=f"{self.game.key}/seed{generator_seed}")
        info.extra["walkthrough"] = state["walkthrough"]
        info.extra["seed"] = generator_seed
        self._info = info
        text = _strip_banner(clean_feedback(state["feedback"]))
        if self.obs.objective and info.objective and info.objective not in text:
            text = f"{info.objective}\n\n{text}"
        return self._decorate(text, state), info

    def step(self, action: str) -> Step:
        if self._info is None:
            raise EnvError("step() called before reset()")
        self._steps += 1
        command = clean_action(action)
        if self._over:
            return self._refuse("The game is over.", invalid=False)
        if not command:
            return self._refuse("I beg your pardon?", invalid=True)
        if _is_meta_command(command):
            return self._refuse("That command is not available in this game.", invalid=True)
        prev_score = self._info.score
        state = self._process.call("step", command, self.step_timeout_s)
        text = clean_feedback(state["feedback"])
        info = self._make_info(state, game_id=self._info.game_id)
        info.invalid_action = is_parser_error(text)
        info.extra["admissible"] = command in (self._info.admissible_actions or [])
        info.extra["command"] = command
        self._info = info
        self._over = info.won or info.lost
        text = text if self._over else self._decorate(text, state)
        return Step(text, info.score - prev_score, self._over,
                    self._truncated(), info)

    def _truncated(self) -> bool:
        return self.max_steps is not None and self._steps >= self.max_steps and not self._over

    def _refuse(self, text: str, invalid: bool) -> Step:
        """Answer without touching the game (empty, meta or post-game commands)."""
        assert self._info is not None
        info = StepInfo(**{**asdict(self._info), "invalid_action": invalid, "extra": {}})
        return Step(text, 0.0, self._over, self._truncated(), info)

    def _make_info(self, state: dict[str, Any], game_id: str) -> StepInfo:
        won, lost = state["won"], state["lost"] and not state["won"]
        max_score = state["max_score"] or 1.0
        progress = 1.0 if won else min(max(state["score"] / max_score, 0.0), 1.0)
        over = won or lost
        return StepInfo(
            objective=state["objective"], won=won, lost=lost, score=state["score"],
            max_score=max_score, progress=progress,
            expert_action=None if over or not state["policy_commands"]
            else state["policy_commands"][0],
            admissible_actions=[] if over else state["admissible_commands"],
            game_id=game_id)

    def _decorate(self, text: str, state: dict[str, Any]) -> str:
        """Append the optional room description, inventory and admissible commands."""
        parts = [text]
        if self.obs.look and state["description"]:
            parts.append(clean_feedback(state["description"]))
        if self.obs.inventory and state["inventory"]:
            parts.append(f"Inventory: {clean_feedback(state['inventory'])}")
        if self.obs.admissible_actions and state["admissible_commands"]:
            parts.append("Admissible actions: " + ", ".join(state["admissible_commands"]))
        return "\n\n".join(p for p in parts if p)

    def close(self) -> None:
        self._process.close()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):  # interpreter shutdown: nothing sensible to do
            self._process.close()


# ----------------------------------------------------------------------------------------
# Factory and registration.
# ----------------------------------------------------------------------------------------

_ENV_KEYS = ("max_steps", "step_timeout_s", "load_timeout_s")
_OBS_KEYS = tuple(f.name for f in fields(TextWorldObsConfig))


def _parse(env_id: str, split: str,
           overrides: dict[str, Any]) -> tuple[GameConfig, TextWorldObsConfig, dict[str, Any]]:
    """Split `overrides` into game, observation and env settings; unknown keys are errors."""
    flags = {k: overrides.pop(k) for k in _OBS_KEYS if k in overrides}
    obs = overrides.pop("obs", None)
    if obs is not None and flags:
        raise TypeError(f"pass either obs=TextWorldObsConfig(...) or {sorted(flags)}, not both")
    obs = obs or TextWorldObsConfig(**flags)
    env_kwargs = {k: overrides.pop(k) for k in _ENV_KEYS if k in overrides}
    game = _game_config(env_id, split, overrides)
    return game, obs, env_kwargs


def _game_config(env_id: str, split: str, overrides: dict[str, Any]) -> GameConfig:
    if m := re.fullmatch(CUSTOM_PATTERN, env_id):
        _check_keys(env_id, overrides, ())
        return CustomGame(*(int(g) for g in m.groups()))
    if m := re.fullmatch(SIMPLE_PATTERN, env_id):
        _check_keys(env_id, overrides, ("goal", "test_foods"))
        return SimpleGame(rewards=m.group(1), **overrides)
    if re.fullmatch(COOKING_PATTERN, env_id):
        _check_keys(env_id, overrides, tuple(f.name for f in fields(CookingGame)))
        default_food = {"valid": "valid", "test": "test"}.get(split, "train")
        return CookingGame(**{"food_split": default_food, **overrides})
    raise KeyError(f"not a TextWorld env id: {env_id!r}")


def _check_keys(env_id: str, overrides: dict[str, Any], game_keys: tuple[str, ...]) -> None:
    unknown = sorted(set(overrides) - set(game_keys))
    if unknown:
        valid = ", ".join(game_keys + _OBS_KEYS + _ENV_KEYS + ("obs",))
        raise TypeError(f"unknown override(s) {unknown} for {env_id}; valid: {valid}")


def make_textworld(env_id: str, split: str = "train", **overrides: Any) -> TextWorldEnv:
    """The registry factory: ``make_textworld("textworld/w2-o3-q4", "test", look=True)``."""
    game, obs, env_kwargs = _parse(env_id, split, dict(overrides))
    game_seed(split, 0)  # validate the split early
    return TextWorldEnv(env_id, split, game, obs=obs, **env_kwargs)


register(CUSTOM_PATTERN, make_textworld, ("textworld/w2-o3-q4", "textworld/w4-o6-q8"),
         "TextWorld custom games: W rooms, O objects, quest of Q actions (step-by-step goal)")
register(SIMPLE_PATTERN, make_textworld,
         ("textworld/simple-dense", "textworld/simple-balanced", "textworld/simple-sparse"),
         "TextWorld tw-simple: cook the food in a fixed house; eating it loses the game")
register(COOKING_PATTERN, make_textworld, ("textworld/cooking",),
         "TextWorld tw-cooking (FTWP): follow a recipe; options via overrides")
