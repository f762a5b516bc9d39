"""The host-sync rule of cost/moe.py `host_bound_moe_layer_s` against the synthetic layers of host_launch.py (no GPU).

Each of the 24 layers issues three phases -- k1 small GEMMs (host-heavy), one big GEMM (device-heavy), k2 tiny
kernels -- with or without a `.tolist()` read-back at its end. The host time of each phase is measured with the
device idle; the big GEMM's device time by CUDA events; the device time of one small GEMM (d1) and of one tiny
kernel (d3) are read off the two device-bound unsynced steps (big_n 8192, k1 = 48 and 144):
    step / 24 = k1 d1 + D_big + k2 d3.
Prints measured steps against: the sync rule (max over phases of host before + max(host of the phase + device
after, device from it)), free run max(H, D), and H + D.

    python benchmarks/real/host_launch_compare.py benchmarks/real/host_launch_h200.raw.json
"""

from __future__ import annotations

import json
import sys


def main(path: str) -> int:
    rows = json.load(open(path))["sync"]
    dev = {(r["big_n"], r["k1"]): r for r in rows}
    a, b = dev[(8192, 48)], dev[(8192, 144)]
    s48 = a["no_sync_step_s"] / 24 - a["phases"][1]["device_s"]
    s144 = b["no_sync_step_s"] / 24 - b["phases"][1]["device_s"]
    d1 = (s144 - s48) / (144 - 48)
    d3 = (s48 - 48 * d1) / a["k2"]
    print(f"device per small GEMM {d1 * 1e6:.2f} us, per tiny kernel {d3 * 1e6:.2f} us")
    print(f"{'big_n':>5} {'k1':>4} | {'sync':>7} {'rule':>7} {'err':>6} | {'nosync':>7} {'max':>7} | {'H+D':>7}")
    for r in rows:
        h = [p["host_s"] for p in r["phases"]]
        d = [r["k1"] * d1, r["phases"][1]["device_s"], r["k2"] * d3]
        rule = 24 * max(sum(h[:i]) + max(h[i] + sum(d[i + 1:]), sum(d[i:])) for i in range(3))
        free = 24 * max(sum(h), sum(d))
        print(f"{r['big_n']:>5} {r['k1']:>4} | {r['sync_step_s'] * 1e3:7.1f} {rule * 1e3:7.1f} "
              f"{rule / r['sync_step_s'] - 1:+6.1%} | {r['no_sync_step_s'] * 1e3:7.1f} {free * 1e3:7.1f} | "
              f"{24 * (sum(h) + sum(d)) * 1e3:7.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "benchmarks/real/host_launch_h200.raw.json"))
