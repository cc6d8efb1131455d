"""The zoo's ONNX graphs run by PyTorch (cuDNN on a GPU): the baseline of bench/kernels.py.

A direct interpreter of the dozen operators the zoo uses (model_zoo/builder.py), with the very
same weights, so that cw and PyTorch compute the same function (BatchNormalization stays a
separate cuDNN call, as in an eval-mode torchvision model). `capture_cuda_graph` replays the whole network as one CUDA graph (the issue's "PyTorch with
cuDNN and a CUDA graph").
"""

from __future__ import annotations

import onnx
from onnx import numpy_helper


def _attrs(node) -> dict:
    return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}


def _pads(attrs, ndim=2):
    pads = list(attrs.get("pads", [0] * 2 * ndim))
    begin, end = pads[:ndim], pads[ndim:]
    return begin, end


class TorchOnnx:
    def __init__(self, path, device: str = "cuda", dtype=None):
        import torch

        self.torch = torch
        model = onnx.load(str(path))
        self.device = torch.device(device)
        self.dtype = dtype or torch.float32
        self.weights = {t.name: torch.from_numpy(numpy_helper.to_array(t).copy()).to(self.device)
                        for t in model.graph.initializer}
        for name, w in self.weights.items():
            if w.is_floating_point():
                self.weights[name] = w.to(self.dtype)
        self.nodes = list(model.graph.node)
        self.input_name = model.graph.input[0].name
        self.output_names = [o.name for o in model.graph.output]

    def __call__(self, x):
        import torch.nn.functional as F

        torch = self.torch
        env = dict(self.weights)
        env[self.input_name] = x
        for node in self.nodes:
            a = _attrs(node)
            ins = [env[i] if i else None for i in node.input]
            op = node.op_type
            if op == "Conv":
                (pt, pl), (pb, pr) = _pads(a)
                inp = ins[0]
                if (pt, pl) != (pb, pr):
                    inp = F.pad(inp, (pl, pr, pt, pb))
                    pt = pl = 0
                y = F.conv2d(inp, ins[1], ins[2] if len(ins) > 2 else None,
                             stride=tuple(a.get("strides", [1, 1])), padding=(pt, pl),
                             dilation=tuple(a.get("dilations", [1, 1])), groups=a.get("group", 1))
            elif op == "BatchNormalization":
                y = F.batch_norm(ins[0], ins[3], ins[4], ins[1], ins[2], training=False,
                                 eps=a.get("epsilon", 1e-5))
            elif op == "Relu":
                y = F.relu(ins[0])
            elif op == "Clip":
                lo = ins[1] if len(ins) > 1 and ins[1] is not None else a.get("min")
                hi = ins[2] if len(ins) > 2 and ins[2] is not None else a.get("max")
                y = torch.clamp(ins[0], float(lo), float(hi))
            elif op == "Add":
                y = ins[0] + ins[1]
            elif op == "MaxPool" or op == "AveragePool":
                (pt, pl), (pb, pr) = _pads(a)
                inp = ins[0]
                if (pt, pl) != (pb, pr):
                    inp = F.pad(inp, (pl, pr, pt, pb),
                                value=float("-inf") if op == "MaxPool" else 0.0)
                    pt = pl = 0
                kw = dict(kernel_size=tuple(a["kernel_shape"]),
                          stride=tuple(a.get("strides", [1, 1])), padding=(pt, pl),
                          ceil_mode=bool(a.get("ceil_mode", 0)))
                if op == "MaxPool":
                    y = F.max_pool2d(inp, **kw)
                else:
                    y = F.avg_pool2d(inp, count_include_pad=bool(a.get("count_include_pad", 0)),
                                     **kw)
            elif op == "GlobalAveragePool":
                y = ins[0].mean(dim=(2, 3), keepdim=True)
            elif op == "Flatten":
                y = torch.flatten(ins[0], a.get("axis", 1))
            elif op == "Gemm":
                w = ins[1].t() if a.get("transB", 0) else ins[1]
                y = torch.addmm(ins[2], ins[0], w, alpha=a.get("alpha", 1.0),
                                beta=a.get("beta", 1.0))
            elif op == "Concat":
                y = torch.cat(ins, dim=a["axis"])
            elif op == "Identity":
                y = ins[0]
            else:
                raise NotImplementedError(f"bench/torch_onnx.py: operator {op}")
            env[node.output[0]] = y
        outs = [env[n] for n in self.output_names]
        return outs[0] if len(outs) == 1 else outs


def capture_cuda_graph(model: TorchOnnx, x):
    """A CUDA graph of the whole forward pass on static input `x`; returns (replay, output)."""
    torch = model.torch
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream), torch.no_grad():
        for _ in range(3):  # cuDNN picks its algorithms outside the capture
            model(x)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph), torch.no_grad():
        y = model(x)
    return graph.replay, y
