"""The npu best-fit tables on disk: :func:`cached_run_dse` is :func:`~servegym.envs.npu.sim.dse.run_dse` with a
content-keyed disk cache in the user cache folder (:mod:`servegym.user_cache`).

Why: a configuration catalog (:class:`~servegym.envs.npu.sim.vpods.ConfigCatalog`) costs 1.9-4.2 CPU-s per
model to build, nearly all of it the DSE (two best-fit tables, selection and scoring model) and the Pareto fronts
of the selection table's buckets, each an evaluation of every allocation at every batch; the first
``reset()`` of every new process (each ``SubprocVecEnv`` worker, each ``pytest -n auto`` worker, each CLI run)
paid it again. Measured cold against warm in ``benchmarks/npu_table_cache.py``.

What an entry holds (``<cache>/npu-dse/<key>.npz``, plain arrays, read with ``allow_pickle=False``): the SLO per
(phase, bucket), the best fits, the per-version fail-overs and every Pareto front the table had computed when it
was stored, each entry as its allocation index, batch and metrics (the allocation's version, shape, TP, PP and EP
come from the allocation space, which is rebuilt from the inputs in ~10 ms). ``key`` is the SHA-256 of every input
of :func:`run_dse` (the model's full spec, objective, phases, versions, buckets, batches, SLO factor or SLO table,
both step models' parameters, chip limit), :data:`FORMAT_VERSION`, numpy's version and the source of the modules
that compute the table (:data:`CODE_MODULES`), so an edit to the step model or the DSE gives new keys.

On load (:func:`load_table`), before any array is inflated, every member's declared size and array header is
checked (:func:`servegym.user_cache.checked_npz`; the ``meta`` member within :data:`MAX_META_BYTES`); then every
array field by field (dtype, shape, ranges, allocation and batch indices, each entry's SLO against the table's,
the SLOs against the caller's when it gives them, coverage: every (phase, bucket) has an SLO, and a best fit
exactly when it has a fail-over of some version). Two checks bind an entry to what built it:

* **Digest.** ``meta`` holds the SHA-256 of the key and of every other array (name, dtype, shape, bytes); one
  that differs from the arrays read (an edited or corrupted entry: best fits zeroed, energies x 1000) fails.
* **Re-derived sample.** :data:`SPOT_CHECKS` (phase, bucket)s, chosen by the digest, are explored again with
  this code (:func:`~servegym.envs.npu.sim.dse.explore_bucket`, 10-40 ms each; their step metrics seed the
  table's metrics cache, so the work is not lost); their SLO, best fit and fail-overs must equal the entry's
  exactly. This catches an entry whose digest was recomputed after an edit, as long as the edit touches a
  sampled bucket (any edit of every bucket does).

A file that fails, or whose stored key is not its name's (stale), is a miss: one stderr line names the entry and
the reason, and the table is rebuilt and replaced atomically. The loaded table equals the computed one exactly
(float64 arrays round-trip; tested). Fronts are stored by :func:`flush` once a catalog has computed them
(:class:`ConfigCatalog` calls it).
"""

from __future__ import annotations

import hashlib
import io
import json
import sys
from collections.abc import Iterable, Mapping
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
from servegym.envs.npu.sim import catalog as _catalog_mod
from servegym.envs.npu.sim import dse as _dse_mod
from servegym.envs.npu.sim import roofline as _roofline_mod
from servegym.envs.npu.sim.catalog import CHIPS, VERSIONS, ModelSpec, model
from servegym.envs.npu.sim.dse import (
    BATCH_BUCKETS,
    OBJECTIVES,
    SEQ_BUCKETS,
    BestFit,
    BestFitTable,
    explore_bucket,
    run_dse,
)
from servegym.envs.npu.sim.roofline import PHASES, RooflineParams, enumerate_allocations

from servegym.user_cache import (
    MAX_ENTRY_BYTES,
    BadEntry,
    checked_npz,
    content_key,
    entry_path,
    read_entry,
    source_digest,
    write_entry,
)

