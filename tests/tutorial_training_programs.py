"""Training programs adapted from PyTorch's tutorials and recipes (github.com/pytorch/tutorials; written for these
tests in the tutorials' style, shortened, on synthetic data): each takes the module it runs on as `torch`, so the
same code runs on real PyTorch (the oracle), `engine` and `client`. Weights and data come from NumPy (`init`,
`data`), so every package starts from the same numbers; each program returns what it printed or computed (losses,
predictions, gradients) for the tests to compare."""

from __future__ import annotations

import collections
import io
import math

import numpy as np


def init(torch, model, seed=0):
    """Every parameter of `model` replaced, in place, by NumPy draws of PyTorch's default scale (1/sqrt(fan_in))."""
    rng = np.random.default_rng(seed)
    with torch.no_grad():
        for _, p in sorted(model.named_parameters()):
            shape = tuple(p.shape)
            bound = 1 / math.sqrt(int(np.prod(shape[1:])) if len(shape) > 1 else shape[0])
            p.copy_(torch.tensor(rng.uniform(-bound, bound, shape).astype(np.float32)))
    return model


def data(seed, *shape):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def labels(seed, n, classes):
    return np.random.default_rng(seed).integers(0, classes, n)


# --- "What is torch.nn really?" ---------------------------------------------------------------------------


def nn_really_from_scratch(torch, steps=3, bs=16, lr=0.5):
    """Logistic regression on flattened 8x8 "images" written from scratch: log_softmax by hand, nll by indexing
    with `range`, the accuracy, and the update by hand under no_grad."""
    x_train, y_train = map(torch.tensor, (data(1, 64, 64), labels(2, 64, 10)))
    n, c = x_train.shape
    weights = torch.tensor(data(3, 64, 10)) / math.sqrt(64)
    weights.requires_grad_()
    bias = torch.zeros(10, requires_grad=True)

    def log_softmax(x):
        return x - x.exp().sum(-1).log().unsqueeze(-1)

    def model(xb):
        return log_softmax(xb @ weights + bias)

    def nll(input, target):
        return -input[range(target.shape[0]), target].mean()

    def accuracy(out, yb):
        preds = torch.argmax(out, dim=1)
        return (preds == yb).float().mean()

    losses = []
    for _ in range(steps):
        for i in range((n - 1) // bs + 1):
            xb, yb = x_train[i * bs : i * bs + bs], y_train[i * bs : i * bs + bs]
            loss = nll(model(xb), yb)
            loss.backward()
            with torch.no_grad():
                weights -= weights.grad * lr
                bias -= bias.grad * lr
                weights.grad.zero_()
                bias.grad.zero_()
            losses.append(loss.item())
    out = model(x_train[:bs])
    return {"losses": losses, "accuracy": accuracy(out, y_train[:bs]).item(), "weights": weights}


def nn_really_cnn(torch, epochs=2, bs=16, lr=0.1, shuffle=False):
    """The tutorial's end: a CNN of stride-2 convolutions, a Lambda module and AdaptiveAvgPool2d, trained with SGD
    with momentum by `fit` and `loss_batch` over TensorDataset/DataLoader wrapped by a preprocessing generator."""
    nn, F, optim = torch.nn, torch.nn.functional, torch.optim
    from_numpy = torch.utils.data
    x_train, y_train, x_valid, y_valid = map(
        torch.tensor, (data(1, 48, 64), labels(2, 48, 10), data(3, 32, 64), labels(4, 32, 10))
    )
    train_ds = from_numpy.TensorDataset(x_train, y_train)
    valid_ds = from_numpy.TensorDataset(x_valid, y_valid)

    class Lambda(nn.Module):
        def __init__(self, func):
            super().__init__()
            self.func = func

        def forward(self, x):
            return self.func(x)

    def preprocess(x, y):
        return x.view(-1, 1, 8, 8), y

    class WrappedDataLoader:
        def __init__(self, dl, func):
            self.dl, self.func = dl, func

        def __len__(self):
            return len(self.dl)

        def __iter__(self):
            for b in self.dl:
                yield (self.func(*b))

    def get_data(train_ds, valid_ds, bs):
        return (
            from_numpy.DataLoader(train_ds, batch_size=bs, shuffle=shuffle),
            from_numpy.DataLoader(valid_ds, batch_size=bs * 2),
        )

    def loss_batch(model, loss_func, xb, yb, opt=None):
        loss = loss_func(model(xb), yb)
        if opt is not None:
            loss.backward()
            opt.step()
            opt.zero_grad()
        return loss.item(), len(xb)

    history = []

    def fit(epochs, model, loss_func, opt, train_dl, valid_dl):
        for _epoch in range(epochs):
            model.train()
            for xb, yb in train_dl:
                history.append(loss_batch(model, loss_func, xb, yb, opt)[0])
            model.eval()
            with torch.no_grad():
                losses, nums = zip(*[loss_batch(model, loss_func, xb, yb) for xb, yb in valid_dl])
            val_loss = np.sum(np.multiply(losses, nums)) / np.sum(nums)
            history.append(float(val_loss))

    train_dl, valid_dl = get_data(train_ds, valid_ds, bs)
    train_dl, valid_dl = WrappedDataLoader(train_dl, preprocess), WrappedDataLoader(valid_dl, preprocess)
    model = nn.Sequential(
        nn.Conv2d(1, 8, kernel_size=3, stride=2, padding=1),
        nn.ReLU(),
        nn.Conv2d(8, 8, kernel_size=3, stride=2, padding=1),
        nn.ReLU(),
        nn.Conv2d(8, 10, kernel_size=3, stride=2, padding=1),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        Lambda(lambda x: x.view(x.size(0), -1)),
    )
    init(torch, model)
    opt = optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    fit(epochs, model, F.cross_entropy, opt, train_dl, valid_dl)
    return {"losses": history, "batches": len(train_dl), "weight": model[0].weight}


# --- Learn the Basics: optimizing model parameters -------------------------------------------------------


def quickstart_loops(torch, epochs=2, batch_size=8):
    """The quickstart's NeuralNetwork (Flatten, Linear/ReLU stack) with `train_loop` and `test_loop`:
    `size = len(dataloader.dataset)`, `(pred.argmax(1) == y).type(torch.float).sum().item()`, SGD."""
    nn = torch.nn
    x, y = torch.tensor(data(1, 40, 4, 4)), torch.tensor(labels(2, 40, 3))
    train_dataloader = torch.utils.data.DataLoader(
        torch.utils.data.TensorDataset(x[:32], y[:32]), batch_size=batch_size
    )
    test_dataloader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x[32:], y[32:]), batch_size=batch_size)

    class NeuralNetwork(nn.Module):
        def __init__(self):
            super().__init__()
            self.flatten = nn.Flatten()
            self.linear_relu_stack = nn.Sequential(
                nn.Linear(16, 12), nn.ReLU(), nn.Linear(12, 12), nn.ReLU(), nn.Linear(12, 3)
            )

        def forward(self, x):
            return self.linear_relu_stack(self.flatten(x))

    def train_loop(dataloader, model, loss_fn, optimizer):
        model.train()
        losses = []
        for X, y in dataloader:
            pred = model(X)
            loss = loss_fn(pred, y)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            losses.append(loss.item())
        return losses

    def test_loop(dataloader, model, loss_fn):
        model.eval()
        size, num_batches = len(dataloader.dataset), len(dataloader)
        test_loss, correct = 0, 0
        with torch.no_grad():
            for X, y in dataloader:
                pred = model(X)
                test_loss += loss_fn(pred, y).item()
                correct += (pred.argmax(1) == y).type(torch.float).sum().item()
        return test_loss / num_batches, correct / size

    model = init(torch, NeuralNetwork())
    loss_fn = nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    return [
        (train_loop(train_dataloader, model, loss_fn, optimizer), test_loop(test_dataloader, model, loss_fn))
        for _ in range(epochs)
    ]


# --- spatial transformer networks ------------------------------------------------------------------------


