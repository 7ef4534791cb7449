"""A mutation pass over the seams of the learner, the batch, the rollout and SWE scoring.

Each mutant is one hand-written bug: a snippet of a source file replaced by a wrong one. The
pass copies `src/`, `tests/`, `recipes/` and `pyproject.toml` into a temporary folder, checks
that the named fast tests pass there unmutated, then applies one mutant at a time to the
copy (restoring the file after each), runs the mutant's tests against the copy
(`PYTHONPATH` puts the copy's `src/` before the editable install) and records whether they
fail. The working tree is never edited, so nothing a mutant does can reach other runs.

    .venv/bin/python tests/mutants/run.py                 # every mutant, prints the table
    .venv/bin/python tests/mutants/run.py --write docs/mutation.md
    .venv/bin/python tests/mutants/run.py --only learner-temperature docker-pristine-tests
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
COPIED = ("src", "tests", "recipes", "pyproject.toml")
WIRING = "tests/train/test_wiring.py"


@dataclass(frozen=True)
class Mutant:
    """One deliberate bug and the fast tests that must catch it."""

    name: str
    file: str
    original: str
    """A snippet that occurs exactly once in `file`."""
    mutated: str
    tests: tuple[str, ...]
    """pytest paths or node ids, all fast (not `slow`)."""
    bug: str
    """What the mutant stands for, in a few words."""


MUTANTS = [
    Mutant("learner-temperature", "src/tripod/train/learner.py",
           "mb.attention_mask, cfg.rollout.train.temperature,", "mb.attention_mask, 1.0,",
           (WIRING,), "the learner recomputes logprobs at T = 1, not the sampling temperature"),
    Mutant("old-logprobs-are-current", "src/tripod/train/learner.py",
           "policy_loss(logp, mb.old_logprobs,", "policy_loss(logp, logp.detach(),",
           ("tests/train/test_clip_engaged.py",),
           "the current logprobs passed as the old ones (ratio always 1, the clip never acts)"),
    Mutant("negated-advantages", "src/tripod/train/learner.py",
           "policy_loss(logp, mb.old_logprobs, mb.advantages,",
           "policy_loss(logp, mb.old_logprobs, -mb.advantages,",
           ("tests/train/test_update_direction.py",), "updates climb the loss"),
    Mutant("attention-mask-as-loss-mask", "src/tripod/train/learner.py",
           "    mask = mb.loss_mask\n", "    mask = mb.attention_mask.float()\n", (WIRING,),
           "loss, entropy and KL over prompt and env tokens too"),
    Mutant("kl-reward-dropped-in-advantage", "src/tripod/train/rl.py",
           "rewards = batch.kl_rewards if batch.kl_rewards is not None else batch.token_rewards",
           "rewards = batch.token_rewards", (WIRING,),
           "the estimator reads the task rewards without the KL penalty"),
    Mutant("kl-reward-never-computed", "src/tripod/train/learner.py",
           'if algo.kl_in == "reward":', 'if algo.kl_in == "never":', (WIRING,),
           "`score` never builds the KL-penalised rewards"),
    Mutant("docker-pristine-tests", "src/tripod/envs/swe/workspace.py",
           "for path, text in self.pristine_tests.items():", "for path, text in {}.items():",
           ("tests/swe/test_docker.py",),
           "Docker scoring runs the agent's test files instead of the pristine ones"),
    Mutant("docker-test-patch-skipped", "src/tripod/envs/swe/workspace.py",
           "ws.pristine_tests.update(apply_patch_to_texts(current, task.test_patch))",
           "pass", ("tests/swe/test_docker.py",),
           "the task's test patch left out of the pristine test files"),
    Mutant("reference-temperature", "src/tripod/train/learner.py",
           "    temperature = learner.cfg.rollout.train.temperature\n",
           "    temperature = 1.0\n", (WIRING,), "reference logprobs at T = 1"),
    Mutant("entropy-bonus-sign", "src/tripod/train/learner.py",
           "loss = loss - algo.entropy_coef", "loss = loss + algo.entropy_coef", (WIRING,),
           "the entropy bonus penalises entropy"),
    Mutant("kl-loss-dropped", "src/tripod/train/learner.py",
           "loss = loss + algo.kl_coef * aggregate(kl,", "loss = loss + 0.0 * aggregate(kl,",
           (WIRING,), "the KL term left out of the loss (`kl_in=loss`)"),
    Mutant("normaliser-over-all-tokens", "src/tripod/train/learner.py",
           "norm = loss_normaliser(mb.loss_mask,",
           "norm = loss_normaliser(mb.attention_mask.float(),", (WIRING,),
           "the loss divided by every token's count, not the agent tokens'"),
    Mutant("teacher-forcing-ignores-temperature", "src/tripod/train/batch.py",
           "        logits = logits / temperature\n", "        logits = logits\n",
           ("tests/policy/test_rollout_invariants.py::test_invariants_tiny_full_history",),
           "`token_logprobs` drops the temperature"),
    Mutant("reward-on-first-agent-token", "src/tripod/train/batch.py",
           "rws[start + len(turn.action_ids) - 1] = rewards[k]", "rws[start] = rewards[k]",
           (f"{WIRING}::test_each_turn_reward_sits_on_its_last_agent_token",),
           "a turn's reward on its first agent token, not its last"),
    Mutant("ended-row-advances-its-cache", "src/tripod/policy/sampler.py",
           "r.length += act", "r.length += 1", ("tests/policy/test_sampler.py",),
           "an ended row's cache takes padding where its end-of-turn token belongs"),
]


@dataclass
class Outcome:
    mutant: Mutant
    verdict: str
    """caught, survived, not applied (snippet not found once) or error (pytest could not run)."""
    caught_by: str = ""


def copy_tree(dest: Path) -> None:
    for name in COPIED:
        src = ROOT / name
        if src.is_dir():
            shutil.copytree(src, dest / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(src, dest / name)


def run_tests(copy: Path, tests: tuple[str, ...]) -> subprocess.CompletedProcess:
    """The fast tests `tests` against the copy (its `src/` first on the import path)."""
    env = dict(os.environ, PYTHONPATH=str(copy / "src"))
    check = ("import sys, tripod; sys.exit(0 if tripod.__file__.startswith(sys.argv[1]) "
             "else 'tripod is not imported from the copy: ' + tripod.__file__)")
    subprocess.run([sys.executable, "-c", check, str(copy)], env=env, cwd=copy, check=True)
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-m", "not slow",
                           "-p", "no:cacheprovider", "-rf", *tests],
                          env=env, cwd=copy, capture_output=True, text=True)


def first_failure(output: str) -> str:
    match = re.search(r"^FAILED (\S+)", output, re.MULTILINE)
    return match.group(1) if match else ""


def apply_and_test(copy: Path, mutant: Mutant) -> Outcome:
    path = copy / mutant.file
    text = path.read_text()
    if text.count(mutant.original) != 1:
        return Outcome(mutant, "not applied")
    try:
        path.write_text(text.replace(mutant.original, mutant.mutated))
        done = run_tests(copy, mutant.tests)
    finally:
        path.write_text(text)
    if done.returncode == 0:
        return Outcome(mutant, "survived")
    if done.returncode == 1:
        return Outcome(mutant, "caught", first_failure(done.stdout))
    return Outcome(mutant, "error", done.stdout[-300:])


def table(outcomes: list[Outcome]) -> str:
    lines = ["| mutant | file | bug | verdict | first failing test |",
             "|---|---|---|---|---|"]
    for o in outcomes:
        m = o.mutant
        lines.append(f"| `{m.name}` | `{m.file.removeprefix('src/tripod/')}` | {m.bug} | "
                     f"{o.verdict} | `{o.caught_by}` |" if o.caught_by else
                     f"| `{m.name}` | `{m.file.removeprefix('src/tripod/')}` | {m.bug} | "
                     f"{o.verdict} | |")
    return "\n".join(lines)


def markdown(outcomes: list[Outcome], commit: str) -> str:
    caught = sum(o.verdict == "caught" for o in outcomes)
    return f"""# Mutation pass: the seams between the learner's parts

