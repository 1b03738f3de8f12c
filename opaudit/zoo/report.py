"""Views of a zoo: zoo.csv (one row per model x target), zoo.json, zoo.html (heat map, filters, op demand) and
the terminal summary. Every view reads the same records (run.py)."""

from __future__ import annotations

import csv
import io
import json
from collections import Counter
from pathlib import Path
from typing import Any

from opaudit import __version__
from opaudit.zoo.run import ZooResult
from opaudit.zoo.shrink import cut_text

CSV_COLUMNS = ["model", "family", "head", "target", "vendor", "release", "torch", "verdict", "missing_ops", "missing",
               "version_skew_ops", "unknown_ops", "cpu_fallback_ops", "status", "reason", "error", "mode", "calls",
               "ops", "duration_s", "config_fixes", "cut"]
ZOO_SCHEMA = "opaudit-zoo/1"


def rows(z: ZooResult) -> list[dict[str, Any]]:
    """One row per model x target; a model that failed has one row, with no target and verdict ``error``."""
    out: list[dict[str, Any]] = []
    for r in z.records:
        common = {"model": r["spec"], "family": r.get("family") or "", "head": r.get("head") or "",
                  "status": r["status"], "reason": r.get("reason") or "", "error": r.get("error") or "",
                  "mode": r.get("mode") or "", "calls": r.get("calls") or 0, "ops": r.get("ops") or 0,
                  "duration_s": r.get("duration_s") or 0.0, "config_fixes": fixes_text(r), "cut": cut_text(r)}
        if r["status"] != "ok":
            out.append({**dict.fromkeys(CSV_COLUMNS, ""), **common, "verdict": "error", "missing_ops": 0,
                        "version_skew_ops": 0, "unknown_ops": 0, "cpu_fallback_ops": 0})
            continue
        for t in r["targets"]:
            out.append({**common, "target": t["target"], "vendor": t["vendor"], "release": t["release"],
                        "torch": t["torch"], "verdict": t["verdict"], "missing_ops": len(t["missing"]),
                        "missing": " ".join(t["missing"]), "version_skew_ops": len(t["skew"]),
                        "unknown_ops": len(t["unknown"]), "cpu_fallback_ops": len(t["fallback"])})
    return out


def fixes_text(record: dict[str, Any]) -> str:
    """The fixes of transformers' default configuration a model was built with, ``key=value; ...`` ("" for none):
    a result never stands silently on a changed configuration."""
    fixes = record.get("config_fixes") or {}
    return "; ".join(f"{k}={json.dumps(v, separators=(',', ':'))}" for k, v in fixes.items())


def csv_text(z: ZooResult) -> str:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=CSV_COLUMNS, lineterminator="\n")
    w.writeheader()
    for row in rows(z):
        w.writerow({k: row.get(k, "") for k in CSV_COLUMNS})
    return buf.getvalue()


def op_demand(z: ZooResult, target: str) -> list[dict[str, Any]]:
    """The ops ``target`` lacks, ranked by how many models they block, with those models."""
    blocked: dict[str, list[str]] = {}
    for r in z.records:
        for t in r.get("targets", []):
            if t["target"] == target:
                for op in t["missing"]:
                    blocked.setdefault(op, []).append(r["spec"])
    return [{"op": op, "models": len(models), "blocked": models}
            for op, models in sorted(blocked.items(), key=lambda kv: (-len(kv[1]), kv[0]))]


def json_doc(z: ZooResult) -> dict[str, Any]:
    return {"schema": ZOO_SCHEMA, "opaudit_version": __version__, "targets": z.targets, "options": z.options,
            "wall_s": z.wall_s, "cached": z.cached, "models": z.records,
            "op_demand": {t: op_demand(z, t) for t in z.targets}}


def json_text(z: ZooResult) -> str:
    return json.dumps(json_doc(z), indent=1, sort_keys=False) + "\n"


