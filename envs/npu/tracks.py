"""The npu stress track (``track`` config key; :data:`servegym.splits.FAMILY_TRACKS` ``["npu"]``): the chip versions
and the per-model chip quotas it sets.

A track keeps its base split's draws (model, trace, day, start hour, rate, seeds: train, validation and test stay
disjoint) and sets two fields of :class:`~servegym.envs.npu.env_config.NPUEnvConfig`: ``versions`` (in the config
itself, so ``env.config`` and every baseline read them) and the chip quota of the episode's model (applied by
:meth:`~servegym.envs.npu.env_config.NPUEnvConfig.cluster_config` per drawn model, since the split draws the model).
``versions`` may be left at its default or given the track's own value; ``quota_chips`` and ``phase_versions`` must
stay unset (the track owns them); anything else is a one-line ConfigError.

- ``stress-quota``: the split's episodes on NPU-C and NPU-D only (no fail-over to NPU-A/B) under a chip quota per
  model in the paper's C:D ratio of 1:2 (Figure 25's C:256/D:512), NPU-D at the model's train-median unconstrained
  peak under Base: Llama-3-8B C:8/D:12, Llama-3-70B C:56/D:112, Llama-3.1-405B C:288/D:576, DeepSeek-V3 C:160/D:320.
  Why: a fixed C:256/D:512 would bind only where a model needs more than 512 NPU-D chips (unconstrained Base: 5 of
  the 30 test episodes, all Llama-3.1-405B; never Llama-3-8B or -70B); at each model's median the quota binds (peak
  chips held reach it) on 52 of 80 train, 24 of 30 validation and 14 of 30 test episodes under Base, which keeps its
  decode group on NPU-D and misses up to all requests' SLO there (the paper's collapse), while NeuScale fails decode
  over to NPU-C; which groups get the scarce chips, on which version, and when, is what a policy can learn

``stress-quota``: after §5.4 / Figure 25 of the NPU paper (NeuScale with NPU-C/NPU-D quotas and no fail-over to
NPU-A/B; "C:256/D:512" named for its focal model DeepSeek-V3, with SLO satisfaction "as low as 14%/11%"). The splits
draw four models whose chip needs differ ~30-fold, so one fixed quota binds on some models only. Each model's NPU-D
quota is the median over the train episodes (reset seeds 0-79, the quick suite's 2-h horizon, NPU-C/D only, no
quota) of Base's peak NPU-D chips held (Llama-3-8B 11.5, -70B 112, Llama-3.1-405B 576, DeepSeek-V3 320), its NPU-C
quota half of it (the paper's ratio; Llama-3-8B's rounded up to 8, the smallest vPod of its top decode group, so
every group keeps a configuration): :data:`TRACK_QUOTAS`. DeepSeek-V3's C:160/D:320 is tighter than the paper's
named C:256/D:512, which is about its 80th percentile on the train episodes. Where it binds (:func:`quota_binds`: at
the peak, no vPod of the version's smallest configuration fits beside the chips held), 2-h episodes: Base 52 of 80
train, 24 of 30 validation, 14 of 30 test episodes; NeuScale 65, 27, 24. Measured headroom:
benchmarks/results/headroom.md ("Stress tracks").
"""

from __future__ import annotations

from typing import Any

from servegym.errors import ConfigError

#: Track -> the chip versions the DSE and every policy may use (no NPU-A/B fail-over).
TRACK_VERSIONS: dict[str, tuple[str, ...]] = {"stress-quota": ("NPU-C", "NPU-D")}
#: Track -> model -> {version: chips}: each model's train-median need in the paper's C:D ratio (module docstring).
TRACK_QUOTAS: dict[str, dict[str, dict[str, int]]] = {
    "stress-quota": {
        "Llama-3-8B": {"NPU-C": 8, "NPU-D": 12},
        "Llama-3-70B": {"NPU-C": 56, "NPU-D": 112},
        "Llama-3.1-405B": {"NPU-C": 288, "NPU-D": 576},
        "DeepSeek-V3-671B": {"NPU-C": 160, "NPU-D": 320},
    },
}


def track_versions(cfg: Any, default_versions: tuple[str, ...]) -> tuple[str, ...] | None:
    """The ``versions`` that make ``cfg`` play its ``track`` (None for no track). ConfigError if ``cfg`` sets
    ``versions`` to anything but the default or the track's, or sets ``quota_chips`` / ``phase_versions``."""
    if cfg.track is None:
        return None
    want = TRACK_VERSIONS[cfg.track]
    if tuple(cfg.versions) not in (tuple(default_versions), want):
        raise ConfigError(f"versions = {list(cfg.versions)!r} is set by track = {cfg.track!r} (to {list(want)!r}); "
                          f"allowed: the default, {list(want)!r}, or no track")
    for name in ("quota_chips", "phase_versions"):
        if getattr(cfg, name) is not None:
            raise ConfigError(f"{name} = {getattr(cfg, name)!r} is set by track = {cfg.track!r} (per model: "
                              f"servegym.envs.npu.tracks.TRACK_QUOTAS); allowed: None, or no track")
    return want


def track_quota(track: str | None, model: str) -> dict[str, int] | None:
    """The chip quota of ``model`` on ``track`` (None: no track)."""
    return None if track is None else dict(TRACK_QUOTAS[track][model])


def quota_binds(sim: Any) -> bool:
    """Whether the quota bound ``sim``'s run (an :class:`~servegym.envs.npu.sim.cluster.NPUCluster` after it ran): at
    its peak, some version held so many chips that no vPod of that version's smallest configuration fit beside
    them (a creation there would have been refused)."""
    smallest: dict[str, float] = {}
    for cid, c in enumerate(sim.configs):
        smallest[c.version] = min(smallest.get(c.version, float("inf")), float(sim.cfg_chips[cid]))
    return any(q != float("inf") and sim.max_held[v] + smallest.get(v, float("inf")) > q for v, q in sim.quota.items())
