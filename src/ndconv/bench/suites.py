"""Benchmark suites: convolutions from real models, as JSON case lists.

``public`` is the GPU suite (ResNet-50, SD UNet/VAE, MobileNet, ConvNeXt, RepLKNet, ResNeXt,
Mamba, Whisper, video models, DCGAN/UNet decoders, DeepLab); ``cpu`` holds the same kinds of
layers scaled down to run on two CPU cores in about a minute; ``stems`` the first layers of
image and audio models (at most 4 input channels: ResNet, EfficientNet, ConvNeXt, ViT, SD's VAE
and UNet; wav2vec2, EnCodec, DAC). A user's own file has the same
schema: a list of objects with ``name, x, w, stride, padding_lo, padding_hi, kernel_dilation,
input_dilation, groups, flip, dtype, passes`` (and optionally ``model``), MLX's conventions.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch

from ..api import make_problem
from ..problem import PASSES, ConvProblem

SUITES = {name: Path(__file__).with_name(f"{name}.json") for name in ("public", "cpu", "stems", "depthwise")}
_DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32,
           "float64": torch.float64}
_FIELDS = ("name", "x", "w", "stride", "padding_lo", "padding_hi", "kernel_dilation",
           "input_dilation", "groups", "flip", "dtype", "passes")


@dataclass(frozen=True)
class BenchCase:
    name: str
    model: str
    spec: dict  # the JSON object

    @property
    def passes(self) -> tuple[str, ...]:
        return tuple(self.spec["passes"])

    def problem(self, device: str) -> ConvProblem:
        """The forward problem of this case on ``device``."""
        s = self.spec
        return make_problem(
            s["x"], s["w"], dtype=_DTYPES[s["dtype"]], device=device, stride=s["stride"],
            padding=(s["padding_lo"], s["padding_hi"]), kernel_dilation=s["kernel_dilation"],
            input_dilation=s["input_dilation"], groups=s["groups"], flip=s["flip"],
            op=f"case {self.name}",
        )


def load_suite(name_or_path: str) -> list[BenchCase]:
    """A built-in suite by name, or a JSON file of cases; ValueError on a malformed case."""
    path = SUITES.get(name_or_path) or Path(name_or_path)
    if not path.is_file():
        raise ValueError(f"suite {name_or_path!r} is neither {' nor '.join(SUITES)} nor a JSON file")
    try:
        specs = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise ValueError(f"suite file {path}: invalid JSON ({e})") from None
    if not isinstance(specs, list):
        raise ValueError(f"suite file {path}: expected a list of cases")
    cases = []
    for i, spec in enumerate(specs):
        missing = [f for f in _FIELDS if f not in spec] if isinstance(spec, dict) else list(_FIELDS)
        if missing:
            raise ValueError(f"suite file {path}: case {i} lacks {', '.join(missing)}")
        if spec["dtype"] not in _DTYPES:
            raise ValueError(f"suite file {path}: case {spec['name']}: dtype must be one of {list(_DTYPES)}")
        bad = [p for p in spec["passes"] if p not in PASSES]
        if bad or not spec["passes"]:
            raise ValueError(f"suite file {path}: case {spec['name']}: passes must be among {PASSES}")
        case = BenchCase(spec["name"], spec.get("model", ""), spec)
        case.problem("cpu")  # validates the arguments
        cases.append(case)
    return cases


def category(p: ConvProblem) -> tuple[str, ...]:
    """Summary categories of a forward problem: depthwise, grouped, transposed, 3-D, 1-D, or
    dense when none of those applies."""
    cats = []
    if p.groups > 1 and p.c_per_group == 1:
        cats.append("depthwise")
    elif p.groups > 1:
        cats.append("grouped")
    if any(d > 1 for d in p.input_dilation):
        cats.append("transposed")
    if p.ndim == 3:
        cats.append("3-D")
    if p.ndim == 1:
        cats.append("1-D")
    return tuple(cats) or ("dense",)
