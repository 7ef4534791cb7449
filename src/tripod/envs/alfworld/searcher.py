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
only won demonstrations are trained on). `gave_up` marks such a proposal, and the random
command played instead of a repeat: the `hybrid` expert type asks the planner there, so its
demonstrations hold neither the fallback `look` a policy learns as a "don't know" move, nor
the random commands, nor the stalls that keep the handcoded agent from finishing
`pick_two_obj_and_place`.

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
        self.gave_up = False
        """Whether `next_action` is a fallback rather than the agent's own choice (its first
        `look` is its own): a step after it failed or timed out, a command that is not
        admissible, or the random admissible command ALFWorld's wrapper plays when the agent
        would repeat the command just played (the `hybrid` expert asks the planner instead)."""

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
            # The task policy's own proposal. `HandCodedAgent.act` around it swaps a repeat of
            # the last command (or an inadmissible one after "look") for a random admissible
            # command; that is done here so that the swap is known.
            try:
                action = self._agent.policy.act(view, command)
            except (HandCodedAgentFailed, HandCodedAgentTimeout):
                action = None
            repeat = action == command or (command == FALLBACK and action not in admissible)
            if action is not None and repeat and admissible:
                action = random.choice(admissible)
        finally:
            random.setstate(saved)
        self.gave_up = action is None or repeat or action not in admissible
        self.next_action = action if action is not None and action in admissible else FALLBACK
