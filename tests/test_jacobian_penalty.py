"""Exact second derivatives of the consistency projection (``grad_order=2``), which a Jacobian penalty of a map
that projects needs."""
import pytest
import torch

from mcnet_basicsr.ops import build_operator

DT = torch.float64


# ------------------------------------------------------------------------------------------ the projection
def projection_problem(op, n, h, w, seed):
    """x (n, 1, h, w) and measurements b near A of another image, float64."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.rand(n, 1, h, w, generator=gen, dtype=DT)
    b = op(torch.rand(n, 1, h, w, generator=gen, dtype=DT))
    return x, b + 0.01 * torch.randn(b.shape, generator=gen, dtype=DT)


@pytest.mark.parametrize('op_type', ['bicubic', 'gaussian'])
def test_gradgradcheck_project_eps_positive_second_order(op_type):
    """grad_order=2: second derivatives of the eps > 0 projection are exact (gradgradcheck), with the value and
    first derivatives of the default; the default's single Newton step misses mu's curvature (not vacuous)."""
    op = build_operator({'type': op_type, 'scale': 2})
    x, b = projection_problem(op, 1, 8, 10, seed=6)
    eps = (0.3 * op.residual_norm(x, b)).detach()
    x.requires_grad_(), b.requires_grad_(), eps.requires_grad_()
    second = lambda x_, b_, e_: op.project(x_, b_, e_, grad_order=2)  # noqa: E731
    assert torch.autograd.gradgradcheck(second, (x, b, eps))
    assert not torch.autograd.gradgradcheck(lambda x_, b_, e_: op.project(x_, b_, e_), (x, b, eps),
                                            raise_exception=False)
    probe = torch.randn(x.shape, generator=torch.Generator().manual_seed(7), dtype=x.dtype)
    one, two = op.project(x, b, eps), second(x, b, eps)
    torch.testing.assert_close(two, one, rtol=0, atol=1e-14)
    g_one = torch.autograd.grad((one * probe).sum(), (x, b, eps))
    g_two = torch.autograd.grad((two * probe).sum(), (x, b, eps))
    for a, c in zip(g_two, g_one):
        torch.testing.assert_close(a, c, rtol=1e-12, atol=1e-12)


def test_gradgradcheck_project_second_order_mixed_samples():
    """grad_order=2 with samples outside, inside and at eps = 0 in one batch; a bad grad_order is refused."""
    op = build_operator({'type': 'bicubic', 'scale': 2})
    x, b = projection_problem(op, 3, 6, 8, seed=8)
    r = op.residual_norm(x, b)
    eps = torch.stack([0.3 * r[0], 2.0 * r[1], torch.zeros((), dtype=DT)]).detach()
    x.requires_grad_(), b.requires_grad_()
    assert torch.autograd.gradgradcheck(lambda x_, b_: op.project(x_, b_, eps, grad_order=2), (x, b))
    with pytest.raises(ValueError, match='grad_order'):
        op.project(x, b, eps, grad_order=3)
