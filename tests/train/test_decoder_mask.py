"""Right-padded batches run the decoder without a padding mask (causal flash attention): the
logprobs at real positions equal those computed with the mask."""

from __future__ import annotations

import torch

from tripod.train.batch import decoder_mask, token_logprobs


def test_right_padding_needs_no_mask_and_anything_else_keeps_it():
    right = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1], [1, 0, 0, 0]])
    assert decoder_mask(right) is None
    left = torch.tensor([[0, 1, 1, 1], [1, 1, 1, 1]])
    holes = torch.tensor([[1, 0, 1, 0]])
    assert decoder_mask(left) is left and decoder_mask(holes) is holes


def test_logprobs_and_gradients_without_the_mask_equal_those_with_it(tiny_policy_factory):
    model = tiny_policy_factory(seed=4).model
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(5, 1000, (3, 40), generator=gen)
    mask = torch.ones_like(ids)
    mask[0, 25:] = 0
    mask[2, 10:] = 0
    ids = ids.masked_fill(mask == 0, 0)
    loss_mask = mask.float()
    loss_mask[:, :3] = 0
    got, _, _ = token_logprobs(model, ids, mask, 1.0, loss_mask)             # no mask passed
    hidden = model.get_decoder()(input_ids=ids, attention_mask=mask).last_hidden_state
    logp = torch.log_softmax(model.get_output_embeddings()(hidden[:, :-1]).float(), -1)
    want = torch.zeros_like(got)
    want[:, 1:] = logp.gather(-1, ids[:, 1:, None])[..., 0] * loss_mask[:, 1:]
    torch.testing.assert_close(got, want, rtol=0, atol=1e-5)
    got.sum().backward()
    grads = [p.grad.clone() for p in model.parameters() if p.grad is not None]
    model.zero_grad()
    want.sum().backward()
    for a, b in zip(grads, [p.grad for p in model.parameters() if p.grad is not None]):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)
