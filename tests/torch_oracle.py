"""conv_general composed from plain PyTorch ops (crop, zero insertion, pad, flip, dense conv):
an implementation independent of ndconv, differentiable, used to anchor ndconv's reference and
its gradients."""

import torch
import torch.nn.functional as F

_CONV = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}


def dense(t):
    """A fresh contiguous copy (PyTorch's CPU conv mishandles odd strides on size-1 axes)."""
    return t.clone(memory_format=torch.contiguous_format)


def torch_conv_general(x, w, stride, lo, hi, kernel_dilation, input_dilation, groups, flip):
    """MLX conv_general semantics; per-axis tuples; lo/hi are MLX pads (negative = crop)."""
    D = x.dim() - 2
    # crop the undilated input where pads are negative
    index = [slice(None)]
    for d in range(D):
        s = x.shape[1 + d]
        index.append(slice(max(0, -lo[d]), s - max(0, -hi[d])))
    x = x[tuple(index) + (slice(None),)]
    # insert input_dilation - 1 zeros between elements
    if any(i > 1 for i in input_dilation):
        shape = ([x.shape[0]] + [(s - 1) * i + 1 for s, i in zip(x.shape[1:-1], input_dilation)]
                 + [x.shape[-1]])
        z = x.new_zeros(shape)
        z[(slice(None), *(slice(None, None, i) for i in input_dilation), slice(None))] = x
        x = z
    x = dense(x.movedim(-1, 1))  # NC*S
    pads = []
    for d in reversed(range(D)):
        pads += [max(0, lo[d]), max(0, hi[d])]
    x = F.pad(x, pads)
    w = w.movedim(-1, 1)  # O, C/g, *K
    if flip:
        w = w.flip(tuple(range(2, 2 + D)))
    y = _CONV[D](x, dense(w), stride=stride, dilation=kernel_dilation, groups=groups)
    return dense(y.movedim(1, -1))
