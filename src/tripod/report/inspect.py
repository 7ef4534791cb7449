"""`tripod inspect FILE`: trajectory records in the terminal, one episode at a time.

For a remote machine without a browser. Each episode shows its game, outcome, objective and
every turn: the agent's tokens with a background colour (green/red by advantage when the
file has advantages, else orange for unlikely samples), masked-out tokens dim and struck
through, what was sent to the env, the reward and the env's answer. `--tokens` adds a table
per turn with every token's id, piece, logprobs, advantage and loss mask.

Interactive on a terminal (n / p: next / previous episode, q: quit); with `--episode K` or
when the output is not a terminal, it prints and exits (for pipes and tests).

All text is shown as text: rich markup in an action is not interpreted, and control
characters (an ANSI escape sequence from an env, say) and lone surrogates are printed as
escapes, so a hostile trajectory cannot drive the terminal.
"""

from __future__ import annotations

import contextlib
import math
import sys
import unicodedata
from collections.abc import Callable, Iterator

from rich.console import Console, Group, RenderableType
from rich.panel import Panel
from rich.style import Style
from rich.table import Table
from rich.text import Text

from tripod.report.records import EpisodeRecord, TurnTokens, read_trajectories

OUTCOME_STYLE = {"won": "bold green", "lost": "bold red", "env_error": "bold magenta",
                 "truncated": "bold yellow", "context_limit": "bold blue"}


def safe(text: str) -> str:
    """Text a terminal shows literally: lone surrogates and control characters (except
    newline and tab) become backslash escapes."""
    text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    return "".join(c if c in "\n\t" or unicodedata.category(c) != "Cc"
                   else c.encode("unicode_escape").decode("ascii") for c in text)


def _mix(colour: tuple[int, int, int], amount: float) -> str:
    """`colour` blended with white; `amount` in [0, 1] (0 = white)."""
    r, g, b = (round(255 + (c - 255) * amount) for c in colour)
    return f"#{r:02x}{g:02x}{b:02x}"


def token_colour(tokens: TurnTokens, i: int, scale: float) -> str | None:
    """Background colour of token i: by advantage if recorded, else by improbability."""
    if tokens.advantages is not None:
        a = tokens.advantages[i]
        if not math.isfinite(a) or scale <= 0 or abs(a) < 1e-9:
            return None
        x = max(-1.0, min(1.0, a / scale))
        return _mix((26, 127, 55) if x > 0 else (207, 34, 46), 0.15 + 0.6 * abs(x))
    lp = tokens.logprobs[i]
    if not math.isfinite(lp):
        return None
    return _mix((247, 129, 102), 0.1 + 0.65 * (1 - math.exp(lp)))


def advantage_scale(ep: EpisodeRecord) -> float:
    values = [abs(a) for t in ep.turns for a in (t.tokens.advantages or [])
              if math.isfinite(a)]
    return max(values, default=0.0)


def token_text(tokens: TurnTokens, scale: float) -> Text:
    out = Text()
    for i, piece in enumerate(tokens.text):
        shown = safe(piece).replace("\n", "\u21b5\n") if piece else "\u00b7"
        masked = not tokens.loss_mask[i]
        bg = None if masked else token_colour(tokens, i, scale)  # no gradient, no colour
        style = Style(color="grey50" if masked else "black", bgcolor=bg, strike=masked,
                      dim=masked)
        out.append(shown, style=style)
        out.append("\u2009")  # a thin space keeps token boundaries visible
    return out


def _num(x: float | None) -> str:
    return "-" if x is None or not math.isfinite(x) else f"{x:.3f}"


def token_table(tokens: TurnTokens) -> Table:
    table = Table(show_edge=False, pad_edge=False, box=None, header_style="bold")
    for col in ("#", "id", "piece", "logprob", "trainer", "advantage", "mask"):
        table.add_column(col, justify="right" if col not in ("piece",) else "left")
    for i, tid in enumerate(tokens.ids):
        table.add_row(str(i), str(tid), Text(repr(safe(tokens.text[i]))),
                      _num(tokens.logprobs[i]),
                      _num(tokens.trainer_logprobs[i] if tokens.trainer_logprobs else None),
                      _num(tokens.advantages[i] if tokens.advantages else None),
                      str(tokens.loss_mask[i]))
    return table