def spatial_transformer(torch, steps=3):
    """The STN tutorial's Net: a localization network and `fc_loc` initialised to the identity transform through
    `.data.zero_()` and `.data.copy_(torch.tensor([1, 0, 0, 0, 1, 0], dtype=torch.float))`, `F.affine_grid` and
    `F.grid_sample`, then a small classifier with dropout off; nll_loss and SGD; the transformed batch."""
    nn, F, optim = torch.nn, torch.nn.functional, torch.optim

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = nn.Conv2d(1, 4, kernel_size=3)
            self.fc1 = nn.Linear(4 * 3 * 3, 10)
            self.localization = nn.Sequential(
                nn.Conv2d(1, 4, kernel_size=3),
                nn.MaxPool2d(2, stride=2),
                nn.ReLU(True),
                nn.Conv2d(4, 5, kernel_size=3),
                nn.ReLU(True),
            )
            self.fc_loc = nn.Sequential(nn.Linear(5 * 1 * 1, 8), nn.ReLU(True), nn.Linear(8, 3 * 2))

        def reset_fc_loc(self):
            self.fc_loc[2].weight.data.zero_()
            self.fc_loc[2].bias.data.copy_(torch.tensor([1, 0, 0, 0, 1, 0], dtype=torch.float))

        def stn(self, x):
            xs = self.localization(x)
            xs = xs.view(-1, 5 * 1 * 1)
            theta = self.fc_loc(xs)
            theta = theta.view(-1, 2, 3)
            grid = F.affine_grid(theta, x.size(), align_corners=False)
            return F.grid_sample(x, grid, align_corners=False)

        def forward(self, x):
            x = self.stn(x)
            x = F.relu(F.max_pool2d(self.conv1(x), 2))
            x = x.view(-1, 4 * 3 * 3)
            x = F.dropout(F.relu(self.fc1(x)), training=False)
            return F.log_softmax(x, dim=1)

    model = init(torch, Net())
    model.reset_fc_loc()
    optimizer = optim.SGD(model.parameters(), lr=0.05)
    x, y = torch.tensor(data(1, 4, 1, 8, 8)), torch.tensor(labels(2, 4, 10))
    losses = []
    for _ in range(steps):
        optimizer.zero_grad()
        loss = F.nll_loss(model(x), y)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    with torch.no_grad():
        transformed = model.stn(x).cpu()
    return {"losses": losses, "transformed": transformed, "theta_bias": model.fc_loc[2].bias}


# --- NLP from scratch: char-RNN classification and generation ---------------------------------------------

LETTERS = "abcdefghijklmnopqrstuvwxyz '"
NAMES = {"English": ["abel", "baker", "hardy"], "Italian": ["abate", "rossi", "conti"], "Greek": ["pappas", "nikos"]}


def line_to_tensor(torch, line):
    tensor = torch.zeros(len(line), 1, len(LETTERS))
    for li, letter in enumerate(line):
        tensor[li][0][LETTERS.find(letter)] = 1
    return tensor


def char_rnn_classification(torch, rounds=2, learning_rate=0.005):
    """The hand-written RNN cell (i2h and h2o over cat(input, hidden), LogSoftmax), trained one name at a time
    with NLLLoss, the update by hand with `p.data.add_(p.grad.data, alpha=-lr)`, then with SGD and
    clip_grad_norm_; the guess by `topk`."""
    nn = torch.nn
    categories = list(NAMES)

    class RNN(nn.Module):
        def __init__(self, input_size, hidden_size, output_size):
            super().__init__()
            self.hidden_size = hidden_size
            self.i2h = nn.Linear(input_size + hidden_size, hidden_size)
            self.h2o = nn.Linear(hidden_size, output_size)
            self.softmax = nn.LogSoftmax(dim=1)

        def forward(self, input, hidden):
            combined = torch.cat((input, hidden), 1)
            hidden = self.i2h(combined)
            output = self.softmax(self.h2o(hidden))
            return output, hidden

        def init_hidden(self):
            return torch.zeros(1, self.hidden_size)

    rnn = init(torch, RNN(len(LETTERS), 16, len(categories)))
    criterion = nn.NLLLoss()
    optimizer = torch.optim.SGD(rnn.parameters(), lr=learning_rate * 10)
    pairs = [(c, name) for c in categories for name in NAMES[c]]
    losses, norms = [], []
    for r in range(rounds):
        for category, name in pairs:
            category_tensor = torch.tensor([categories.index(category)], dtype=torch.long)
            line_tensor = line_to_tensor(torch, name)
            hidden = rnn.init_hidden()
            rnn.zero_grad()
            for i in range(line_tensor.size()[0]):
                output, hidden = rnn(line_tensor[i], hidden)
            loss = criterion(output, category_tensor)
            loss.backward()
            if r == 0:
                for p in rnn.parameters():
                    p.data.add_(p.grad.data, alpha=-learning_rate)
            else:
                norms.append(float(torch.nn.utils.clip_grad_norm_(rnn.parameters(), 3)))
                optimizer.step()
            losses.append(loss.item())
    with torch.no_grad():
        hidden = rnn.init_hidden()
        line_tensor = line_to_tensor(torch, "rossi")
        for i in range(line_tensor.size()[0]):
            output, hidden = rnn(line_tensor[i], hidden)
        top_n, top_i = output.topk(3, 1, True)
        guesses = [(categories[top_i[0][k].item()], top_n[0][k].item()) for k in range(3)]
    return {"losses": losses, "norms": norms, "guesses": guesses, "output": output}


def char_rnn_generation(torch, rounds=2, learning_rate=0.01, max_length=6):
    """The generating RNN (category, input and hidden concatenated, i2h/i2o then o2o, Dropout, LogSoftmax),
    trained on whole names with the loss summed over letters and `loss.backward()` once, then sampled greedily
    by `topk(1)` under no_grad."""
    nn = torch.nn
    categories = list(NAMES)
    n_letters = len(LETTERS) + 1  # + EOS

    class RNN(nn.Module):
        def __init__(self, input_size, hidden_size, output_size):
            super().__init__()
            self.hidden_size = hidden_size
            self.i2h = nn.Linear(len(categories) + input_size + hidden_size, hidden_size)
            self.i2o = nn.Linear(len(categories) + input_size + hidden_size, output_size)
            self.o2o = nn.Linear(hidden_size + output_size, output_size)
            self.dropout = nn.Dropout(0.0)
            self.softmax = nn.LogSoftmax(dim=1)

        def forward(self, category, input, hidden):
            input_combined = torch.cat((category, input, hidden), 1)
            hidden = self.i2h(input_combined)
            output = self.i2o(input_combined)
            output_combined = torch.cat((hidden, output), 1)
            output = self.softmax(self.dropout(self.o2o(output_combined)))
            return output, hidden

        def init_hidden(self):
            return torch.zeros(1, self.hidden_size)

    def category_tensor(c):
        tensor = torch.zeros(1, len(categories))
        tensor[0][categories.index(c)] = 1
        return tensor

    def input_tensor(line):
        tensor = torch.zeros(len(line), 1, n_letters)
        for li in range(len(line)):
            tensor[li][0][LETTERS.find(line[li])] = 1
        return tensor

    def target_tensor(line):
        letter_indexes = [LETTERS.find(line[li]) for li in range(1, len(line))]
        letter_indexes.append(n_letters - 1)
        return torch.LongTensor(letter_indexes)

    rnn = init(torch, RNN(n_letters, 12, n_letters))
    criterion = nn.NLLLoss()
    losses = []
    for _ in range(rounds):
        for c in categories:
            for name in NAMES[c]:
                cat, inp, target = category_tensor(c), input_tensor(name), target_tensor(name)
                target.unsqueeze_(-1)
                hidden = rnn.init_hidden()
                rnn.zero_grad()
                loss = torch.Tensor([0])
                for i in range(inp.size(0)):
                    output, hidden = rnn(cat, inp[i], hidden)
                    loss += criterion(output, target[i])
                loss.backward()
                for p in rnn.parameters():
                    p.data.add_(p.grad.data, alpha=-learning_rate)
                losses.append(loss.item() / inp.size(0))
    samples = []
    with torch.no_grad():
        for c, start in (("Italian", "r"), ("Greek", "p")):
            inp, hidden, name = input_tensor(start), rnn.init_hidden(), start
            for _ in range(max_length):
                output, hidden = rnn(category_tensor(c), inp[0], hidden)
                topv, topi = output.topk(1)
                topi = topi[0][0]
                if topi == n_letters - 1:
                    break
                name += LETTERS[topi]
                inp = input_tensor(LETTERS[topi])
            samples.append(name)
    return {"losses": losses, "samples": samples}


# --- seq2seq translation with attention ---------------------------------------------------------------------

SOS, EOS = 0, 1


