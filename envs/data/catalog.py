"""The catalog of datasets shipped inside the package.

Traces and request-length sets are listed here (their files live in ``traces/``
beside this module; see ``traces/PROVENANCE.md``). Grid datasets (carbon
intensity, RTT) are described by :mod:`servegym.envs.grid`, which is imported
lazily so that trace commands keep working without it.
"""

from __future__ import annotations

import importlib
from dataclasses import asdict, dataclass
from typing import Any

from servegym.errors import ConfigError

SPLITWISE_CITATION = (
    "Patel et al., \"Splitwise: Efficient generative LLM inference using phase splitting\", ISCA 2024"
)
MOONCAKE_CITATION = (
    "Qin et al., \"Mooncake: Trading More Storage for Less Computation - A KVCache-centric "
    "Architecture for Serving LLM Chatbot\", USENIX FAST 2025"
)
VIDUR_CITATION = "Agrawal et al., \"Vidur: A Large-Scale Simulation Framework for LLM Inference\", MLSys 2024"


@dataclass(frozen=True)
class DatasetInfo:
    """One shipped dataset: ``file`` is relative to the ``servegym.envs.data`` package folder."""

    name: str
    kind: str          # "trace" (arrivals + lengths), "lengths" (lengths only) or a grid kind
    file: str
    description: str
    license: str
    source: str
    citation: str

    def as_dict(self) -> dict[str, str]:
        return asdict(self)


TRACES: dict[str, DatasetInfo] = {
    "azure-conv": DatasetInfo(
        name="azure-conv", kind="trace", file="traces/azure_conv.csv.gz",
        description="Azure LLM inference trace 2023, conversation service: ~58 min of arrivals with "
                    "prompt and generated token counts (all rows, original columns)",
        license="CC-BY-4.0",
        source="https://github.com/Azure/AzurePublicDataset data/AzureLLMInferenceTrace_conv.csv "
               "@ 790921015d50dd6aae7f7e47f39ba0e235ad6b08",
        citation=SPLITWISE_CITATION,
    ),
    "azure-code": DatasetInfo(
        name="azure-code", kind="trace", file="traces/azure_code.csv.gz",
        description="Azure LLM inference trace 2023, code-completion service: ~57 min of arrivals with "
                    "prompt and generated token counts (all rows, original columns)",
        license="CC-BY-4.0",
        source="https://github.com/Azure/AzurePublicDataset data/AzureLLMInferenceTrace_code.csv "
               "@ 790921015d50dd6aae7f7e47f39ba0e235ad6b08",
        citation=SPLITWISE_CITATION,
    ),
    "mooncake": DatasetInfo(
        name="mooncake", kind="trace", file="traces/mooncake_conversation.csv.gz",
        description="Mooncake (Kimi) FAST'25 conversation trace: one hour of arrivals (ms) with input and "
                    "output lengths; hash_ids dropped; all 12,031 rows (the <=38,000-input filter is "
                    "applied at load time)",
        license="Apache-2.0",
        source="https://github.com/kvcache-ai/Mooncake FAST25-release/traces/conversation_trace.jsonl "
               "@ 3cca71daccf2a7afb8fe3f0295358f70e3a69fdb",
        citation=MOONCAKE_CITATION,
    ),
    "arxiv": DatasetInfo(
        name="arxiv", kind="lengths", file="traces/arxiv_summarization_lengths.csv.gz",
        description="arXiv-summarization request lengths (Llama-2 tokenizer, <=4,096 total tokens) from "
                    "Vidur; no arrival times",
        license="MIT",
        source="https://github.com/microsoft/vidur "
               "data/processed_traces/arxiv_summarization_stats_llama2_tokenizer_filtered_v2.csv "
               "@ 6d98aa8f71696520acc603d87439e77cc78160a7",
        citation=VIDUR_CITATION,
    ),
}


def trace_names() -> list[str]:
    """Names of the shipped traces and length sets (arrivals are available for kind ``trace``)."""
    return list(TRACES)


def _grid_module() -> Any | None:
    """The grid module if it exists and exposes the dataset functions, else ``None``."""
    try:
        mod = importlib.import_module("servegym.envs.grid")
    except ModuleNotFoundError as exc:
        if exc.name not in ("servegym.envs.grid",):
            raise
        return None
    if not (hasattr(mod, "grid_datasets") and hasattr(mod, "summarize_grid_dataset")):
        return None
    return mod


def grid_datasets() -> dict[str, dict[str, Any]]:
    """Grid datasets as described by :func:`servegym.envs.grid.grid_datasets` (empty until it exists)."""
    mod = _grid_module()
    return {} if mod is None else dict(mod.grid_datasets())


def all_datasets() -> dict[str, dict[str, Any]]:
    """Every shipped dataset, name -> {kind, description, license, source, file, ...}."""
    out: dict[str, dict[str, Any]] = {name: info.as_dict() for name, info in TRACES.items()}
    for name, meta in grid_datasets().items():
        out[name] = {"name": name, **meta}
    return out


def summarize(name: str) -> dict[str, Any]:
    """Summary statistics of one dataset (trace: rows, duration, rate, ISL/OSL; grid: per grid module)."""
    if name in TRACES:
        from servegym.envs.traces import trace_stats

        info = TRACES[name]
        return {**info.as_dict(), **trace_stats(name)}
    grid = grid_datasets()
    if name in grid:
        return {"name": name, **grid[name], **_grid_module().summarize_grid_dataset(name)}  # type: ignore[union-attr]
    names = ", ".join(sorted(all_datasets()))
    raise ConfigError(f"dataset = {name!r} is unknown; allowed: {names}")