FORMAT = "servegym-npu-dse-table"
FORMAT_VERSION = 2
"""Raise when the layout of an entry changes (it is part of every key, so old entries are never read)."""
KIND = "npu-dse"
"""The entries' sub-folder of the cache folder."""
CODE_MODULES = (_catalog_mod, _roofline_mod, _dse_mod)
"""Modules whose source is part of the key: the model and chip tables, the step model and the DSE."""
ROLES = ("best", "fallback", "pareto")
_FLOATS = ("latency_s", "period_s", "slo_s", "energy_j_per_token", "usd_per_token", "tokens_per_s")
MAX_CHIPS = 1024
MAX_META_BYTES = 4096
"""The largest ``meta`` member (a JSON object of ~400 bytes, as uint8, plus its npy header) read back."""
ARRAYS = ("meta", "slo_phase", "slo_seq", "slo_val", "e_slot", "e_phase", "e_seq", "e_role", "e_alloc", "e_batch",
          "e_meets", "e_f", "f_phase", "f_seq", "f_obj", "f_versions")
"""The members of an entry; no other is read."""
SPOT_CHECKS = 2
"""(phase, bucket)s of a loaded table explored again and compared with the entry (see the module's docstring)."""


#: The code's digest, taken once when this module is imported (the modules above are loaded by then), so the key
#: describes the code this process runs even if the files are edited while it runs.
CODE_DIGEST: str | None = source_digest(CODE_MODULES)


class InvalidEntry(BadEntry):
    """A cache entry that fails a check (the message says which field); it is rebuilt."""


def _params(p: RooflineParams | None) -> dict[str, Any] | None:
    return None if p is None else asdict(p)


def table_key(spec: ModelSpec, objective: str, versions: tuple[str, ...], slo_factor: float,
              params: RooflineParams, slo_s: Mapping[tuple[str, int], float] | None,
              test_params: RooflineParams | None) -> str | None:
    """The content key of a table (None when the code's source cannot be read: then nothing is cached)."""
    code = CODE_DIGEST
    if code is None:
        return None
    inputs = {
        "format": FORMAT, "format_version": FORMAT_VERSION, "code": code, "numpy": np.__version__,
        "model": asdict(spec), "chips": {v: asdict(CHIPS[v]) for v in VERSIONS}, "objective": objective,
        "phases": list(PHASES), "versions": list(versions), "buckets": SEQ_BUCKETS.tolist(),
        "batches": BATCH_BUCKETS.tolist(), "slo_factor": float(slo_factor), "params": _params(params),
        "max_chips": MAX_CHIPS, "test_params": _params(test_params),
        "slo_s": None if slo_s is None else sorted([p, int(s), float(v)] for (p, s), v in slo_s.items()),
    }
    return content_key(inputs)


def cached_run_dse(model_name: str | ModelSpec, objective: str = "energy", versions: Iterable[str] = VERSIONS,
                   slo_factor: float = 5.0, params: RooflineParams | None = None,
                   slo_s: Mapping[tuple[str, int], float] | None = None,
                   test_params: RooflineParams | None = None) -> BestFitTable:
    """:func:`run_dse` over the default phases, buckets, batches and chip limit (what a catalog builds), read
    from the disk cache when a valid entry exists; otherwise built, and stored by :func:`flush`."""
    spec = model_name if isinstance(model_name, ModelSpec) else model(model_name)
    versions = tuple(versions)
    params = params or RooflineParams()
    key = table_key(spec, objective, versions, slo_factor, params, slo_s, test_params)
    path = None if key is None else entry_path(KIND, key, ".npz")
    refused: str | None = None
    if path is not None:
        try:
            data = read_entry(path)
            if data is not None:
                table = load_table(data, key, spec, objective, versions, slo_factor, params,  # type: ignore[arg-type]
                                   slo_s=slo_s, test_params=test_params)
                table._disk = (path, len(table._fronts))  # type: ignore[attr-defined]
                return table
        except BadEntry as exc:  # InvalidEntry included: a miss, rebuilt below and replaced by flush
            refused = str(exc)
    announce_build(spec.name, objective, path, refused)
    table = run_dse(spec, objective=objective, versions=versions, slo_factor=slo_factor, params=params,
                    slo_s=slo_s, test_params=test_params)
    if path is not None:
        table._disk = (path, -1)  # type: ignore[attr-defined]  # -1: not stored yet
    return table


