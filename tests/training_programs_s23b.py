"""Training programs of kinds the earlier sweeps did not cover (session 23, second sweep), in the style of
tests/tutorial_training_programs.py: each takes the package it runs on as `torch` (PyTorch, the oracle, or
`engine`), starts from NumPy's weights and data, and returns what it computed (losses, gradients, weights, learning
rates, dtypes, node names, errors) for tests/engine/test_conformance_s23b.py to compare."""

from __future__ import annotations

import copy
import io

import numpy as np

from tests.tutorial_training_programs import data, init, labels


def _out(*values):
    return [v.detach().numpy() if hasattr(v, "detach") else v for v in values]


def gru_char_lm(torch, steps=3):
    """A char-level GRU language model step: Embedding, GRU(batch_first), Linear, CrossEntropyLoss over
    the flattened logits, clip_grad_norm_ (its returned total norm), Adam."""
    nn = torch.nn

    class CharLM(nn.Module):
        def __init__(self, vocab=7, emb=5, hidden=6):
            super().__init__()
            self.emb, self.rnn, self.head = (
                nn.Embedding(vocab, emb),
                nn.GRU(emb, hidden, batch_first=True),
                nn.Linear(hidden, vocab),
            )

        def forward(self, x, h=None):
            out, h = self.rnn(self.emb(x), h)
            return self.head(out), h

    model = init(torch, CharLM(), 1)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    text = torch.tensor(labels(2, 2 * 9, 7).reshape(2, 9))
    x, y = text[:, :-1], text[:, 1:]
    seen, h = [], None
    for _ in range(steps):
        logits, h = model(x, None if h is None else h.detach())
        loss = nn.functional.cross_entropy(logits.reshape(-1, 7), y.reshape(-1))
        opt.zero_grad()
        loss.backward()
        norm = nn.utils.clip_grad_norm_(model.parameters(), max_norm=0.5)
        opt.step()
        seen += _out(loss, norm) + [loss.grad_fn.name(), str(norm.dtype), tuple(h.shape)]
    return seen + _out(model.head.weight, model.rnn.weight_hh_l0.grad)


def transformer_encoder_step(torch, steps=2):
    """A small TransformerEncoderLayer (batch_first, dropout 0) with a causal mask and a key padding mask,
    mean-pooled over the unpadded positions, a classifier head, SGD with momentum."""
    nn = torch.nn
    layer = nn.TransformerEncoderLayer(d_model=8, nhead=2, dim_feedforward=16, dropout=0.0, batch_first=True)
    enc = nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False)
    head = nn.Linear(8, 3)
    init(torch, enc, 3), init(torch, head, 4)
    params = list(enc.parameters()) + list(head.parameters())
    opt = torch.optim.SGD(params, lr=0.05, momentum=0.9)
    x = torch.tensor(data(5, 2, 5, 8))
    pad = torch.tensor([[False, False, False, True, True], [False] * 5])
    causal = nn.Transformer.generate_square_subsequent_mask(5)
    y = torch.tensor([0, 2])
    seen = _out(causal)
    for _ in range(steps):
        h = enc(x, mask=causal, src_key_padding_mask=pad)
        keep = (~pad).unsqueeze(-1).float()
        pooled = (h * keep).sum(1) / keep.sum(1)
        loss = nn.functional.cross_entropy(head(pooled), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        seen += _out(loss, h[0, :3])
    return seen + _out(enc.layers[0].self_attn.in_proj_weight.grad, head.bias)


def conv_bn_dropout_train_eval(torch, steps=2):
    """Conv2d + BatchNorm2d + ReLU + MaxPool + Dropout + Linear: train steps (batch statistics, running stats
    updated, dropout with a seeded generator is not compared: p chosen 0 in train, its eval identity checked),
    then eval (running statistics), and the num_batches_tracked buffer."""
    nn = torch.nn
    model = nn.Sequential(
        nn.Conv2d(1, 3, 3, padding=1),
        nn.BatchNorm2d(3),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Dropout(0.0),
        nn.Flatten(),
        nn.Linear(3 * 3 * 3, 4),
    )
    init(torch, model, 6)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, weight_decay=1e-3)
    x, y = torch.tensor(data(7, 5, 1, 6, 6)), torch.tensor(labels(8, 5, 4))
    seen = []
    for _ in range(steps):
        model.train()
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        seen += _out(loss)
    model.eval()
    with torch.no_grad():
        ev = model(x)
    bn = model[1]
    return (
        seen
        + _out(ev, bn.running_mean, bn.running_var, bn.num_batches_tracked, model[0].weight.grad)
        + [str(bn.num_batches_tracked.dtype), model.training, model[4].training]
    )


