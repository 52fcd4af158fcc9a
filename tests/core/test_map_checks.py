"""lipnb.core.map_checks: what local_lipschitz checks of a map before it trusts it, each check on a map built to
pass it and a map built to fail it."""

from __future__ import annotations

import pytest
import torch

from lipnb.core.map_checks import check_map, check_output, check_same_map, relative_change

F64 = torch.float64


def tokens(B: int = 3, n: int = 4, d: int = 2, dtype: torch.dtype = F64) -> torch.Tensor:
    return torch.randn(B, n, d, generator=torch.Generator().manual_seed(0), dtype=dtype)


def test_relative_change_is_the_largest_difference_over_the_largest_entry() -> None:
    Y = torch.tensor([[1.0, -4.0], [2.0, 0.5]], dtype=F64)
    Z = Y + torch.tensor([[0.0, 0.2], [-0.1, 0.0]], dtype=F64)
    assert relative_change(Y, Z) == pytest.approx(0.2 / 4.0, rel=1e-12)
    assert relative_change(Y, Y) == 0.0
    assert relative_change(Y, Z[:1]) == float("inf")  # another shape is no match
    assert relative_change(torch.zeros(2), torch.zeros(2)) == 0.0  # no division by zero


def test_check_output_takes_a_finite_batch_of_the_same_size() -> None:
    X = tokens()
    check_output(torch.zeros(3, 5, 7), X)  # another length and width are fine
    for bad in (torch.zeros(3, 5), torch.zeros(2, 4, 2), (torch.zeros(3, 4, 2),), [1.0]):
        with pytest.raises(ValueError, match="fn must map"):
            check_output(bad, X)
    for value in (float("nan"), float("inf")):
        Y = torch.zeros(3, 4, 2)
        Y[1, 2, 0] = value
        with pytest.raises(ValueError, match="NaN or inf"):
            check_output(Y, X)


def test_check_map_returns_fn_of_x_for_a_map_acting_on_each_input_alone() -> None:
    X = tokens()
    W = torch.randn(2, 2, generator=torch.Generator().manual_seed(1), dtype=F64)

    def fn(Z: torch.Tensor) -> torch.Tensor:
        return torch.softmax(Z @ Z.mT, dim=-1) @ Z @ W

    torch.testing.assert_close(check_map(fn, X, mixing=True), fn(X), rtol=0, atol=0)


def test_check_map_refuses_a_random_map() -> None:
    dropout = torch.nn.Dropout(0.5).train()
    with pytest.raises(ValueError, match="not deterministic"):
        check_map(dropout, tokens(), mixing=False)


def test_check_map_refuses_a_map_that_mixes_the_inputs_of_a_batch() -> None:
    def mean_over_batch(Z: torch.Tensor) -> torch.Tensor:
        return Z + Z.mean(0, keepdim=True)

    with pytest.raises(ValueError, match="mixes the inputs"):
        check_map(mean_over_batch, tokens(), mixing=True)
    check_map(mean_over_batch, tokens(), mixing=False)  # the test of mixing runs only when asked
    check_map(mean_over_batch, tokens(B=1), mixing=True)  # and needs two inputs


def test_check_map_refuses_a_map_that_depends_on_the_batch_it_is_given() -> None:
    X = tokens()
    closed_over = torch.randn(3, 4, 2, generator=torch.Generator().manual_seed(2), dtype=F64)

    def per_batch(Z: torch.Tensor) -> torch.Tensor:  # fails on a batch of another size
        return Z * closed_over

    def batch_size(Z: torch.Tensor) -> torch.Tensor:  # acts on each input alone, but scaled by the batch's size
        return Z * len(Z)

    for fn in (per_batch, batch_size):
        with pytest.raises(ValueError, match="depends on the batch"):
            check_map(fn, X, mixing=True)


def test_check_same_map_allows_rounding_and_refuses_another_map() -> None:
    X = tokens()
    Y = torch.tanh(X)
    check_same_map(Y.float(), Y, "the float32 closed form")  # float32's rounding is below √eps of float32
    with pytest.raises(ValueError, match="another map"):
        check_same_map(Y * (1 + 1e-6), Y, "a closed form")  # above √eps(float64) ≈ 1.5e-8
    check_same_map(Y * (1 + 1e-6), Y, "a closed form", rounding=1e-6)  # 8 times the scatter observed
    with pytest.raises(ValueError, match="a truncated closed form"):
        check_same_map(Y[:, :2], Y, "a truncated closed form")
