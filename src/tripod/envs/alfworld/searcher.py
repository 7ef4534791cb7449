"""The searching expert: ALFWorld's handcoded agent (`alfworld.agents.expert`) behind a small
adapter, for demonstrations that show the search a partially observing agent must do.

The planner expert (`Engine.plan`) sees the whole PDDL state and walks straight to the hidden
object, so its demonstrations never open a drawer that turns out to be empty; a policy
imitating it has to guess where objects are. ALFWorld's handcoded agent (the expert BUTLER
was trained on with DAgger) keeps its own memory of what it has seen: it reads the room's
receptacles from the intro text, visits receptacles in an order given by priors over where
each object type is usually kept, opens closed ones and remembers where it saw things. It
reads the game's facts only for predicates the agent could observe (what it holds, whether
the held object is hot/cool/clean).

It is driven as ALFWorld's `AlfredExpert(expert_type="handcoded")` wrapper drives it: it
observes the intro at reset (its first action is "look"), then after every step it is told the
command that was played, whoever chose it, and proposes the next one. So it labels the states
a policy visits as well as its own (DAgger). Its random choices (which of several visible
objects to take, a random admissible command when it would repeat itself) come from a
generator seeded per game, so an episode is reproducible. It is not guaranteed to succeed:
when it gives up (its step limit, or no subgoal left) or proposes a command that is not
admissible, it says "look", as ALFWorld's wrapper does (such an episode is rarely won, and
only won demonstrations are trained on).

Imported only in the game's child process: importing the `alfworld` wheel writes
``ALFWORLD_DATA`` into the environment (see env.py).
"""

from __future__ import annotations

import random
from pathlib import Path

from textworld.core import GameState

MAX_STEPS = 200
"""The handcoded agent's own step limit (ALFWorld's wrapper uses 200)."""
FALLBACK = "look"
"""The action proposed when the agent has none (its first action too)."""


class Searcher:
    """ALFWorld's handcoded agent for one episode of one game."""

    def __init__(self, game_file: Path, intro_feedback: str, seed: int) -> None:
        from alfworld.agents.expert import HandCodedTWAgent

        self._agent = HandCodedTWAgent(max_steps=MAX_STEPS)
        self._agent.reset(str(game_file))        # reads traj_data.json next to the game
        self._agent.observe(intro_feedback)       # the receptacles listed in the intro
        self._rng = random.Random(seed)
        self.next_action = FALLBACK
        """The expert's proposal for the current state."""

    def after(self, state: GameState, facts: list, command: str,
              admissible: list[str]) -> None:
        """Tell the agent the command just played and the state it led to (`facts` with
        ALFWorld's object names, `Engine.readable_facts`); update `next_action`."""
        from alfworld.agents.expert import HandCodedAgentTimeout
        from alfworld.agents.expert.handcoded_expert import HandCodedAgentFailed

        view = {"feedback": state.feedback, "facts": facts,
                "admissible_commands": admissible, "won": bool(state["won"])}
        saved = random.getstate()
        random.seed(self._rng.getrandbits(64))   # the agent draws from the global generator
        try:
            action = self._agent.act(view, 0, view["won"], command)
        except (HandCodedAgentFailed, HandCodedAgentTimeout):
            action = FALLBACK
        finally:
            random.setstate(saved)
        self.next_action = action if action in admissible else FALLBACK
