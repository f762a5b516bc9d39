"""Vectorised pre-checks for the search: peak memory (analytic, the cost model's own terms) and a
lower bound on step time, for every row of a candidate array at once (numpy).

Memory (cost.estimate.stage_cost, term by term) for stage i with dense params D_i, expert params
E_i, embedding params B_i, n_i layers, micro-batch b:
    weights + grads + optimizer = D_i (w+g+k)(zero, dp·cp) + E_i (w+g+k)(zero, edp) [+ ZeRO-3 gather buffer]
    activations = b·a_i·inflight(pp, vpp, m, i) + b·x_i [+ b·max full-layer activations with full recompute]
where a_i is the stage's stored activation per sequence (`layer_activation_bytes` is linear in b).
Evaluated on stages 0, 1 and pp-1 (the peak for even splits: stage 0 holds the most micro-batches;
the last holds the logits); a lower bound on the true max over stages otherwise.

Time lower bound: with per-layer times c (from `stage_cost` on a one-layer stage, minus its p2p),
stage times t_i >= sum of its layers' c (+ logits/loss on the last stage), and the step
    T = m·t_max + (sum t - t_max)/vpp + exposed DP + optimizer
is non-decreasing in every t_i (m >= 1 >= 1/vpp), so plugging in the lower bounds, dropping the
exposed DP and p2p terms (>= 0) and keeping the optimizer step gives T_lb <= T. With the EP all-to-all overlap
(column a2a) an MoE layer's bound is its time per layer when every micro-batch runs paired (`_layer_time`).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from baige_plan.cost import collectives as C
from baige_plan.cost.compute import ChipRates
from baige_plan.cost.estimate import (
    DEEPSPEED_COLLECTIVES_PER_LAYER,
    ZERO3_COLLECTIVES_PER_LAYER,
    adam_bytes_per_param,
    engine_precision,
    first_stage_cost,
    stage_cost,
)
from baige_plan.cost.execution import EAGER
from baige_plan.cost.fp8 import QUANTIZED_COPY_BYTES
from baige_plan.cost.memory import (
    FP32_PRECISIONS,
    GIB,
    comm_groups,
    fp8_layer_weight_bytes,
    inflight_microbatches,
    layer_activation_bytes,
    loss_bytes_per_logit,
    reserve_bytes,
    state_bytes,
    weight_bytes,
)
from baige_plan.cost.params import layer_params_split
from baige_plan.search.space import COL
from baige_plan.specs import runtimes
from baige_plan.specs.calibration import COMMITTED
from baige_plan.specs.frozen import make
from baige_plan.specs.job import QUANTIZED_PRECISIONS, JobSpec
from baige_plan.specs.model import ModelSpec
from baige_plan.specs.strategy import ATTENTION, RECOMPUTE, StrategySpec, stage_layers
from baige_plan.specs.topology import GroupSpec

SAFETY = 1e-9   # relative slack for floating-point summation order
OVERLAP_BOUND_MICRO_BATCHES = 10**9   # enough that the combined 1F1B's unpaired warm-up share is negligible


def _cols(a: np.ndarray, *names: str) -> list[np.ndarray]:
    return [a[:, COL[n]] for n in names]


def _unique_rows(a: np.ndarray, names: tuple[str, ...], extra: np.ndarray | None = None
                 ) -> tuple[np.ndarray, np.ndarray]:
    """Distinct rows of the named columns (and `extra`), and each row's index into them. Columns are
    packed into one int64 key (mixed radix) so numpy's 1-D unique does the work."""
    cols = [a[:, COL[n]] for n in names] + ([extra] if extra is not None else [])
    key = np.zeros(len(a), dtype=np.int64)
    for c in cols:
        key = key * (int(c.max()) + 1) + c
    _, first, inv = np.unique(key, return_index=True, return_inverse=True)
    return np.column_stack(cols)[first], inv.reshape(-1)


def _stage_rows(pp: int) -> tuple[int, ...]:
    return tuple(sorted({0, min(1, pp - 1), pp - 1}))