def vae_step(torch, steps=3):
    """A VAE step: encoder to (mu, logvar), reparameterization with a fixed eps, decoder with sigmoid,
    binary_cross_entropy(reduction='sum') + the KL term, Adam."""
    nn, F = torch.nn, torch.nn.functional

    class VAE(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1, self.mu, self.logvar = nn.Linear(10, 8), nn.Linear(8, 2), nn.Linear(8, 2)
            self.fc3, self.fc4 = nn.Linear(2, 8), nn.Linear(8, 10)

        def forward(self, x, eps):
            h = F.relu(self.fc1(x))
            mu, logvar = self.mu(h), self.logvar(h)
            z = mu + eps * torch.exp(0.5 * logvar)
            return torch.sigmoid(self.fc4(F.relu(self.fc3(z)))), mu, logvar

    model = init(torch, VAE(), 9)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    x = torch.tensor(np.random.default_rng(10).uniform(0, 1, (4, 10)).astype(np.float32))
    eps = torch.tensor(data(11, 4, 2))
    seen = []
    for _ in range(steps):
        recon, mu, logvar = model(x, eps)
        bce = F.binary_cross_entropy(recon, x, reduction="sum")
        kld = -0.5 * torch.sum(1 + logvar - mu.pow(2) - logvar.exp())
        loss = bce + kld
        opt.zero_grad()
        loss.backward()
        opt.step()
        seen += _out(bce, kld) + [bce.grad_fn.name(), kld.grad_fn.name()]
    return seen + _out(model.logvar.weight.grad, model.fc1.weight)


def gan_step(torch, steps=2):
    """An MLP GAN: the discriminator trained on real and detached fakes (BCEWithLogitsLoss), then the generator
    through the discriminator; two Adam optimizers with betas=(0.5, 0.999); the discriminator's gradients from
    the generator's step are zeroed before its next step."""
    nn = torch.nn
    G = init(torch, nn.Sequential(nn.Linear(3, 8), nn.LeakyReLU(0.2), nn.Linear(8, 4), nn.Tanh()), 12)
    D = init(torch, nn.Sequential(nn.Linear(4, 8), nn.LeakyReLU(0.2), nn.Linear(8, 1)), 13)
    opt_g = torch.optim.Adam(G.parameters(), lr=2e-3, betas=(0.5, 0.999))
    opt_d = torch.optim.Adam(D.parameters(), lr=2e-3, betas=(0.5, 0.999))
    crit = nn.BCEWithLogitsLoss()
    real, z = torch.tensor(data(14, 6, 4)), torch.tensor(data(15, 6, 3))
    ones, zeros = torch.ones(6, 1), torch.zeros(6, 1)
    seen = []
    for _ in range(steps):
        fake = G(z)
        opt_d.zero_grad()
        loss_d = crit(D(real), ones) + crit(D(fake.detach()), zeros)
        loss_d.backward()
        opt_d.step()
        seen.append(G[0].weight.grad is None)
        opt_g.zero_grad()
        loss_g = crit(D(fake), ones)
        loss_g.backward()
        opt_g.step()
        seen += _out(loss_d, loss_g, D[0].weight.grad)
    return seen + _out(G[2].weight, D[2].bias)


def tied_autoencoder(torch, steps=3):
    """Weight tying two ways: a decoder Linear whose weight is the encoder's Parameter (one entry in
    parameters(), the gradient of both uses summed), and a functional decoder by `F.linear(h, W.t())`."""
    nn, F = torch.nn, torch.nn.functional
    enc, dec = nn.Linear(6, 3), nn.Linear(3, 6, bias=False)
    init(torch, enc, 16)
    model = nn.ModuleDict({"enc": enc, "dec": dec})
    emb = nn.Embedding(6, 3)
    out_layer = nn.Linear(3, 6)
    init(torch, emb, 17), init(torch, out_layer, 18)
    out_layer.weight = emb.weight  # the word_language_model's tying
    params = list(model.parameters()) + list(nn.ModuleList([emb, out_layer]).parameters())
    opt = torch.optim.SGD(params, lr=0.1)
    x, tokens = torch.tensor(data(19, 4, 6)), torch.tensor([0, 3, 5, 1])
    seen = [
        len(params),
        len(list(nn.ModuleList([emb, out_layer]).parameters())),
        sorted(nn.ModuleList([emb, out_layer]).state_dict()),
    ]
    for _ in range(steps):
        h = torch.tanh(enc(x))
        recon = F.linear(h, enc.weight.t())
        logits = out_layer(emb(tokens))
        loss = F.mse_loss(recon, x) + F.cross_entropy(logits, tokens)
        opt.zero_grad()
        loss.backward()
        opt.step()
        seen += _out(loss, enc.weight.grad, emb.weight.grad)
    return seen + [out_layer.weight is emb.weight]


def grad_accumulation(torch, micro=3):
    """Gradient accumulation over micro-batches (each loss divided by their number) equals one big batch's
    gradient; the step taken once; `zero_grad(set_to_none=True)` leaves None."""
    nn = torch.nn
    model = init(torch, nn.Sequential(nn.Linear(4, 5), nn.Tanh(), nn.Linear(5, 2)), 20)
    big = copy.deepcopy(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.5)
    x, y = torch.tensor(data(21, 6, 4)), torch.tensor(labels(22, 6, 2))
    opt.zero_grad()
    for xb, yb in zip(x.chunk(micro), y.chunk(micro)):
        (nn.functional.cross_entropy(model(xb), yb) / micro).backward()
    accumulated = [p.grad.clone() for p in model.parameters()]
    nn.functional.cross_entropy(big(x), y).backward()
    whole = [p.grad for p in big.parameters()]
    opt.step()
    opt.zero_grad(set_to_none=True)
    return _out(*accumulated, *whole, *model.parameters()) + [all(p.grad is None for p in model.parameters())]


def param_groups_schedulers(torch, epochs=4):
    """Mixed parameter groups (no weight decay on biases and norms, a head at 10x lr), a LinearLR warmup then
    CosineAnnealingLR by SequentialLR, AdamW; each group's lr per epoch and the weights."""
    nn = torch.nn
    model = init(torch, nn.Sequential(nn.Linear(3, 4), nn.LayerNorm(4), nn.ReLU(), nn.Linear(4, 2)), 23)
    decay = [
        p
        for n, p in model.named_parameters()
        if n.endswith("weight") and not n.startswith("1.") and not n.startswith("3.")
    ]
    no_decay = [p for n, p in model.named_parameters() if n.endswith("bias") or n.startswith("1.")]
    opt = torch.optim.AdamW(
        [{"params": decay}, {"params": no_decay, "weight_decay": 0.0}, {"params": [model[3].weight], "lr": 0.1}],
        lr=0.01,
        weight_decay=0.1,
    )
    warm = torch.optim.lr_scheduler.LinearLR(opt, start_factor=0.25, total_iters=2)
    cos = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=3)
    sched = torch.optim.lr_scheduler.SequentialLR(opt, [warm, cos], milestones=[2])
    x, y = torch.tensor(data(24, 5, 3)), torch.tensor(labels(25, 5, 2))
    seen = []
    for _ in range(epochs):
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        seen.append([round(g["lr"], 10) for g in opt.param_groups])
        seen += _out(loss)
    return seen + _out(*model.parameters()) + [sched.get_last_lr(), [len(g["params"]) for g in opt.param_groups]]


