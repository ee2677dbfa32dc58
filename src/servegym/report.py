"""Results tables that explain themselves: one shared set of helpers for every CLI table.

- :func:`seeds_phrase`: ``seed 0``, ``seeds 0-4 (5)``, ``seeds 3, 7``.
- :func:`format_column`: one fixed-point format per column (no ``7.17e-05`` beside ``0 ± 0``).
- :func:`text_table`: a plain-text table; :func:`fit_width` drops trailing columns that do not fit in
  :data:`WIDTH` characters (the markdown file keeps them all).
- :func:`legend` and :data:`POLICY_LEGEND`: one line per policy name saying what it is.
- :func:`identical_groups` / :func:`explain_identical`: rows whose every cell is equal, and why.
- :func:`verdict`: the one-line verdict that ends a results table (best policy; the agent's rank).
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

#: Longest line a CLI table prints; wider tables go to the markdown file written beside it.
WIDTH = 120

#: family -> policy -> what it is (one short clause). ``greedy:<alpha>`` matches every alpha.
POLICY_LEGEND: dict[str, dict[str, str]] = {
    "geo": {
        "rr": "round-robin over DCs (carbon-blind reference)",
        "ll": "least-loaded DC (carbon-blind)",
        "greedy:<alpha>": "lowest α·latency + (1−α)·carbon among SLO-feasible DCs [geo] §IV-A",
        "moer": "greedy on marginal emissions; no MOER signal ships, so it uses average CI [geo] §V-A",
        "ilp": "per-window assignment ILP on the estimated loads (HiGHS) [geo] §IV-B",
        "iter-ilp": "ILP that projects its own assignments back into the load estimates [geo] §IV-B",
        "milp": "facility MILP: prices each DC's fixed energy once per window [geo] §IV-C",
        "green-llm": "Green-LLM: hourly per-DC token budgets, batch-agnostic latency [geo] §V-A",
        "oracle": "hindsight oracle: facility MILP with the true output lengths, realized grid, fresh state and the "
                  "coming arrivals (a bound, not a competitor)",
        "agent": "the trained policy being evaluated",
    },
    "pd": {
        "min-power": "minimum-power [pd] Pareto deployment for rate / target utilization, re-chosen every period",
        "min-power+lookahead": "min-power that also covers the next period's scenario rate",
        "static-peak": "one deployment for the whole day, sized for its peak demand",
        "threshold-hpa": "Kubernetes-HPA-like utilization target per pool (0.7 ± 0.1, 5-min scale-down window)",
        "min-power+forecast": "min-power sized for the forecast maximum over the start-up delay (target "
                              "utilization 0.85, or RHO in min-power+forecast:RHO)",
        "oracle": "hindsight oracle: least-cost backlog-free plan of the episode with its arrivals known (dynamic "
                  "programming; a bound, not a competitor)",
        "agent": "the trained policy being evaluated",
    },
    "npu": {
        "base": "homogeneous count-only autoscaling on one best-fit vPod type [npu] §5.1",
        "neuscale": "NeuScale: per-length best-fit vPods, scale in/out, coalescing, fail-over [npu] §3",
        "ideal": "oracle bound: true lengths, best fit at full batch, no idle [npu] §5.1 (not a competitor)",
        "hindsight": "hindsight oracle: least-energy vPod plan with the episode's demand known in advance (a bound, "
                     "not a competitor)",
        "agent": "the trained policy being evaluated",
    },
}

#: Known reasons why two policies' rows coincide: (family, frozenset of policies) -> reason.
IDENTICAL_REASONS: dict[tuple[str, frozenset[str]], str] = {
    ("geo", frozenset({"moer", "greedy:0"})): (
        "no marginal-emissions (MOER) signal ships, so moer falls back to average carbon intensity "
        "and ranks DCs exactly as greedy:0"),
    ("geo", frozenset({"greedy:0", "greedy:0.5"})): (
        "the DCs' carbon intensities differ far more than their estimated latencies, so at α = 0.5 "
        "the carbon term still decides every placement"),
    ("geo", frozenset({"rr", "ll"})): (
        "at this load every DC has free batch slots, so least-loaded spreads requests as evenly as "
        "round-robin"),
}


def seeds_phrase(seeds: Iterable[int]) -> str:
    """``seed 0``; ``seeds 0-4 (5)`` for a run of consecutive seeds; else ``seeds 3, 7``."""
    s = sorted({int(x) for x in seeds})
    if len(s) == 1:
        return f"seed {s[0]}"
    if s == list(range(s[0], s[-1] + 1)):
        return f"seeds {s[0]}-{s[-1]} ({len(s)})"
    return "seeds " + ", ".join(map(str, s))


def decimals_for(values: Iterable[float], significant: int = 4, most: int = 6, by: str = "max") -> int:
    """Decimals that show the column's largest magnitude (``by="max"``) or its smallest non-zero one
    (``by="min"``, for columns spanning orders of magnitude) with ``significant`` digits (0..``most``)."""
    mags = [abs(float(v)) for v in values if v is not None and math.isfinite(float(v)) and float(v) != 0.0]
    if not mags:
        return 0
    top = math.floor(math.log10(max(mags) if by == "max" else min(mags)))
    return max(0, min(most, significant - 1 - top))


def format_column(means: Sequence[float], cis: Sequence[float] | None = None, decimals: int | None = None
                  ) -> list[str]:
    """Cells ``mean`` or ``mean ± ci`` with one fixed-point format for the whole column (``n/a`` for
    NaN); the CI is omitted where it is not finite (one episode)."""
    d = decimals_for(means) if decimals is None else decimals
    finite = [abs(float(m)) for m in means if math.isfinite(float(m))]
    grouped = bool(finite) and max(finite) >= 1e4  # thousands separators for the whole column or none of it
    out = []
    for i, m in enumerate(means):
        m = float(m)
        if not math.isfinite(m):
            out.append("n/a")
            continue
        cell = f"{m:,.{d}f}" if grouped else f"{m:.{d}f}"
        if cell.lstrip("-").strip("0.,") == "" and cell.startswith("-"):
            cell = cell[1:]  # -0.00 reads as a sign that is not there
        ci = None if cis is None else float(cis[i])
        if ci is not None and math.isfinite(ci):
            cell += f" ± {ci:.{d}f}"
        out.append(cell)
    return out


def text_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Left-aligned first column, right-aligned others, two spaces apart, with a rule under the header."""
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths, strict=True)))

    return "\n".join([line(header), "  ".join("-" * w for w in widths), *(line(r) for r in rows)])


