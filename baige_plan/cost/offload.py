"""Activation offloading to host memory, as Megatron-core runs it (`cpu_offloading`, `cpu_offloading_num_layers`;
Megatron-Bridge `cpu_offloading_num_layers`, NeMo `activation_offload_layers`;
megatron/core/transformer/transformer_block.py get_cpu_offload_context, megatron/core/extensions/
transformer_engine.py -> Transformer Engine cpu_offload.py, core 0.19).

The activations a layer saves for its backward are copied to host memory on a side stream once the layer's forward
is done and copied back ahead of its backward (one layer prefetched), for N of a stage's layers; the last layers,
whose backward comes first, stay on the device. Per micro-batch and stage, with a = one layer's saved activations,
L the stage's layers, N = min(offloaded, L - 1) and b the host link per direction (ChipSpec.host_link_GBps: NVLink-C2C
on Grace superchips, else pcie_GBps):
    device activations:  (L - N) a per micro-batch in flight, + a (the layer in transfer)
    forward exposed:     max(0, N a / b - (L - 1)/L x the stage's forward)    (the copies run beside later layers)
    backward exposed:    max(0, N a / b - (L - 1)/L x the stage's backward)   (prefetch beside earlier layers)
The copies' HBM traffic (N a each way, at the host link's rate) is left out: a fraction b / HBM of the transfer time.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Offload:
    layers: int              # N: the stage's layers whose activations go to host memory
    keep_fraction: float     # (L - N) / L: of the per-micro-batch stage activations, what stays on the device
    buffer_bytes: float      # one layer's activations in transfer
    exposed_fwd_s: float
    exposed_bwd_s: float


def activation_offload(requested: int, n_layers: int, act_bytes_per_mb: float, fwd_s: float, bwd_s: float,
                       host_GBps: float) -> Offload:
    """Offloading of `requested` layers on a stage of `n_layers` (module docstring); `act_bytes_per_mb`: the stage's
    saved activations per micro-batch; `fwd_s` / `bwd_s`: its forward / backward per micro-batch."""
    n = max(0, min(requested, n_layers - 1))
    if n == 0 or n_layers <= 0:
        return Offload(0, 1.0, 0.0, 0.0, 0.0)
    a = act_bytes_per_mb / n_layers
    t = n * a / (host_GBps * 1e9)
    hide = (n_layers - 1) / n_layers
    return Offload(n, (n_layers - n) / n_layers, a, max(0.0, t - hide * fwd_s), max(0.0, t - hide * bwd_s))