def early_stopping(torch, epochs=6, patience=2):
    """Early stopping: the best validation loss's weights kept by `copy.deepcopy(model.state_dict())` (a copy,
    not views that later steps change), restored with load_state_dict at the end; ReduceLROnPlateau on the
    validation loss."""
    nn = torch.nn
    model = init(torch, nn.Sequential(nn.Linear(3, 6), nn.ReLU(), nn.Linear(6, 1)), 26)
    opt = torch.optim.SGD(model.parameters(), lr=0.3)
    plateau = torch.optim.lr_scheduler.ReduceLROnPlateau(opt, factor=0.5, patience=0)
    xt, yt = torch.tensor(data(27, 8, 3)), torch.tensor(data(28, 8, 1))
    xv, yv = torch.tensor(data(29, 4, 3)), torch.tensor(data(30, 4, 1))
    best, best_state, bad, seen = float("inf"), None, 0, []
    for epoch in range(epochs):
        model.train()
        loss = nn.functional.mse_loss(model(xt), yt)
        opt.zero_grad()
        loss.backward()
        opt.step()
        model.eval()
        with torch.no_grad():
            val = nn.functional.mse_loss(model(xv), yv).item()
        plateau.step(val)
        seen.append((epoch, round(val, 5), opt.param_groups[0]["lr"]))
        if val < best - 1e-4:
            best, best_state, bad = val, copy.deepcopy(model.state_dict()), 0
        else:
            bad += 1
            if bad >= patience:
                break
    last = model[0].weight.detach().clone()
    result = model.load_state_dict(best_state)
    with torch.no_grad():
        restored = nn.functional.mse_loss(model(xv), yv).item()
    return seen + _out(last, model[0].weight) + [round(restored, 5), round(best, 5), repr(result)]


