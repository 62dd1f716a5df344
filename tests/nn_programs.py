"""Programs that use `torch.nn.functional` the way today's tutorials do (written for these tests): each
takes the module it runs on as `torch`, so the same code runs on real PyTorch (with
`modern_programs.with_numpy_draws`), `engine` and `client`."""

from __future__ import annotations


def softmax_regression(torch, steps=120, learning_rate=0.5):
    """Three Gaussian blobs in the plane classified by softmax regression written from scratch: the
    parameters are plain tensors that require grad, the loss is F.cross_entropy, and the SGD update is
    done by hand in place under no_grad."""
    F = torch.nn.functional
    torch.manual_seed(0)
    per_class = 40
    centres = torch.tensor([[0.0, 2.0], [2.0, -1.0], [-2.0, -1.0]])
    x = torch.cat([torch.randn(per_class, 2) * 0.8 + centres[c] for c in range(3)])
    y = torch.cat([torch.full((per_class,), c, dtype=torch.long) for c in range(3)])
    weight = torch.zeros(3, 2, requires_grad=True)  # [out, in], as F.linear takes it
    bias = torch.zeros(3, requires_grad=True)
    for step in range(steps):
        logits = F.linear(x, weight, bias)
        loss = F.cross_entropy(logits, y)
        loss.backward()
        with torch.no_grad():
            weight -= learning_rate * weight.grad
            bias -= learning_rate * bias.grad
            weight.grad = None
            bias.grad = None
        if step % 20 == 0:
            print(f"step {step:3d}  loss {loss.item():.4f}")
    with torch.no_grad():
        logits = F.linear(x, weight, bias)
        accuracy = (logits.argmax(dim=1) == y).float().mean().item()
        confidence = F.softmax(logits, dim=1).amax(dim=1).mean().item()
    print(f"accuracy {accuracy:.3f}  mean confidence {confidence:.4f}")