def seq2seq_attention(torch, epochs=3, hidden_size=8, max_length=5):
    """EncoderRNN (Embedding, GRU batch_first, Dropout) and AttnDecoderRNN with Bahdanau attention (Wa, Ua, Va,
    tanh, softmax, bmm), teacher forcing when a target is given, greedy `topk(1)` otherwise; Adam and NLLLoss
    over `view(-1)`; then an evaluation with the attention weights."""
    nn, F, optim = torch.nn, torch.nn.functional, torch.optim
    in_words, out_words = 9, 8
    rng = np.random.default_rng(5)
    pairs = [
        (
            np.append(rng.integers(2, in_words, max_length - 1), EOS),
            np.append(rng.integers(2, out_words, max_length - 1), EOS),
        )
        for _ in range(6)
    ]

    class EncoderRNN(nn.Module):
        def __init__(self, input_size, hidden_size, dropout_p=0.0):
            super().__init__()
            self.embedding = nn.Embedding(input_size, hidden_size)
            self.gru = nn.GRU(hidden_size, hidden_size, batch_first=True)
            self.dropout = nn.Dropout(dropout_p)

        def forward(self, input):
            embedded = self.dropout(self.embedding(input))
            output, hidden = self.gru(embedded)
            return output, hidden

    class BahdanauAttention(nn.Module):
        def __init__(self, hidden_size):
            super().__init__()
            self.Wa = nn.Linear(hidden_size, hidden_size)
            self.Ua = nn.Linear(hidden_size, hidden_size)
            self.Va = nn.Linear(hidden_size, 1)

        def forward(self, query, keys):
            scores = self.Va(torch.tanh(self.Wa(query) + self.Ua(keys)))
            scores = scores.squeeze(2).unsqueeze(1)
            weights = F.softmax(scores, dim=-1)
            context = torch.bmm(weights, keys)
            return context, weights

    class AttnDecoderRNN(nn.Module):
        def __init__(self, hidden_size, output_size, dropout_p=0.0):
            super().__init__()
            self.embedding = nn.Embedding(output_size, hidden_size)
            self.attention = BahdanauAttention(hidden_size)
            self.gru = nn.GRU(2 * hidden_size, hidden_size, batch_first=True)
            self.out = nn.Linear(hidden_size, output_size)
            self.dropout = nn.Dropout(dropout_p)

        def forward(self, encoder_outputs, encoder_hidden, target_tensor=None):
            batch_size = encoder_outputs.size(0)
            decoder_input = torch.empty(batch_size, 1, dtype=torch.long).fill_(SOS)
            decoder_hidden = encoder_hidden
            decoder_outputs, attentions = [], []
            for i in range(max_length):
                decoder_output, decoder_hidden, attn_weights = self.forward_step(
                    decoder_input, decoder_hidden, encoder_outputs
                )
                decoder_outputs.append(decoder_output)
                attentions.append(attn_weights)
                if target_tensor is not None:
                    decoder_input = target_tensor[:, i].unsqueeze(1)  # teacher forcing
                else:
                    _, topi = decoder_output.topk(1)
                    decoder_input = topi.squeeze(-1).detach()
            decoder_outputs = F.log_softmax(torch.cat(decoder_outputs, dim=1), dim=-1)
            return decoder_outputs, decoder_hidden, torch.cat(attentions, dim=1)

        def forward_step(self, input, hidden, encoder_outputs):
            embedded = self.dropout(self.embedding(input))
            query = hidden.permute(1, 0, 2)
            context, attn_weights = self.attention(query, encoder_outputs)
            input_gru = torch.cat((embedded, context), dim=2)
            output, hidden = self.gru(input_gru, hidden)
            return self.out(output), hidden, attn_weights

    encoder = init(torch, EncoderRNN(in_words, hidden_size), 1)
    decoder = init(torch, AttnDecoderRNN(hidden_size, out_words), 2)
    input_tensor = torch.tensor(np.stack([p[0] for p in pairs]), dtype=torch.long)
    target_tensor = torch.tensor(np.stack([p[1] for p in pairs]), dtype=torch.long)
    dataset = torch.utils.data.TensorDataset(input_tensor, target_tensor)
    dataloader = torch.utils.data.DataLoader(dataset, batch_size=3)
    encoder_optimizer = optim.Adam(encoder.parameters(), lr=0.01)
    decoder_optimizer = optim.Adam(decoder.parameters(), lr=0.01)
    criterion = nn.NLLLoss()
    losses = []
    for _ in range(epochs):
        total_loss = 0
        for input_batch, target_batch in dataloader:
            encoder_optimizer.zero_grad()
            decoder_optimizer.zero_grad()
            encoder_outputs, encoder_hidden = encoder(input_batch)
            decoder_outputs, _, _ = decoder(encoder_outputs, encoder_hidden, target_batch)
            loss = criterion(decoder_outputs.view(-1, decoder_outputs.size(-1)), target_batch.view(-1))
            loss.backward()
            encoder_optimizer.step()
            decoder_optimizer.step()
            total_loss += loss.item()
        losses.append(total_loss / len(dataloader))
    encoder.eval()
    decoder.eval()
    with torch.no_grad():
        encoder_outputs, encoder_hidden = encoder(input_tensor[:1])
        decoder_outputs, _, attentions = decoder(encoder_outputs, encoder_hidden)
        _, topi = decoder_outputs.topk(1)
        decoded_ids = topi.squeeze()
        words = []
        for idx in decoded_ids:
            if idx.item() == EOS:
                words.append("<EOS>")
                break
            words.append(idx.item())
    return {"losses": losses, "decoded": words, "attentions": attentions}


def word_language_model(torch, batches=4, bptt=4, ninp=6, lr=2.0):
    """pytorch/examples' word_language_model (which the tutorials link): an LSTM RNNModel with tied encoder and
    decoder weights, `init_weights` by nn.init, `init_hidden` from `next(self.parameters()).new_zeros`, batchify,
    `repackage_hidden` detaching the state between batches, clip_grad_norm_(0.25) and the update by hand with
    `p.data.add_(p.grad, alpha=-lr)`; the evaluation's perplexity."""
    nn, F = torch.nn, torch.nn.functional
    ntokens = 9

    class RNNModel(nn.Module):
        def __init__(self, ntoken, ninp, nhid, nlayers, dropout=0.0):
            super().__init__()
            self.drop = nn.Dropout(dropout)
            self.encoder = nn.Embedding(ntoken, ninp)
            self.rnn = nn.LSTM(ninp, nhid, nlayers, dropout=dropout)
            self.decoder = nn.Linear(nhid, ntoken)
            self.decoder.weight = self.encoder.weight
            self.nhid, self.nlayers = nhid, nlayers

        def init_weights(self):
            initrange = 0.1
            nn.init.uniform_(self.encoder.weight, -initrange, initrange)
            nn.init.zeros_(self.decoder.bias)

        def forward(self, input, hidden):
            emb = self.drop(self.encoder(input))
            output, hidden = self.rnn(emb, hidden)
            decoded = self.decoder(self.drop(output)).view(-1, ntokens)
            return F.log_softmax(decoded, dim=1), hidden

        def init_hidden(self, bsz):
            weight = next(self.parameters())
            return (weight.new_zeros(self.nlayers, bsz, self.nhid), weight.new_zeros(self.nlayers, bsz, self.nhid))

    def repackage_hidden(h):
        if isinstance(h, torch.Tensor):
            return h.detach()
        return tuple(repackage_hidden(v) for v in h)

    def batchify(data, bsz):
        nbatch = data.size(0) // bsz
        data = data.narrow(0, 0, nbatch * bsz)
        return data.view(bsz, -1).t().contiguous()

    def get_batch(source, i):
        seq_len = min(bptt, len(source) - 1 - i)
        return source[i : i + seq_len], source[i + 1 : i + 1 + seq_len].view(-1)

    model = RNNModel(ntokens, ninp, ninp, 2)
    model.init_weights()
    tied = model.decoder.weight is model.encoder.weight and len(list(model.parameters())) == 10
    init(torch, model)
    stream = torch.tensor(np.random.default_rng(6).integers(0, ntokens, 70), dtype=torch.long)
    train_data, val_data = batchify(stream[:50], 3), batchify(stream[50:], 2)
    criterion = nn.NLLLoss()
    model.train()
    hidden, losses = model.init_hidden(3), []
    for batch, i in enumerate(range(0, train_data.size(0) - 1, bptt)):
        if batch == batches:
            break
        data_, targets = get_batch(train_data, i)
        model.zero_grad()
        hidden = repackage_hidden(hidden)
        output, hidden = model(data_, hidden)
        loss = criterion(output, targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.25)
        for p in model.parameters():
            p.data.add_(p.grad, alpha=-lr)
        losses.append(loss.item())
    model.eval()
    total_loss, hidden = 0.0, model.init_hidden(2)
    with torch.no_grad():
        for i in range(0, val_data.size(0) - 1, bptt):
            data_, targets = get_batch(val_data, i)
            output, hidden = model(data_, hidden)
            hidden = repackage_hidden(hidden)
            total_loss += len(data_) * criterion(output, targets).item()
    return {
        "losses": losses,
        "ppl": math.exp(total_loss / (len(val_data) - 1)),
        "tied": tied,
        "encoder": model.encoder.weight,
    }


