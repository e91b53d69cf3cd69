"""Join run documents (CI shards, each a ``gpu_util.json``) into one run, as ``coverage combine`` does.

Every test must come from one shard only. Shards measured on the same machine (same GPU, host,
versions; the command line may differ) give a run with that ``machine_info``; shards from several
machines give a run whose ``machine_info`` holds what they share (the GPU models joined with
``" + "`` when they differ), a ``machines`` object with each machine's whole description under a
label (its host name), and each record's ``machine`` naming the label it ran on.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from pytest_gpuutil.records import TestRecord, gpu_totals
from pytest_gpuutil.rundoc.document import PathLike, RunDoc, RunDocError, now_utc, run_document
from pytest_gpuutil.rundoc.reading import load_run_doc

#: machine_info keys that may differ between shards of one machine (each shard's own command line)
PER_SHARD_KEYS = ("argv",)
#: top-level keys of a run document that merge_runs builds itself
_BUILT = frozenset({"format", "version", "created", "machine_info", "machines", "tests", "totals", "gpus",
                    "thresholds", "merged_from", "findings_summary"})


class MergeError(RunDocError):
    """Shards that cannot be merged; ``str()`` is one line ``<path>: <problem>``."""


@dataclass(frozen=True)
class Shard:
    """One run document to merge: its records and machine as read, and the document's other keys."""

    run: RunDoc
    #: the document's top-level keys besides format, version, created, machine_info and tests
    extra: Mapping[str, Any]
    #: label -> machine_info, for a document that is itself a merge of several machines
    machines: Mapping[str, Mapping[str, Any]]

    @property
    def path(self) -> Path:
        return self.run.path

    def machine_of(self, record: TestRecord) -> Mapping[str, Any]:
        """The machine that ran ``record``: its labelled machine in a merged document, else the run's."""
        return self.machines.get(record.machine, self.run.machine_info) if record.machine else self.run.machine_info


def read_shard(path: PathLike) -> Shard:
    """Read and check a run document for merging; RunDocError (one line) when it cannot be used."""
    run = load_run_doc(path)
    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:  # changed since load_run_doc read it
        raise RunDocError(path, f"cannot read: {exc}") from None
    machines = doc.get("machines") or {}
    if not isinstance(machines, dict) or not all(isinstance(v, dict) for v in machines.values()):
        raise RunDocError(path, "machines: expected an object of machine descriptions")
    for record in run.records.values():
        if record.machine and record.machine not in machines:
            raise RunDocError(path, f"{record.test}: machine {record.machine!r} is not in the document's machines")
    extra = {k: v for k, v in doc.items() if k not in ("format", "version", "created", "machine_info", "tests",
                                                         "machines")}
    return Shard(run, extra, machines)


def _identity(info: Mapping[str, Any]) -> str:
    """What makes two machine descriptions the same machine (everything but the command line)."""
    return json.dumps({k: v for k, v in info.items() if k not in PER_SHARD_KEYS}, sort_keys=True, default=str)


def _labels(infos: Sequence[Mapping[str, Any]]) -> list[str]:
    """A label per distinct machine: its host name, numbered when two share one."""
    labels: list[str] = []
    for index, info in enumerate(infos):
        host = info.get("host")
        base = host if isinstance(host, str) and host else f"machine{index + 1}"
        label, n = base, 1
        while label in labels:
            n += 1
            label = f"{base}#{n}"
        labels.append(label)
    return labels