def dataloader_loops(torch, epochs=2):
    """torch.utils.data: a TensorDataset split by random_split (a seeded Generator), DataLoaders (shuffle with
    a generator, drop_last, a collate of tuples), a train loop and an eval loop over batches; the split sizes,
    the first batch's shapes and dtypes."""
    nn = torch.nn
    from_data = torch.utils.data
    xs, ys = torch.tensor(data(31, 10, 3)), torch.tensor(labels(32, 10, 2))
    ds = from_data.TensorDataset(xs, ys)
    parts = from_data.random_split(ds, [0.7, 0.3], generator=torch.Generator().manual_seed(0))
    again = from_data.random_split(ds, [7, 3], generator=torch.Generator().manual_seed(0))
    split = [sorted(parts[0].indices + parts[1].indices), [p.indices for p in parts] == [p.indices for p in again]]
    train, val = from_data.Subset(ds, list(range(7))), from_data.Subset(ds, [9, 8, 7])  # (the streams differ)
    loader = from_data.DataLoader(train, batch_size=3, shuffle=False, drop_last=True)
    val_loader = from_data.DataLoader(val, batch_size=2)
    model = init(torch, nn.Linear(3, 2), 33)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    seen = split + [len(parts[0]), len(val), len(loader), len(val_loader), len(ds), tuple(ds[2][0].shape)]
    for _ in range(epochs):
        for xb, yb in loader:
            loss = nn.functional.cross_entropy(model(xb), yb)
            opt.zero_grad()
            loss.backward()
            opt.step()
            seen += _out(loss) + [tuple(xb.shape), str(yb.dtype)]
        correct = total = 0
        with torch.no_grad():
            for xb, yb in val_loader:
                correct += (model(xb).argmax(1) == yb).sum().item()
                total += len(yb)
        seen.append((correct, total))
    return seen + _out(model.weight)


def interpolate_grid_sample_model(torch, steps=2):
    """A model that upsamples with F.interpolate (bilinear, align_corners=False; nearest by scale_factor) and
    warps with F.grid_sample on a grid from F.affine_grid of a learned theta; MSE to a target, Adam."""
    nn, F = torch.nn, torch.nn.functional

    class Warp(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(1, 2, 3, padding=1)
            self.theta = nn.Parameter(torch.tensor([[1.0, 0.1, 0.0], [-0.1, 0.9, 0.05]]))

        def forward(self, x):
            up = F.interpolate(self.conv(x), size=(6, 6), mode="bilinear", align_corners=False)
            near = F.interpolate(x, scale_factor=2, mode="nearest")
            grid = F.affine_grid(self.theta.expand(x.shape[0], 2, 3), [x.shape[0], 2, 6, 6], align_corners=False)
            return F.grid_sample(up, grid, mode="bilinear", padding_mode="zeros", align_corners=False) + near.mean(
                1, keepdim=True
            )

    model = Warp()
    init(torch, model.conv, 34)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    x, target = torch.tensor(data(35, 2, 1, 3, 3)), torch.tensor(data(36, 2, 2, 6, 6))
    seen = []
    for _ in range(steps):
        out = model(x)
        loss = F.mse_loss(out, target)
        opt.zero_grad()
        loss.backward()
        opt.step()
        seen += _out(loss, out[0, 0, :2]) + [out.grad_fn.name()]
    return seen + _out(model.theta.grad, model.conv.weight.grad, model.theta)


PROGRAMS = {
    f.__name__: f
    for f in (
        gru_char_lm,
        transformer_encoder_step,
        conv_bn_dropout_train_eval,
        vae_step,
        gan_step,
        tied_autoencoder,
        grad_accumulation,
        param_groups_schedulers,
        early_stopping,
        dataloader_loops,
        interpolate_grid_sample_model,
    )
}


def label_smoothing_onecycle(torch, steps=4):
    """CrossEntropyLoss(label_smoothing=0.1, weight=class weights), clip_grad_value_, OneCycleLR stepped each
    batch (its lr and momentum per step), SGD with nesterov."""
    nn = torch.nn
    model = init(torch, nn.Sequential(nn.Linear(4, 6), nn.GELU(), nn.Linear(6, 3)), 40)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, nesterov=True)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.5, total_steps=steps)
    crit = nn.CrossEntropyLoss(weight=torch.tensor([1.0, 2.0, 0.5]), label_smoothing=0.1)
    x, y = torch.tensor(data(41, 5, 4)), torch.tensor(labels(42, 5, 3))
    seen = []
    for _ in range(steps):
        loss = crit(model(x), y)
        opt.zero_grad()
        loss.backward()
        nn.utils.clip_grad_value_(model.parameters(), 0.05)
        opt.step()
        sched.step()
        g = opt.param_groups[0]
        seen += _out(loss, model[0].weight.grad) + [round(g["lr"], 8), round(g["momentum"], 8)]
    return seen + _out(*model.parameters())