# --- Deep Learning for NLP: n-gram language model, LSTM POS tagger, BiLSTM-CRF -----------------------------

SENTENCE = "when forty winters shall besiege thy brow and dig deep trenches in thy beauty field".split()


def ngram_language_model(torch, epochs=3, context_size=2, embedding_dim=6):
    """The trigram NGramLanguageModeler (Embedding, view((1, -1)), Linear, relu, log_softmax), NLLLoss, SGD,
    `model.zero_grad()`, `total_loss += loss.item()`, and an embedding row read back."""
    nn, F, optim = torch.nn, torch.nn.functional, torch.optim
    ngrams = [
        ([SENTENCE[i - j - 1] for j in range(context_size)], SENTENCE[i]) for i in range(context_size, len(SENTENCE))
    ]
    vocab = sorted(set(SENTENCE))
    word_to_ix = {word: i for i, word in enumerate(vocab)}

    class NGramLanguageModeler(nn.Module):
        def __init__(self, vocab_size, embedding_dim, context_size):
            super().__init__()
            self.embeddings = nn.Embedding(vocab_size, embedding_dim)
            self.linear1 = nn.Linear(context_size * embedding_dim, 32)
            self.linear2 = nn.Linear(32, vocab_size)

        def forward(self, inputs):
            embeds = self.embeddings(inputs).view((1, -1))
            out = F.relu(self.linear1(embeds))
            out = self.linear2(out)
            return F.log_softmax(out, dim=1)

    losses = []
    loss_function = nn.NLLLoss()
    model = init(torch, NGramLanguageModeler(len(vocab), embedding_dim, context_size))
    optimizer = optim.SGD(model.parameters(), lr=0.05)
    for _ in range(epochs):
        total_loss = 0
        for context, target in ngrams:
            context_idxs = torch.tensor([word_to_ix[w] for w in context], dtype=torch.long)
            model.zero_grad()
            log_probs = model(context_idxs)
            loss = loss_function(log_probs, torch.tensor([word_to_ix[target]], dtype=torch.long))
            loss.backward()
            optimizer.step()
            total_loss += loss.item()
        losses.append(total_loss)
    return {"losses": losses, "beauty": model.embeddings.weight[word_to_ix["beauty"]]}


def train_tagger(torch, model, optimizer, sentences, loss_of, epochs):
    """Both taggers' loop: the first sentence's prediction under no_grad, `epochs` of SGD steps (`model.zero_grad()`,
    `loss_of(sentence, tags)`), the prediction again; (before, losses, after)."""
    with torch.no_grad():
        before = model(sentences[0][0])
    losses = []
    for _ in range(epochs):
        for sentence_in, targets in sentences:
            model.zero_grad()
            loss = loss_of(sentence_in, targets)
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
    with torch.no_grad():
        return before, losses, model(sentences[0][0])


TAGGED = [
    ("The dog ate the apple".split(), ["DET", "NN", "V", "DET", "NN"]),
    ("Everybody read that book".split(), ["NN", "V", "DET", "NN"]),
]


def lstm_pos_tagger(torch, epochs=4, embedding_dim=6, hidden_dim=6):
    """LSTMTagger (Embedding, LSTM over `embeds.view(len(sentence), 1, -1)`, Linear, log_softmax), NLLLoss, SGD
    lr 0.1, the scores before and after training under no_grad."""
    nn, F, optim = torch.nn, torch.nn.functional, torch.optim
    word_to_ix = {}
    for sent, _ in TAGGED:
        for word in sent:
            if word not in word_to_ix:
                word_to_ix[word] = len(word_to_ix)
    tag_to_ix = {"DET": 0, "NN": 1, "V": 2}

    def prepare_sequence(seq, to_ix):
        idxs = [to_ix[w] for w in seq]
        return torch.tensor(idxs, dtype=torch.long)

    class LSTMTagger(nn.Module):
        def __init__(self, embedding_dim, hidden_dim, vocab_size, tagset_size):
            super().__init__()
            self.hidden_dim = hidden_dim
            self.word_embeddings = nn.Embedding(vocab_size, embedding_dim)
            self.lstm = nn.LSTM(embedding_dim, hidden_dim)
            self.hidden2tag = nn.Linear(hidden_dim, tagset_size)

        def forward(self, sentence):
            embeds = self.word_embeddings(sentence)
            lstm_out, _ = self.lstm(embeds.view(len(sentence), 1, -1))
            tag_space = self.hidden2tag(lstm_out.view(len(sentence), -1))
            tag_scores = F.log_softmax(tag_space, dim=1)
            return tag_scores

    model = init(torch, LSTMTagger(embedding_dim, hidden_dim, len(word_to_ix), len(tag_to_ix)))
    loss_function = nn.NLLLoss()
    optimizer = optim.SGD(model.parameters(), lr=0.1)
    sentences = [
        (prepare_sequence(sentence, word_to_ix), prepare_sequence(tags, tag_to_ix)) for sentence, tags in TAGGED
    ]
    before, losses, after = train_tagger(
        torch, model, optimizer, sentences, lambda s, t: loss_function(model(s), t), epochs
    )
    return {"losses": losses, "before": before, "after": after}


START_TAG, STOP_TAG = "<START>", "<STOP>"


