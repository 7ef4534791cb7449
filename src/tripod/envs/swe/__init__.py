"""SWE environment family: repository tasks solved through tools, scored by their tests.

Env ids:
- ``swe/generated`` and ``swe/generated-easy|medium|hard``: the default suite of seeded bugs
  in real PyPI projects (`generator.prepare_suite`; generated on first use, then cached);
- ``swe/large`` and ``swe/large-easy|medium|hard``: the large suite (`generator.
  prepare_large_suite`): seeded bugs in fifteen projects, four of them held out for testing
  (option ``held_out``: ``project``, the default, or ``function`` for the test tasks from
  unseen functions of the training projects; ``train_projects``: a subset of the training
  projects);
- ``swe/file:PATH``: tasks from a JSONL / JSON / parquet file of SWE-Gym-format instances.

Options (``make(env_id, split, **overrides)``) are the fields of `SweEnvConfig`, plus
``seed`` for the generated suite; each is an explicit keyword of the factories, so a wrong
option name fails before any work starts. See docs/swe.md for the tool syntax and an example episode.
"""

from __future__ import annotations

from tripod.envs.base import whole_reply_action
from tripod.envs.registry import register
from tripod.envs.swe.env import SweEnv, SweEnvConfig
from tripod.envs.swe.generator import (
    GeneratorConfig,
    generate_suite,
    prepare_large_suite,
    prepare_suite,
)
from tripod.envs.swe.sandbox import SandboxLimits, run_sandboxed, sandbox_report
from tripod.envs.swe.sources import LARGE_PROJECTS
from tripod.envs.swe.task import SweTask, WorkspaceSpec, load_tasks, save_tasks
from tripod.envs.swe.tools import TOOL_HELP, parse_tool_call

TIERS = ("easy", "medium", "hard")


def _config(observation: str, progress: str, similarity_weight: float, max_tool_calls: int,
            max_observation_chars: int, end_on_violation: bool, workspace_dir: str,
            limits: SandboxLimits | dict | None, hidden_checks: int = 64,
            objective: str = "full") -> SweEnvConfig:
    return SweEnvConfig(observation=observation, objective=objective, progress=progress,
                        similarity_weight=similarity_weight, max_tool_calls=max_tool_calls,
                        max_observation_chars=max_observation_chars,
                        end_on_violation=end_on_violation, workspace_dir=workspace_dir,
                        limits=SandboxLimits() if limits is None else limits,
                        hidden_checks=hidden_checks)


def make_generated(env_id: str, split: str = "train", *, seed: int = 0,
                   observation: str = "traceback", progress: str = "all_tests",
                   similarity_weight: float = 0.0,
                   max_tool_calls: int = 40, max_observation_chars: int = 6000,
                   end_on_violation: bool = True, workspace_dir: str = "",
                   limits: SandboxLimits | dict | None = None,
                   hidden_checks: int = 64, objective: str = "full") -> SweEnv:
    """``swe/generated[-TIER]``: the cached default suite (generator seed `seed`),
    optionally one tier of it. The other options are the fields of `SweEnvConfig`."""
    config = _config(observation, progress, similarity_weight, max_tool_calls,
                     max_observation_chars, end_on_violation, workspace_dir, limits,
                     hidden_checks, objective)
    tasks = prepare_suite(seed)
    tier = env_id.removeprefix("swe/generated").lstrip("-")
    if tier:
        tasks = [t for t in tasks if t.difficulty == tier]
    return SweEnv(env_id, split, tasks, config)


HELD_OUT = ("project", "function")


def _large_projects(train_projects: list[str] | tuple[str, ...] | None) -> tuple[str, ...]:
    """The large suite's projects an env uses: every held-out project and the training
    projects `train_projects` (None: all of them), in `LARGE_PROJECTS` order."""
    if train_projects is None:
        return tuple(LARGE_PROJECTS)
    training = [n for n, spec in LARGE_PROJECTS.items() if not spec.held_out]
    unknown = sorted(set(train_projects) - set(training))
    if unknown or not train_projects:
        raise ValueError(f"train_projects must be a non-empty list of the large suite's "
                         f"training projects {training}, not {list(train_projects)!r}")
    return tuple(n for n, spec in LARGE_PROJECTS.items()
                 if spec.held_out or n in train_projects)


