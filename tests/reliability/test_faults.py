"""Fault injection (`envs/faults.py`) through the rollout engine: every injected fault becomes
an env-error episode with a clear reason, counted; no step is waited for past the time-out;
no thread, child process or file handle is left behind; SWE envs survive it too."""

from __future__ import annotations

import os
import threading
import time

import psutil
import pytest

from tripod.core.config import FaultsSection
from tripod.core.types import EpisodeEnd, EpisodeJob
from tripod.envs.base import EnvError, Step, StepInfo
from tripod.envs.faults import GARBAGE, FaultyEnv, InjectedFault
from tripod.envs.pool import EnvPool
from tripod.envs.process import ChildProcess
from tripod.envs.toy import LettersEnv
from tripod.policy.rollout import RolloutConfig, RolloutEngine, _checked_step, make_jobs
from tripod.policy.sampler import SamplingParams
from tripod.train.rl import make_batch

SAMPLING = SamplingParams(temperature=1.0, max_new_tokens=3)


class ChildLetters:
    """`toy/letters-2` played in a child process (as TextWorld and ALFWorld games are), so
    that the `kill` fault has a real process to kill."""

    def __init__(self, env_id: str = "toy/letters-2", split: str = "train") -> None:
        self.env_id, self.split = env_id, split
        self._process = ChildProcess("tripod.envs.toy:LettersEnv",
                                     {"env_id": env_id, "split": split, "turns": 2,
                                      "vocabulary": 4}, label="toy game process")

    def reset(self, game_index: int):
        return self._process.call("reset", game_index, 60.0)

    def step(self, action: str) -> Step:
        return self._process.call("step", action, 60.0)

    def close(self) -> None:
        self._process.close()


def _faulty(kind: str, env=None) -> FaultyEnv:
    env = FaultyEnv(env or LettersEnv("toy/letters-2", turns=2), 1.0, [kind], "0:1", hang_s=30)
    env.reset(0)
    return env


# -- each kind on its own ----------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(GARBAGE))
def test_every_garbage_result_is_an_env_error_naming_the_problem(name):
    class Broken:
        def step(self, action):
            return GARBAGE[name]()

    with pytest.raises(EnvError, match="env broke its contract"):
        _checked_step(Broken(), "go")


def test_raise_and_dead_env_faults():
    with pytest.raises(InjectedFault, match="injected fault"):
        _faulty("raise").step("apple")
    env = _faulty("kill")  # no child process: the env is dead from now on
    with pytest.raises(EnvError, match="was killed"):
        env.step("apple")
    with pytest.raises(EnvError, match="was killed"):
        env.reset(1)


def test_hang_returns_when_the_env_is_closed():
    env = _faulty("hang")
    errors: list[BaseException] = []

    def run():
        try:
            env.step("apple")
        except BaseException as exc:  # noqa: BLE001 (recorded for the assertion)
            errors.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(0.2)
    assert thread.is_alive()  # hanging
    env.close()
    thread.join(30)
    assert not thread.is_alive() and isinstance(errors[0], InjectedFault)


def test_kill_fault_kills_the_child_process():
    env = _faulty("kill", ChildLetters())
    pid = env.env._process.pid
    with pytest.raises(EnvError, match="crashed during 'step'.*exit code -9"):
        env.step("apple")
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    env.close()


def test_fault_draws_are_a_function_of_seed_and_episode():
    def fates(seed):
        class Endless:
            env_id, split = "endless", "train"

            def step(self, action):
                return Step("ok", 0.0, False, False, StepInfo())

        env = FaultyEnv(Endless(), 0.3, ["raise"], seed)
        out = []
        for _ in range(200):
            try:
                env.step("apple")
                out.append(0)
            except InjectedFault:
                out.append(1)
        return out

    assert fates("0:7") == fates("0:7") != fates("0:8")
    assert 30 <= sum(fates("0:7")) <= 90  # about 30% of 200


# -- through the engine --------------------------------------------------------------------------
def _engine(policy, timeout_s: float, faults: FaultsSection | None, **kw) -> RolloutEngine:
    cfg = RolloutConfig(max_turns=2, batch_size=4, env_timeout_s=timeout_s,
                        truncated_action="step", faults=faults, env_options={"vocabulary": 4})
    return RolloutEngine(policy, cfg, **kw)


def _resources() -> tuple[int, int, int]:
    """(threads, child processes, open file descriptors) of this process."""
    me = psutil.Process()
    return (threading.active_count(), len(me.children(recursive=True)),
            len(os.listdir("/proc/self/fd")))


