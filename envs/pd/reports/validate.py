"""Model-versus-paper checks for the PD provisioning model (``servegym pd validate``).

Anchors are figures stated in the paper's text (the figure values are not recoverable):

* capacities of the fixed 4096/256 workload, tolerance 3.5%: 1p1d 2.3 req/s (App. D), 2p1d 4.5 (App. D:
  "3.6 req/s, or 80% of the serving capacity of 2p1d"), 3p1d 5.2 (§5.3.2), 3p2d 6.625 (§5.3.2: "5.3 req/s,
  or 80% of the serving capacity of 3p2d");
* power saved by removing one decode instance (3p2d -> 3p1d), tolerance 15%: 560 W at 3.1 req/s (§5.3.1),
  620 W at 5.3 req/s (§5.3.2), 520 W at 3.6 req/s (App. D).

C_tok is fitted to the 3p1d capacity (``servegym.calibration.pd_kv``), so that row is marked ``fitted``; every
other anchor is held out (``held out``): nothing else was tuned to it.

Informational rows (``required=False``) compare other reported figures: the later scale-down steps of
App. D, the rate-drop saving of §5.3.1, the fixed-workload capacity MAPE claim (1.2%) restricted to the four
deployments whose measured capacity is stated, the Table 2 trace means, and the decode-pool question of
:func:`~servegym.envs.pd.sim.catalog.fitted_serving`: the pool the measured 3p1d capacity implies, and the
decode-sensitive anchors under SGLang's two documented pools
(:func:`~servegym.envs.pd.sim.catalog.sglang_serving`, :func:`~servegym.envs.pd.sim.catalog.sglang_profiled_kv_tokens`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
from scipy.optimize import brentq
from servegym.envs.pd.sim.catalog import PDSystem, paper_system, sglang_profiled_kv_tokens, sglang_serving
from servegym.envs.pd.sim.model import PDModel
from servegym.envs.pd.sim.workload_moments import WorkloadMoments, parse_workload

from servegym.errors import ServegymError

CAPACITY_TOL = 0.035
POWER_TOL = 0.15

# (deployment, paper req/s, source)
CAPACITY_ANCHORS: tuple[tuple[tuple[int, int], float, str], ...] = (
    ((1, 1), 2.3, "App. D"),
    ((2, 1), 4.5, "App. D (3.6=80%)"),
    ((3, 1), 5.2, "§5.3.2"),
    ((3, 2), 5.3 / 0.8, "§5.3.2 (5.3=80%)"),
)
# §5.3.2: "We hold the request rate at 5.3 req/s, or 80% of the serving capacity of 3p2d".
PAPER_3P2D_FROM_5_3 = 5.3 / 0.8
#: The one anchor C_tok is fitted to (``servegym.calibration.pd_kv``); every other required anchor is held out.
FITTED_ANCHOR = "capacity 3p1d, fixed 4096/256"
#: What the ``result`` column of ``servegym pd validate`` means.
LEGEND = (
    "result: PASS / FAIL = a required anchor (a figure the paper measured) within / outside its tolerance; "
    "pass / fail (lower case) = an informational comparison with a tolerance, not required; "
    "- = informational, no verdict (e.g. a model mean against a paper median). fitted = the one "
    "measurement C_tok is fitted to; held out = a required anchor nothing was fitted to. A FAIL means the "
    "model misses that measurement by more than the tolerance with these parameters; it is reported, not tuned "
    "away, and the command then exits with status 1.")
# (from, to, rate req/s, paper saving W, source, required)
POWER_ANCHORS: tuple[tuple[tuple[int, int], tuple[int, int], float, float, str, bool], ...] = (
    ((3, 2), (3, 1), 3.1, 560.0, "§5.3.1", True),
    ((3, 2), (3, 1), 5.3, 620.0, "§5.3.2", True),
    ((3, 2), (3, 1), 3.6, 520.0, "App. D", True),
    ((3, 1), (2, 1), 3.6, 180.0, "App. D", False),
    ((2, 1), (1, 1), 3.6, 470.0, "App. D", False),
)
PAPER_FIXED_MAPE = 0.012  # §5.2, fixed 4096/256 across all evaluated deployments
# Table 2 sample means (l_in, l_out) of the paper's resampled trace workloads.
TABLE2_MEANS = {"mooncake": (8307.0, 345.0), "azure-conv": (1158.0, 211.0)}


@dataclass(frozen=True)
class Check:
    """One comparison of a model figure with a paper figure."""

    name: str
    unit: str
    model: float
    paper: float
    tolerance: float | None  # relative; None for a figure reported without a pass/fail
    source: str
    required: bool = True

    @property
    def role(self) -> str:
        """``fitted``, ``held out`` (required anchors) or ``info``."""
        if not self.required:
            return "info"
        return "fitted" if self.name == FITTED_ANCHOR else "held out"

    @property
    def rel_error(self) -> float:
        return self.model / self.paper - 1.0

    @property
    def passed(self) -> bool | None:
        if self.tolerance is None:
            return None
        return bool(abs(self.rel_error) <= self.tolerance)

    def as_dict(self) -> dict[str, object]:
        d: dict[str, object] = asdict(self)
        d["rel_error"] = self.rel_error
        d["passed"] = self.passed
        d["role"] = self.role
        return d


def run_checks(system: PDSystem | None = None, *, include_traces: bool = True) -> list[Check]:
    """All checks; trace rows are skipped when the trace layer is unavailable."""
    system = paper_system() if system is None else system
    model = PDModel(WorkloadMoments.fixed(4096, 256), system)
    checks: list[Check] = []
    errs = []
    for (n_p, n_d), ref, src in CAPACITY_ANCHORS:
        mu = model.capacity(n_p, n_d).mu
        errs.append(abs(mu / ref - 1))
        checks.append(Check(f"capacity {n_p}p{n_d}d, fixed 4096/256", "req/s", mu, ref, CAPACITY_TOL, src))
    for (a, b, rate, ref, src, req) in POWER_ANCHORS:
        saving = float(model.power_w(*a, rate)) - float(model.power_w(*b, rate))
        checks.append(Check(f"power saved {a[0]}p{a[1]}d->{b[0]}p{b[1]}d at {rate:g} req/s", "W", saving, ref,
                            POWER_TOL, src, required=req))
    # 3p2d is prefill-bound (its two decode instances could take > 10 req/s): the model's capacity is
    # rho_P * 3 mu_P with one calibrated mu_P for every n_P, while the measured 1p1d/2p1d/3p2d figures imply
    # 2.3, 2.25 and 2.2 req/s per prefill instance.
    checks.append(Check("prefill capacity per instance vs 3p2d's 6.625 / 3", "req/s", model.mu_p,
                        PAPER_3P2D_FROM_5_3 / 3, None, "Table 3, §5.3.2", required=False))
    # §5.3.1 starts at 60% of the measured 3p2d capacity (0.6 * 6.625 = 3.975 req/s).
    drop = float(model.power_w(3, 2, 0.6 * PAPER_3P2D_FROM_5_3)) - float(model.power_w(3, 2, 3.1))
    checks.append(Check("power saved by 3p2d rate drop 3.975 -> 3.1 req/s", "W", drop, 270.0, POWER_TOL,
                        "§5.3.1", required=False))
    checks.append(Check("utilization of 3p1d at 3.1 req/s", "fraction", 3.1 / model.capacity(3, 1).mu, 0.60,
                        0.05, "§5.3.1", required=False))
    # Median TPOT reported in the case studies (ms); the model gives the mean iteration time at that load.
    for (n_p, n_d), rate, ref, src in (((3, 2), 3.1, 23.0, "§5.3.1"), ((3, 1), 3.1, 28.0, "§5.3.1"),
                                       ((3, 2), 5.3, 27.0, "§5.3.2"), ((3, 2), 3.6, 24.0, "App. D"),
                                       ((3, 1), 3.6, 29.0, "App. D")):
        op = model.operating_point(n_p, n_d, rate)
        checks.append(Check(f"TPOT {n_p}p{n_d}d at {rate:g} req/s (model mean vs median)", "ms",
                            op.tpot_s * 1e3, ref, None, src, required=False))
    checks.extend(_kv_pool_checks(system))
    checks.append(Check("capacity MAPE, fixed 4096/256 (4 stated deployments)", "fraction",
                        float(np.mean(errs)), PAPER_FIXED_MAPE, None, "§5.2", required=False))
    if include_traces:
        try:
            loads = {name: parse_workload(name) for name in ("azure-conv", "mooncake")}
        except ServegymError:
            loads = {}
        if loads:
            # §5.2: "At comparable power levels, serving capacity is highest for Azure, followed by the
            # fixed-length workload and Mooncake" -- checked on max capacity under power budgets.
            grids = {k: PDModel(w, system).grid(8) for k, w in loads.items()}
            grids["fixed"] = model.grid(8)
            budgets = np.linspace(1500.0, 5500.0, 9)
            ok = 0
            for b in budgets:
                best = {k: float(g.mu[g.power_w <= b].max(initial=0.0)) for k, g in grids.items()}
                ok += best["azure-conv"] > best["fixed"] > best["mooncake"]
            checks.append(Check("capacity order Azure > fixed > Mooncake at equal power",
                                "fraction", ok / budgets.size, 1.0, 0.0, "§5.2 / Fig. 4", required=False))
        for name, (m_in, m_out) in TABLE2_MEANS.items():
            if name not in loads:
                continue
            w = loads[name]
            # The paper's figures are means of 1,000 / 7,200 resampled requests; ours are of the filtered trace.
            checks.append(Check(f"{name} mean input (filtered trace)", "tokens", w.in_m1, m_in, None,
                                "Table 2", required=False))
            checks.append(Check(f"{name} mean output (filtered trace)", "tokens", w.out_mean, m_out, None,
                                "Table 2", required=False))
    return checks


def _kv_pool_checks(system: PDSystem) -> list[Check]:
    """Informational rows on C_tok, which the paper does not publish (see ``catalog.fitted_serving``).

    The 3p1d capacity is decode-bound and moves about 1% per 2,400 tokens of C_tok; the pool the paper's
    measured 5.2 req/s implies is found by brentq on C_tok (the same fit as ``servegym.calibration.pd_kv``,
    here for the system in use, so an overridden R moves it). Then the decode-sensitive anchors are
    re-evaluated with SGLang's two documented readings of the pool (``--kv-tokens sglang-recipe`` and
    ``sglang-profiled``), which are provenance, not the default.
    """
    fixed = WorkloadMoments.fixed(4096, 256)

    def cap_3p1d(kv_tokens: float) -> float:
        return PDModel(fixed, system.with_serving(kv_tokens=kv_tokens)).capacity(3, 1).mu

    rows: list[Check] = []
    lo, hi = 1.2e5, 6.0e5  # tokens; brackets the root for the paper's system (244,190)
    if (cap_3p1d(lo) - 5.2) * (cap_3p1d(hi) - 5.2) < 0:  # an overridden R can move the root out
        implied = float(brentq(lambda c: cap_3p1d(c) - 5.2, lo, hi, xtol=1.0))
        rows.append(Check("C_tok in use vs the pool implied by 3p1d = 5.2 req/s", "tokens",
                          system.serving.kv_tokens, implied, None, "§5.3.2, eq. (10)", required=False))
    readings = (("SGLang-recipe", sglang_serving(system.hardware, system.model).kv_tokens),
                ("SGLang-profiled", sglang_profiled_kv_tokens(system.hardware, system.model)))
    for label, kv in readings:
        alt = PDModel(fixed, system.with_serving(kv_tokens=kv))
        tag = f"{label} {kv:,.0f}"
        rows.append(Check(f"capacity 3p1d, {tag}", "req/s", alt.capacity(3, 1).mu, 5.2, CAPACITY_TOL, "§5.3.2",
                          required=False))
        for (a, b, rate, ref, src, req) in POWER_ANCHORS:
            if req:
                saving = float(alt.power_w(*a, rate)) - float(alt.power_w(*b, rate))
                rows.append(Check(f"saved 3p2d->3p1d at {rate:g} req/s, {tag}", "W", saving, ref, POWER_TOL,
                                  src, required=False))
    return rows


def all_required_pass(checks: list[Check]) -> bool:
    return all(c.passed for c in checks if c.required and c.passed is not None)


def validate_report(kv_tokens: str | None, reserve: float | None, as_json: bool) -> int:
    """``servegym pd validate``: the checks (JSON or a table on stdout); exit status 1 if a required one fails."""
    import json
    import textwrap

    from servegym.envs.pd.reports.common import serving_system

    system = serving_system(kv_tokens, reserve)
    checks = run_checks(system)
    ok = all_required_pass(checks)
    if as_json:
        print(json.dumps({"passed": ok, "legend": LEGEND, "kv_tokens": system.serving.kv_tokens,
                          "reserve_tokens": system.serving.reserve_tokens,
                          "checks": [c.as_dict() for c in checks]}, indent=2))
        return 0 if ok else 1
    how = "fitted to 3p1d = 5.2 req/s, §5.3.2" if system.serving.derivation.startswith("fitted") else (
        system.serving.derivation or "given")
    print(f"C_tok = {system.serving.kv_tokens:,.0f} tokens ({how}), R = {system.serving.reserve_tokens:.0f} tokens")
    def num(v: float) -> str:
        return f"{v:,.0f}" if abs(v) >= 1e4 else f"{v:.1f}" if abs(v) >= 100 else f"{v:.3f}"

    print(f"{'check':<58} {'model':>9} {'paper':>9} {'error':>7}  {'result':<13}  source")
    for c in checks:
        res = "-" if c.passed is None else ("PASS" if c.passed else "FAIL")
        if not c.required and c.passed is not None:
            res = res.lower()
        if c.required:
            res = f"{res} {c.role}"
        print(f"{c.name[:58]:<58} {num(c.model):>9} {num(c.paper):>9} {c.rel_error:+7.1%}  {res:<13}  {c.source}")
    n_req = sum(c.required for c in checks)
    n_fail = sum(c.required and c.passed is False for c in checks)
    print(f"required anchors: {n_req - n_fail} of {n_req} pass" + ("" if ok else f", {n_fail} FAIL"))
    print(textwrap.fill(LEGEND, width=118))
    return 0 if ok else 1