#: (model, objective) of the builds this process has announced: a catalog builds two tables of one model, and one
#: line says why the first ``make`` is slow
_ANNOUNCED: set[tuple[str, str]] = set()


def announce_build(model_name: str, objective: str, path: Path | None, refused: str | None = None) -> None:
    """One line on stderr before a table is built rather than read from the cache: the first
    ``gym.make("servegym/NPUAutoscale-v0")`` on a machine spends ~8 s here and would otherwise say nothing.
    ``refused``: why the entry at ``path`` was not used (then the line says so, always: a bad entry is news)."""
    if refused is not None and path is not None:
        _ANNOUNCED.add((model_name, objective))
        print(f"servegym: npu table cache entry {path} not used ({refused}); rebuilding the best-fit tables of "
              f"{model_name} ({objective}), a few seconds, and replacing it", file=sys.stderr, flush=True)
        return
    if (model_name, objective) in _ANNOUNCED:
        return
    _ANNOUNCED.add((model_name, objective))
    where = (f"stored in {path.parent} for later runs" if path is not None
             else "not stored: the disk cache is off (SERVEGYM_NO_CACHE)")
    print(f"servegym: building the npu best-fit tables of {model_name} ({objective}), a few seconds once; {where}",
          file=sys.stderr, flush=True)


def flush(*tables: BestFitTable) -> None:
    """Store each table from :func:`cached_run_dse` whose content (its Pareto fronts) grew since it was read
    or built; tables from elsewhere are skipped. Never raises for an unwritable cache."""
    seen: set[int] = set()
    for t in tables:
        disk = getattr(t, "_disk", None)
        if disk is None or id(t) in seen:
            continue
        seen.add(id(t))
        path, stored = disk
        if stored == len(t._fronts):
            continue
        if write_entry(path, dump_table(t, path.stem)):
            t._disk = (path, len(t._fronts))  # type: ignore[attr-defined]


# --------------------------------------------------------------------------------------------- format
def dump_table(t: BestFitTable, key: str) -> bytes:
    """The ``.npz`` bytes of ``t`` (plain arrays; the metadata is JSON in a uint8 array)."""
    ents: list[BestFit] = []
    slot: list[int] = []
    for e in t.best.values():
        ents.append(e)
        slot.append(0)
    for e in t.per_version.values():
        ents.append(e)
        slot.append(1)
    fronts = list(t._fronts.items())
    for i, (_, front) in enumerate(fronts):
        ents.extend(front)
        slot.extend([2 + i] * len(front))
    slo = sorted(t.slo_s.items())
    arrays = {
        "slo_phase": np.array([PHASES.index(p) for (p, _), _ in slo], dtype=np.int64),
        "slo_seq": np.array([s for (_, s), _ in slo], dtype=np.int64),
        "slo_val": np.array([v for _, v in slo], dtype=np.float64),
        "e_slot": np.array(slot, dtype=np.int64),
        "e_phase": np.array([PHASES.index(e.phase) for e in ents], dtype=np.int64),
        "e_seq": np.array([e.seq_len for e in ents], dtype=np.int64),
        "e_role": np.array([ROLES.index(e.role) for e in ents], dtype=np.int64),
        "e_alloc": np.array([e.alloc_index for e in ents], dtype=np.int64),
        "e_batch": np.array([e.batch for e in ents], dtype=np.int64),
        "e_meets": np.array([e.meets_slo for e in ents], dtype=bool),
        "e_f": np.array([[getattr(e, f) for f in _FLOATS] for e in ents], dtype=np.float64).reshape(-1, len(_FLOATS)),
        "f_phase": np.array([PHASES.index(k[0][0]) for k, _ in fronts], dtype=np.int64),
        "f_seq": np.array([k[0][1] for k, _ in fronts], dtype=np.int64),
        "f_obj": np.array([OBJECTIVES.index(k[1]) for k, _ in fronts], dtype=np.int64),
        # "" for an unrestricted front (versions None); else the versions in the order the caller gave
        "f_versions": np.array([",".join(k[2]) if k[2] is not None else "" for k, _ in fronts], dtype="<U64"),
    }
    meta = {"format": FORMAT, "format_version": FORMAT_VERSION, "key": key, "model": t.model.name,
            "objective": t.objective, "n_alloc": len(t.space), "digest": arrays_digest(key, arrays)}
    arrays["meta"] = np.frombuffer(json.dumps(meta).encode("utf-8"), dtype=np.uint8)
    buf = io.BytesIO()
    np.savez(buf, **arrays)  # type: ignore[arg-type]
    return buf.getvalue()