def siamese_contrastive(torch, steps=3):
    """A Siamese embedding net trained with TripletMarginLoss and a cosine-embedding term (F.cosine_similarity,
    F.normalize, CosineEmbeddingLoss), RMSprop."""
    nn, F = torch.nn, torch.nn.functional
    net = init(torch, nn.Sequential(nn.Linear(5, 6), nn.ReLU(), nn.Linear(6, 3)), 43)
    opt = torch.optim.RMSprop(net.parameters(), lr=0.01)
    a, p, n = (torch.tensor(data(s, 4, 5)) for s in (44, 45, 46))
    triplet, cos = nn.TripletMarginLoss(margin=0.5), nn.CosineEmbeddingLoss(margin=0.1)
    target = torch.tensor([1.0, -1.0, 1.0, -1.0])
    seen = []
    for _ in range(steps):
        ea, ep, en = (F.normalize(net(t), dim=1) for t in (a, p, n))
        loss = triplet(ea, ep, en) + cos(ea, en, target) + (1 - F.cosine_similarity(ea, ep)).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        seen += _out(loss, F.cosine_similarity(ea, en)) + [loss.grad_fn.name()]
    return seen + _out(*net.parameters())


def straight_through_quantizer(torch, steps=3):
    """A custom autograd.Function (a straight-through rounding: round forward, identity backward) inside a
    training loop, with ctx.save_for_backward and a clamp of the passed gradient; Adagrad."""
    nn = torch.nn

    class RoundSTE(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return torch.round(x * 4) / 4

        @staticmethod
        def backward(ctx, grad):
            (x,) = ctx.saved_tensors
            return grad * (x.abs() <= 1).to(grad.dtype)

    model = init(torch, nn.Linear(4, 3), 47)
    opt = torch.optim.Adagrad(model.parameters(), lr=0.1)
    x, y = torch.tensor(data(48, 6, 4)), torch.tensor(data(49, 6, 3))
    seen = []
    for _ in range(steps):
        q = RoundSTE.apply(model(x))
        loss = nn.functional.smooth_l1_loss(q, y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        seen += _out(loss, q[0], model.weight.grad) + [type(q.grad_fn).__name__.startswith("RoundSTE")]
    return seen + _out(*model.parameters())


def frozen_backbone_ema(torch, steps=3, decay=0.9):
    """Fine-tuning with a frozen backbone (requires_grad_(False), the optimizer over `filter(lambda p:
    p.requires_grad, ...)`) and an exponential moving average of the head's weights by `lerp_` under no_grad."""
    nn = torch.nn
    backbone = init(torch, nn.Sequential(nn.Linear(4, 5), nn.ReLU()), 50)
    head = init(torch, nn.Linear(5, 2), 51)
    backbone.requires_grad_(False)
    model = nn.Sequential(backbone, head)
    ema = copy.deepcopy(head)
    opt = torch.optim.Adam(filter(lambda p: p.requires_grad, model.parameters()), lr=0.05)
    x, y = torch.tensor(data(52, 6, 4)), torch.tensor(labels(53, 6, 2))
    seen = [sum(p.numel() for p in model.parameters() if p.requires_grad)]
    for _ in range(steps):
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        with torch.no_grad():
            for e, p in zip(ema.parameters(), head.parameters()):
                e.lerp_(p, 1 - decay)
        seen += _out(loss) + [backbone[0].weight.grad is None]
    return seen + _out(*ema.parameters(), *head.parameters())


def checkpoint_resume(torch, steps=2):
    """A checkpoint mid-training: torch.save of {model, optimizer, epoch} to a BytesIO, torch.load into a fresh
    model and optimizer, training resumed; the resumed run equals the uninterrupted one (Adam's state kept)."""
    nn = torch.nn

    def fresh():
        model = init(torch, nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 1)), 54)
        return model, torch.optim.Adam(model.parameters(), lr=0.05)

    x, y = torch.tensor(data(55, 6, 3)), torch.tensor(data(56, 6, 1))

    def train(model, opt, n):
        for _ in range(n):
            loss = nn.functional.mse_loss(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
        return loss

    model, opt = fresh()
    train(model, opt, steps)
    buffer = io.BytesIO()
    torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(), "epoch": steps}, buffer)
    straight = train(model, opt, steps)
    buffer.seek(0)
    saved = torch.load(buffer)
    model2, opt2 = fresh()
    model2.load_state_dict(saved["model"])
    opt2.load_state_dict(saved["optimizer"])
    resumed = train(model2, opt2, steps)
    state = opt2.state_dict()
    return _out(straight, resumed, *model2.parameters()) + [
        saved["epoch"],
        sorted(state["state"][0]),
        _out(state["state"][0]["step"])[0].tolist(),
        state["param_groups"][0]["params"],
    ]


