"""A character-level MLP written the way today's lecture notebooks write one from raw tensors (written for
these tests, not copied): embeddings looked up by indexing, batch norm by hand, a loss spelled out step by
step with every intermediate's `retain_grad()`, then a manual backward checked tensor by tensor against
autograd, then the same loss with `F.cross_entropy` and a few SGD steps through `p.data += -lr * p.grad`.

The program takes the module it runs on as `torch` (real PyTorch is the oracle; `engine` and `client` run it
with the import changed). Draws come from a `torch.Generator`; `same_draws(torch, package)` makes real
PyTorch draw what gradserve's generators draw, so both sides start from the same numbers.
"""

from __future__ import annotations

import numpy as np

WORDS = [  # made-up words over a small alphabet
    "abel",
    "cade",
    "dana",
    "ebbe",
    "faye",
    "gale",
    "hana",
    "ida",
    "jade",
    "kale",
    "lena",
    "mabel",
    "nada",
    "odell",
    "pace",
    "bella",
]


class same_draws:
    """Real `torch`, except that `Generator`, `randn` and `randint` draw with gradserve's generators
    (`package.Generator`), so the oracle starts from the numbers gradserve draws."""

    def __init__(self, torch, package):
        self._torch, self._package = torch, package

    def __getattr__(self, name):
        return getattr(self._torch, name)

    def Generator(self):  # noqa: N802 - torch's spelling
        return self._package.Generator()

    def randn(self, *size, generator=None, dtype=None, requires_grad=False):
        values = self._package.randn(*size, generator=generator).numpy()
        return self._torch.tensor(values, dtype=dtype or self._torch.float32, requires_grad=requires_grad)

    def randint(self, low, high, size, generator=None):
        return self._torch.tensor(self._package.randint(low, high, size, generator=generator).numpy())


def dataset(torch, block_size=3):
    chars = sorted(set("".join(WORDS)))
    stoi = {s: i + 1 for i, s in enumerate(chars)}
    stoi["."] = 0
    xs, ys = [], []
    for w in WORDS:
        context = [0] * block_size
        for ch in w + ".":
            ix = stoi[ch]
            xs.append(context)
            ys.append(ix)
            context = context[1:] + [ix]
    return torch.tensor(xs), torch.tensor(ys), len(stoi)


def cmp(torch, name, dt, t):
    """One line: does the manual gradient `dt` equal autograd's `t.grad`, within float32 tolerance?"""
    approximate = torch.allclose(dt, t.grad, rtol=1e-4, atol=1e-6)
    maxdiff = (dt - t.grad).abs().max().item()
    print(f"{name:15s} | approximate: {approximate!s:5s} | maxdiff below 1e-5: {maxdiff < 1e-5}")


