"""``servegym npu dse`` (the roofline DSE's best-fit vPod per sequence-length bucket, paper §3.3) and ``servegym
npu catalog`` (the chip versions of Table 2 with prices, and the model shapes): JSON or text tables."""

from __future__ import annotations

import json
import sys

from servegym import report


def dse_report(model: str, phase: str | None, objective: str, slo_factor: float, fallbacks: bool, as_json: bool,
               plot: str | None) -> int:
    """``servegym npu dse``: the best-fit table of ``model`` for ``phase`` (None: both) by ``objective`` (energy
    in J/token or cost in USD/token), the SLO ``slo_factor`` x the single-request latency; ``fallbacks`` adds
    each chip version's best fit; ``plot`` also writes the PNG there. Prints JSON or a table; returns 0."""
    from servegym.envs.npu.sim.dse import PHASES, run_dse

    phases = PHASES if phase is None else (phase,)
    table = run_dse(model, objective=objective, phases=phases, slo_factor=slo_factor,
                    progress=sys.stderr.isatty() and not as_json)
    entries = table.entries(fallbacks=fallbacks)
    if plot:
        from servegym.envs.npu.reports.plots import plot_best_fit

        plot_best_fit(table, plot)
    if as_json:
        print(json.dumps([e.to_dict() for e in entries], indent=1))
        return 0
    print(f"{table.model.name}: best-fit vPods by {objective} per token, SLO = "
          f"{table.slo_factor:g}x single-request latency on NPU-C/NPU-D ({len(table.space)} allocations)")
    # the vPod label carries the chip count (version_shape_tp_pp[_ep]); --json has every field
    headers = ["phase", "seq len", "role", "vPod", "batch", "lat ms", "SLO ms", "ok", "mJ/tok", "µUSD/tok", "tok/s"]
    # one fixed-point format per numeric column (no 2.5e+04 beside 84.87), precise for its smallest entries
    num = [report.format_column(vals, decimals=min(report.decimals_for(vals, 3, 4, by="min"), 4))
           for vals in ([f(e) for e in entries] for f in (
        lambda e: e.latency_s * 1e3, lambda e: e.slo_s * 1e3, lambda e: e.energy_j_per_token * 1e3,
        lambda e: e.usd_per_token * 1e6, lambda e: e.tokens_per_s))]
    rows = [[e.phase, str(e.seq_len), e.role, e.label, str(e.batch), num[0][i], num[1][i],
             "yes" if e.meets_slo else "NO", num[2][i], num[3][i], num[4][i]] for i, e in enumerate(entries)]
    headers, rows, dropped = report.fit_width(headers, rows)
    print(report.text_table(headers, rows))
    if dropped:
        print(f"(not shown, to fit {report.WIDTH} characters: {', '.join(dropped)}; --json has every field)")
    if plot:
        print(f"plot written to {plot}")
    return 0


def _print_table(headers: list[str], rows: list[list[str]]) -> None:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]
    print("  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip())
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())


def catalog_report(as_json: bool) -> int:
    """``servegym npu catalog``: the chip versions (Table 2 + prices) and the model shapes, JSON or two tables."""
    from dataclasses import asdict

    from servegym.envs.npu.sim.catalog import CHIPS, MODELS

    chips = [asdict(c) for c in CHIPS.values()]
    models = [dict(asdict(m), total_params=m.total_params) for m in MODELS.values()]
    if as_json:
        print(json.dumps({"chips": chips, "models": models}, indent=1))
        return 0
    keys = ["name", "tpu", "tflops", "tflop_per_j", "hbm_gbps", "hbm_gb", "hbm_gb_per_j", "ici_gbps_per_link",
            "ici_links", "torus_dims", "max_chips_per_pod", "usd_per_chip_hour"]
    _print_table([k.upper() for k in keys], [[str(c[k]) for k in keys] for c in chips])
    print()
    mkeys = ["name", "hidden", "layers", "heads", "kv_heads", "ffn", "vocab", "experts", "active_experts"]
    _print_table([k.upper() for k in [*mkeys, "params_B"]],
                 [[str(m[k]) for k in mkeys] + [f"{m['total_params'] / 1e9:.1f}"] for m in models])
    return 0
