"""``servegym npu compare``: Base, NeuScale and the Ideal oracle on one replay (paper §5), as JSON or a table
with the explanations and the verdict.

The runner (:func:`servegym.baselines.npu.compare`, :func:`~servegym.baselines.npu.plot_compare`) stays with the
policies in ``baselines/npu.py``: it drives the policies' own decision loop, and benchmarks and tests call it
there; this module only checks the flags, calls it and formats what it returns."""

from __future__ import annotations

import json

from servegym import report


def compare_report(model: str, trace: str, hours: float, policies: str, *, day: int | None, objective: str,
                   rate_rpm: float | None, osl_accuracy: float, seed: int, as_json: bool, fidelity: str | None,
                   fast: bool, fit_at: str, max_requests: int, plot_dir: str | None, kv_form: str = "latent") -> int:
    """``servegym npu compare``: checks ``hours`` (h), ``max_requests`` and ``rate_rpm`` (req/min; None: Table
    4's rate of ``trace``), replays ``trace`` under the comma list ``policies`` and prints JSON rows or the table;
    ``plot_dir`` also gets the two PNGs. Returns 0."""
    from servegym.baselines.npu import compare, plot_compare
    from servegym.envs.npu.sim.catalog import MODELS

    model = MODELS.resolve(model)  # shown in its canonical spelling from here on
    from servegym.envs.npu.sim.workloads import BURSTY_BASE_RPM, TABLE4_RATE_RPM

    from servegym.errors import MAX_REQUEST_CEILING, check_range, check_request_count

    check_range("--hours", hours, 5.0 / 60.0, 24.0 * 7)
    check_range("--max-requests", max_requests, 1, MAX_REQUEST_CEILING)
    if rate_rpm is not None:
        check_range("--rate-rpm", rate_rpm, 0.0, None, low_inclusive=False)
    rate = rate_rpm if rate_rpm is not None else TABLE4_RATE_RPM.get(trace, BURSTY_BASE_RPM)
    check_request_count(rate * 60.0 * hours, max_requests,
                        f"--rate-rpm {rate:g} x --hours {hours:g}", "--max-requests")
    pols = tuple(x.strip() for x in policies.split(",") if x.strip())
    fidelity = fidelity or ("fluid" if fast else "request")
    res = compare(model, trace, hours, pols, seed=seed, objective=objective,
                  rate_rpm=rate_rpm, osl_accuracy=osl_accuracy, progress=not as_json, day=day,
                  fidelity=fidelity, fit_at=fit_at, **({} if kv_form == "latent" else {"kv_form": kv_form}))
    if plot_dir:
        plot_compare(res, plot_dir, f"{model} {trace} {hours:g} h")
    rows = [{**r.row(), "fidelity": fidelity, "fit_at": fit_at, **({} if kv_form == "latent" else {"kv_form": kv_form})}
            for r in res]
    if as_json:
        print(json.dumps(rows, indent=1))
        return 0
    print(f"{model} on {trace}, {hours:g} h, seed {seed}, {fidelity} simulator (ideal = oracle "
          "bound, uses true lengths)")
    headers = ["policy", "tokens/J", "tokens/USD", "SLO viol. (%)", "TTFT viol. (%)", "TPOT viol. (%)", "energy (MJ)",
               "cost (USD)"]
    cols = [report.format_column([float(r[k]) * scale for r in rows], decimals=d) for k, scale, d in (
        ("energy_efficiency", 1.0, None), ("cost_efficiency", 1.0, None), ("slo_violation_pct", 1.0, 2),
        ("ttft_violation_pct", 1.0, 2), ("tpot_violation_pct", 1.0, 2), ("energy_j", 1e-6, None), ("usd", 1.0, None))]
    cells = [[str(r["policy"]), *(c[i] for c in cols)] for i, r in enumerate(rows)]
    print(report.text_table(headers, cells))
    # per phase (Figure 18 plots prefill and decode apart): the whole pool (idle and booting vPods included) and the
    # serving steps only ("busy", as a per-request simulator counts)
    ph_keys = [(f"{m}_efficiency{b}_{ph}", scale) for ph in ("prefill", "decode") for m, scale in
               (("energy", 1.0), ("cost", 1.0)) for b in ("", "_busy")]
    ph_cols = [report.format_column([float(r[k]) * sc for r in rows], decimals=None) for k, sc in ph_keys]
    ph_headers = [f"{ph} {'tokens/J' if m == 'energy' else 'tokens/USD'}{' busy' if b else ''}"
                  for ph in ("prefill", "decode") for m in ("energy", "cost") for b in ("", "_busy")]
    print(report.text_table(["policy", *ph_headers], [[str(r["policy"]), *(c[i] for c in ph_cols)]
                                                      for i, r in enumerate(rows)]))
    for line in compare_explanations(rows, cells, objective):
        print(line)
    return 0


def compare_explanations(rows: list[dict], cells: list[list[str]], objective: str) -> list[str]:
    """Identical rows and why, the policy legend, and the verdict: the policy with the highest tokens/J (energy
    objective) or tokens/USD (cost) among those within 1 pp of the lowest SLO violation; the oracle is a bound."""
    out = [report.wrap(report.explain_identical("npu", g), indent="  ")
           for g in report.identical_groups({c[0]: c[1:] for c in cells})]
    out += report.legend("npu", [c[0] for c in cells])
    key = "energy_efficiency" if objective == "energy" else "cost_efficiency"
    real = [r for r in rows if not r.get("oracle")]
    if real:
        low = min(float(r["slo_violation_pct"]) for r in real)
        best = max((r for r in real if float(r["slo_violation_pct"]) <= low + 1.0), key=lambda r: float(r[key]))
        unit = "tokens/J" if objective == "energy" else "tokens/USD"
        out.append(report.wrap(f"verdict: best {best['policy']}: {float(best[key]):.4g} {unit} at "
                               f"{float(best['slo_violation_pct']):.2f}% SLO violation (highest {unit} among policies "
                               "within 1 pp of the lowest SLO violation; the oracle is a bound, not ranked)", indent="  "))
    return out