def _split(model: ModelSpec, pp: int, first: int, last: int, account: int = 0) -> list[tuple[int, int]]:
    # an uneven count with no first/last or accounting is a runtime's balanced partition (space.py _split_family)
    s = StrategySpec(pp=pp, first_stage_layers=first or None, last_stage_layers=last or None,
                     account_for_embedding=bool(account & 1), account_for_loss=bool(account & 2),
                     balanced_partition=not (first or last or account) and model.layers % pp != 0)
    out, f = [], 0
    for n in stage_layers(s, model.layers):
        out.append((f, n))
        f += n
    return out


def _state_shards(a: np.ndarray, dp: np.ndarray, cp: np.ndarray) -> np.ndarray:
    """StrategySpec.state_shards per row: hybrid sharding's group where the row has one, else dp·cp."""
    shard = a[:, COL["shard"]].astype(np.float64)
    return np.where(shard > 0, shard, dp * cp)


def _distinct(col: np.ndarray) -> list[int]:
    """The distinct values of an integer-valued column, ascending (np.unique's, without the numpy.ma import its
    masked-array check costs the first time: 20-40 ms of a plan's start-up)."""
    v = np.sort(col)
    return [int(x) for x in v[np.concatenate(([True], v[1:] != v[:-1]))].tolist()] if v.size else []


def _by_zero(mem, precision: str, zero: np.ndarray, shards: np.ndarray) -> list[np.ndarray]:
    """cost/memory.py state_bytes per row (zero varies by row)."""
    out = [np.zeros(len(zero)) for _ in range(4)]
    for z in _distinct(zero):
        sel = zero == z
        for i, v in enumerate(state_bytes(mem, precision, z, shards)):
            out[i] = np.where(sel, v, out[i])
    return out