def fit_width(header: Sequence[str], rows: Sequence[Sequence[str]], width: int = WIDTH
              ) -> tuple[list[str], list[list[str]], list[str]]:
    """Keep the leading columns whose text table fits in ``width`` characters; returns (header, rows,
    dropped column names)."""
    keep = len(header)
    while keep > 2 and max(map(len, text_table(header[:keep], [r[:keep] for r in rows]).splitlines())) > width:
        keep -= 1
    return list(header[:keep]), [list(r[:keep]) for r in rows], list(header[keep:])


def wrap(text: str, width: int = WIDTH, indent: str = "") -> str:
    """``text`` wrapped to ``width`` characters, continuation lines indented by ``indent``."""
    return textwrap.fill(text, width=width, subsequent_indent=indent, break_on_hyphens=False)


def describe_policy(family: str, name: str) -> str | None:
    """The legend entry of ``name`` (``greedy:0.5`` matches ``greedy:<alpha>``, ``min-power+forecast:0.97`` its
    plain name; ``@measured`` suffixes and ``agent`` variants are matched on their base name), or None."""
    table = POLICY_LEGEND.get(family, {})
    base = name.split("@", 1)[0]
    if base in table:
        return table[base]
    head = base.split(":", 1)[0]
    if ":" in base and f"{head}:<alpha>" in table:
        return table[f"{head}:<alpha>"]
    return table.get(head)  # a parameterized name (min-power+forecast:0.97) under its plain entry