def backprop_ninja(torch, F, steps=3, lr=0.1):  # noqa: N803 - F is torch.nn.functional's usual name
    """Prints the forward's loss, one line per tensor comparing the manual backward with autograd's, the loss of
    the fused `F.cross_entropy`, and the losses of a few SGD steps."""
    Xtr, Ytr, vocab = dataset(torch)
    n_embd, n_hidden, block_size, batch = 5, 32, 3, 16
    g = torch.Generator().manual_seed(2147483647)
    C = torch.randn((vocab, n_embd), generator=g)
    W1 = torch.randn((n_embd * block_size, n_hidden), generator=g) * (5 / 3) / ((n_embd * block_size) ** 0.5)
    b1 = torch.randn(n_hidden, generator=g) * 0.1
    W2 = torch.randn((n_hidden, vocab), generator=g) * 0.1
    b2 = torch.randn(vocab, generator=g) * 0.1
    bngain = torch.randn((1, n_hidden), generator=g) * 0.1 + 1.0
    bnbias = torch.randn((1, n_hidden), generator=g) * 0.1
    parameters = [C, W1, b1, W2, b2, bngain, bnbias]
    for p in parameters:
        p.requires_grad = True
    print("parameters:", sum(p.nelement() for p in parameters))

    ix = torch.randint(0, Xtr.shape[0], (batch,), generator=g)
    Xb, Yb = Xtr[ix], Ytr[ix]
    n = batch

    # forward, chunked into steps that can be backpropagated one at a time
    emb = C[Xb]
    embcat = emb.view(emb.shape[0], -1)
    hprebn = embcat @ W1 + b1
    bnmeani = 1 / n * hprebn.sum(0, keepdim=True)
    bndiff = hprebn - bnmeani
    bndiff2 = bndiff**2
    bnvar = 1 / (n - 1) * bndiff2.sum(0, keepdim=True)  # Bessel's correction
    bnvar_inv = (bnvar + 1e-5) ** -0.5
    bnraw = bndiff * bnvar_inv
    hpreact = bngain * bnraw + bnbias
    h = torch.tanh(hpreact)
    logits = h @ W2 + b2
    logit_maxes = logits.max(1, keepdim=True).values
    norm_logits = logits - logit_maxes
    counts = norm_logits.exp()
    counts_sum = counts.sum(1, keepdims=True)
    counts_sum_inv = counts_sum**-1
    probs = counts * counts_sum_inv
    logprobs = probs.log()
    loss = -logprobs[range(n), Yb].mean()

    for p in parameters:
        p.grad = None
    intermediates = [logprobs, probs, counts, counts_sum, counts_sum_inv, norm_logits, logit_maxes, logits, h]
    intermediates += [hpreact, bnraw, bnvar_inv, bnvar, bndiff2, bndiff, hprebn, bnmeani, embcat, emb]
    for t in intermediates:
        t.retain_grad()
    loss.backward()
    print(f"loss: {loss.item():.4f}")

    # the same gradients by hand
    dlogprobs = torch.zeros_like(logprobs)
    dlogprobs[range(n), Yb] = -1.0 / n
    dprobs = (1.0 / probs) * dlogprobs
    dcounts_sum_inv = (counts * dprobs).sum(1, keepdim=True)
    dcounts = counts_sum_inv * dprobs
    dcounts_sum = (-(counts_sum**-2)) * dcounts_sum_inv
    dcounts += torch.ones_like(counts) * dcounts_sum
    dnorm_logits = counts * dcounts
    dlogits = dnorm_logits.clone()
    dlogit_maxes = (-dnorm_logits).sum(1, keepdim=True)
    dlogits += F.one_hot(logits.max(1).indices, num_classes=logits.shape[1]) * dlogit_maxes
    dh = dlogits @ W2.T
    dW2 = h.T @ dlogits
    db2 = dlogits.sum(0)
    dhpreact = (1.0 - h**2) * dh
    dbngain = (bnraw * dhpreact).sum(0, keepdim=True)
    dbnraw = bngain * dhpreact
    dbnbias = dhpreact.sum(0, keepdim=True)
    dbndiff = bnvar_inv * dbnraw
    dbnvar_inv = (bndiff * dbnraw).sum(0, keepdim=True)
    dbnvar = (-0.5 * (bnvar + 1e-5) ** -1.5) * dbnvar_inv
    dbndiff2 = (1.0 / (n - 1)) * torch.ones_like(bndiff2) * dbnvar
    dbndiff += (2 * bndiff) * dbndiff2
    dhprebn = dbndiff.clone()
    dbnmeani = (-dbndiff).sum(0)
    dhprebn += 1.0 / n * (torch.ones_like(hprebn) * dbnmeani)
    dembcat = dhprebn @ W1.T
    dW1 = embcat.T @ dhprebn
    db1 = dhprebn.sum(0)
    demb = dembcat.view(emb.shape)
    dC = torch.zeros_like(C)
    for k in range(Xb.shape[0]):
        for j in range(Xb.shape[1]):
            dC[Xb[k, j]] += demb[k, j]
    checks = [
        ("logprobs", dlogprobs, logprobs),
        ("probs", dprobs, probs),
        ("counts_sum_inv", dcounts_sum_inv, counts_sum_inv),
    ]
    checks += [
        ("counts_sum", dcounts_sum, counts_sum),
        ("counts", dcounts, counts),
        ("norm_logits", dnorm_logits, norm_logits),
    ]
    checks += [("logit_maxes", dlogit_maxes, logit_maxes), ("logits", dlogits, logits), ("h", dh, h), ("W2", dW2, W2)]
    checks += [
        ("b2", db2, b2),
        ("hpreact", dhpreact, hpreact),
        ("bngain", dbngain, bngain),
        ("bnbias", dbnbias, bnbias),
    ]
    checks += [("bnraw", dbnraw, bnraw), ("bnvar_inv", dbnvar_inv, bnvar_inv), ("bnvar", dbnvar, bnvar)]
    checks += [("bndiff2", dbndiff2, bndiff2), ("bndiff", dbndiff, bndiff), ("bnmeani", dbnmeani, bnmeani)]
    checks += [("hprebn", dhprebn, hprebn), ("embcat", dembcat, embcat), ("W1", dW1, W1), ("b1", db1, b1)]
    checks += [("emb", demb, emb), ("C", dC, C)]
    for name, dt, t in checks:
        cmp(torch, name, dt, t)

    # the loss fused, and its gradient in one expression
    loss_fast = F.cross_entropy(logits, Yb)
    print(f"fused loss equal: {abs(loss_fast.item() - loss.item()) < 1e-5}")
    dlogits_fast = F.softmax(logits, 1)
    dlogits_fast[range(n), Yb] -= 1
    dlogits_fast /= n
    cmp(torch, "logits (fused)", dlogits_fast, logits)

    # a few steps of SGD through .data
    for step in range(steps):
        ix = torch.randint(0, Xtr.shape[0], (batch,), generator=g)
        emb = C[Xtr[ix]]
        hpre = emb.view(emb.shape[0], -1) @ W1 + b1
        hpre = bngain * (hpre - hpre.mean(0, keepdim=True)) / (hpre.var(0, keepdim=True) + 1e-5) ** 0.5 + bnbias
        step_loss = F.cross_entropy(torch.tanh(hpre) @ W2 + b2, Ytr[ix])
        for p in parameters:
            p.grad = None
        step_loss.backward()
        for p in parameters:
            p.data += -lr * p.grad
        print(f"step {step}: {step_loss.item():.4f}")
    return np.asarray(C.detach().numpy())
