"""Invalid arguments raise ValueError naming the argument, the value and the rule; nothing runs."""

import pytest
import torch

import ndconv

x4 = torch.randn(2, 6, 6, 4)
w4 = torch.randn(8, 3, 3, 4)


@pytest.mark.parametrize(
    "call,match",
    [
        (lambda: ndconv.conv_general(x4.int(), w4), "input must be floating point, got dtype torch.int32"),
        (lambda: ndconv.conv_general(x4, w4.to(torch.complex64)),
         "weight dtype must be an integer type or one of"),
        (lambda: ndconv.conv_general(x4.to(torch.float8_e4m3fn), w4),
         "input dtype must be one of float16, bfloat16, float32, float64, got torch.float8_e4m3fn"),
        (lambda: ndconv.conv_general(x4, w4.to(torch.float8_e4m3fn)),
         "weight dtype must be an integer type or one of"),
        (lambda: ndconv.conv_general(torch.randn(2, 4), torch.randn(2, 4)),
         r"input must have 3 to 5 dimensions .* got shape \[2, 4\]"),
        (lambda: ndconv.conv_general(torch.randn(1, 2, 2, 2, 2, 2, 2), torch.randn(1, 1, 1, 1, 1, 1, 2)),
         "input must have 3 to 5 dimensions"),
        (lambda: ndconv.conv_general(x4, torch.randn(8, 3, 4)),
         r"weight must have as many dimensions as the input \(4"),
        (lambda: ndconv.conv_general(x4, torch.randn(8, 3, 3, 3)),
         r"weight's last dimension must be C/groups = 4/1 = 4, got weight shape \[8, 3, 3, 3\]"),
        (lambda: ndconv.conv_general(x4, torch.randn(8, 3, 3, 2), groups=3),
         "groups=3 must divide the input channels C=4"),
        (lambda: ndconv.conv_general(x4, torch.randn(6, 3, 3, 2), groups=4),
         "groups=4 must divide the output channels O=6"),
        (lambda: ndconv.conv_general(x4, torch.randn(6, 3, 3, 1), groups=0),
         "groups must be a positive integer, got 0"),
        (lambda: ndconv.conv_general(x4, w4, stride=0),
         r"stride must be positive on every axis, got \[0, 0\]"),
        (lambda: ndconv.conv_general(x4, w4, stride=(1, -1)),
         r"stride must be positive on every axis, got \[1, -1\]"),
        (lambda: ndconv.conv_general(x4, w4, kernel_dilation=0), r"kernel_dilation must be positive"),
        (lambda: ndconv.conv_general(x4, w4, input_dilation=[0, 1]), r"input_dilation must be positive"),
        (lambda: ndconv.conv_general(x4, w4, stride=[1, 1, 1]),
         r"stride must have one entry per spatial axis \(2\) or a single entry, got \[1, 1, 1\]"),
        (lambda: ndconv.conv_general(x4, w4, padding=([1, 1], [1, 1, 1])), r"padding hi must have one entry"),
        (lambda: ndconv.conv_general(x4, w4, padding=1.5),
         r"padding must be an int or a sequence of ints, got 1.5"),
        (lambda: ndconv.conv_general(x4, w4, stride=True),
         r"stride must be an int or a sequence of ints, got True"),
        (lambda: ndconv.conv_general(x4, w4, flip=1), r"flip must be a bool, got 1"),
        (lambda: ndconv.conv_general(x4, w4, flip="yes"), r"flip must be a bool, got 'yes'"),
        (lambda: ndconv.conv_general(x4, w4, flip=None), r"flip must be a bool, got None"),
        (lambda: ndconv.conv_general(x4, torch.randn(8, 7, 7, 4)),
         r"output would be empty on spatial axis 0"),
        (lambda: ndconv.conv_general(x4, w4, padding=([-6, 0], [0, 0])),
         r"padding \(-6, 0\) on spatial axis 0 crops all 6 input elements"),
        (lambda: ndconv.conv_general(x4, torch.randn(8, 0, 3, 4)), r"kernel sizes must be at least 1"),
        (lambda: ndconv.conv_general(torch.randn(2, 0, 6, 4), w4), r"spatial sizes must be at least 1"),
        (lambda: ndconv.conv_general(x4, w4.to("meta")),
         r"input and weight must be on the same device, got cpu and meta"),
        (lambda: ndconv.conv_general(x4.numpy(), w4), r"input and weight must be torch.Tensor, got ndarray"),
        (lambda: ndconv.conv2d(torch.randn(2, 6, 4), torch.randn(8, 3, 4)),
         r"conv2d: input must have 4 dimensions"),
        (lambda: ndconv.conv1d(x4, w4), r"conv1d: input must have 3 dimensions"),
        (lambda: ndconv.conv3d(x4, w4), r"conv3d: input must have 5 dimensions"),
        (lambda: ndconv.conv2d(x4, w4, stride=(1, 2, 3)),
         r"conv2d: stride must have one entry per spatial axis"),
        (lambda: ndconv.conv2d(x4, w4, dilation=0), r"conv2d: kernel_dilation must be positive"),
        (lambda: ndconv.conv_transpose2d(x4, w4, output_padding=-8),
         r"conv_transpose2d: padding \(2, -6\) on spatial axis 0 crops all 6 input elements"),
        (lambda: ndconv.conv_transpose1d(x4, w4), r"conv_transpose1d: input must have 3 dimensions"),
        (lambda: ndconv.conv_transpose2d(x4, torch.randn(8, 3, 3, 5)),
         r"conv_transpose2d: weight's last dimension"),
    ],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_invalid_arguments(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_nothing_runs_on_bad_input(monkeypatch):
    from ndconv import planner

    monkeypatch.setattr(planner, "plan", lambda *a, **k: pytest.fail("planned on bad input"))
    with pytest.raises(ValueError):
        ndconv.conv_general(x4, w4, stride=0)


@pytest.mark.parametrize(
    "make,match",
    [
        (lambda: ndconv.nn.Conv2d(4, 6, 3, groups=4),
         "groups=4 must divide in_channels=4 and out_channels=6"),
        (lambda: ndconv.nn.Conv2d(0, 6, 3), "in_channels must be a positive integer, got 0"),
        (lambda: ndconv.nn.Conv2d(4, 6, (3, 3, 3)),
         r"Conv2d: kernel_size must have one entry per spatial axis \(2\)"),
        (lambda: ndconv.nn.Conv1d(4, 6, 0), r"kernel_size must be positive"),
        (lambda: ndconv.nn.Conv2d(4, 6, 3, output_padding=1), "output_padding is only for transposed"),
        (lambda: ndconv.nn.from_torch(torch.nn.Linear(2, 2)), "expected a torch.nn.Conv"),
        (lambda: ndconv.nn.from_torch(torch.nn.Conv2d(2, 2, 3, padding_mode="reflect")), "only zero padding"),
        (lambda: ndconv.nn.ConvTranspose2d(2, 2, 3, padding=([0, 1], [1, 1])),
         "transposed layer's padding is symmetric"),
        (lambda: ndconv.nn.Conv2d(2, 2, 3, padding=([0, 1], [1, 1, 1])),
         r"padding hi must have one entry per spatial axis"),
        (lambda: ndconv.nn.Conv2d(2, 2, 3)(torch.randn(1, 4, 4, 4, 2)),
         r"Conv2d: input must have 4 dimensions"),
    ],
)
def test_invalid_layers(make, match):
    with pytest.raises(ValueError, match=match):
        make()


def test_flip_must_be_a_bool_on_the_cached_path_too():
    """A call cached with flip=True does not let flip=1 through (MLX refuses a non-bool flip)."""
    ndconv.conv_general(x4, w4, flip=True)
    with pytest.raises(ValueError, match="flip must be a bool, got 1"):
        ndconv.conv_general(x4, w4, flip=1)