def common_machine_info(infos: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """What the machines share; GPU models that differ are joined with " + ", other differences are None."""
    keys: dict[str, None] = {}
    for info in infos:
        keys.update(dict.fromkeys(info))
    common: dict[str, Any] = {}
    for key in keys:
        values = [info.get(key) for info in infos]
        if all(v == values[0] for v in values):
            common[key] = values[0]
        elif key == "gpu_model":
            common[key] = " + ".join(sorted({str(v) for v in values if v}))
        else:
            common[key] = None
    return common


def _number(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return 0.0
    return float(value)


def merged_totals(shards: Sequence[Shard], records: Sequence[TestRecord]) -> dict[str, Any]:
    """The run's totals: figures of the records computed again, the processes' costs added up."""
    totals = [s.extra.get("totals") for s in shards]
    totals = [t for t in totals if isinstance(t, Mapping)]
    measure_ms = sum(_number(t.get("measure_ms")) for t in totals)
    test_s = sum(_number(t.get("test_s")) for t in totals)
    startups = [t["startup_s"] for t in totals if _number(t.get("startup_s")) > 0]
    figures = gpu_totals(records)
    return {
        "tests": figures.pop("tests"),
        "measure_ms": measure_ms,
        "measure_in_tests_ms": sum(_number(t.get("measure_in_tests_ms")) for t in totals),
        "test_s": test_s,
        "measure_share_pct": 100.0 * measure_ms / 1000 / test_s if test_s > 0 else 0.0,
        "startup_s": max(startups) if startups else None,
        **figures,
    }


def _merged_gpus(shards: Sequence[Shard], label_of_shard: Sequence[str], labelled: bool) -> list[dict[str, Any]]:
    """Busy time per physical GPU; GPUs of different machines are told apart as ``label:gpu``."""
    per_gpu: dict[str, dict[str, Any]] = {}
    for shard, label in zip(shards, label_of_shard):
        gpus = shard.extra.get("gpus")
        for entry in gpus if isinstance(gpus, list) else ():
            if not isinstance(entry, Mapping) or "gpu" not in entry:
                continue
            key = f"{label}:{entry['gpu']}" if labelled and label else str(entry["gpu"])
            merged = per_gpu.setdefault(key, {"gpu": key, "busy_ms": 0.0, "tests": 0, "workers": []})
            merged["busy_ms"] += _number(entry.get("busy_ms"))
            merged["tests"] += int(_number(entry.get("tests")))
            workers = entry.get("workers") if isinstance(entry.get("workers"), list) else []
            merged["workers"] = sorted(set(merged["workers"]) | {str(w) for w in workers})
    return list(per_gpu.values())


def _other_keys(shards: Sequence[Shard]) -> dict[str, Any]:
    """Top-level keys this module does not know: objects joined, lists concatenated, other values kept
    when every shard that has the key agrees."""
    out: dict[str, Any] = {}
    keys: dict[str, None] = {}
    for shard in shards:
        keys.update(dict.fromkeys(k for k in shard.extra if k not in _BUILT))
    for key in keys:
        values = [s.extra[key] for s in shards if key in s.extra]
        if all(isinstance(v, Mapping) for v in values):
            joined: dict[str, Any] = {}
            for value in values:
                joined.update(value)
            out[key] = joined
        elif all(isinstance(v, list) for v in values):
            out[key] = [item for value in values for item in value]
        elif all(v == values[0] for v in values):
            out[key] = values[0]
    return out


def merge_runs(shards: Sequence[Shard], created: str | None = None) -> dict[str, Any]:
    """One run document from ``shards``; MergeError naming a test found in two of them."""
    if not shards:
        raise MergeError("-", "nothing to merge")
    seen: dict[str, Path] = {}
    for shard in shards:
        for test in shard.run.records:
            if test in seen:
                where = "twice in the list" if seen[test] == shard.path else f"also in {seen[test]}"
                raise MergeError(shard.path, f"test {test} is {where} (each test may come from one shard only)")
            seen[test] = shard.path
    # every distinct machine, in the order first seen
    identities: dict[str, Mapping[str, Any]] = {}
    for shard in shards:
        infos_here = [shard.machine_of(r) for r in shard.run.records.values()] or [shard.run.machine_info]
        for info in infos_here:
            identities.setdefault(_identity(info), info)
    infos = list(identities.values())
    labelled = len(infos) > 1
    label_by_identity = dict(zip(identities, _labels(infos))) if labelled else {}
    records: list[TestRecord] = []
    for shard in shards:
        for record in shard.run.records.values():
            label = label_by_identity.get(_identity(shard.machine_of(record)), "")
            records.append(replace(record, machine=label))
    records.sort(key=lambda r: r.test)
    if labelled:
        machine_info = common_machine_info(infos)
        machines = {label_by_identity[k]: dict(v) for k, v in identities.items()}
    else:
        machine_info = dict(infos[0]) if infos else {}
        machines = {}
    argvs = [s.run.machine_info.get("argv") for s in shards]
    if "argv" in machine_info or any(argvs):
        machine_info["argv"] = argvs[0] if all(a == argvs[0] for a in argvs) else None
    stamps = [s.run.created for s in shards if s.run.created]
    thresholds: dict[str, Any] = {}
    for shard in shards:
        if isinstance(shard.extra.get("thresholds"), Mapping):
            thresholds.update(shard.extra["thresholds"])
    shard_labels = [label_by_identity.get(_identity(s.run.machine_info), "") for s in shards]
    doc = run_document(
        records, machine_info, created or (max(stamps) if stamps else now_utc()),
        totals=merged_totals(shards, records),
        gpus=_merged_gpus(shards, shard_labels, labelled),
        thresholds=thresholds,
        merged_from=[
            {"file": str(s.path), "created": s.run.created, "tests": len(s.run.records),
             "argv": s.run.machine_info.get("argv"), "machine": label}
            for s, label in zip(shards, shard_labels)
        ],
    )
    if machines:
        doc["machines"] = machines
    doc.update(_other_keys(shards))
    floors = [s.extra["findings_summary"].get("floor") for s in shards
              if isinstance(s.extra.get("findings_summary"), Mapping)]
    from pytest_gpuutil.analysis.finding_records import Floor
    from pytest_gpuutil.analysis.findings import findings_summary

    floor = floors[0] if floors and isinstance(floors[0], Mapping) else {}
    summary = findings_summary(doc["tests"], Floor(**{k: float(v) for k, v in floor.items() if k in ("ms", "pct")}))
    if summary is not None:  # the shards' rankings joined: made again from the merged tests
        doc["findings_summary"] = summary
    return doc


def merge_files(paths: Iterable[PathLike], created: str | None = None) -> dict[str, Any]:
    """``merge_runs`` of the files at ``paths``; RunDocError (one line) for a file that cannot be used."""
    return merge_runs([read_shard(p) for p in paths], created)