def render_episode(ep: EpisodeRecord, index: int, total: int,
                   with_tokens: bool = False) -> RenderableType:
    """One episode as a rich renderable (header, objective, start, then each turn)."""
    scale = advantage_scale(ep)
    head = Text()
    head.append(f"episode {index} of {total}  ", style="bold")
    head.append(f"[{ep.outcome}: {ep.end}]", style=OUTCOME_STYLE.get(ep.outcome, "bold"))
    head.append(f"\n{safe(ep.source)} iteration {ep.iteration} \u00b7 {safe(ep.env_id)} "
                f"[{safe(ep.split)}] game {ep.game_index} \u00b7 group {ep.group_id} \u00b7 "
                f"episode id {ep.episode_id} \u00b7 {len(ep.turns)} turns \u00b7 return "
                f"{ep.total_reward:.3f}")
    colour_by = "advantage" if scale > 0 else "sampling improbability (no advantages)"
    head.append(f"\ncolour: {colour_by}; struck-through tokens are outside the loss",
                style="dim")
    parts: list[RenderableType] = [head]
    if ep.error:
        parts.append(Text(f"error: {safe(ep.error)}", style="magenta"))
    parts.append(Panel(Text(safe(ep.objective)), title="objective", title_align="left"))
    parts.append(Panel(Text(safe(ep.first_observation)), title="start", title_align="left"))
    for k, turn in enumerate(ep.turns):
        line = Text()
        line.append(f"turn {k + 1}", style="bold")
        line.append(f"  {turn.status}  reward {turn.reward:.3f}\n", style="dim")
        line.append_text(token_text(turn.tokens, scale))
        line.append("\nsent to env: ", style="dim")
        line.append(safe(turn.action))
        if turn.observation:
            line.append("\n")
            line.append(safe(turn.observation), style="cyan")
        parts.append(line)
        if with_tokens:
            parts.append(token_table(turn.tokens))
    return Group(*parts)


@contextlib.contextmanager
def single_keys() -> Iterator[None]:
    """Key presses without Enter (cbreak mode) for the whole session, restored on exit.

    Switching per key would drop or delay keys typed while the episode is drawn."""
    try:
        import termios
        import tty
    except ImportError:  # not a POSIX terminal: keys come as lines
        yield
        return
    if not sys.stdin.isatty():
        yield
        return
    fd = sys.stdin.fileno()
    old = termios.tcgetattr(fd)
    tty.setcbreak(fd, termios.TCSANOW)
    try:
        yield
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, old)


def read_key() -> str:
    """The next key (a key press under `single_keys`, else the next letter typed before
    Enter); end of input reads as q."""
    while True:
        key = sys.stdin.read(1)
        if key == "":
            return "q"
        if key not in "\r\n":
            return key


def browse(episodes: list[EpisodeRecord], console: Console, start: int = 0,
           key: Callable[[], str] = read_key, with_tokens: bool = False) -> None:
    """The interactive loop: n / space next, p previous, q quit."""
    i = start
    while True:
        console.clear()
        console.print(render_episode(episodes[i], i, len(episodes), with_tokens))
        console.print(Text("n next \u00b7 p previous \u00b7 q quit", style="reverse"))
        pressed = key().lower()
        if pressed in ("q", "\x1b", "\x04"):
            return
        if pressed in ("n", " ", "j"):
            i = min(i + 1, len(episodes) - 1)
        elif pressed in ("p", "k"):
            i = max(i - 1, 0)


def inspect_file(path: str, episode: int | None = None, with_tokens: bool = False,
                 console: Console | None = None, interactive: bool | None = None) -> int:
    """Show the episodes of a trajectory file; returns a process exit code."""
    console = console or Console(highlight=False)
    episodes = read_trajectories(path)
    if not episodes:
        console.print(Text(f"{path}: no episodes"))
        return 1
    if episode is not None and not 0 <= episode < len(episodes):
        console.print(Text(f"--episode {episode}: the file has episodes 0-{len(episodes) - 1}"))
        return 2
    if interactive is None:
        interactive = episode is None and console.is_terminal and sys.stdin.isatty()
    if interactive:
        with single_keys():
            browse(episodes, console, start=episode or 0, with_tokens=with_tokens)
        return 0
    chosen = range(len(episodes)) if episode is None else [episode]
    for i in chosen:
        console.print(render_episode(episodes[i], i, len(episodes), with_tokens))
        console.rule()
    return 0