def summary(z: ZooResult) -> list[str]:
    """The terminal summary: models traced, failures by reason, per target how many models run, the ops that
    block the most models."""
    ok = [r for r in z.records if r["status"] == "ok"]
    reasons = Counter(r.get("reason") or "error" for r in z.failed)
    lines = [f"{len(z.records)} models, {len(ok)} traced"
             + (f", {len(z.failed)} failed ({', '.join(f'{k} {v}' for k, v in reasons.most_common())})"
                if z.failed else "")
             + f"; {z.cached} from the cache; {z.wall_s:.1f} s"]
    for target in z.targets:
        verdicts = Counter(t["verdict"] for r in ok for t in r["targets"] if t["target"] == target)
        demand = op_demand(z, target)[:3]
        top = ", ".join(f"{d['op'].removeprefix('aten::')} ({d['models']})" for d in demand)
        # natively and on the vendor's CPU fallback apart, as zoo.csv has them
        cpu = verdicts["cpu_fallback"]
        lines.append(f"  {target}: {verdicts.get('runs', 0)}/{len(ok)} run"
                     + (f"; {cpu} with ops on the CPU fallback" if cpu else "")
                     + (f"; {verdicts['fails']} fail" if verdicts["fails"] else "")
                     + (f"; {verdicts['version_skew']} need a newer PyTorch" if verdicts["version_skew"] else "")
                     + (f"; {verdicts['uncertain']} uncertain" if verdicts["uncertain"] else "")
                     + (f"; most blocking: {top}" if top else ""))
    for r in z.failed[:10]:
        why = str(r.get("error") or r.get("reason"))
        lines.append(f"  failed: {why}" if why.startswith(f"{r['spec']}: ") else f"  failed: {r['spec']}: {why}")
    if len(z.failed) > 10:
        lines.append(f"  ... and {len(z.failed) - 10} more failures (zoo.csv has them all)")
    return lines


def labels(records: list[dict[str, Any]]) -> list[str]:
    """A short name per model for the page, its type: ``llama``; with its head where the type comes with several
    heads (``bert:SequenceClassification``), numbered where the same type and head come twice (other overrides);
    a spec that did not resolve, the spec up to its overrides. The full spec stays in the tooltip and the CSV."""
    def base(r: dict[str, Any]) -> str:
        if r.get("family"):
            return str(r["family"])
        return r["spec"].partition("?")[0].removeprefix("hf:")[:60]

    names = [base(r) for r in records]
    heads: dict[str, set[str]] = {}
    for r, name in zip(records, names, strict=True):
        heads.setdefault(name, set()).add(r.get("head") or "")
    names = [f"{n}:{r['head']}" if len(heads[n]) > 1 and r.get("head") else n
             for r, n in zip(records, names, strict=True)]
    seen: Counter[str] = Counter(names)
    count: Counter[str] = Counter()
    out = []
    for n in names:
        count[n] += 1
        out.append(f"{n} #{count[n]}" if seen[n] > 1 else n)
    return out


def html_text(z: ZooResult, *, title: str = "opaudit zoo") -> str:
    import jinja2

    from opaudit.data import data_dir
    from opaudit.report.html import VERDICT_COLOURS, script_json

    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(data_dir("reports"))),
                             autoescape=jinja2.select_autoescape(["html", "j2"], default=True),
                             trim_blocks=True, lstrip_blocks=True, undefined=jinja2.StrictUndefined)
    data = {"targets": [{"key": k, "vendor": k.partition("@")[0], "release": k.partition("@")[2]}
                        for k in z.targets],
            "models": [{"spec": r["spec"], "label": label, "family": r.get("family") or "", "head": r.get("head") or "",
                        "status": r["status"], "error": r.get("error") or "", "mode": r.get("mode") or "",
                        "fixes": fixes_text(r), "cut": cut_text(r),
                        "results": {t["target"]: [t["verdict"], t["summary"], t["missing"]]
                                    for t in r.get("targets", [])}}
                       for r, label in zip(z.records, labels(z.records), strict=True)],
            "colours": {**VERDICT_COLOURS, "error": "#555b66"}}
    ok = sum(r["status"] == "ok" for r in z.records)
    fixed = sum(bool(r.get("config_fixes")) for r in z.records)
    return env.get_template("zoo.html.j2").render(title=title, data_json=script_json(data), version=__version__,
                                                   models=len(z.records), traced=ok, fixed=fixed, targets=z.targets,
                                                   train=z.train, colours=data["colours"])


FILES = {"csv": csv_text, "json": json_text, "html": html_text}


def check_outputs(folder: Path) -> None:
    """Before a long run: every output of the folder can be written."""
    from opaudit.files import check_writable

    for fmt in FILES:
        check_writable(folder / f"zoo.{fmt}")


def write_outputs(z: ZooResult, folder: Path) -> list[Path]:
    """zoo.csv, zoo.json and zoo.html in ``folder`` (made if needed), each written atomically."""
    from opaudit.files import write_atomic

    folder.mkdir(parents=True, exist_ok=True)
    texts = {fmt: make(z) for fmt, make in FILES.items()}
    return [write_atomic(folder / f"zoo.{fmt}", text) for fmt, text in texts.items()]