def legend(family: str, names: Iterable[str], width: int = WIDTH) -> list[str]:
    """``policies:`` then one wrapped line per distinct policy family entry (``greedy:0, greedy:0.5`` share
    one line)."""
    entries: dict[str, list[str]] = {}
    for n in names:
        d = describe_policy(family, n)
        if d is not None:
            entries.setdefault(d, []).append(n)
    if not entries:
        return []
    pad = max(len(", ".join(ns)) for ns in entries.values())
    return ["policies:"] + [wrap(f"  {', '.join(ns):<{pad}}  {d}", width, " " * (pad + 4)) for d, ns in entries.items()]


def identical_groups(rows: Mapping[str, Sequence[str]]) -> list[list[str]]:
    """Groups (>= 2) of row names whose cells are all equal, in first-seen order."""
    by_cells: dict[tuple[str, ...], list[str]] = {}
    for name, cells in rows.items():
        by_cells.setdefault(tuple(cells), []).append(name)
    return [g for g in by_cells.values() if len(g) > 1]


def explain_identical(family: str, group: Sequence[str]) -> str:
    """A line saying that the rows of ``group`` are identical and why (a known reason, or the generic one:
    the policies made the same decisions on these seeds)."""
    reasons = [why for (fam, pols), why in IDENTICAL_REASONS.items() if fam == family and pols <= set(group)]
    rest = "no cell differs at the precision shown (the same, or nearly the same, decisions on these seeds)"
    if reasons:
        covered = set().union(*(pols for (fam, pols) in IDENTICAL_REASONS if fam == family and pols <= set(group)))
        if covered != set(group):
            reasons.append(f"{', '.join(p for p in group if p not in covered)}: {rest}")
        return f"identical rows {', '.join(group)}: " + "; ".join(reasons)
    return f"identical rows {', '.join(group)}: {rest}"


def verdict(scores: Mapping[str, float], *, higher_is_better: bool, what: str, agent: str | None = "agent",
            exclude: Iterable[str] = ()) -> str:
    """One line: the best policy by ``scores`` (``what`` names the score), and with ``agent`` among the
    scores, its rank and its gap to the best baseline in % of that baseline's magnitude."""
    skip = set(exclude)
    pool = {k: float(v) for k, v in scores.items() if k not in skip and math.isfinite(float(v))}
    if not pool:
        return f"verdict: no finite {what} to rank"
    sign = 1.0 if higher_is_better else -1.0
    order = sorted(pool, key=lambda k: -sign * pool[k])
    best = order[0]
    if agent is None or agent not in pool:
        return f"verdict: best {what}: {best} {pool[best]:.4g}"
    base = [k for k in order if k != agent]
    if not base:
        return f"verdict: {agent} {what} {pool[agent]:.4g} (no baseline to compare)"
    b = base[0]
    gap = sign * (pool[agent] - pool[b]) / abs(pool[b]) * 100.0 if pool[b] != 0 else math.nan
    word = "better" if gap > 0 else "worse" if gap < 0 else "equal to it"
    rank = order.index(agent) + 1
    pct = f"{abs(gap):.1f}% {word}" if math.isfinite(gap) else "n/a"
    return (f"verdict ({what}): {agent} {pool[agent]:.4g} vs best baseline {b} {pool[b]:.4g}: {pct}; "
            f"{agent} ranks {rank} of {len(order)}")


def save_png(fig: object, path: str | Path, dpi: int = 110) -> Path:
    """Lay out ``fig``, write it as a PNG at ``path`` (creating the folder; atomically), close it; returns the path."""
    import matplotlib.pyplot as plt

    from servegym.outputs import save_figure

    out = Path(path)
    fig.tight_layout()  # type: ignore[attr-defined]
    save_figure(fig, out, dpi=dpi)
    plt.close(fig)  # type: ignore[arg-type]
    return out


__all__ = ["IDENTICAL_REASONS", "POLICY_LEGEND", "WIDTH", "decimals_for", "describe_policy", "explain_identical",
           "fit_width", "format_column", "identical_groups", "legend", "save_png", "seeds_phrase", "text_table", "verdict",
           "wrap"]