Each mutant below is one deliberate bug in the code that joins the well-tested parts (the
learner, the batch, the rollout's sampler, Docker scoring). `tests/mutants/run.py` applies
each to a temporary copy of the repository, runs the fast tests named for it (`-m "not
slow"`) and records the first test that fails. A mutant that survives is a gap in the tests.
The mutants themselves (snippet and replacement) are listed in that script.

{caught} of {len(outcomes)} mutants caught on the working tree at commit `{commit}`, by
`.venv/bin/python tests/mutants/run.py --write docs/mutation.md`.

{table(outcomes)}
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", nargs="*", help="run these mutants only (by name)")
    parser.add_argument("--write", type=Path, help="also write the record (markdown) here")
    args = parser.parse_args()
    chosen = [m for m in MUTANTS if not args.only or m.name in args.only]
    with tempfile.TemporaryDirectory(prefix="tripod-mutants-") as tmp:
        copy = Path(tmp)
        copy_tree(copy)
        tests = tuple(dict.fromkeys(t for m in chosen for t in m.tests))
        baseline = run_tests(copy, tests)
        if baseline.returncode != 0:
            sys.exit("the unmutated copy fails its tests:\n" + baseline.stdout[-2000:])
        outcomes = []
        for m in chosen:
            outcomes.append(apply_and_test(copy, m))
            print(f"{m.name}: {outcomes[-1].verdict} {outcomes[-1].caught_by}", flush=True)
    print(table(outcomes))
    if args.write:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                                capture_output=True, text=True).stdout.strip()
        args.write.write_text(markdown(outcomes, commit))


if __name__ == "__main__":
    main()