def arrays_digest(key: str, arrays: Mapping[str, np.ndarray]) -> str:
    """SHA-256 (hex) of ``key`` and every array but ``meta`` (name, dtype, shape, bytes, in name order): what an
    entry's ``meta`` stores and :func:`load_table` recomputes, so an entry edited after it was written fails."""
    h = hashlib.sha256(key.encode("utf-8") + b"\0")
    for name in sorted(arrays):
        if name == "meta":
            continue
        a = np.ascontiguousarray(arrays[name])
        h.update(f"{name}\0{a.dtype.str}\0{a.shape}\0".encode())
        h.update(a.tobytes())
    return h.hexdigest()


def _array(z: Mapping[str, np.ndarray], name: str, kind: str, ndim: int = 1) -> np.ndarray:
    if name not in z:
        raise InvalidEntry(f"{name} is missing")
    a = z[name]
    if a.dtype.kind != kind or a.ndim != ndim:
        raise InvalidEntry(f"{name} has dtype {a.dtype} and {a.ndim} dimensions; allowed: kind {kind!r}, {ndim}-D")
    return a


def _in(name: str, a: np.ndarray, low: int, high: int) -> None:
    if a.size and (a.min() < low or a.max() >= high):
        raise InvalidEntry(f"{name} is out of range; allowed: [{low}, {high})")


def load_table(data: bytes, key: str, spec: ModelSpec, objective: str, versions: tuple[str, ...],
               slo_factor: float, params: RooflineParams, slo_s: Mapping[tuple[str, int], float] | None = None,
               test_params: RooflineParams | None = None) -> BestFitTable:
    """The table stored in ``data`` (an entry of ``key`` for the other arguments, :func:`cached_run_dse`'s),
    checked as the module's docstring says; :class:`InvalidEntry` naming what fails (a stale entry, whose stored
    key differs, or an edited one, whose digest or re-derived sample differs, included)."""
    try:
        z = checked_npz(data, {n: MAX_META_BYTES if n == "meta" else MAX_ENTRY_BYTES for n in ARRAYS})
        return _load(z, key, spec, objective, versions, slo_factor, params, slo_s, test_params)
    except InvalidEntry:
        raise
    except BadEntry as exc:  # the zip or a member's size or header: said by checked_npz
        raise InvalidEntry(str(exc)) from None
    except Exception as exc:  # a foreign file: JSON errors or anything else of any kind
        raise InvalidEntry(f"unreadable ({type(exc).__name__})") from None