def bilstm_crf(torch, epochs=2, embedding_dim=5, hidden_dim=4):
    """The BiLSTM-CRF: `argmax` by `torch.max(vec, 1)`, `log_sum_exp` by max + expand, the forward algorithm
    and the gold path's score indexing a Parameter with 0-d tensors, Viterbi decoding with back-pointers; SGD
    with weight_decay, the prediction under no_grad before and after training."""
    nn, optim = torch.nn, torch.optim

    def argmax(vec):
        _, idx = torch.max(vec, 1)
        return idx.item()

    def prepare_sequence(seq, to_ix):
        return torch.tensor([to_ix[w] for w in seq], dtype=torch.long)

    def log_sum_exp(vec):
        max_score = vec[0, argmax(vec)]
        max_score_broadcast = max_score.view(1, -1).expand(1, vec.size()[1])
        return max_score + torch.log(torch.sum(torch.exp(vec - max_score_broadcast)))

    class BiLSTM_CRF(nn.Module):
        def __init__(self, vocab_size, tag_to_ix, embedding_dim, hidden_dim):
            super().__init__()
            self.hidden_dim = hidden_dim
            self.tag_to_ix = tag_to_ix
            self.tagset_size = len(tag_to_ix)
            self.word_embeds = nn.Embedding(vocab_size, embedding_dim)
            self.lstm = nn.LSTM(embedding_dim, hidden_dim // 2, num_layers=1, bidirectional=True)
            self.hidden2tag = nn.Linear(hidden_dim, self.tagset_size)
            self.transitions = nn.Parameter(torch.randn(self.tagset_size, self.tagset_size))

        def constrain(self):
            self.transitions.data[self.tag_to_ix[START_TAG], :] = -10000
            self.transitions.data[:, self.tag_to_ix[STOP_TAG]] = -10000

        def init_hidden(self):
            h = data(9, 2, 1, self.hidden_dim // 2)
            return (torch.tensor(h), torch.tensor(h * 0.5))

        def _forward_alg(self, feats):
            init_alphas = torch.full((1, self.tagset_size), -10000.0)
            init_alphas[0][self.tag_to_ix[START_TAG]] = 0.0
            forward_var = init_alphas
            for feat in feats:
                alphas_t = []
                for next_tag in range(self.tagset_size):
                    emit_score = feat[next_tag].view(1, -1).expand(1, self.tagset_size)
                    trans_score = self.transitions[next_tag].view(1, -1)
                    next_tag_var = forward_var + trans_score + emit_score
                    alphas_t.append(log_sum_exp(next_tag_var).view(1))
                forward_var = torch.cat(alphas_t).view(1, -1)
            terminal_var = forward_var + self.transitions[self.tag_to_ix[STOP_TAG]]
            return log_sum_exp(terminal_var)

        def _get_lstm_features(self, sentence):
            embeds = self.word_embeds(sentence).view(len(sentence), 1, -1)
            lstm_out, self.hidden = self.lstm(embeds, self.init_hidden())
            lstm_out = lstm_out.view(len(sentence), self.hidden_dim)
            return self.hidden2tag(lstm_out)

        def _score_sentence(self, feats, tags):
            score = torch.zeros(1)
            tags = torch.cat([torch.tensor([self.tag_to_ix[START_TAG]], dtype=torch.long), tags])
            for i, feat in enumerate(feats):
                score = score + self.transitions[tags[i + 1], tags[i]] + feat[tags[i + 1]]
            return score + self.transitions[self.tag_to_ix[STOP_TAG], tags[-1]]

        def _viterbi_decode(self, feats):
            backpointers = []
            init_vvars = torch.full((1, self.tagset_size), -10000.0)
            init_vvars[0][self.tag_to_ix[START_TAG]] = 0
            forward_var = init_vvars
            for feat in feats:
                bptrs_t, viterbivars_t = [], []
                for next_tag in range(self.tagset_size):
                    next_tag_var = forward_var + self.transitions[next_tag]
                    best_tag_id = argmax(next_tag_var)
                    bptrs_t.append(best_tag_id)
                    viterbivars_t.append(next_tag_var[0][best_tag_id].view(1))
                forward_var = (torch.cat(viterbivars_t) + feat).view(1, -1)
                backpointers.append(bptrs_t)
            terminal_var = forward_var + self.transitions[self.tag_to_ix[STOP_TAG]]
            best_tag_id = argmax(terminal_var)
            path_score = terminal_var[0][best_tag_id]
            best_path = [best_tag_id]
            for bptrs_t in reversed(backpointers):
                best_tag_id = bptrs_t[best_tag_id]
                best_path.append(best_tag_id)
            start = best_path.pop()
            assert start == self.tag_to_ix[START_TAG]
            best_path.reverse()
            return path_score, best_path

        def neg_log_likelihood(self, sentence, tags):
            feats = self._get_lstm_features(sentence)
            return self._forward_alg(feats) - self._score_sentence(feats, tags)

        def forward(self, sentence):
            lstm_feats = self._get_lstm_features(sentence)
            score, tag_seq = self._viterbi_decode(lstm_feats)
            return score, tag_seq

    training_data = [
        (
            "the wall street journal reported today that apple corporation made money".split(),
            "B I I I O O O B I O O".split(),
        ),
        ("georgia tech is a university in georgia".split(), "B I O O O O B".split()),
    ]
    word_to_ix = {}
    for sentence, _ in training_data:
        for word in sentence:
            if word not in word_to_ix:
                word_to_ix[word] = len(word_to_ix)
    tag_to_ix = {"B": 0, "I": 1, "O": 2, START_TAG: 3, STOP_TAG: 4}
    model = init(torch, BiLSTM_CRF(len(word_to_ix), tag_to_ix, embedding_dim, hidden_dim))
    model.constrain()
    optimizer = optim.SGD(model.parameters(), lr=0.01, weight_decay=1e-4)
    sentences = [
        (prepare_sequence(sentence, word_to_ix), torch.tensor([tag_to_ix[t] for t in tags], dtype=torch.long))
        for sentence, tags in training_data
    ]
    before, losses, (score, path) = train_tagger(torch, model, optimizer, sentences, model.neg_log_likelihood, epochs)
    return {"losses": losses, "before": (before[0].item(), before[1]), "after": (score.item(), path)}


# --- DCGAN ----------------------------------------------------------------------------------------------------


def dcgan(torch, iterations=3, batch=4, nz=8, ngf=4, ndf=4, nc=1):
    """A 16x16 DCGAN: Generator of ConvTranspose2d/BatchNorm2d/ReLU/Tanh, Discriminator of Conv2d/LeakyReLU(inplace)
    /BatchNorm2d/Sigmoid, `weights_init` applied with `apply` (its normal_ draws then replaced by NumPy's), BCELoss
    on `torch.full` labels refilled with `fill_`, `fake.detach()` for D's step, Adam with betas (0.5, 0.999)."""
    nn, optim = torch.nn, torch.optim

    def weights_init(m):
        classname = m.__class__.__name__
        if classname.find("Conv") != -1:
            nn.init.normal_(m.weight.data, 0.0, 0.02)
        elif classname.find("BatchNorm") != -1:
            nn.init.normal_(m.weight.data, 1.0, 0.02)
            nn.init.constant_(m.bias.data, 0)

    class Generator(nn.Module):
        def __init__(self):
            super().__init__()
            self.main = nn.Sequential(
                nn.ConvTranspose2d(nz, ngf * 2, 4, 1, 0, bias=False),
                nn.BatchNorm2d(ngf * 2),
                nn.ReLU(True),
                nn.ConvTranspose2d(ngf * 2, ngf, 4, 2, 1, bias=False),
                nn.BatchNorm2d(ngf),
                nn.ReLU(True),
                nn.ConvTranspose2d(ngf, nc, 4, 2, 1, bias=False),
                nn.Tanh(),
            )

        def forward(self, input):
            return self.main(input)

    class Discriminator(nn.Module):
        def __init__(self):
            super().__init__()
            self.main = nn.Sequential(
                nn.Conv2d(nc, ndf, 4, 2, 1, bias=False),
                nn.LeakyReLU(0.2, inplace=True),
                nn.Conv2d(ndf, ndf * 2, 4, 2, 1, bias=False),
                nn.BatchNorm2d(ndf * 2),
                nn.LeakyReLU(0.2, inplace=True),
                nn.Conv2d(ndf * 2, 1, 4, 1, 0, bias=False),
                nn.Sigmoid(),
            )

        def forward(self, input):
            return self.main(input)

    netG, netD = Generator(), Discriminator()
    netG.apply(weights_init)
    netD.apply(weights_init)
    drawn = [float(p.detach().std()) for p in netD.parameters() if p.dim() == 4]
    init(torch, netG, 1)
    init(torch, netD, 2)
    criterion = nn.BCELoss()
    real_label, fake_label = 1.0, 0.0
    optimizerD = optim.Adam(netD.parameters(), lr=0.0002 * 10, betas=(0.5, 0.999))
    optimizerG = optim.Adam(netG.parameters(), lr=0.0002 * 10, betas=(0.5, 0.999))
    losses = []
    for i in range(iterations):
        real_cpu = torch.tanh(torch.tensor(data(10 + i, batch, nc, 16, 16)))
        netD.zero_grad()
        b_size = real_cpu.size(0)
        label = torch.full((b_size,), real_label, dtype=torch.float)
        output = netD(real_cpu).view(-1)
        errD_real = criterion(output, label)
        errD_real.backward()
        D_x = output.mean().item()
        noise = torch.tensor(data(20 + i, b_size, nz, 1, 1))
        fake = netG(noise)
        label.fill_(fake_label)
        output = netD(fake.detach()).view(-1)
        errD_fake = criterion(output, label)
        errD_fake.backward()
        D_G_z1 = output.mean().item()
        errD = errD_real + errD_fake
        optimizerD.step()
        netG.zero_grad()
        label.fill_(real_label)
        output = netD(fake).view(-1)
        errG = criterion(output, label)
        errG.backward()
        D_G_z2 = output.mean().item()
        optimizerG.step()
        losses.append((errD.item(), errG.item(), D_x, D_G_z1, D_G_z2))
    with torch.no_grad():
        fake = netG(torch.tensor(data(30, 2, nz, 1, 1))).detach().cpu()
    return {"losses": losses, "fake": fake, "running_var": netG.main[1].running_var, "drawn": drawn}


# --- FGSM -------------------------------------------------------------------------------------------------------


def fgsm(torch, epsilons=(0.0, 0.1, 0.3)):
    """The FGSM attack on a small LeNet in eval mode (F.dropout with training=self.training): `data.requires_grad
    = True`, the prediction by `max(1, keepdim=True)[1]`, nll_loss, the input's gradient's sign, `torch.clamp`,
    a denormalisation with a `view(1, -1, 1, 1)` std, and the adversarial examples as NumPy arrays."""
    nn, F = torch.nn, torch.nn.functional

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = nn.Conv2d(1, 4, 3, 1)
            self.conv2 = nn.Conv2d(4, 8, 3, 1)
            self.dropout1 = nn.Dropout(0.25)
            self.fc1 = nn.Linear(8 * 2 * 2, 16)
            self.fc2 = nn.Linear(16, 10)

        def forward(self, x):
            x = F.relu(self.conv1(x))
            x = F.relu(self.conv2(x))
            x = F.max_pool2d(x, 2)
            x = self.dropout1(x)
            x = torch.flatten(x, 1)
            x = F.relu(self.fc1(x))
            x = F.dropout(x, 0.5, training=self.training)
            return F.log_softmax(self.fc2(x), dim=1)

    def fgsm_attack(image, epsilon, data_grad):
        sign_data_grad = data_grad.sign()
        perturbed_image = image + epsilon * sign_data_grad
        return torch.clamp(perturbed_image, 0, 1)

    def denorm(batch, mean=(0.1307,), std=(0.3081,)):
        mean = torch.tensor(list(mean)).view(1, -1, 1, 1)
        std = torch.tensor(list(std)).view(1, -1, 1, 1)
        return batch * std + mean

    model = init(torch, Net())
    model.eval()
    images = torch.tensor(np.random.default_rng(3).random((6, 1, 1, 8, 8)).astype(np.float32))
    targets = torch.tensor(labels(4, 6, 10).reshape(6, 1))
    results = {}
    for epsilon in epsilons:
        correct, adv_examples, grads = 0, [], []
        for data_, target in zip(images, targets):
            data_.requires_grad = True
            output = model(data_)
            init_pred = output.max(1, keepdim=True)[1]
            loss = F.nll_loss(output, target)
            model.zero_grad()
            loss.backward()
            data_grad = data_.grad.data
            grads.append(data_grad.numpy().copy())
            data_denorm = denorm(data_)
            perturbed_data = fgsm_attack(data_denorm, epsilon, data_grad)
            perturbed_data_normalized = (perturbed_data - 0.1307) / 0.3081
            output = model(perturbed_data_normalized)
            final_pred = output.max(1, keepdim=True)[1]
            if final_pred.item() == target.item():
                correct += 1
            adv_ex = perturbed_data.squeeze().detach().cpu().numpy()
            adv_examples.append((init_pred.item(), final_pred.item(), adv_ex))
        results[epsilon] = (correct / float(len(images)), adv_examples, grads)
    return results


# --- knowledge distillation ---------------------------------------------------------------------------------


def knowledge_distillation(torch, epochs=2, T=2, soft_target_loss_weight=0.25, ce_loss_weight=0.75):
    """A teacher trained with CrossEntropyLoss, then a student trained on soft targets (softmax/log_softmax with
    temperature T, the KL term written out as the tutorial does, and as nn.KLDivLoss(reduction="batchmean")),
    and one with a CosineEmbeddingLoss between hidden representations pooled by F.avg_pool1d; the accuracies."""
    nn, F, optim = torch.nn, torch.nn.functional, torch.optim
    x = torch.tensor(data(1, 32, 1, 6, 6))
    y = torch.tensor(labels(2, 32, 4))
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=8)

    class Net(nn.Module):
        def __init__(self, channels, hidden):
            super().__init__()
            self.features = nn.Sequential(nn.Conv2d(1, channels, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2, 2))
            self.classifier = nn.Sequential(
                nn.Linear(channels * 9, hidden), nn.ReLU(), nn.Dropout(0.0), nn.Linear(hidden, 4)
            )

        def forward(self, x, hidden=False):
            x = torch.flatten(self.features(x), 1)
            out = self.classifier(x)
            return (out, x) if hidden else out

    def train(model, epochs, learning_rate):
        criterion = nn.CrossEntropyLoss()
        optimizer = optim.Adam(model.parameters(), lr=learning_rate)
        model.train()
        for _ in range(epochs):
            for inputs, labels_ in loader:
                optimizer.zero_grad()
                loss = criterion(model(inputs), labels_)
                loss.backward()
                optimizer.step()
        return loss.item()

    def train_knowledge_distillation(teacher, student, epochs, learning_rate, kl_div):
        ce_loss = nn.CrossEntropyLoss()
        optimizer = optim.Adam(student.parameters(), lr=learning_rate)
        teacher.eval()
        student.train()
        losses = []
        for _ in range(epochs):
            running_loss = 0.0
            for inputs, labels_ in loader:
                optimizer.zero_grad()
                with torch.no_grad():
                    teacher_logits = teacher(inputs)
                student_logits = student(inputs)
                soft_targets = nn.functional.softmax(teacher_logits / T, dim=-1)
                soft_prob = nn.functional.log_softmax(student_logits / T, dim=-1)
                if kl_div:
                    soft_targets_loss = nn.KLDivLoss(reduction="batchmean")(soft_prob, soft_targets) * (T**2)
                else:
                    soft_targets_loss = (
                        torch.sum(soft_targets * (soft_targets.log() - soft_prob)) / soft_prob.size()[0] * (T**2)
                    )
                label_loss = ce_loss(student_logits, labels_)
                loss = soft_target_loss_weight * soft_targets_loss + ce_loss_weight * label_loss
                loss.backward()
                optimizer.step()
                running_loss += loss.item()
            losses.append(running_loss / len(loader))
        return losses

    def train_cosine_loss(teacher, student, epochs, learning_rate):
        ce_loss, cosine_loss = nn.CrossEntropyLoss(), nn.CosineEmbeddingLoss()
        optimizer = optim.Adam(student.parameters(), lr=learning_rate)
        teacher.eval()
        student.train()
        losses = []
        for _ in range(epochs):
            for inputs, labels_ in loader:
                optimizer.zero_grad()
                with torch.no_grad():
                    _, teacher_hidden = teacher(inputs, hidden=True)
                    teacher_hidden = F.avg_pool1d(teacher_hidden, 2)
                student_logits, student_hidden = student(inputs, hidden=True)
                hidden_rep_loss = cosine_loss(student_hidden, teacher_hidden, target=torch.ones(inputs.size(0)))
                loss = 0.25 * hidden_rep_loss + 0.75 * ce_loss(student_logits, labels_)
                loss.backward()
                optimizer.step()
                losses.append(loss.item())
        return losses

    def test(model):
        model.eval()
        correct, total = 0, 0
        with torch.no_grad():
            for inputs, labels_ in loader:
                _, predicted = torch.max(model(inputs).data, 1)
                total += labels_.size(0)
                correct += (predicted == labels_).sum().item()
        return 100 * correct / total

    teacher = init(torch, Net(8, 16), 1)
    teacher_loss = train(teacher, epochs, 0.01)
    students = [init(torch, Net(4, 8), 2) for _ in range(3)]
    return {
        "teacher": (teacher_loss, test(teacher)),
        "kd": train_knowledge_distillation(teacher, students[0], epochs, 0.01, kl_div=False),
        "kl_div": train_knowledge_distillation(teacher, students[1], epochs, 0.01, kl_div=True),
        "cosine": train_cosine_loss(teacher, students[2], epochs, 0.01),
        "accuracies": [test(s) for s in students[:2]],
    }


# --- neural style transfer -----------------------------------------------------------------------------------


def style_transfer(torch, num_steps=4, style_weight=1000, content_weight=1):
    """Style transfer with a tiny CNN in place of VGG: ContentLoss and StyleLoss modules (gram matrices by `view`
    and `mm`), a Normalization module, the model rebuilt layer by layer from `cnn.children()` with `add_module` and
    trimmed by slicing, `requires_grad_(False)`, and the input image optimized by LBFGS with a closure that clamps
    it in place under no_grad."""
    nn, F, optim = torch.nn, torch.nn.functional, torch.optim

    class ContentLoss(nn.Module):
        def __init__(self, target):
            super().__init__()
            self.target = target.detach()

        def forward(self, input):
            self.loss = F.mse_loss(input, self.target)
            return input

    def gram_matrix(input):
        a, b, c, d = input.size()
        features = input.view(a * b, c * d)
        G = torch.mm(features, features.t())
        return G.div(a * b * c * d)

    class StyleLoss(nn.Module):
        def __init__(self, target_feature):
            super().__init__()
            self.target = gram_matrix(target_feature).detach()

        def forward(self, input):
            self.loss = F.mse_loss(gram_matrix(input), self.target)
            return input

    class Normalization(nn.Module):
        def __init__(self, mean, std):
            super().__init__()
            self.mean = torch.tensor(mean).view(-1, 1, 1)
            self.std = torch.tensor(std).view(-1, 1, 1)

        def forward(self, img):
            return (img - self.mean) / self.std

    cnn = nn.Sequential(
        nn.Conv2d(3, 4, 3, padding=1),
        nn.ReLU(inplace=True),
        nn.Conv2d(4, 4, 3, padding=1),
        nn.ReLU(inplace=True),
        nn.MaxPool2d(2, 2),
        nn.Conv2d(4, 6, 3, padding=1),
        nn.ReLU(inplace=True),
        nn.Conv2d(6, 6, 3, padding=1),
    )
    init(torch, cnn)
    cnn = cnn.eval()
    pixels = np.random.default_rng(7).random((3, 1, 3, 8, 8)).astype(np.float32)
    style_img, content_img = torch.tensor(pixels[0]), torch.tensor(pixels[1])
    input_img = content_img.clone() * 0.5 + torch.tensor(pixels[2]) * 0.5

    def get_style_model_and_losses(
        cnn, style_img, content_img, content_layers=("conv_3",), style_layers=("conv_1", "conv_2", "conv_3", "conv_4")
    ):
        normalization = Normalization([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])
        content_losses, style_losses = [], []
        model = nn.Sequential(normalization)
        i = 0
        for layer in cnn.children():
            if isinstance(layer, nn.Conv2d):
                i += 1
                name = f"conv_{i}"
            elif isinstance(layer, nn.ReLU):
                name = f"relu_{i}"
                layer = nn.ReLU(inplace=False)
            elif isinstance(layer, nn.MaxPool2d):
                name = f"pool_{i}"
            elif isinstance(layer, nn.BatchNorm2d):
                name = f"bn_{i}"
            else:
                raise RuntimeError(f"Unrecognized layer: {layer.__class__.__name__}")
            model.add_module(name, layer)
            if name in content_layers:
                target = model(content_img).detach()
                content_loss = ContentLoss(target)
                model.add_module(f"content_loss_{i}", content_loss)
                content_losses.append(content_loss)
            if name in style_layers:
                target_feature = model(style_img).detach()
                style_loss = StyleLoss(target_feature)
                model.add_module(f"style_loss_{i}", style_loss)
                style_losses.append(style_loss)
        for i in range(len(model) - 1, -1, -1):
            if isinstance(model[i], ContentLoss) or isinstance(model[i], StyleLoss):
                break
        model = model[: (i + 1)]
        return model, style_losses, content_losses

    model, style_losses, content_losses = get_style_model_and_losses(cnn, style_img, content_img)
    input_img.requires_grad_(True)
    model.eval()
    model.requires_grad_(False)
    optimizer = optim.LBFGS([input_img])
    scores, run = [], [0]
    while run[0] <= num_steps:

        def closure():
            with torch.no_grad():
                input_img.clamp_(0, 1)
            optimizer.zero_grad()
            model(input_img)
            style_score = 0
            content_score = 0
            for sl in style_losses:
                style_score += sl.loss
            for cl in content_losses:
                content_score += cl.loss
            style_score *= style_weight
            content_score *= content_weight
            loss = style_score + content_score
            loss.backward()
            run[0] += 1
            scores.append((style_score.item(), content_score.item()))
            return style_score + content_score

        optimizer.step(closure)
    with torch.no_grad():
        input_img.clamp_(0, 1)
    return {"scores": scores, "image": input_img, "layers": [name for name, _ in model.named_children()]}


# --- REINFORCE -----------------------------------------------------------------------------------------------


class LineWorld:
    """A deterministic stand-in for CartPole: a 4-number state, two actions, reward 1 a step until |position| > 1."""

    def reset(self):
        self.state = np.array([0.05, -0.02, 0.03, 0.01])
        return self.state, {}

    def step(self, action):
        self.state = self.state * 0.9 + np.array([0.1, 0.05, -0.04, 0.02]) * (1 if action else -1)
        done = bool(abs(self.state[0]) > 0.25)
        return self.state, 1.0, done, False, {}


def reinforce(torch, episodes=3, gamma=0.99, max_steps=12, actions=None):
    """REINFORCE: a Policy (Linear, Dropout, relu, softmax(dim=1)) sampling from distributions.Categorical, the
    log-probabilities kept on the module, the returns accumulated with a deque, normalised by mean and std +
    float32 eps, `torch.cat(policy_loss).sum()`, Adam, `del policy.rewards[:]` and the running reward. With
    `actions` the sampled action is replaced by the given one (the same episode in every package)."""
    nn, F, optim = torch.nn, torch.nn.functional, torch.optim
    Categorical = torch.distributions.Categorical
    eps = np.finfo(np.float32).eps.item()

    class Policy(nn.Module):
        def __init__(self):
            super().__init__()
            self.affine1 = nn.Linear(4, 16)
            self.dropout = nn.Dropout(p=0.0)
            self.affine2 = nn.Linear(16, 2)
            self.saved_log_probs = []
            self.rewards = []

        def forward(self, x):
            x = self.affine1(x)
            x = self.dropout(x)
            x = F.relu(x)
            action_scores = self.affine2(x)
            return F.softmax(action_scores, dim=1)

    policy = init(torch, Policy())
    optimizer = optim.Adam(policy.parameters(), lr=1e-2)
    env = LineWorld()
    chosen = iter(actions) if actions is not None else None

    def select_action(state):
        state = torch.from_numpy(state).float().unsqueeze(0)
        probs = policy(state)
        m = Categorical(probs)
        action = m.sample()
        if chosen is not None:
            action = torch.tensor([next(chosen)])
        policy.saved_log_probs.append(m.log_prob(action))
        return action.item()

    def finish_episode():
        R = 0
        policy_loss = []
        returns = collections.deque()
        for r in policy.rewards[::-1]:
            R = r + gamma * R
            returns.appendleft(R)
        returns = torch.tensor(returns)
        returns = (returns - returns.mean()) / (returns.std() + eps)
        for log_prob, R in zip(policy.saved_log_probs, returns):
            policy_loss.append(-log_prob * R)
        optimizer.zero_grad()
        policy_loss = torch.cat(policy_loss).sum()
        policy_loss.backward()
        optimizer.step()
        del policy.rewards[:]
        del policy.saved_log_probs[:]
        return policy_loss.item()

    running_reward, history, taken = 10, [], []
    for _ in range(episodes):
        state, _ = env.reset()
        ep_reward = 0
        for _ in range(max_steps):
            action = select_action(state)
            taken.append(action)
            state, reward, done, _, _ = env.step(action)
            policy.rewards.append(reward)
            ep_reward += reward
            if done:
                break
        running_reward = 0.05 * ep_reward + (1 - 0.05) * running_reward
        history.append((finish_episode(), running_reward))
    return {"history": history, "taken": taken, "weight": policy.affine2.weight}


# --- DQN ----------------------------------------------------------------------------------------------------


def dqn(torch, steps=12, batch_size=4, gamma=0.99, tau=0.005):
    """The DQN tutorial's optimize_model on LineWorld: a ReplayMemory of Transition namedtuples sampled by a NumPy
    generator, the non-final mask as a bool tensor, `policy_net(state_batch).gather(1, action_batch)`,
    `next_state_values[non_final_mask] = target_net(...).max(1).values` under no_grad, SmoothL1Loss, AdamW with
    amsgrad, clip_grad_value_, the target network's soft update through state_dicts, epsilon-greedy actions by
    `max(1).indices.view(1, 1)`."""
    nn, F, optim = torch.nn, torch.nn.functional, torch.optim
    Transition = collections.namedtuple("Transition", ("state", "action", "next_state", "reward"))
    rng = np.random.default_rng(8)

    class ReplayMemory:
        def __init__(self, capacity):
            self.memory = collections.deque([], maxlen=capacity)

        def push(self, *args):
            self.memory.append(Transition(*args))

        def sample(self, batch_size):
            return [self.memory[k] for k in rng.choice(len(self.memory), batch_size, replace=False)]

        def __len__(self):
            return len(self.memory)

    class DQN(nn.Module):
        def __init__(self, n_observations, n_actions):
            super().__init__()
            self.layer1 = nn.Linear(n_observations, 16)
            self.layer2 = nn.Linear(16, 16)
            self.layer3 = nn.Linear(16, n_actions)

        def forward(self, x):
            x = F.relu(self.layer1(x))
            x = F.relu(self.layer2(x))
            return self.layer3(x)

    policy_net, target_net = init(torch, DQN(4, 2), 1), DQN(4, 2)
    target_net.load_state_dict(policy_net.state_dict())
    optimizer = optim.AdamW(policy_net.parameters(), lr=1e-3, amsgrad=True)
    memory = ReplayMemory(100)

    def select_action(state, explore):
        if not explore:
            with torch.no_grad():
                return policy_net(state).max(1).indices.view(1, 1)
        return torch.tensor([[int(rng.integers(2))]], dtype=torch.long)

    def optimize_model():
        if len(memory) < batch_size:
            return None
        batch = Transition(*zip(*memory.sample(batch_size)))
        non_final_mask = torch.tensor(tuple(map(lambda s: s is not None, batch.next_state)), dtype=torch.bool)
        non_final_next_states = torch.cat([s for s in batch.next_state if s is not None])
        state_batch, action_batch = torch.cat(batch.state), torch.cat(batch.action)
        reward_batch = torch.cat(batch.reward)
        state_action_values = policy_net(state_batch).gather(1, action_batch)
        next_state_values = torch.zeros(batch_size)
        with torch.no_grad():
            next_state_values[non_final_mask] = target_net(non_final_next_states).max(1).values
        expected_state_action_values = (next_state_values * gamma) + reward_batch
        criterion = nn.SmoothL1Loss()
        loss = criterion(state_action_values, expected_state_action_values.unsqueeze(1))
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_value_(policy_net.parameters(), 100)
        optimizer.step()
        return loss.item()

    env, losses, actions = LineWorld(), [], []
    state = torch.tensor(env.reset()[0], dtype=torch.float32).unsqueeze(0)
    for t in range(steps):
        action = select_action(state, explore=t % 3 != 2)
        actions.append(action.item())
        observation, reward, terminated, truncated, _ = env.step(action.item())
        reward = torch.tensor([reward])
        next_state = None if terminated else torch.tensor(observation, dtype=torch.float32).unsqueeze(0)
        memory.push(state, action, next_state, reward)
        state = next_state if next_state is not None else torch.tensor(env.reset()[0], dtype=torch.float32).unsqueeze(0)
        losses.append(optimize_model())
        target_net_state_dict = target_net.state_dict()
        policy_net_state_dict = policy_net.state_dict()
        for key in policy_net_state_dict:
            target_net_state_dict[key] = policy_net_state_dict[key] * tau + target_net_state_dict[key] * (1 - tau)
        target_net.load_state_dict(target_net_state_dict)
    return {"losses": losses, "actions": actions, "target": target_net.layer3.weight}


# --- transfer learning ---------------------------------------------------------------------------------------


def transfer_learning(torch, epochs=2):
    """Finetuning as the transfer-learning tutorial does it, with a small "pretrained" CNN: the features frozen by
    `param.requires_grad = False`, a new `fc` whose parameters alone go to SGD with momentum, StepLR, the phases
    train/val with `torch.set_grad_enabled(phase == "train")`, `torch.sum(preds == labels.data)`,
    `running_corrects.double() / size`, the best weights kept with `copy.deepcopy(model.state_dict())` and loaded."""
    import copy

    nn, optim = torch.nn, torch.optim

    class Pretrained(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, 4, 3, padding=1)
            self.bn = nn.BatchNorm2d(4)
            self.pool = nn.AdaptiveAvgPool2d((1, 1))
            self.fc = nn.Linear(4, 10)

        def forward(self, x):
            x = self.pool(torch.relu(self.bn(self.conv(x))))
            return self.fc(torch.flatten(x, 1))

    model = init(torch, Pretrained(), 1)
    for param in model.parameters():
        param.requires_grad = False
    num_ftrs = model.fc.in_features
    model.fc = init(torch, nn.Linear(num_ftrs, 2), 2)
    criterion = nn.CrossEntropyLoss()
    optimizer_conv = optim.SGD(model.fc.parameters(), lr=0.1, momentum=0.9)
    exp_lr_scheduler = optim.lr_scheduler.StepLR(optimizer_conv, step_size=1, gamma=0.1)
    loaders = {
        phase: torch.utils.data.DataLoader(
            torch.utils.data.TensorDataset(torch.tensor(data(seed, 8, 3, 5, 5)), torch.tensor(labels(seed + 1, 8, 2))),
            batch_size=4,
        )
        for phase, seed in (("train", 1), ("val", 3))
    }
    best_model_wts, best_acc, history = copy.deepcopy(model.state_dict()), 0.0, []
    for _ in range(epochs):
        for phase in ["train", "val"]:
            model.train() if phase == "train" else model.eval()
            running_loss, running_corrects = 0.0, 0
            for inputs, labels_ in loaders[phase]:
                optimizer_conv.zero_grad()
                with torch.set_grad_enabled(phase == "train"):
                    outputs = model(inputs)
                    _, preds = torch.max(outputs, 1)
                    loss = criterion(outputs, labels_)
                    if phase == "train":
                        loss.backward()
                        optimizer_conv.step()
                running_loss += loss.item() * inputs.size(0)
                running_corrects += torch.sum(preds == labels_.data)
            if phase == "train":
                exp_lr_scheduler.step()
            epoch_acc = running_corrects.double() / len(loaders[phase].dataset)
            history.append((running_loss / 8, epoch_acc.item()))
            if phase == "val" and epoch_acc > best_acc:
                best_acc, best_model_wts = epoch_acc, copy.deepcopy(model.state_dict())
    model.load_state_dict(best_model_wts)
    frozen = [p.grad is None for p in model.conv.parameters()]
    return {"history": history, "fc": model.fc.weight, "running_mean": model.bn.running_mean, "frozen": frozen}


# --- recipes: zeroing gradients, saving and loading, warmstarting, LR schedulers -------------------------------


def recipes(torch, steps=3):
    """Recipes: the gradients zeroed by `optimizer.zero_grad()` each step (and what they add up to when not), two
    models and their optimizers saved to one file with `torch.save` and loaded back with `torch.load` to resume,
    a model warmstarted from another's state_dict with `strict=False`, and the schedulers' learning rates."""
    nn, F, optim = torch.nn, torch.nn.functional, torch.optim

    class Net(nn.Module):
        def __init__(self, extra=False):
            super().__init__()
            self.conv1 = nn.Conv2d(1, 3, 3)
            self.pool = nn.MaxPool2d(2, 2)
            self.fc1 = nn.Linear(3 * 2 * 2, 5)
            if extra:
                self.fc2 = nn.Linear(5, 4)

        def forward(self, x):
            x = torch.flatten(self.pool(F.relu(self.conv1(x))), 1)
            x = self.fc1(x)
            return self.fc2(x) if hasattr(self, "fc2") else x

    x, y = torch.tensor(data(1, 6, 1, 6, 6)), torch.tensor(labels(2, 6, 4))
    criterion = nn.CrossEntropyLoss()
    netA, netB = init(torch, Net(), 1), init(torch, Net(), 2)
    optimizerA = optim.SGD(netA.parameters(), lr=0.1, momentum=0.9)
    optimizerB = optim.Adam(netB.parameters(), lr=0.01)
    out = {"accumulated": [], "losses": []}
    for _ in range(2):
        criterion(netA(x), y).backward()
        out["accumulated"].append(netA.fc1.bias.grad.clone())

    def step(pairs):
        for net, opt in pairs:
            opt.zero_grad()
            loss = criterion(net(x), y)
            loss.backward()
            opt.step()
            out["losses"].append(loss.item())
        return loss

    for _ in range(steps):
        loss = step(((netA, optimizerA), (netB, optimizerB)))
    buffer = io.BytesIO()
    torch.save(
        {
            "modelA_state_dict": netA.state_dict(),
            "modelB_state_dict": netB.state_dict(),
            "optimizerA_state_dict": optimizerA.state_dict(),
            "optimizerB_state_dict": optimizerB.state_dict(),
            "epoch": steps,
            "loss": loss,
        },
        buffer,
    )
    buffer.seek(0)
    checkpoint = torch.load(buffer, weights_only=True)
    modelA, modelB = Net(), Net()
    optA = optim.SGD(modelA.parameters(), lr=0.1, momentum=0.9)
    optB = optim.Adam(modelB.parameters(), lr=0.01)
    modelA.load_state_dict(checkpoint["modelA_state_dict"])
    modelB.load_state_dict(checkpoint["modelB_state_dict"])
    optA.load_state_dict(checkpoint["optimizerA_state_dict"])
    optB.load_state_dict(checkpoint["optimizerB_state_dict"])
    out["epoch"], out["saved_loss"] = checkpoint["epoch"], checkpoint["loss"].item()
    modelA.train()
    modelB.train()
    step(((modelA, optA), (modelB, optB)))
    buffer = io.BytesIO()
    torch.save(netA.state_dict(), buffer)
    buffer.seek(0)
    warm = init(torch, Net(extra=True), 3)
    keys = warm.load_state_dict(torch.load(buffer), strict=False)
    out["warm"] = (sorted(keys.missing_keys), sorted(keys.unexpected_keys), warm(x))
    param = nn.Parameter(torch.zeros(2))
    rates = []
    for make in (
        lambda o: optim.lr_scheduler.StepLR(o, step_size=2, gamma=0.5),
        lambda o: optim.lr_scheduler.MultiStepLR(o, milestones=[1, 3], gamma=0.1),
        lambda o: optim.lr_scheduler.ExponentialLR(o, gamma=0.9),
        lambda o: optim.lr_scheduler.CosineAnnealingLR(o, T_max=4),
        lambda o: optim.lr_scheduler.LambdaLR(o, lr_lambda=lambda epoch: 0.95**epoch),
        lambda o: optim.lr_scheduler.OneCycleLR(o, max_lr=0.5, total_steps=6),
    ):
        opt = optim.SGD([param], lr=0.1, momentum=0.9)
        scheduler = make(opt)
        for _ in range(5):
            opt.step()
            scheduler.step()
            rates.append(scheduler.get_last_lr()[0])
    opt = optim.SGD([param], lr=0.1)
    plateau = optim.lr_scheduler.ReduceLROnPlateau(opt, "min", patience=1, factor=0.5)
    for val_loss in (1.0, 0.9, 0.95, 0.97, 0.99, 0.8):
        plateau.step(val_loss)
        rates.append(opt.param_groups[0]["lr"])
    out["rates"] = rates
    return out
