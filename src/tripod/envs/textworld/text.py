"""Text clean-up for TextWorld games: what the agent reads and which commands count as invalid.

Invalid actions. A command is invalid when, after `clean_action`, it is empty; or it is an
interpreter meta-command (``quit``, ``restart``, ``undo``, ``save``, ``restore``, ``script``,
``tw-...``), which is never sent to the game because it would desynchronise TextWorld's state
tracking; or the game's parser rejected it (one of Inform 7's parser errors such as "That's
not a verb I recognise." or "You can't see any such thing.", or an incomplete command such as
"What do you want to take?"). A command the game understood but that fails in the world
("You can't go that way.") is valid: the agent learns from that feedback. Membership in
TextWorld's admissible commands is not the test, because that list omits commands the game
understands and answers sensibly (``jump``, ``wait``, abbreviations such as ``x trunk``).
"""

from __future__ import annotations

import re

_BANNER_LINE = re.compile(r"^[\s_|\\/$<>()\-]*$")
_STATUS_LINE = re.compile(r"\n>[^\n]*\Z")
_END_PROMPT = re.compile(r"Would you like to RESTART, RESTORE a saved game, QUIT or UNDO[^\n]*")

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


def strip_banner(text: str) -> str:
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


def is_parser_error(feedback: str) -> bool:
    """True when the game's reply says its parser did not understand the command."""
    return bool(_PARSER_ERRORS.match(feedback.strip()))


def is_meta_command(action: str) -> bool:
    """True for interpreter commands that must not reach the game (see the module doc)."""
    first = action.split(" ", 1)[0].lower()
    return first in _META_VERBS or first.startswith("tw-")