def _settled(before: tuple[int, int, int], limit_s: float = 60.0) -> tuple[int, int, int]:
    """Resource counts once abandoned worker threads have had time to return (a wait, not a
    timing assertion: the counts are compared, however long it took)."""
    end = time.monotonic() + limit_s
    now = _resources()
    while now != before and time.monotonic() < end:
        time.sleep(0.1)
        now = _resources()
    return now


def test_every_fault_is_an_env_error_episode_and_nothing_leaks(tiny_policy_factory):
    """All four kinds on child-process envs: each injected fault ends its episode as an env
    error with a reason; the counts agree; threads, processes and fds return to before."""
    policy = tiny_policy_factory()
    faults = FaultsSection(rate=0.5, kinds=["raise", "hang", "garbage", "kill"], seed=3)
    before = _resources()
    engine = _engine(policy, 2.0, faults, env_factory=lambda job: ChildLetters())
    trajs, stats = engine.collect(make_jobs("toy/letters-2", "train", [0, 1, 2, 3], 2, 0),
                                  SAMPLING)
    engine.close()
    failed = [t for t in trajs if t.failed]
    assert sum(engine.faults_injected.values()) == len(failed) == stats.env_errors > 0
    assert all(t.end is EpisodeEnd.ENV_ERROR and t.error for t in failed)
    assert all(t.turns[-1].status.value == "env_error" for t in failed if t.turns)
    print(f"faults injected: {dict(engine.faults_injected)}; reasons: "
          f"{sorted({(t.error or '').splitlines()[0][:70] for t in failed})}")
    assert _settled(before) == before


def test_faults_with_the_pool_only_on_training_splits(tiny_policy_factory, tiny_cfg, tmp_path):
    """Through a shared `EnvPool`: failed envs are closed, clean ones go back unwrapped; the
    valid split is never faulted (evaluations stay clean)."""
    faults = FaultsSection(rate=0.25, kinds=["raise", "garbage", "kill"], seed=1)
    before = _resources()
    with EnvPool() as pool:
        engine = _engine(tiny_policy_factory(), 5.0, faults, pool=pool)
        train, stats = engine.collect(make_jobs("toy/letters-2", "train", list(range(6)), 3, 0),
                                      SAMPLING)
        assert 0 < stats.env_errors == sum(engine.faults_injected.values())
        batch, counts = make_batch(train, tiny_cfg(tmp_path), engine.policy.pad_token_id)
        failed = {t.episode_id for t in train if t.failed}
        assert batch is not None and not failed & set(batch.episode_ids.tolist())  # excluded from the loss
        assert all(not isinstance(env, FaultyEnv) for envs in pool._idle.values()
                   for env in envs)
        valid, vstats = engine.collect(make_jobs("toy/letters-2", "valid", list(range(6)), 2, 0),
                                       SAMPLING)
        assert vstats.env_errors == 0 and sum(engine.faults_injected.values()) == stats.env_errors
    assert _settled(before) == before


def test_no_step_is_waited_for_past_the_turn_deadline(tiny_policy_factory):
    """Two envs in one turn: A hangs, B answers after 1.5 time-outs. Waiting a fresh
    time-out per future (the old engine) accepted B's late answer; one deadline per turn
    marks both as timed out."""
    class Slow(LettersEnv):
        def __init__(self, delay: float) -> None:
            super().__init__("toy/letters-2", turns=2, vocabulary=4)
            self.delay, self.closed = delay, threading.Event()

        def step(self, action):
            self.closed.wait(self.delay)
            return super().step(action)

        def close(self):
            self.closed.set()

    envs = {0: Slow(60.0), 1: Slow(3.0)}
    engine = _engine(tiny_policy_factory(), 2.0, None,
                     env_factory=lambda job: envs[job.episode_id])
    trajs, _ = engine.collect([EpisodeJob("toy/letters-2", "train", 0, 0, 0, 1),
                               EpisodeJob("toy/letters-2", "train", 0, 0, 1, 2)], SAMPLING)
    assert [t.error for t in trajs] == ["env step timed out"] * 2
    assert [t.num_turns for t in trajs] == [1, 1]  # B's late first answer was not taken