def _load(z: Mapping[str, np.ndarray], key: str, spec: ModelSpec, objective: str, versions: tuple[str, ...],
          slo_factor: float, params: RooflineParams, given_slo: Mapping[tuple[str, int], float] | None,
          test_params: RooflineParams | None) -> BestFitTable:
    meta = json.loads(_array(z, "meta", "u").tobytes().decode("utf-8"))
    if not isinstance(meta, dict) or meta.get("format") != FORMAT or meta.get("format_version") != FORMAT_VERSION:
        raise InvalidEntry("format is not this code's")
    if meta.get("key") != key:
        raise InvalidEntry("key differs from the file name (stale)")
    digest = meta.get("digest")
    if not isinstance(digest, str) or digest != arrays_digest(key, z):
        raise InvalidEntry("its arrays differ from the digest stored with them (edited or corrupted)")
    space = enumerate_allocations(spec, versions, max_chips=MAX_CHIPS, params=params)
    if meta.get("n_alloc") != len(space) or meta.get("model") != spec.name or meta.get("objective") != objective:
        raise InvalidEntry("model, objective or allocation count differ from the inputs'")
    buckets = SEQ_BUCKETS
    bs = BATCH_BUCKETS if BATCH_BUCKETS[0] == 1 else np.concatenate([[1], BATCH_BUCKETS])
    # SLOs: exactly one finite positive value per (phase, bucket)
    sp, ss, sv = _array(z, "slo_phase", "i"), _array(z, "slo_seq", "i"), _array(z, "slo_val", "f")
    if not sp.size == ss.size == sv.size == len(PHASES) * buckets.size:
        raise InvalidEntry("slo_* do not cover every (phase, bucket)")
    _in("slo_phase", sp, 0, len(PHASES))
    if not np.isin(ss, buckets).all() or not (np.isfinite(sv).all() and (sv > 0).all()):
        raise InvalidEntry("slo_seq or slo_val is out of range")
    slo_s = {(PHASES[int(p)], int(s)): float(v) for p, s, v in zip(sp, ss, sv, strict=True)}
    if len(slo_s) != sp.size:
        raise InvalidEntry("slo_* repeat a (phase, bucket)")
    if given_slo is not None and any(slo_s[k] != float(given_slo.get(k, np.nan)) for k in slo_s):
        raise InvalidEntry("slo_val differs from the SLOs the table is built for")
    # entries
    cols = {n: _array(z, n, "i") for n in ("e_slot", "e_phase", "e_seq", "e_role", "e_alloc", "e_batch")}
    meets = _array(z, "e_meets", "b")
    ef = _array(z, "e_f", "f", 2)
    n = cols["e_slot"].size
    if any(c.size != n for c in cols.values()) or meets.size != n or ef.shape != (n, len(_FLOATS)):
        raise InvalidEntry("entry columns differ in length")
    fp, fs, fo = _array(z, "f_phase", "i"), _array(z, "f_seq", "i"), _array(z, "f_obj", "i")
    fv = _array(z, "f_versions", "U")
    nf = fp.size
    if not fs.size == fo.size == fv.size == nf:
        raise InvalidEntry("front columns differ in length")
    _in("e_slot", cols["e_slot"], 0, 2 + nf)
    _in("e_phase", cols["e_phase"], 0, len(PHASES))
    _in("e_role", cols["e_role"], 0, len(ROLES))
    _in("e_alloc", cols["e_alloc"], 0, len(space))
    _in("f_phase", fp, 0, len(PHASES))
    _in("f_obj", fo, 0, len(OBJECTIVES))
    if not np.isin(cols["e_seq"], buckets).all() or not np.isin(fs, buckets).all():
        raise InvalidEntry("e_seq or f_seq is not a bucket edge")
    if not np.isin(cols["e_batch"], bs).all():
        raise InvalidEntry("e_batch is not a batch bucket")
    if not (np.isfinite(ef).all() and (ef >= 0).all()):
        raise InvalidEntry("e_f has a negative or non-finite metric")
    slot, role = cols["e_slot"], cols["e_role"]
    want_role = np.minimum(slot, 2)
    if not np.array_equal(role, want_role):
        raise InvalidEntry("e_role does not match the entry's slot")
    ent_slo = np.array([slo_s[(PHASES[int(p)], int(s))] for p, s in zip(cols["e_phase"], cols["e_seq"], strict=True)])
    if not np.array_equal(ef[:, _FLOATS.index("slo_s")], ent_slo.reshape(-1)):
        raise InvalidEntry("an entry's slo_s differs from the table's")
    lat = ef[:, _FLOATS.index("latency_s")]
    if (meets & ~(lat <= ent_slo.reshape(-1))).any():
        raise InvalidEntry("e_meets is set on an entry slower than its SLO")
    fkeys = []
    for i in range(nf):
        vs = str(fv[i])
        vt = None if vs == "" else tuple(vs.split(","))
        if vt is not None and (len(set(vt)) != len(vt) or any(v not in VERSIONS for v in vt)):
            raise InvalidEntry("f_versions names an unknown or repeated version")
        fkeys.append(((PHASES[int(fp[i])], int(fs[i])), OBJECTIVES[int(fo[i])], vt))
    if len(set(fkeys)) != nf:
        raise InvalidEntry("f_* repeat a front")
    table = BestFitTable(model=spec, objective=objective, slo_factor=float(slo_factor), space=space, batches=bs,
                         buckets=buckets, phases=PHASES, slo_s=slo_s, best={}, per_version={})
    fronts: list[list[BestFit]] = [[] for _ in range(nf)]
    vp = space.vpods
    rows = ef.tolist()
    for i in range(n):
        a = int(cols["e_alloc"][i])
        v = vp[a]
        f = rows[i]
        e = BestFit(phase=PHASES[int(cols["e_phase"][i])], seq_len=int(cols["e_seq"][i]), role=ROLES[int(role[i])],
                    version=v.version, shape=v.shape, chips=v.chips, tp=v.tp, pp=v.pp, ep=v.ep,
                    batch=int(cols["e_batch"][i]), latency_s=f[0], period_s=f[1], slo_s=f[2], meets_slo=bool(meets[i]),
                    energy_j_per_token=f[3], usd_per_token=f[4], tokens_per_s=f[5], alloc_index=a)
        s = int(slot[i])
        if s == 0:
            k0 = (e.phase, e.seq_len)
            if k0 in table.best:
                raise InvalidEntry("two best fits for one (phase, bucket)")
            table.best[k0] = e
        elif s == 1:
            k1 = (e.phase, e.seq_len, e.version)
            if k1 in table.per_version:
                raise InvalidEntry("two fail-overs for one (phase, bucket, version)")
            table.per_version[k1] = e
        else:
            fk = fkeys[s - 2]
            if (e.phase, e.seq_len) != fk[0] or (fk[2] is not None and e.version not in fk[2]):
                raise InvalidEntry("a front entry lies outside its front's bucket or versions")
            fronts[s - 2].append(e)
    if any((*k, b.version) not in table.per_version for k, b in table.best.items()):
        raise InvalidEntry("a best fit has no fail-over entry of its version")
    # coverage: run_dse picks a best fit for a bucket exactly when some version has a feasible allocation there,
    # i.e. when the bucket has a fail-over; a best fit dropped (or one added) breaks this
    if {k[:2] for k in table.per_version} != set(table.best):
        raise InvalidEntry("best fits do not cover the buckets that have fail-overs")
    for fk, front in zip(fkeys, fronts, strict=True):
        table._fronts[fk] = tuple(front)
    _spot_check(table, digest, versions, given_slo, test_params)
    return table


