"""The leaderboard's table: per section, every policy's test episodes on the section's scale (:class:`EnvBoard`),
and one row and one JSON record per policy with its scores, the paired verdict against the strongest baseline,
the share of the gap closed, the headroom and the agents' time to the strongest."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from servegym.agents import protocol
from servegym.agents import time_to_strongest as tts
from servegym.agents.families import EpisodeResult, family_for
from servegym.agents.split_episodes import make_split_env
from servegym.agents.suite_entries import SuiteEntry, section_of
from servegym.agents.suite_tasks import suite_policies
from servegym.agents.verdict import _json_float

from servegym.errors import ConfigError


@dataclass(frozen=True)
class EnvBoard:
    """Every policy's episodes of one env id on the leaderboard, with its scale (the roles the stored runs
    lack fall back as :func:`env_board` states in ``notes``)."""

    env_id: str
    by_policy: dict[str, list[EpisodeResult]]
    roles: dict[str, str]  # role -> policy name, for the roles present in the runs
    scale: protocol.Scale
    notes: tuple[str, ...]

    def scores(self, policy: str) -> np.ndarray:
        return self.scale.scores(self.by_policy[policy])


def env_board(env_id: str, eps: pd.DataFrame, env_kwargs: dict[str, Any] | None = None) -> EnvBoard:
    """The board of one env id (on the stress track ``env_kwargs`` select, if any) from its episode rows (stored
    suite outputs)."""
    by_policy = {p: [_result(r) for r in g.to_dict("records")] for p, g in eps.groupby("policy", sort=False)}
    wanted = protocol.yardsticks(env_id, env_kwargs).roles()
    roles, notes = {}, []
    for role, name in wanted.items():
        if name in by_policy:
            roles[role] = name
        elif role == "strongest":
            roles[role] = wanted["paper"]
            notes.append(f"strongest baseline {name!r} not in these runs: the paper's method stands in")
        elif role != "paper" and role != "naive":
            notes.append(f"{role} ({name}) not in these runs")
    for role in ("naive", "paper"):
        if wanted[role] not in by_policy:
            raise ConfigError(f"{env_id}: the stored runs lack the {role} reference {wanted[role]!r}; rerun the suite")
    oracle = by_policy.get(roles["oracle"]) if "oracle" in roles else None
    scale = protocol.make_scale(env_id, by_policy[roles["naive"]], by_policy[roles["paper"]], oracle)
    return EnvBoard(env_id, by_policy, roles, scale, tuple(notes))


def leaderboard(entries: Sequence[SuiteEntry], outs: Sequence[dict[str, Any]],
                tts_refs: dict[str, tts.Reference] | None = None) -> tuple[pd.DataFrame, list[dict[str, Any]]]:
    """One row per env id x policy (agents pooled over training seeds), and the JSON records: the
    protocol object plus role, scale, SLO violation, the paired verdict against the strongest baseline,
    the share of the gap closed (agents), the agents' time to the strongest on validation
    (:mod:`servegym.agents.time_to_strongest`; ``tts_refs``: the strongest's validation return and a CPU
    model per id for runs that do not carry them) and the headroom (the strongest baseline's record)."""
    rows, records = [], []
    for e in entries:
        mine = [o for o in outs if section_of(o) == e.section]
        eps = pd.DataFrame([r for o in mine for r in o["rows"]])
        board = env_board(e.env_id, eps, e.env_kwargs)
        fam = family_for(e.env_id)
        kpi = _entry_kpi(e)
        strongest = board.roles["strongest"]
        strong_res = board.by_policy[strongest]
        strong_scores = board.scores(strongest)
        strong_by_seed = protocol.seed_scores(strong_res, strong_scores)
        head, head_ci = protocol.headroom(strong_by_seed) if board.scale.oracle else (math.nan, (math.nan, math.nan))
        # headroom in the KPI's units: the oracle's and the causal reference's paired difference to the strongest
        head_kpi = {role: protocol.paired_verdict(board.by_policy[board.roles[role]], strong_res, kpi, strongest)
                    for role in ("oracle", "causal") if role in board.roles and board.roles[role] in board.by_policy}
        role_of = {v: k for k, v in reversed(list(board.roles.items()))}
        order = [p for p in by_role_order(board)] + [p for p in board.by_policy if p.startswith("agent:")]
        order += [p for p in suite_policies(e) if p not in order]
        for p in order:
            res = board.by_policy.get(p)
            if not res:
                continue
            scores = board.scores(p)
            st = protocol.score_stats(scores, results=res)
            poi, poi_ci = protocol.probability_of_improvement(scores, strong_scores)
            runs = [o for o in mine if (o["kind"] == "train") == p.startswith("agent:")
                    and (o["kind"] == "train" or o["rows"][0]["policy"] == p)]
            agent = p.startswith("agent:")
            role = "agent" if agent else role_of.get(p, "baseline")
            verdict = None if p == strongest else protocol.paired_verdict(res, strong_res, kpi, strongest)
            # the share of the gap is the agents' figure (and follow's, the agent that only copies)
            closed, closed_ci = (protocol.gap_closed(protocol.seed_scores(res, scores), strong_by_seed)
                                 if board.scale.oracle and role in ("agent", "follow") else (math.nan, (math.nan, math.nan)))
            slo = protocol.mean_metric(res, protocol.SLO_METRIC)
            me = protocol.model_error(e.env_id)
            mape = me.mape_pct if me is not None and me.mape_pct is not None else math.nan
            inside = bool(verdict is not None and math.isfinite(mape) and abs(verdict.kpi_diff_pct) < mape)
            rec = protocol.benchmark_record(e.env_id, p, "test", res, scores)
            rec.update(track=e.track, role=role, scale=board.scale.name, slo_violation_pct=_json_float(slo),
                       vs_strongest=None if verdict is None else {**verdict.as_dict(), "model_error_mape_pct":
                                                                  _json_float(mape),
                                                                  "inside_model_error": inside},
                       gap_closed=_json_float(closed),
                       gap_closed_ci=[_json_float(v) for v in closed_ci])
            reach = None
            if agent:
                ref = (tts_refs or {}).get(e.section, tts.Reference())
                reach = tts.time_to_strongest([o for o in mine if o["kind"] == "train"],
                                              {**board.roles, "strongest": strongest}, ref.target, ref.cpu_model)
                rec.update(time_to_strongest=None if reach is None else reach.as_dict())
            if p == strongest:
                rec.update(headroom=_json_float(head), headroom_ci=[_json_float(v) for v in head_ci],
                           headroom_kpi={role: {k: v.as_dict()[k] for k in ("kpi", "kpi_diff", "kpi_diff_ci",
                                                                              "kpi_diff_pct", "slo_diff_pp",
                                                                              "slo_diff_ci", "episodes")}
                                         for role, v in head_kpi.items()})
            records.append(rec)
            rows.append({"env": e.env_id, "track": e.track or "", "policy": p, "role": role, "episodes": len(res),
                         "seeds": len({r.get("train_seed") for r in eps[eps.policy == p].to_dict("records")}),
                         "score_iqm": st.iqm, "score_iqm_lo": st.iqm_ci[0], "score_iqm_hi": st.iqm_ci[1],
                         "score_mean": st.mean, "score_mean_lo": st.mean_ci[0], "score_mean_hi": st.mean_ci[1],
                         "p_improve_over_strongest": poi, "p_improve_lo": poi_ci[0], "p_improve_hi": poi_ci[1],
                         "kpi": kpi, **{k: v for k, v in protocol.kpi_means(res, fam).items()},
                         "kpi_diff_vs_strongest": math.nan if verdict is None else verdict.kpi_diff,
                         "kpi_diff_lo": math.nan if verdict is None else verdict.kpi_ci[0],
                         "kpi_diff_hi": math.nan if verdict is None else verdict.kpi_ci[1],
                         "kpi_diff_pct": math.nan if verdict is None else verdict.kpi_diff_pct,
                         "slo_diff_vs_strongest_pp": math.nan if verdict is None else verdict.slo_diff_pp,
                         "slo_diff_lo": math.nan if verdict is None else verdict.slo_ci[0],
                         "slo_diff_hi": math.nan if verdict is None else verdict.slo_ci[1],
                         "slo_tolerance_pp": math.nan if verdict is None else verdict.slo_tolerance_pp,
                         "return_diff": math.nan if verdict is None else verdict.return_diff,
                         "return_diff_lo": math.nan if verdict is None else verdict.return_ci[0],
                         "return_diff_hi": math.nan if verdict is None else verdict.return_ci[1],
                         "seeds_beating": -1 if verdict is None else verdict.seeds_beating,
                         "inside_model_error": inside,
                         "outcome_vs_strongest": "" if verdict is None else verdict.outcome,
                         "beats_strongest": bool(verdict is not None and verdict.beats),
                         "beats_naive": protocol.beats(res, board.by_policy[board.roles["naive"]], kpi),
                         "gap_closed": closed, "gap_closed_lo": closed_ci[0], "gap_closed_hi": closed_ci[1],
                         **{f"{role}_minus_strongest{suffix}": (getattr(head_kpi[role], attr) if p == strongest
                                                                 and role in head_kpi else math.nan)
                            for role in ("oracle", "causal")
                            for suffix, attr in (("", "kpi_diff"), ("_pct", "kpi_diff_pct"), ("_slo_pp", "slo_diff_pp"))},
                         "headroom": head if p == strongest else math.nan,
                         "headroom_lo": head_ci[0] if p == strongest else math.nan,
                         "headroom_hi": head_ci[1] if p == strongest else math.nan,
                         "scale": board.scale.name, "notes": "; ".join(board.notes),
                         "wall_s": float(sum(o["wall_s"] for o in runs)),
                         "env_steps": int(sum(o["env_steps"] for o in runs)),
                         **tts.csv_fields(reach if agent else None)})
    return pd.DataFrame(rows), records


def by_role_order(board: EnvBoard) -> list[str]:
    """The board's yardstick policies in role order (each once)."""
    return list(dict.fromkeys(board.roles[r] for r in protocol.ROLES if r in board.roles))


def _entry_kpi(e: SuiteEntry) -> str:
    env = make_split_env(e.env_id, "test", e.env_kwargs)
    try:
        return protocol.kpi_metric(env)
    finally:
        env.close()


def _result(row: dict[str, Any]) -> EpisodeResult:
    core = {"policy", "seed", "reward", "length", "train_seed"}
    metrics = {k: float(v) for k, v in row.items() if k not in core and isinstance(v, (int, float))
               and not isinstance(v, bool) and math.isfinite(float(v))}
    # agents pooled over training seeds: one episode per (training seed, test seed)
    ts = row.get("train_seed")
    train_seed = int(ts) if isinstance(ts, (int, float)) and not isinstance(ts, bool) and math.isfinite(ts) else -1
    return EpisodeResult(policy=row["policy"], seed=int(row["seed"]), reward=float(row["reward"]),
                         length=int(row["length"]), metrics=metrics, train_seed=train_seed)
