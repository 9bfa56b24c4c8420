"""The oracle: the convolution formula, step by step, in float64 on any device.

Dilate the input (zeros between elements), pad or crop it, reverse the kernel when flipping,
slide windows with ``Tensor.unfold``, keep every ``kernel_dilation``-th element of each window,
and contract with ``einsum``. Written for obviousness, not speed; it shares no code with the
other algorithms.
"""

from __future__ import annotations

import torch

NAME = "reference"


def supports(p):
    return True, "direct float64 formula: every problem, any device (slow; the test oracle)"


def configs(p):
    return [None]


def default_config(p):
    return None


def run(p, x, w, out, config=None):
    """out[n, j, g, o] = sum_{t, c} X[n, j*stride + t*kdil - lo, g, c] * w'[g, o, t, c]."""
    D = p.ndim
    N, G, Cg = x.shape[0], x.shape[-2], x.shape[-1]
    xd = x.to(torch.float64)
    wd = w.to(torch.float64)

    dilated = xd.new_zeros((N, *p.dilated_in, G, Cg))
    dilated[(slice(None), *(slice(None, None, d) for d in p.input_dilation))] = xd

    padded_size = [di + lo + hi for di, lo, hi in zip(p.dilated_in, p.padding_lo, p.padding_hi)]
    padded = xd.new_zeros((N, *padded_size, G, Cg))
    src, dst = [slice(None)], [slice(None)]
    for di, lo, size in zip(p.dilated_in, p.padding_lo, padded_size):
        start = max(0, -lo)  # first kept element of the dilated input
        stop = min(di, size - lo)  # one past the last kept element
        stop = max(stop, start)
        src.append(slice(start, stop))
        dst.append(slice(start + lo, stop + lo))
    padded[tuple(dst)] = dilated[tuple(src)]

    if p.flip:
        wd = wd.flip(dims=tuple(range(2, 2 + D)))

    windows = padded
    for d in range(D):
        windows = windows.unfold(1 + d, p.span[d], p.stride[d])
    # windows: [N, *S_out, G, Cg, *span]; keep every kernel_dilation-th element
    windows = windows[(..., *(slice(None, None, kd) for kd in p.kernel_dilation))]

    j, t = "xyz"[:D], "uvw"[:D]
    result = torch.einsum(f"n{j}gc{t},go{t}c->n{j}go", windows, wd)
    out.copy_(result)
