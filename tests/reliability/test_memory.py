"""Memory after RL: the learner (optimizer state, reference model, critic, rollout copy)
must not outlive `train_rl`, so the pipeline's final evaluation runs without it."""

from __future__ import annotations

import weakref

from tripod.train import rl
from tripod.train.common import release_memory


def test_the_learner_is_freed_once_train_rl_returns(tmp_path, tiny_policy_factory, tiny_cfg,
                                                    monkeypatch):
    learners: list[weakref.ref] = []
    start = rl._start

    def recording_start(*args, **kwargs):
        learner, it = start(*args, **kwargs)
        learners.append(weakref.ref(learner))
        return learner, it

    monkeypatch.setattr(rl, "_start", recording_start)
    cfg = tiny_cfg(tmp_path, "train.iterations=2", "algo.estimator=gae")   # with a critic
    result = rl.train_rl(cfg, policy=tiny_policy_factory(), quiet=True)
    before, after = release_memory()
    assert len(learners) == 1
    assert learners[0]() is None, "the learner is still reachable after train_rl returned"
    assert result.policy.model is not None          # the trained policy is what is kept
    assert before > 0 and after > 0                 # VmRSS read (Linux)
