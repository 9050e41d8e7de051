"""Recipe: a job of N ranks built from the artifacts of a real 4-rank job, by relabelling ranks and hosts.

The source is a folder written by ``tests/data/dist/faulty_job.py`` under torchrun with ``instrument()`` (MODE=skip:
rank 1 never reaches the 4th all_reduce).  Rank ``template_good`` stands in for every healthy rank and
``template_bad`` for every rank of the bad host; each copy gets its own rank, host and pid in every file that
names them (Flight Recorder dump with the job's full ``pg_config``, error file, stack dump, ``[rankN]:`` log).
Used by tests/test_dist_postmortem.py (1,024 ranks) and benchmarks/bench_dist.py (4,096 ranks).
"""

from __future__ import annotations

import io
import json
import os
import pickle
import re
from pathlib import Path

__all__ = ["build_scaled"]


class _Plain(pickle.Unpickler):
    def find_class(self, module, name):  # the source dumps hold plain data only
        raise pickle.UnpicklingError(f"global {module}.{name}")


def _files_of(src: Path, rank: int) -> dict[str, bytes]:
    out = {}
    for name in (f"fr_rank_{rank}", f"error_rank{rank}.json", f"stacks_rank{rank}.txt", f"rank{rank}.log"):
        p = src / name
        if p.exists():
            out[name] = p.read_bytes()
    return out


def build_scaled(src: str | os.PathLike[str], out: str | os.PathLike[str], nranks: int, *, ranks_per_host: int = 8,
                 bad_host: int = 5, template_good: int = 0, template_bad: int = 1) -> dict[str, object]:
    """Write an ``nranks``-rank artifact folder to ``out``; return what was built (bad ranks, bad host name)."""
    src, out = Path(src), Path(out)
    out.mkdir(parents=True, exist_ok=True)
    good, bad = _files_of(src, template_good), _files_of(src, template_bad)
    bad_ranks = list(range(bad_host * ranks_per_host, (bad_host + 1) * ranks_per_host))
    ranks_text = "[" + ", ".join(str(r) for r in range(nranks)) + "]"
    fr_cache: dict[int, dict] = {}
    for rank in range(nranks):
        template, files = (template_bad, bad) if rank in bad_ranks else (template_good, good)
        host = f"node{rank // ranks_per_host:04d}"
        pid = 100_000 + rank
        for name, data in files.items():
            new_name = name.replace(f"rank_{template}", f"rank_{rank}").replace(f"rank{template}", f"rank{rank}")
            if name.startswith("fr_rank_"):
                if template not in fr_cache:
                    doc = _Plain(io.BytesIO(data)).load()
                    for cfg in doc.get("pg_config", {}).values():
                        cfg["ranks"] = ranks_text
                    fr_cache[template] = doc
                (out / new_name).write_bytes(pickle.dumps(fr_cache[template]))
                continue
            if name.endswith(".json"):
                doc = json.loads(data)
                nb = doc.setdefault("nbdebug", {})
                nb.update(rank=rank, host=host, pid=pid, time=float(nb.get("time", 0)) + rank * 1e-6)
                (out / new_name).write_text(json.dumps(doc))
                continue
            text = data.decode()
            text = text.replace(f"[rank{template}]:", f"[rank{rank}]:")
            text = re.sub(r"rank [0-9]+ of [0-9]+", f"rank {rank} of {nranks}", text)
            text = re.sub(r"rank [0-9]+ host \S+ pid [0-9]+", f"rank {rank} host {host} pid {pid}", text)
            text = re.sub(r"host \S+ pid [0-9]+", f"host {host} pid {pid}", text)
            (out / new_name).write_text(text)
    return {"bad_ranks": bad_ranks, "bad_host": f"node{bad_host:04d}", "nranks": nranks}


def export_example(src: str | os.PathLike[str], dst: str | os.PathLike[str], replace: dict[str, str]) -> None:
    """Copy a job's artifact folder with paths and names rewritten (``replace``: old -> new, in order), inside
    Flight Recorder dumps too: how nbdebug/examples/dist/postmortem_* were made from real runs."""
    src, dst = Path(src), Path(dst)
    dst.mkdir(parents=True, exist_ok=True)

    def fix(text: str) -> str:
        for old, new in replace.items():
            text = text.replace(old, new)
        return text

    def walk(value):
        if isinstance(value, str):
            return fix(value)
        if isinstance(value, list):
            return [walk(v) for v in value]
        if isinstance(value, tuple):
            return tuple(walk(v) for v in value)
        if isinstance(value, dict):
            return {walk(k): walk(v) for k, v in value.items()}
        return value

    for f in sorted(src.iterdir()):
        data = f.read_bytes()
        if data[:1] == b"\x80":
            (dst / f.name).write_bytes(pickle.dumps(walk(_Plain(io.BytesIO(data)).load()), protocol=2))
        else:
            (dst / f.name).write_text(fix(data.decode("utf-8", errors="replace")))
