"""The vPod configurations a simulator can run and their step tables (npu paper §3.3-§3.4, §4).

:class:`ConfigCatalog` holds, per (phase, sequence-length bucket), the DSE's candidates and per-version
fail-overs (and, with ``fit_at = "operating"``, the operating-point picks of :mod:`~servegym.envs.npu.sim.selection`),
and the scoring model's step latency, throughput and power per (configuration, bucket, batch level), so the
simulator's inner loop is array lookups.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from servegym.envs.npu.sim.catalog import CHIPS, VERSIONS, model
from servegym.envs.npu.sim.config import ENGINE_START_S, LEVELS, LOAD_GBPS_PER_CHIP, NB, ClusterConfig
from servegym.envs.npu.sim.dse import SEQ_BUCKETS, BestFit, BestFitTable
from servegym.envs.npu.sim.roofline import PHASES, RooflineParams, evaluate, space_for, weight_bytes_per_chip
from servegym.envs.npu.sim.table_cache import cached_run_dse, flush

from servegym.errors import ConfigError


@dataclass(frozen=True)
class VPodConfig:
    """A vPod configuration the simulator can run: a DSE entry (allocation + max batch) of one phase."""

    id: int
    phase: str
    entry: BestFit

    @property
    def version(self) -> str:
        return self.entry.version

    @property
    def chips(self) -> int:
        return self.entry.chips

    @property
    def max_batch(self) -> int:
        return self.entry.batch

    @property
    def label(self) -> str:
        return f"{self.entry.label}_b{self.entry.batch}"



class ConfigCatalog:
    """The configurations a simulator can run (per bucket: the DSE's candidates and per-version fail-overs)
    and their roofline step tables per (configuration, bucket, batch level). Build once per (model,
    objective, SLO factor, versions, candidates) and share between simulators (a few seconds to build)."""

    @staticmethod
    def key_of(c: ClusterConfig) -> tuple:
        pv = c.phase_versions or {}
        return (c.model, c.objective, float(c.slo_factor), tuple(c.versions), int(c.n_candidates),
                tuple((ph, tuple(pv[ph])) for ph in PHASES if ph in pv), c.step_models, c.fit_at,
                float(c.serving_efficiency), c.kv_form)

    def __init__(self, config: ClusterConfig, table: BestFitTable | None = None,
                 scoring_table: BestFitTable | None = None) -> None:
        """``table``: the selection model's best-fit table (the configurations policies choose from);
        ``scoring_table``: the scoring model's (its SLO is the one requests are judged by, and its best fits
        are Ideal's). Either is built when not given; pass both from another catalog of the same model,
        objective, versions and ``step_models`` to share them."""
        self.key = self.key_of(config)
        self.config = config
        self.model = model(config.model)
        sel, sco = config.step_params()
        self.selection_params, self.scoring_params = sel, sco
        kw = dict(objective=config.objective, slo_factor=config.slo_factor, versions=config.versions)
        for name, t, want in (("table", table, sel), ("scoring_table", scoring_table, sco)):
            if t is not None and t.space.params != want:
                raise ConfigError(f"{name} was built with other step-model parameters than step_models = "
                                  f"{config.step_models!r} needs")
        # the SLO is set on the scoring model (§2.4 sets it on the production simulator); the selection
        # model chooses against it with its own latency estimates
        # the tables come from the disk cache when built before (servegym.envs.npu.sim.table_cache)
        self.scoring_table = scoring_table if scoring_table is not None else cached_run_dse(config.model, params=sco, **kw)
        if table is None:
            table = (self.scoring_table if sel == sco else
                     cached_run_dse(config.model, params=sel, slo_s=self.scoring_table.slo_s, test_params=sco, **kw))
        self.table = table
        for t in (self.table, self.scoring_table):
            if t.objective != config.objective:
                raise ConfigError(f"table objective {t.objective!r} != config objective {config.objective!r}")
        self.edges = self.table.buckets
        if self.edges.size != NB or not np.array_equal(self.edges, SEQ_BUCKETS):
            raise ConfigError("the simulator needs the DSE's default 48 sequence-length buckets")
        before = set(self.__dict__)
        self._build_configs()
        flush(self.table, self.scoring_table)  # store them with the Pareto fronts _build_configs computed
        self._build_tables()
        self.fields = {k: v for k, v in self.__dict__.items()
                       if k not in before or k in ("table", "scoring_table", "edges", "kv_bytes_tok")}

    def _build_configs(self) -> None:
        seen: dict[tuple[str, int, int], int] = {}
        self.configs: list[VPodConfig] = []
        self.cand: dict[tuple[str, int], list[int]] = {}
        self.failover: dict[tuple[str, int], list[int]] = {}
        # per bucket: the best fit the cluster can run (the table's, or among the phase's versions)
        self.best_fit: dict[tuple[str, int], BestFit] = {}
        pv = self.config.phase_versions or {}

        def add(e: BestFit, phase: str) -> int:
            key = (phase, e.alloc_index, e.batch)
            if key not in seen:
                seen[key] = len(self.configs)
                self.configs.append(VPodConfig(len(self.configs), phase, e))
            return seen[key]

        # per bucket: the scoring model's best fit the cluster can run (Ideal's, §5.1)
        self.ideal_fit: dict[tuple[str, int], BestFit] = {}
        for ph in self.table.phases:
            vs = tuple(pv[ph]) if ph in pv else None  # None: unrestricted, the table as explored
            for s in self.edges.tolist():
                best = self.table.lookup(ph, s) if vs is None else self.table.best_of(ph, s, vs)
                if best is not None:
                    self.best_fit[(ph, s)] = best
                ideal = (self.scoring_table.lookup(ph, s) if vs is None
                         else self.scoring_table.best_of(ph, s, vs))
                if ideal is not None:
                    self.ideal_fit[(ph, s)] = ideal
                # k = 1 needs no Pareto front (the front is the slow part of building a catalog)
                picks = ([best] if self.config.n_candidates == 1 and best is not None
                         else self.table.candidates(ph, s, self.config.n_candidates, versions=vs))
                cands = [add(e, ph) for e in picks]
                fos = [self.table.lookup(ph, s, v) for v in (VERSIONS if vs is None else vs)]
                fo = sorted((e for e in fos if e is not None),
                            key=lambda e: (not e.meets_slo, e.energy_j_per_token if self.config.objective == "energy"
                                           else e.usd_per_token))
                self.cand[(ph, s)] = cands
                self.failover[(ph, s)] = [add(e, ph) for e in fo]
        # per bucket and demand level: the operating-point pick (None: fall back to the best fit)
        self.op_cfg: dict[tuple[str, int], np.ndarray] = {}
        if self.config.fit_at == "operating":
            from servegym.envs.npu.sim.selection import operating_fits

            sel, sco = self.selection_params, self.scoring_params
            op_params = (RooflineParams.selection_op(collectives=sco.collectives,
                                                     ici_step_latency_s=sco.ici_step_latency_s,
                                                     collective_launch_s=sco.collective_launch_s,
                                                     kv_form=sco.kv_form)
                         if sel.is_selection else sel)
            fits = operating_fits(self.model, self.config.objective, self.scoring_table.slo_s, self.edges.tolist(),
                                  self.config.versions, self.config.phase_versions, op_params, sco)
            tv = self.table.space.vpods
            for key, picks in fits.items():
                for e in picks:
                    if e is not None and (e.version, e.shape, e.tp, e.pp, e.ep) != (
                            tv[e.alloc_index].version, tv[e.alloc_index].shape, tv[e.alloc_index].tp,
                            tv[e.alloc_index].pp, tv[e.alloc_index].ep):
                        raise ConfigError("operating-point allocations must index the DSE's allocation space")
                best = self.cand[key][0] if self.cand.get(key) else -1
                self.op_cfg[key] = np.array([best if e is None else add(e, key[0]) for e in picks], dtype=np.int64)

    def _build_tables(self) -> None:
        t = self.table
        n = len(self.configs)
        J = LEVELS.size
        shape = (n, NB, J)
        self.lat = np.full(shape, np.inf)
        self.tps = np.zeros(shape)
        self.pow = np.zeros(shape)
        self.jmax = np.zeros((n, NB), dtype=np.int64)
        # the step tables charge the scoring model: evaluate the configurations' allocations (a small space)
        uniq = sorted({cf.entry.alloc_index for cf in self.configs})
        row_of = {ai: i for i, ai in enumerate(uniq)}
        space = space_for(self.model, [t.space.vpods[ai] for ai in uniq], self.scoring_params)
        alloc = np.array([row_of[cf.entry.alloc_index] for cf in self.configs], dtype=np.int64)
        maxb = np.array([cf.max_batch for cf in self.configs])
        ph = np.array([PHASES.index(cf.phase) for cf in self.configs])
        lvl = np.minimum(LEVELS[None, :], maxb[:, None])  # (n, J)
        bl = np.unique(lvl)
        bcol = {int(b): i for i, b in enumerate(bl.tolist())}
        cols = np.vectorize(lambda b: bcol[int(b)])(lvl)
        for pi, phase in enumerate(PHASES):
            sel = np.flatnonzero(ph == pi)
            if sel.size == 0:
                continue
            for bi, s in enumerate(self.edges.tolist()):
                sm = evaluate(space, phase, s, bl)
                rows = alloc[sel][:, None]
                cc = cols[sel]
                per = sm.period_s[rows, cc]
                self.lat[sel, bi] = sm.latency_s[rows, cc]
                self.tps[sel, bi] = np.broadcast_to(sm.tokens, sm.latency_s.shape)[rows, cc] / per
                self.pow[sel, bi] = sm.energy_j[rows, cc] / per
                feas = np.broadcast_to(sm.feasible, sm.latency_s.shape)[rows, cc]
                # largest feasible level (at least level 0 so a too-long request still has a latency)
                self.jmax[sel, bi] = np.where(feas.any(axis=1), J - 1 - np.argmax(feas[:, ::-1], axis=1), 0)
        jj = np.arange(J)[None, None, :]
        cap = self.jmax[:, :, None]
        idx = np.minimum(jj, cap)
        self.lat = np.take_along_axis(self.lat, idx, axis=2)
        self.tps = np.take_along_axis(self.tps, idx, axis=2)
        self.pow = np.take_along_axis(self.pow, idx, axis=2)
        self.cfg_levels = lvl
        self.cfg_chips = np.array([cf.chips for cf in self.configs], dtype=float)
        self.cfg_ver = np.array([VERSIONS.index(cf.version) for cf in self.configs])
        self.cfg_phase = ph
        self.cfg_maxb = maxb.astype(float)
        ps = self.scoring_params
        self.cfg_static_w = np.array([ps.static_power_frac * CHIPS[cf.version].tflops / CHIPS[cf.version].tflop_per_j
                                      for cf in self.configs]) * self.cfg_chips
        # the steps' power above the vPod's idle floor (W): the floor is charged for the whole time a vPod is ready,
        # the dynamic part per token made, so a decode group whose batch sits below its level's is not charged the
        # floor at the level's period instead of its own (step energy = dynamic + floor x period, roofline.evaluate)
        self.pow_dyn = np.maximum(self.pow - self.cfg_static_w[:, None, None], 0.0)
        self.cfg_usd_s = np.array([CHIPS[cf.version].usd_per_chip_second for cf in self.configs]) * self.cfg_chips
        wb = np.array([weight_bytes_per_chip(self.model, cf.entry.vpod) for cf in self.configs])
        dcn = np.array([CHIPS[cf.version].dcn_gbps for cf in self.configs])
        self.cfg_boot_s = wb * 8.0 / (dcn * 1e9) + ENGINE_START_S + wb / (LOAD_GBPS_PER_CHIP * 1e9)
        self.cfg_dcn_bps = dcn * 1e9 / 8.0 * self.cfg_chips
        self.kv_bytes_tok = float(self.model.kv_bytes_per_token_layer_as(ps.kv_form) * self.model.layers)