@pytest.mark.slow
def test_a_training_run_with_10_percent_faulty_steps_completes(tmp_path, tiny_policy_factory,
                                                              tiny_cfg):
    """`env.faults.rate=0.1` with every kind: the run finishes, faulty episodes are counted
    in `env_errors` (their lone group partners dropped from the loss), no update skipped."""
    from tripod.train.rl import train_rl

    cfg = tiny_cfg(tmp_path, "train.iterations=4", "rollout.games_per_iter=4",
                   "rollout.env_timeout_s=1.0", "env.faults.rate=0.1", "env.faults.seed=2")
    result = train_rl(cfg, policy=tiny_policy_factory(), quiet=True)
    errors = sum(h["env_errors"] for h in result.history)
    episodes = sum(h["episodes"] for h in result.history)
    dropped = sum(h["dropped_episodes"] for h in result.history)
    print(f"10% faults: {errors} env-error episodes of {episodes}; {dropped:.0f} episodes "
          f"dropped from the loss with their groups")
    assert errors > 0 and result.final_checkpoint.exists()
    assert all(h.get("skipped_updates", 0) == 0 for h in result.history)
    # every injected fault ended its episode: the loop's count equals the env errors
    assert sum(h["faults_injected"] for h in result.history) == errors


def test_faults_around_swe_envs(tmp_path, tiny_policy_factory):
    """The wrapper around an SWE env (no child process of its own: `kill` marks it dead),
    played by the expert: faulty episodes are env errors, the others still win."""
    from tripod.envs.swe.patches import make_patch
    from tripod.envs.swe.task import SweTask, WorkspaceSpec, save_tasks
    from tripod.policy.rollout import expert_actor

    good, bad = "def double(x):\n    return 2 * x\n", "def double(x):\n    return x + x + 1\n"
    (tmp_path / "proj" / "tests").mkdir(parents=True)
    (tmp_path / "proj" / "mathx.py").write_text(good)
    (tmp_path / "proj" / "tests" / "test_mathx.py").write_text(
        "from mathx import double\n\n\ndef test_double():\n    assert double(3) == 6\n")
    task = SweTask(instance_id="mathx-1", repo="tripod/mathx", base_commit="",
                   problem_statement="double(3) is 7; it should be 6.",
                   patch=make_patch("mathx.py", bad, good), test_patch="",
                   FAIL_TO_PASS=["tests/test_mathx.py::test_double"], PASS_TO_PASS=[],
                   workspace=WorkspaceSpec(kind="local", source=str(tmp_path / "proj"),
                                           setup_patch=make_patch("mathx.py", good, bad)))
    env_id = f"swe/file:{save_tasks([task], tmp_path / 'tasks.jsonl')}"
    faults = FaultsSection(rate=0.25, kinds=["raise", "garbage", "kill"], seed=0)
    engine = RolloutEngine(tiny_policy_factory(), RolloutConfig(
        max_turns=20, batch_size=4, env_timeout_s=120.0, faults=faults))
    trajs, stats = engine.collect(make_jobs(env_id, "train", [0, 1, 2, 3], 1, 0),
                                  SamplingParams(), actor=expert_actor())
    engine.close()
    failed = [t for t in trajs if t.failed]
    print(f"SWE with faults: {dict(engine.faults_injected)}; "
          f"{len(failed)} env errors, {sum(t.won for t in trajs)} won of {len(trajs)}")
    assert 0 < len(failed) == sum(engine.faults_injected.values()) == stats.env_errors
    assert all(t.won for t in trajs if not t.failed) and len(failed) < len(trajs)


@pytest.mark.slow
def test_kill_fault_on_textworld_and_alfworld_game_processes():
    """The families that run games in child processes: `kill` finds the process, the step
    fails as a crash, and the env plays again after a reset (a fresh child)."""
    from tripod.envs.registry import make

    for env_id in ("textworld/w2-o3-q4", "alfworld/generated"):
        env = _faulty("kill", make(env_id))
        pid = env.env._process.pid
        with pytest.raises(EnvError, match="crashed during 'step'.*exit code -9"):
            env.step("look")
        assert env.env._process.pid is None
        env.rate = 0.0
        env.reset(0)
        assert env.env._process.pid not in (None, pid)
        assert isinstance(env.step("look").observation, str)
        env.close()


def test_numpy_scalars_are_a_valid_step():
    """Envs built on numpy may return its scalars: they are numbers, not a broken contract."""
    import numpy as np

    class Numpy:
        def step(self, action):
            return Step("ok", np.float32(0.5), np.bool_(False), np.bool_(False),
                        StepInfo(score=np.float64(1.0), progress=np.float32(0.5)))

    assert _checked_step(Numpy(), "go").reward == 0.5