def _spot_check(table: BestFitTable, digest: str, versions: tuple[str, ...],
                given_slo: Mapping[tuple[str, int], float] | None, test_params: RooflineParams | None) -> None:
    """Explore :data:`SPOT_CHECKS` buckets of ``table`` again with this code and compare their SLO, best fit and
    fail-overs with the loaded ones exactly (:class:`InvalidEntry` otherwise); the buckets are chosen by the
    entry's digest, so which are checked differs between entries but not between runs. Their step metrics seed
    the table's metrics cache (the simulation asks for them anyway)."""
    keys = sorted(table.slo_s)
    space = table.space
    tspace = (None if test_params is None or test_params == space.params else
              enumerate_allocations(table.model, versions, max_chips=MAX_CHIPS, params=test_params))
    seed = int(digest[:16], 16)
    picked = sorted({keys[(seed >> (8 * i)) % len(keys)] for i in range(SPOT_CHECKS)})
    fresh = BestFitTable(model=table.model, objective=table.objective, slo_factor=table.slo_factor, space=space,
                         batches=table.batches, buckets=table.buckets, phases=table.phases, slo_s={}, best={},
                         per_version={})
    for k in picked:
        # the caller's SLOs when it gives them (checked above), else derived again: a wrong stored SLO fails
        sm = explore_bucket(fresh, k, tspace, given_slo)
        if fresh.slo_s[k] != table.slo_s[k]:
            raise InvalidEntry(f"the SLO of {k} differs from this code's")
        mine = {v: e for (p, s, v), e in table.per_version.items() if (p, s) == k}
        theirs = {v: e for (p, s, v), e in fresh.per_version.items() if (p, s) == k}
        if fresh.best.get(k) != table.best.get(k) or mine != theirs:
            raise InvalidEntry(f"the best fits of {k} differ from this code's (wrong numbers)")
        table._cache[k] = sm


__all__ = ["CODE_MODULES", "FORMAT", "FORMAT_VERSION", "KIND", "InvalidEntry", "cached_run_dse", "dump_table",
           "flush", "load_table", "table_key"]