def mha_attention_weights(torch, steps=2):
    """nn.MultiheadAttention (batch_first) with a float attn_mask and a key_padding_mask, its averaged and
    per-head weights, a residual + LayerNorm block trained with SGD."""
    nn = torch.nn
    mha = init(torch, nn.MultiheadAttention(6, 2, batch_first=True), 57)
    norm = nn.LayerNorm(6)
    opt = torch.optim.SGD(list(mha.parameters()) + list(norm.parameters()), lr=0.1)
    x = torch.tensor(data(58, 2, 4, 6))
    mask = torch.tensor(np.triu(np.full((4, 4), -1e9, dtype=np.float32), 1))
    pad = torch.tensor([[False, False, True, True], [False, False, False, False]])
    seen = []
    for _ in range(steps):
        out, w = mha(x, x, x, attn_mask=mask, key_padding_mask=pad.float() * -1e9)
        _, heads = mha(x, x, x, attn_mask=mask, average_attn_weights=False)
        loss = norm(x + out).pow(2).mean() + heads.var()
        opt.zero_grad()
        loss.backward()
        opt.step()
        seen += _out(loss, w[0], heads[1, 1]) + [tuple(w.shape), tuple(heads.shape)]
    return seen + _out(mha.out_proj.weight.grad, mha.in_proj_bias)


MORE = (
    label_smoothing_onecycle,
    siamese_contrastive,
    straight_through_quantizer,
    frozen_backbone_ema,
    checkpoint_resume,
    mha_attention_weights,
)
PROGRAMS.update({f.__name__: f for f in MORE})


def _error(call):
    try:
        call()
    except Exception as e:  # noqa: BLE001 - its builtin type and the start of its message are compared
        return next(c.__name__ for c in type(e).__mro__ if c.__module__ == "builtins"), str(e)[:50]
    return None


def training_mistakes(torch):
    """The errors of common training mistakes: a GAN's generator loss backpropagated through a discriminator
    that opt_d.step() changed in place since (PyTorch's version-counter error), a second backward without
    retain_graph, a loss that is not a scalar, a target of the wrong dtype for cross_entropy, an optimizer
    given a non-leaf, zero_grad then step with no gradients (a no-op)."""
    nn = torch.nn
    G = init(torch, nn.Sequential(nn.Linear(2, 3)), 60)
    D = init(torch, nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 1)), 61)
    opt_d = torch.optim.SGD(D.parameters(), lr=0.1)
    z = torch.tensor(data(62, 4, 2))
    seen = []

    def stale_graph():
        fake = G(z)
        out = D(fake)
        opt_d.zero_grad()
        out.mean().backward(retain_graph=True)
        opt_d.step()
        (-out.mean()).backward()

    seen.append(_error(stale_graph))
    y = G(z).sum()
    y.backward()
    seen.append(_error(y.backward))
    seen.append(_error(lambda: G(z).backward()))
    seen.append(_error(lambda: nn.functional.cross_entropy(G(z), torch.tensor([0.0, 1.0, 2.0, 1.0]))))
    seen.append(_error(lambda: torch.optim.SGD([G(z)], lr=0.1)))
    w = nn.Parameter(torch.ones(2))
    opt = torch.optim.Adam([w], lr=0.1)
    opt.zero_grad()
    opt.step()
    seen += _out(w) + [opt.state_dict()["state"]]
    return seen


PROGRAMS["training_mistakes"] = training_mistakes