class Bounds:
    """Caches per-structure constants; `memory_gib(rows)` and `time_lb_s(rows)` are vectorised."""

    def __init__(self, model: ModelSpec, group: GroupSpec, job: JobSpec, runtime: str = runtimes.DEFAULT):
        self.model, self.group, self.job = model, group, job
        self.runtime = runtimes.get(runtime)
        self.knobs = runtimes.knobs(runtime)
        # the engine the group's chip runs the job's matmuls in under this runtime (issue 18: fp32 -> TF32 on
        # A100/H100 with Megatron's NGC stack), as estimate.stage_cost costs it, so the bound stays a bound
        self.rates = ChipRates.of(group.chip, engine_precision(group, job.precision, runtime))
        self.capacity_gib = group.chip.need("memory_gib")
        # a measured profile (specs/profile.py) may store fewer activation bytes or step the optimizer
        # faster than the analytical terms below: scale them by its smallest ratio so they stay bounds
        from baige_plan.cost.measured import profile_bound_factors
        self.act_lb, self.opt_lb = profile_bound_factors(model, group, job, self.knobs)
        # estimate.stage_cost's memo for this search (what the stages of one strategy share); the same numbers
        self.memo: dict = {}

    # -- per (tp, ep, etp, pp, first, last, account): params and layer counts of stages 0, 1, pp-1 --
    def _param_table(self, key: tuple[int, ...]) -> np.ndarray:
        tp, ep, etp, pp, first, last, account = key
        m = self.model
        emb = m.vocab * m.hidden / tp
        rows = []
        split = _split(m, pp, first, last, account)
        dl, el = layer_params_split(m, False)
        ml = layer_params_split(m, True) if m.moe else (0, 0)
        for i in _stage_rows(pp):
            f, n = split[i]
            nm = m.moe_layers_in(f, f + n) if m.moe else 0
            nd = n - nm
            e_p = 0.0
            if i == 0:
                e_p += emb
            if i == pp - 1 and not (m.tie_embeddings and pp == 1):
                e_p += emb
            dense = nd * dl / tp + nm * ml[0] / tp + e_p
            expert = (nd * el + nm * ml[1]) / (ep * etp)
            rows.append((i, n, nd, nm, dense, expert, e_p))
        while len(rows) < 3:
            rows.append(rows[-1])
        return np.array(rows, dtype=np.float64)

    def _params(self, a: np.ndarray) -> np.ndarray:
        """(N, 3 stages, 7) table: stage index, layers, dense layers, moe layers, dense/expert/emb params."""
        uniq, inv = _unique_rows(a, ("tp", "ep", "etp", "pp", "first", "last", "account"))
        tab = np.stack([self._param_table(tuple(int(x) for x in k)) for k in uniq])
        return tab[inv]

    # -- per (tp, cp, sp, recompute, attention): stored activation bytes of one sequence ---------
    def _act(self, a: np.ndarray) -> np.ndarray:
        """(N, 3): dense layer, moe layer, max full-layer (full recompute only) bytes per sequence."""
        m, seq, ab = self.model, self.job.seq_len, self.rates.act_bytes
        uniq, inv = _unique_rows(a, ("tp", "cp", "sp", "recompute", "attention"))
        out = []
        for tp, cp, sp, rec, att in uniq.tolist():
            std = ATTENTION[att] == "standard"
            r = RECOMPUTE[rec]
            sel = self.runtime.memory.selective
            f8 = self.rates.dtype in QUANTIZED_PRECISIONS and self.runtime.memory.fp8_gemm_inputs
            qc = QUANTIZED_COPY_BYTES.get(self.rates.dtype, 1.0)
            d = layer_activation_bytes(m, seq, 1, tp, cp, bool(sp), r, std, False, ab, selective=sel, fp8_gemm_inputs=f8,
                                       quant_copy_bytes=qc)
            mo = layer_activation_bytes(m, seq, 1, tp, cp, bool(sp), r, std, True, ab, selective=sel,
                                        fp8_gemm_inputs=f8, quant_copy_bytes=qc) if m.moe else 0.0
            full = 0.0
            if r == "full" or (r == "selective" and sel == "op_sac"):
                full = layer_activation_bytes(m, seq, 1, tp, cp, bool(sp), "none", std, False, ab)
                if m.moe:
                    full = (full, layer_activation_bytes(m, seq, 1, tp, cp, bool(sp), "none", std, True, ab))
            out.append((d, mo, full[0] if isinstance(full, tuple) else full,
                        full[1] if isinstance(full, tuple) else full))
        return np.array(out, dtype=np.float64).reshape(-1, 4)[inv]

    def memory_gib(self, a: np.ndarray) -> np.ndarray:
        """Peak memory per device (GiB) of every row, max over stages 0, 1 and pp-1, with the runtime's
        memory semantics (specs/runtime.py MemorySemantics) as estimate.stage_cost applies them."""
        if len(a) == 0:
            return np.zeros(0)
        m, job, ab = self.model, self.job, self.rates.act_bytes
        mem = self.runtime.memory
        tp, pp, dp, cp, ep, etp, zero, mb, vpp, sp, rec = (x.astype(np.float64) for x in _cols(
            a, "tp", "pp", "dp", "cp", "ep", "etp", "zero", "micro_batch", "vpp", "sp", "recompute"))
        P = self._params(a)
        A = self._act(a)
        micro = job.global_batch / (dp * mb)
        dpd = _state_shards(a, dp, cp)
        edp = tp * cp * dp / (ep * etp)
        eager = self.runtime.execution == "eager"
        fp32 = job.precision in FP32_PRECISIONS
        # model-state bytes per parameter as estimate.stage_cost counts them (cost/memory.py state_bytes)
        # FSDP SHARD_GRAD_OP (zero 2 where RuntimeSpec.fsdp_zero2): states sharded as zero 3, the stage's 16-bit
        # parameters resident from forward to backward (estimate.stage_cost)
        sgo = (zero == 2) & bool(self.runtime.fsdp_zero2)
        zst = np.where(sgo, 3.0, zero)
        w, g, k, st = _by_zero(mem, job.precision, zst, dpd)
        we, ge, ke, ste = _by_zero(mem, job.precision, zst, edp)
        pb = 4.0 if fp32 else float(mem.zero3_param_bytes)
        rb = 4.0 if fp32 else float(mem.zero3_reduce_bytes)
        fsdp = (zero >= 3) | bool(mem.fsdp_always)
        # stage-resident unsharded params + accumulated grads (pipelining + FSDP2): never below the gathered units
        step_pp = [v for v in _distinct(pp) if v > 1 and self.runtime.zero3_gather(v) == "step"]
        step_gather = fsdp & np.isin(pp, step_pp)
        tokens = mb * job.seq_len / cp
        keep_working = (rec == RECOMPUTE.index("full")) | (
            (rec == RECOMPUTE.index("selective")) & (mem.selective == "op_sac"))
        per_logit = np.zeros(len(a))
        for t in _distinct(tp):
            per_logit = np.where(tp == t, loss_bytes_per_logit(mem.loss, self.runtime.execution, t, ab,
                                                               EAGER.extra_loss_activation_bytes_per_logit), per_logit)
        groups = comm_groups(tp, cp, dp, pp, ep, etp)
        per_layer = DEEPSPEED_COLLECTIVES_PER_LAYER if self.runtime.zero3_impl == "deepspeed" else \
            ZERO3_COLLECTIVES_PER_LAYER
        best = np.zeros(len(a))
        for j in range(3):
            idx, n, nd, nm, dense, expert, emb = (P[:, j, c] for c in range(7))
            weights = dense * w + expert * we
            grads = dense * g + expert * ge
            optim = dense * k + expert * ke
            step_copy = dense * st + expert * ste
            layer_full = np.maximum(dense + expert - emb, 0.0) / np.maximum(n, 1)
            unit = np.maximum(layer_full / per_layer, np.where(emb > 0, m.vocab * m.hidden / tp, 0.0))
            ahead = unit if mem.zero3_prefetch_params is None else np.minimum(unit, mem.zero3_prefetch_params)
            if job.precision in QUANTIZED_PRECISIONS:
                # TE's fp8 (NVFP4) weight copies, or fp8 primary weights where the runtime keeps them below ZeRO-3
                # (RuntimeSpec.fp8_param_gather; cost/memory.py fp8_layer_weight_bytes): the whole stage's, or only
                # the gathered units' under FSDP (estimate.stage_cost)
                whole = ~fsdp | sgo | step_gather
                per = np.where(zero < 3, fp8_layer_weight_bytes(mem, bool(self.runtime.fp8_param_gather),
                                                                precision=job.precision),
                               fp8_layer_weight_bytes(mem, False, precision=job.precision))
                weights = weights + per * np.where(
                    whole, np.maximum(dense + expert - emb, 0.0), np.minimum(unit + ahead, 2 * layer_full))
            weights += np.where(sgo, pb * (dense + expert), np.where(
                step_gather, pb * (dense + expert), np.where(fsdp, pb * (unit + ahead), 0.0)))
            grads += np.where(sgo, (pb + rb) * layer_full, np.where(
                step_gather, (4.0 if fp32 else mem.pipeline_grad_bytes) * (dense + expert),
                np.where(fsdp, (pb + rb) * unit, 0.0)))
            inflight = inflight_microbatches(pp, vpp, micro, idx)
            act = mb * (nd * A[:, 0] + nm * A[:, 1]) * inflight
            act += np.where(keep_working, mb * np.maximum(np.where(nd > 0, A[:, 2], 0), np.where(nm > 0, A[:, 3], 0)),
                            0)
            act += np.where(idx == 0, tokens * m.hidden * ab / np.where(sp > 0, tp, 1), 0.0)
            act += np.where(idx == pp - 1, tokens * m.vocab / tp * per_logit, 0.0)
            act = act * self.act_lb
            # eager without DDP buckets holds the larger of grads and activations (estimate.stage_cost)
            if eager:
                grads, act = np.where(grads > act, grads, 0.0), np.where(grads > act, 0.0, act)
            optim = optim + np.maximum(0.0, step_copy - act)
            alloc = weights + grads + optim + act
            best = np.maximum(best, (alloc + reserve_bytes(mem, alloc, groups)) / GIB)
        return best

    # -- per (tp, cp, mb, sp, ep, etp, attention, recompute'): per-layer time --------------------
    def _layer_time(self, key: tuple[int, ...]) -> tuple[float, float, float, float]:
        """(dense layer, MoE layer, last-stage tail, MoE layer with Megatron-core's EP all-to-all overlap) seconds
        per micro-batch, lower bounds. With the overlap (cost/estimate.py stage_cost, cost/moe.py
        a2a_overlap_pair_s) a stage's n MoE layers take pair(n) + u (alone - pair(n)) per micro-batch, u >= 0 the
        share run unpaired, and the host-bound terms are added unchanged; pair(n)/n falls with n, so the model's
        L MoE layers paired (u -> 0) give a per-layer bound for any stage."""
        tp, cp, mb, sp, ep, etp, att, rec = key
        m = self.model
        s = make(StrategySpec, tp=tp, pp=3, dp=ep * etp, cp=cp, ep=ep, etp=etp, micro_batch=mb,
                 recompute=RECOMPUTE[rec], sequence_parallel=bool(sp), attention=ATTENTION[att], **self.knobs)
        # the cheapest layer of each kind: a sliding-window layer where the model has them (fewer keys, never slower)
        def pick(moe: bool) -> int | None:
            kind = (i for i in range(m.layers) if m.is_moe_layer(i) == moe)
            if m.sliding_window is None:
                return next(kind, None)
            kind = list(kind)
            return next((i for i in kind if m.is_window_layer(i)), kind[0] if kind else None)
        dense_i, moe_i = pick(False), pick(True)
        c = {}
        for kind, li in (("d", dense_i), ("m", moe_i)):
            if li is not None:
                st = stage_cost(m, self.group, self.job, s, 1, li, 1, 1, memo=self.memo)
                c[kind] = st.time_s - st.pp_s
        li = m.layers - 1
        st = stage_cost(m, self.group, self.job, s, 2, li, 1, 1, memo=self.memo)
        rep = moe_i if m.is_moe_layer(li) else dense_i
        own = c["m" if m.is_moe_layer(li) else "d"]
        if m.is_window_layer(li) != m.is_window_layer(rep):   # the last layer is of another kind: its own time
            st1 = stage_cost(m, self.group, self.job, s, 1, li, 1, 1, memo=self.memo)
            own = st1.time_s - st1.pp_s
        tail = max(0.0, st.time_s - st.pp_s - own)
        cm_ov = c.get("m", 0.0)
        if moe_i is not None and ep > 1 and RECOMPUTE[rec] != "full":
            # every layer of the model in one middle stage of an interleaved pipeline, with so many micro-batches
            # that none runs unpaired: the overlapped MoE layers' time per layer there, pair(L)/L, is at most
            # pair(n)/n for any n <= L layers (non-increasing in n: tests/test_moe_a2a_overlap.py). With sliding
            # windows on some layers, every layer windowed (the cheaper kind, whose terms stage_cost pairs: its
            # _layer_kinds puts the windowed MoE kind last), so a stage of either kind costs no less
            mw = replace(m, full_attention_every=None) if m.sliding_window is not None else m
            s_ov = replace(s, vpp=2, moe_a2a_overlap=True)
            st = stage_cost(mw, self.group, self.job, s_ov, 1, 0, m.layers, OVERLAP_BOUND_MICRO_BATCHES,
                            memo=self.memo)
            n_moe = m.moe_layer_count
            cm_ov = min(cm_ov, max(0.0, (st.time_s - st.pp_s - (m.layers - n_moe) * c.get("d", 0.0)) / n_moe))
        return c.get("d", 0.0), c.get("m", 0.0), tail, cm_ov

    def time_lb_s(self, a: np.ndarray) -> np.ndarray:
        return self.time_lb_parts(a)[0]

    def time_lb_parts(self, a: np.ndarray) -> tuple[np.ndarray, ...]:
        """(lower bound of the step, and per row what `dp_lb_s` needs: micro-batches, the largest stage-time
        bound of stages 0, 1 and pp-1, the sum of every stage's bound, stage 0's bound, the optimizer step's
        bound)."""
        if len(a) == 0:
            return (np.zeros(0),) * 6
        m, job = self.model, self.job
        rec = a[:, COL["recompute"]].copy()
        att = a[:, COL["attention"]]
        # selective recomputation of fused (flash) attention costs nothing extra: share the "none" times
        cheap = (rec == RECOMPUTE.index("selective")) & (att == ATTENTION.index("flash"))
        if self.group.profile is None:   # a profile may time selective and none differently
            rec[cheap] = RECOMPUTE.index("none")
        uniq, inv = _unique_rows(a, ("tp", "cp", "micro_batch", "sp", "ep", "etp", "attention"), rec)
        T = np.array([self._layer_time(tuple(int(x) for x in k)) for k in uniq]).reshape(-1, 4)[inv.reshape(-1)]
        cd, tail = T[:, 0], T[:, 2]
        cm = np.where(a[:, COL["a2a"]] > 0, T[:, 3], T[:, 1])
        tp, pp, dp, cp, ep, etp, zero, mb, vpp = (x.astype(np.float64) for x in _cols(
            a, "tp", "pp", "dp", "cp", "ep", "etp", "zero", "micro_batch", "vpp"))
        P = self._params(a)
        micro = job.global_batch / (dp * mb)
        n_moe = m.moe_layer_count if m.moe else 0
        total = (m.layers - n_moe) * cd + n_moe * cm + tail
        t_max = np.zeros(len(a))
        opt = np.zeros(len(a))
        dpd = np.where(zero >= 1, dp * cp, 1.0)
        edp = np.where(zero >= 1, tp * cp * dp / (ep * etp), 1.0)
        t0 = np.zeros(len(a))
        for j in range(3):
            idx, n, nd, nm, dense, expert, emb = (P[:, j, c] for c in range(7))
            t = nd * cd + nm * cm + np.where(idx == pp - 1, tail, 0.0)
            if j == 0:
                t0 = t
            t_max = np.maximum(t_max, t)
            opt = np.maximum(opt, (dense / dpd + expert / edp) * adam_bytes_per_param(job.precision)
                             / self.rates.hbm_Bps
                             * self.opt_lb)
        pipe = micro * t_max + (total - t_max) / vpp
        # ZeRO-3 gathers per micro-batch unless the runtime gathers once per step with pipelining
        per_mb = {x: self.runtime.zero3_gather(x) == "micro_batch" for x in _distinct(pp)}
        z3_mb = np.vectorize(per_mb.__getitem__, otypes=[bool])(pp.astype(np.int64))
        # hybrid sharding gathers over its shard group only (the replicas' all-reduce is left out of the bound)
        z3_n = _state_shards(a, dp, cp)
        lb = (pipe + opt + np.where(z3_mb, self._zero3_lb(P, zero, z3_n, micro), 0.0)) * (1 - SAFETY)
        return lb, micro, t_max, total, t0, opt

    def dp_lb_s(self, s: StrategySpec, t_max_lb: float, total_lb: float, t0_lb: float, opt_lb: float) -> float:
        """A lower bound of `estimate`'s step for strategy s that counts the data-parallel sync: stage 0 costed
        exactly (estimate.stage_cost, and estimate.dp_traffic's exposed time, with no later stage's lead to hide
        under: it finishes last) and the other stages by their per-layer bounds (`time_lb_parts`). Since
            T = m·t_max + (Σt - t_max)/vpp + max_i exposed_i + optimizer
        is non-decreasing in every t_i, t_0 exact and t_i >= bound_i (i > 0), t_max >= max(t_0, the bounds of
        stages 1 and pp-1), Σt >= t_0 + (Σ bounds - bound_0) and max_i exposed_i >= exposed_0 give T >= this. Costs
        one stage, where `estimate` costs pp of them."""
        job = self.job
        m = job.global_batch // (s.dp * s.micro_batch)
        # kept in the memo, where the row's estimate (when it is not skipped) reads both back
        st0, sync0 = first_stage_cost(self.model, self.group, job, s, self.memo)
        exposed0 = sync0.exposed_s
        t0 = st0.time_s
        t_max = max(t0, t_max_lb)
        pipe = m * t_max + (t0 + (total_lb - t0_lb) - t_max) / s.vpp
        return (pipe + exposed0 + opt_lb) * (1 - SAFETY)

    def _zero3_lb(self, P: np.ndarray, zero: np.ndarray, n: np.ndarray, micro: np.ndarray) -> np.ndarray:
        """ZeRO-3 exposed communication >= (1 - the runtime's ZeRO-3 overlap) x its total: per micro-batch, three
        all-gathers of the stage's 16-bit weights over dp·cp ranks, at no more than the fastest link
        busbw (scale-up or NIC) and without latency."""
        g, chip = self.group, self.group.chip
        su = g.scaleup_GBps_eff * (chip.scaleup_efficiency if chip.scaleup_efficiency is not None
                                   else C.DEFAULT_SCALEUP_EFF)
        nic = g.nic_GBps * (chip.nic_efficiency if chip.nic_efficiency is not None else C.DEFAULT_NIC_EFF)
        bw = max(su, nic) * 1e9
        size = np.max(P[:, :, 4] + P[:, :, 5], axis=1) * weight_bytes(self.job.precision)
        tot = micro * 3 * size * (n - 1) / n / bw
        overlap = COMMITTED.zero3_overlap_for(self.runtime.zero3_impl)   # what estimate.dp_traffic uses
        return np.where(zero >= 3, (1 - overlap) * tot, 0.0)
