"""SFT gradient accumulation: micro-batches of 1 row give the same update as the whole batch
at once (the token-mean NLL of the step's rows either way)."""

from __future__ import annotations

import torch

from tripod.core.config import load_config
from tripod.train.batch import Row
from tripod.train.sft import sft_step


def _rows() -> list[Row]:
    gen = torch.Generator().manual_seed(0)
    rows = []
    for k, length in enumerate((30, 18, 25, 9)):
        ids = torch.randint(5, 1000, (length,), generator=gen).tolist()
        mask = [0] * 4 + [1] * (length - 4)
        mask[length // 2] = 0  # an env token in the middle
        rows.append(Row(ids, mask, [0.0] * length, [0.0] * length,
                        [0 if m else -1 for m in mask], 0, k))
    return rows


def test_micro_batches_give_the_same_step_as_one_batch(tiny_policy_factory):
    after = []
    for micro in (1, 4):
        cfg = load_config(overrides=["model.name=tiny", "sft.batch_size=4",
                                     f"sft.micro_batch_size={micro}"])
        policy = tiny_policy_factory(seed=2)
        params = [p for p in policy.model.parameters() if p.requires_grad]
        opt = torch.optim.SGD(params, lr=1.0)  # the change is the gradient itself
        policy.model.train()
        loss, n = sft_step(policy, _rows(), cfg, opt, params)
        assert n == sum(sum(r.loss_mask) for r in _rows()) and loss > 0
        after.append((loss, torch.cat([p.detach().flatten() for p in params])))
    start = torch.cat([p.detach().flatten() for p in tiny_policy_factory(seed=2).model.parameters()])
    assert abs(after[0][0] - after[1][0]) < 1e-5
    assert not torch.equal(after[0][1], start)
    torch.testing.assert_close(after[0][1] - start, after[1][1] - start, rtol=1e-4, atol=1e-7)
