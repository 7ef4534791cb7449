"""A tiny learnable environment for tests and smoke runs: `toy/letters-N`.

The agent must answer N turns; on turn k the answer is correct when its first letter is the
k-th target letter (a, b, c, ...: the same in every game). Each correct turn scores 1 point,
the episode always lasts N turns, and it is won when every turn was correct.

Games differ by index and split: game `index` of `split` lists the admissible words in its own
order (shuffled with the seed `game_seed(split, index)`) in its objective. The held-out splits
(`valid`, `test`) list them in the orders of odd parity and the training splits (`train`,
`sft`) in those of even parity, so no held-out prompt is a training prompt, however many
games are played (with 4 words each side has 12 of the 24 orders; with a single word there
is one order and no held-out prompt can differ). What they test is that the learnt answers
do not hinge on one exact prompt (e.g. on copying the word listed first), not a new task: the
letters are the same, which keeps the task learnable by a tiny model in a few dozen RL
iterations. (Per-game target letters were tried: GRPO with the learning test's settings did
not learn them in 50 iterations.)

`vocabulary` limits the admissible words (the first k of apple, banana, cherry, ...): a model
first taught to answer with a uniformly random admissible word (the `random` scripted actor)
wins (1/k)^N of its episodes and must then learn the right sequence by RL, which is what the
learning tests check.
"""

from __future__ import annotations

import random
import re
import string

from tripod.envs.base import Step, StepInfo, clean_action, game_seed
from tripod.envs.registry import register

_WORDS = {c: w for c, w in zip(string.ascii_lowercase, ["apple", "banana", "cherry", "dates", "eggs", "figs", "grapes", "honey", "ice", "jam", "kiwi", "lemon", "mango", "nuts", "olive", "pear", "quince", "rice", "salt", "tea", "udon", "vanilla", "water", "xigua", "yam", "zucchini"])}


HELD_OUT_SPLITS = ("valid", "test")
"""Splits whose games list the words in orders no training game uses."""


def _odd(listed: list[str], words: list[str]) -> bool:
    """Whether `listed` is an odd permutation of `words` (an odd number of inversions)."""
    rank = [words.index(w) for w in listed]
    return sum(a > b for i, a in enumerate(rank) for b in rank[i + 1:]) % 2 == 1


class LettersEnv:
    """N turns; turn k is correct when the answer starts with letter k of the alphabet."""

    def __init__(self, env_id: str, split: str = "train", turns: int = 2,
                 vocabulary: int = 26) -> None:
        if not 1 <= vocabulary <= len(_WORDS):
            raise ValueError(f"vocabulary must be in [1, {len(_WORDS)}], got {vocabulary}")
        if not 1 <= turns <= len(_WORDS):
            raise ValueError(f"{env_id}: the toy task has 1 to {len(_WORDS)} turns (one letter "
                             f"of the alphabet each), got {turns}")
        self.env_id, self.split, self.turns = env_id, split, turns
        self.words = list(_WORDS.values())[:max(vocabulary, turns)]
        self.targets = string.ascii_lowercase[:turns]
        self.listed = list(self.words)
        self.game_index = -1
        self._turn = 0
        self._score = 0

    def _listing(self, game_index: int) -> list[str]:
        """The game's order of the admissible words: a pure function of (split, index), of
        odd parity on held-out splits and even on training splits (a swap of the first two
        words moves an order to the other parity)."""
        listed = list(self.words)
        random.Random(game_seed(self.split, game_index)).shuffle(listed)
        if len(listed) > 1 and _odd(listed, self.words) != (self.split in HELD_OUT_SPLITS):
            listed[0], listed[1] = listed[1], listed[0]
        return listed

    @property
    def _objective(self) -> str:
        letters = ", then ".join(f"'{c}'" for c in self.targets)
        return (f"Words: {', '.join(self.listed)}. Answer with one word per turn: a word "
                f"starting with {letters}.")

    def _info(self, invalid: bool = False) -> StepInfo:
        done = self._turn >= self.turns
        return StepInfo(
            objective=self._objective, won=done and self._score == self.turns,
            lost=done and self._score < self.turns, score=float(self._score),
            max_score=float(self.turns), progress=self._score / self.turns,
            expert_action=None if done else _WORDS[self.targets[self._turn]],
            admissible_actions=None if done else list(self.words),
            invalid_action=invalid,
            game_id=f"{self.env_id}:{self.split}:{self.game_index}",
        )

    def _ask(self) -> str:
        return f"Turn {self._turn + 1}: a word starting with '{self.targets[self._turn]}'."

    def reset(self, game_index: int) -> tuple[str, StepInfo]:
        self.game_index, self.listed = game_index, self._listing(game_index)
        self._turn, self._score = 0, 0
        return self._ask(), self._info()

    def step(self, action: str) -> Step:
        if self._turn >= self.turns:
            return Step("The episode is over.", 0.0, True, False, self._info(invalid=True))
        text = clean_action(action).lower()
        letter = re.sub(r"[^a-z]", "", text)[:1]
        correct = letter == self.targets[self._turn]
        self._turn += 1
        self._score += int(correct)
        obs = ("Correct." if correct else "Wrong.") + (
            f" {self._ask()}" if self._turn < self.turns else "")
        info = self._info(invalid=not text)
        return Step(obs, float(correct), self._turn >= self.turns, False, info)

    def close(self) -> None:
        pass


def _make(env_id: str, split: str = "train", **overrides) -> LettersEnv:
    turns = int(env_id.rsplit("-", 1)[1])
    return LettersEnv(env_id, split, turns=turns, **overrides)


register(r"toy/letters-\d+", _make, ("toy/letters-2",),
         "tiny learnable task for tests: answer words starting with a, b, ... in order")