def make_large(env_id: str, split: str = "train", *, seed: int = 0, held_out: str = "project",
               train_projects: list[str] | None = None,
               observation: str = "traceback", progress: str = "all_tests",
               similarity_weight: float = 0.0, max_tool_calls: int = 40,
               max_observation_chars: int = 6000, end_on_violation: bool = True,
               workspace_dir: str = "", limits: SandboxLimits | dict | None = None,
               hidden_checks: int = 64, objective: str = "full") -> SweEnv:
    """``swe/large[-TIER]``: the cached large suite (generator seed `seed`), optionally
    one tier of it; the test split holds the tasks of the projects held out (`held_out`
    ``project``) or of the training projects' held-out functions (``function``).
    `train_projects` keeps only these training projects (None: all), so a run generates
    and trains on fewer; the held-out projects are always there. The other options are the
    fields of `SweEnvConfig`."""
    if held_out not in HELD_OUT:
        raise ValueError(f"held_out must be one of {HELD_OUT}, not {held_out!r}")
    config = _config(observation, progress, similarity_weight, max_tool_calls,
                     max_observation_chars, end_on_violation, workspace_dir, limits,
                     hidden_checks, objective)
    tasks = prepare_large_suite(seed, _large_projects(train_projects))
    tier = env_id.removeprefix("swe/large").lstrip("-")
    tasks = [t for t in tasks if (not tier or t.difficulty == tier)
             and (t.split != "test" or t.metadata.get("held_out") == held_out)]
    return SweEnv(env_id, split, tasks, config)


def make_from_file(env_id: str, split: str = "train", *, observation: str = "traceback",
                   progress: str = "all_tests", similarity_weight: float = 0.0,
                   max_tool_calls: int = 40,
                   max_observation_chars: int = 6000, end_on_violation: bool = True,
                   workspace_dir: str = "",
                   limits: SandboxLimits | dict | None = None,
                   hidden_checks: int = 64, objective: str = "full") -> SweEnv:
    """``swe/file:PATH``: every task of a task file. Options: the fields of
    `SweEnvConfig`."""
    config = _config(observation, progress, similarity_weight, max_tool_calls,
                     max_observation_chars, end_on_violation, workspace_dir, limits,
                     hidden_checks, objective)
    return SweEnv(env_id, split, load_tasks(env_id.removeprefix("swe/file:")), config)


SWE_INSTRUCTION = (
    "You are an expert software engineer fixing a bug in a Python repository. Each turn, "
    "think briefly if you need to, then end your reply with exactly one tool call in the "
    "format of the tool reference below (an edit call includes its whole block); the "
    "tool's output comes back as the next message."
)
"""The answer format of SWE envs: one tool call per reply, parsed by `parse_tool_call` from
the whole reply (multi-line edit blocks included)."""

def _prepare(env_id: str, split: str, games: list[int], options: dict) -> None:
    """The registry's preparation hook: generate (or find cached) the default suite before a
    run starts, rather than inside the first episode's reset."""
    prepare_suite(options.get("seed", 0))


register(r"swe/generated(-(easy|medium|hard))?", make_generated,
         ("swe/generated", "swe/generated-easy", "swe/generated-hard"),
         "Seeded bugs in real PyPI projects; tools + sandboxed, test-verified rewards",
         action_parser=whole_reply_action, instruction=SWE_INSTRUCTION, prepare=_prepare)
def _prepare_large(env_id: str, split: str, games: list[int], options: dict) -> None:
    prepare_large_suite(options.get("seed", 0),
                        _large_projects(options.get("train_projects")))


register(r"swe/large(-(easy|medium|hard))?", make_large,
         ("swe/large", "swe/large-easy"),
         "Seeded bugs in fifteen PyPI projects, four held out for testing",
         action_parser=whole_reply_action, instruction=SWE_INSTRUCTION, prepare=_prepare_large)
register(r"swe/file:.+", make_from_file, ("swe/file:tasks.jsonl",),
         "SWE-Gym / SWE-bench format task file (local or docker workspaces)",
         action_parser=whole_reply_action, instruction=SWE_INSTRUCTION)

__all__ = [
    "TIERS",
    "TOOL_HELP",
    "GeneratorConfig",
    "SandboxLimits",
    "SweEnv",
    "SweEnvConfig",
    "SweTask",
    "WorkspaceSpec",
    "generate_suite",
    "load_tasks",
    "make_from_file",
    "make_generated",
    "make_large",
    "parse_tool_call",
    "prepare_large_suite",
    "prepare_suite",
    "run_sandboxed",
    "sandbox_report",
    "save_tasks",
]
