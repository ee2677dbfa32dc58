"""``servegym npu compare``'s runner: the NeuScale paper's policies and its Ideal oracle on one workload (§5.1-5.4).

:func:`compare` runs Base, NeuScale (:mod:`servegym.baselines.npu`) and the Ideal (:func:`ideal_metrics`, the
§5.1 oracle bound) on the same workload and simulator settings; :class:`CompareResult` holds a row (efficiencies
in tokens/J and tokens/USD, SLO violation %, per-epoch vPod counts, energy J and SLO violation %);
:func:`plot_compare` draws it; :func:`paper_satisfaction` converts violation % to the paper's satisfaction (0-1).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from servegym.baselines.npu import POLICIES, make_policy, run_policy
from servegym.envs.npu.sim.cluster import NB, NPUCluster
from servegym.envs.npu.sim.dse import SEQ_BUCKETS
from servegym.envs.npu.sim.roofline import PHASES

from servegym.errors import ConfigError, check_range, choice_error

#: summary key of SLO violation (%) -> the paper's matching SLO satisfaction key (0-1)
PAPER_SATISFACTION_KEYS = {"slo_violation_pct": "slo_satisfaction", "ttft_violation_pct": "slo_satisfaction_prefill",
                           "tpot_violation_pct": "slo_satisfaction_decode"}


def paper_satisfaction(summary: dict[str, float]) -> dict[str, float]:
    """``summary`` plus the paper's SLO satisfaction (share of requests meeting the SLO, 0-1) beside each
    SLO violation (%): ``slo_satisfaction`` = 1 - ``slo_violation_pct`` / 100, ``_prefill`` from TTFT, ``_decode``
    from TPOT. servegym reports violation %; this is only for comparing with the paper's satisfaction figures
    (§5.2-5.4). A summary recorded with satisfaction keys only gets the violation keys filled the same way."""
    out = dict(summary)
    for viol, sat in PAPER_SATISFACTION_KEYS.items():
        if viol in out:
            out.setdefault(sat, 1.0 - out[viol] / 100.0)
        elif sat in out:
            out[viol] = 100.0 * (1.0 - out[sat])
    return out


def ideal_metrics(sim: NPUCluster, hours: float | None = None) -> dict[str, float]:
    """The §5.1 oracle (uses oracle information: true lengths): every request on its best-fit vPod at
    a maximum-size batch of its own sequence length; energy/cost per token from the scoring model's best fits.

    Prefill tokens = input tokens at the input-length bucket; decode tokens = output tokens at the
    total-length bucket. SLO violation is 0 % by construction (best fits meet the SLO).
    """
    horizon = sim.workload.duration_s if hours is None else hours * 3600.0
    r = sim.workload.requests.window(0.0, horizon)
    out: dict[str, float] = {"oracle": 1.0}
    e_tot = u_tot = t_tot = 0.0
    for ph, bk, tok in (("prefill", sim.bk_p[: len(r)], r.input_tokens), ("decode", sim.bk_d[: len(r)], r.output_tokens)):
        # the scoring model's best fits the cluster can run (those of its phase's chip versions,
        # ClusterConfig.phase_versions): the oracle knows the true costs, not the selection model's estimates
        e_tok = np.array([sim.ideal_fit[(ph, int(s))].energy_j_per_token for s in sim.edges])
        u_tok = np.array([sim.ideal_fit[(ph, int(s))].usd_per_token for s in sim.edges])
        e = float((tok * e_tok[bk]).sum())
        u = float((tok * u_tok[bk]).sum())
        t = float(tok.sum())
        out[f"energy_j_{ph}"], out[f"usd_{ph}"], out[f"tokens_{ph}"] = e, u, t
        out[f"energy_efficiency_{ph}"] = t / e if e else 0.0
        out[f"cost_efficiency_{ph}"] = t / u if u else 0.0
        e_tot, u_tot, t_tot = e_tot + e, u_tot + u, t_tot + t
    out.update(energy_j=e_tot, usd=u_tot, tokens=t_tot, energy_efficiency=t_tot / e_tot if e_tot else 0.0,
               cost_efficiency=t_tot / u_tot if u_tot else 0.0, slo_violation_pct=0.0,
               ttft_violation_pct=0.0, tpot_violation_pct=0.0,
               requests_finished=float(len(r)))
    return out


@dataclass(frozen=True)
class CompareResult:
    """One row of :func:`compare`: efficiencies (tokens/J, tokens/USD), SLO violation (%) and the
    per-epoch vPod counts (epochs x 2 phases x 48 buckets) for plots."""

    policy: str
    summary: dict[str, float]
    alive: np.ndarray
    energy_j_per_epoch: np.ndarray
    slo_per_epoch: np.ndarray

    def row(self) -> dict[str, float | str | bool]:
        s = self.summary
        out: dict[str, float | str | bool] = {
            "policy": self.policy, "energy_efficiency": s["energy_efficiency"],
            "cost_efficiency": s["cost_efficiency"], "slo_violation_pct": s["slo_violation_pct"],
            "oracle": bool(s.get("oracle", 0.0)),
        }
        for k in ("energy_efficiency_prefill", "energy_efficiency_decode", "cost_efficiency_prefill",
                  "cost_efficiency_decode", "ttft_violation_pct", "tpot_violation_pct",
                  "energy_j", "usd", "tokens"):
            out[k] = s[k]
        for k in ("energy_efficiency_busy", "cost_efficiency_busy", "energy_efficiency_busy_prefill",
                  "energy_efficiency_busy_decode", "cost_efficiency_busy_prefill", "cost_efficiency_busy_decode"):
            # request-attributed (no idle vPods); the oracle has no idle, so its value is the plain one
            out[k] = s.get(k, s[k.replace("_busy", "")])
        return out


def compare(model_name: str = "Llama-3-70B", trace: str = "azure", hours: float = 2.0,
            policies: tuple[str, ...] = ("base", "neuscale", "ideal"), seed: int = 0,
            objective: str = "energy", rate_rpm: float | None = None, quota: dict[str, int] | None = None,
            osl_accuracy: float = 0.6, progress: bool = False, day: int | None = None,
            fidelity: str = "request", fit_at: str = "best-batch", **cluster: Any) -> list[CompareResult]:
    """Run each policy on the same workload and simulator settings (Ideal: the §5.1 oracle bound); ``day``:
    the day of the 2024 Azure week (:func:`~servegym.envs.npu.sim.workloads.make_workload`); ``fidelity``: the
    request-level simulator or the fluid one (:func:`~servegym.envs.npu.sim.fluid.make_cluster`); ``fit_at``:
    :attr:`ClusterConfig.fit_at` (the DSE's best fits, or best fits at the operating point); ``cluster``: other
    :class:`ClusterConfig` fields (e.g. ``step_models``, ``serving_efficiency`` for the ablations)."""
    from servegym.envs.npu.sim.cluster import ClusterConfig, ConfigCatalog
    from servegym.envs.npu.sim.fluid import make_cluster
    from servegym.envs.npu.sim.workloads import make_workload

    for p in policies:
        if p not in POLICIES:
            raise choice_error("policy", p, POLICIES)
    if not policies:
        raise ConfigError(f"policies is empty; allowed: a non-empty subset of {', '.join(POLICIES)}")
    check_range("hours", hours, 5.0 / 60.0, 24.0 * 7)
    cfg = ClusterConfig(model=model_name, objective=objective, quota_chips=quota, osl_accuracy=osl_accuracy,
                        n_candidates=1, fit_at=fit_at, **cluster)  # the policies use only the best fit and fail-overs
    if day is not None and trace in ("azure-2023", "bursty"):
        raise ConfigError(f"day = {day} is a day of the 2024 Azure trace; allowed: None with trace = {trace}")
    epochs = int(hours * 3600.0 // cfg.epoch_s)
    played = [p for p in policies if p != "ideal"]
    bar = None
    if progress:  # the start line comes before the workload and the catalog are built (seconds for a day)
        from servegym.envs.npu.sim.workloads import TABLE4_RATE_RPM

        from servegym.estimates import estimate
        from servegym.progress import Progress

        rpm = rate_rpm if rate_rpm is not None else TABLE4_RATE_RPM.get(trace)
        est, basis = estimate("npu compare" if fidelity == "request" else "npu compare fluid", policies,
                              None if rpm is None else rpm * hours * 60.0 / 1000.0, once=("workload",))
        bar = Progress(epochs * len(played), "npu compare", "epoch", what=f"{', '.join(policies)} on {model_name}, "
                       f"{trace}, {hours:g} h (seed {seed})", estimate_s=est, basis=basis)
    wl = make_workload(trace, hours=hours, seed=seed, rate_rpm=rate_rpm, day=None if trace == "bursty" else day)
    cat = ConfigCatalog(cfg)
    out: list[CompareResult] = []
    if epochs != int(wl.duration_s // cfg.epoch_s):
        raise AssertionError("the workload's length differs from the hours asked")
    for name in policies:
        sim = make_cluster(cfg, wl, seed=seed, catalog=cat, fidelity=fidelity)
        if name == "ideal":
            s = ideal_metrics(sim)
            out.append(CompareResult(name, s, np.zeros((0, 2, NB)), np.zeros(0), np.zeros(0)))
            continue
        cb = None
        if bar is not None:
            def cb(_e: int, bar: Any = bar) -> None:
                bar.update(1)
        s = run_policy(sim, make_policy(name), progress=cb)
        per = round(cfg.epoch_s / cfg.check_s)
        hist = sim.history
        alive = np.array([hist[i].alive for i in range(per - 1, len(hist), per)])
        e = np.array([sum(h.energy_j.sum() for h in hist[i:i + per]) for i in range(0, len(hist), per)])
        slo = np.array([_slo(hist[i:i + per]) for i in range(0, len(hist), per)])
        out.append(CompareResult(name, s, alive, e, slo))
    if bar is not None:
        bar.close()
    return out


def _slo(hs: list) -> float:
    """SLO violation (%) of the requests finished in the spans ``hs`` (0 when none finished)."""
    met = sum(h.slo_met[2] for h in hs)
    tot = sum(h.slo_total for h in hs)
    return float(100.0 * (1.0 - met / tot)) if tot else 0.0


def plot_compare(results: list[CompareResult], out_dir: str, title: str = "") -> list[str]:
    """vPods over time (per policy, stacked by group) and energy efficiency vs SLO violation (%); PNG paths."""
    import os

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    os.makedirs(out_dir, exist_ok=True)
    paths = []
    sims = [r for r in results if r.alive.size]
    if sims:
        fig, axes = plt.subplots(len(sims), 2, figsize=(11, 3.2 * len(sims)), squeeze=False)
        for i, r in enumerate(sims):
            edges = np.arange(r.alive.shape[0] + 1) * 5.0 / 60.0  # one 5-min epoch per step of the stairs
            for p, ph in enumerate(PHASES):
                ax = axes[i, p]
                cols = np.flatnonzero(r.alive[:, p].sum(axis=0) > 0)
                base = np.zeros(r.alive.shape[0])
                for k, c in enumerate(cols):  # stacked stairs: vPod counts are whole numbers per epoch
                    top = base + r.alive[:, p, c]
                    ax.stairs(top, edges, baseline=base, fill=True, color=f"C{k % 10}", label=f"≤{int(SEQ_BUCKETS[c])}")
                    base = top
                if cols.size:
                    ax.legend(fontsize=6, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0,
                              title="group (tokens)", title_fontsize=6)
                ax.yaxis.set_major_locator(MaxNLocator(integer=True))
                ax.set_ylim(0, max(1.0, float(base.max())) * 1.1)
                ax.set_title(f"{r.policy}: {ph} vPods per group")
                ax.set_xlabel("hours")
                ax.set_ylabel("vPods")
        fig.suptitle(title)
        fig.tight_layout()
        path = os.path.join(out_dir, "vpods_over_time.png")
        fig.savefig(path, dpi=110)
        plt.close(fig)
        paths.append(path)
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for i, r in enumerate(results):
        oracle = bool(r.summary.get("oracle", 0.0))
        ax.scatter(r.summary["slo_violation_pct"], r.summary["energy_efficiency"], s=70, marker="*" if oracle else "o",
                   color=f"C{i}", label=f"{r.policy} (oracle bound)" if oracle else r.policy)
    ax.margins(x=0.1, y=0.12)
    ax.text(0.01, 0.985, "\u2196 better: more tokens/J, fewer violations", transform=ax.transAxes, fontsize=8,
            color="0.25", ha="left", va="top")
    ax.set_xlabel("SLO violation (%, TTFT or TPOT missed)")
    ax.set_ylabel("energy efficiency (tokens/J)")
    ax.set_title(title or "energy vs SLO")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0)
    fig.tight_layout()
    path = os.path.join(out_dir, "energy_vs_slo.png")
    fig.savefig(path, dpi=110)
    plt.close(fig)
    paths.append(path)
    return paths
