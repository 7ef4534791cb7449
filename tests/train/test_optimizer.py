"""The trainers' AdamW is fused where torch can fuse it: the same steps as the plain one."""

from __future__ import annotations

import torch

from tripod.train.common import adamw


def test_fused_adamw_takes_the_plain_steps():
    torch.manual_seed(0)
    start = [torch.randn(64, 32), torch.randn(32)]
    runs = []
    for fused in (True, False):
        params = [torch.nn.Parameter(t.clone()) for t in start]
        opt = (adamw(params, lr=1e-2, weight_decay=0.01) if fused
               else torch.optim.AdamW(params, lr=1e-2, weight_decay=0.01))
        assert opt.defaults["fused"] is (True if fused else None)
        for step in range(5):
            for p in params:
                p.grad = torch.sin(p.detach() * (step + 1))
            opt.step()
        runs.append([p.detach() for p in params])
    for fused_p, plain_p in zip(*runs):
        torch.testing.assert_close(fused_p, plain_p, atol=1e-6, rtol=1e-5)
    assert not torch.equal(runs[0][0], start[0])


def test_param_groups_and_what_cannot_be_fused():
    a, b = torch.nn.Parameter(torch.zeros(3)), torch.nn.Parameter(torch.zeros(2))
    opt = adamw([{"params": [a], "lr": 1.0}, {"params": [b], "lr": 2.0}])
    assert opt.defaults["fused"] is True and [g["lr"] for g in opt.param_groups] == [1.0, 2.0]
    assert adamw([torch.nn.Parameter(torch.zeros(2, device="meta"))]).defaults["fused"] is None
