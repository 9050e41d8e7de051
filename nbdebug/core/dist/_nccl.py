"""Read an ``NCCL_DEBUG=INFO`` log: version, interfaces, transports, and the failures it shows.

The failures are the knowledge entries read by ``nccl_log`` (``core/knowledge/dist.py``); each names the real
log (a public GitHub issue) it was taken from, and tests/data/dist/ holds those logs.  Each failure is a
``Finding``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from typing import Any

from nbdebug.core._findings import Finding, Fix, HasFindings, sort_findings
from nbdebug.core._result import Result
from nbdebug.core.dist._failures import meaning
from nbdebug.core.knowledge import Entry, entries, finding
from nbdebug.errors import ReportParseError

__all__ = ["NcclLog", "parse_nccl_log"]


@cache
def _compiled() -> tuple[tuple[Entry, re.Pattern[str]], ...]:
    # the explainer's broad entries last (the most general, "NCCL error", at the very end), so each line is told
    # by the entry that knows it best: "NCCL WARN ... No route to host" is no_route_to_host, not any NCCL error
    chosen = sorted(entries("nccl_log"), key=lambda e: ("explain" in e.contexts, -e.priority))
    return tuple((e, re.compile("|".join(f"(?:{p})" for p in e.patterns))) for e in chosen)


@dataclass(frozen=True, repr=False)
class NcclLog(HasFindings, Result):
    """What an ``NCCL_DEBUG=INFO`` log says.

    Attributes
    ----------
    version : str
        NCCL version (``2.4.7+cuda9.2``), '' when the log does not say.
    cuda_driver : str
        ``cudaDriverVersion`` as logged.
    hosts : tuple of str
        Host names seen in the line prefixes.
    ranks : tuple of int
        Ranks seen (``rank R nranks N``, ``[Rank R]``).
    nranks : int or None
        World size when logged.
    interfaces : tuple of str
        Socket interfaces NCCL chose (``ens3:172.31.10.182``).
    ib_devices : tuple of str
        InfiniBand / RoCE devices.
    transports : tuple of str
        Transports used between ranks (``P2P/IPC``, ``SHM``, ``NET/Socket``, ``NET/IB``...).
    network : str
        ``Socket`` or ``IB`` (``Using network ...``).
    env : dict
        ``NCCL_*`` variables the log says were set.
    timeouts : tuple of dict
        Watchdog timeouts: rank, SeqNum, op, timeout in ms.
    findings : tuple of Finding
        Failures and notable facts, errors first (``ok`` when none is an error or a warning): ``kind`` is the knowledge entry (``no_route_to_host``,
        ``nccl_timeout``, ...), ``evidence`` holds the first matching ``line`` and the ``count`` of such lines.
    """

    version: str
    cuda_driver: str
    hosts: tuple[str, ...]
    ranks: tuple[int, ...]
    nranks: int | None
    interfaces: tuple[str, ...]
    ib_devices: tuple[str, ...]
    transports: tuple[str, ...]
    network: str
    env: dict[str, str]
    timeouts: tuple[dict[str, Any], ...]
    findings: tuple[Finding, ...]

    def _summary_line(self) -> str:
        return f"NCCL {self.version or '?'}: {len(self.findings)} finding(s)"

    def _records(self) -> list[dict[str, Any]]:
        return [{"kind": p.kind, "severity": p.severity.value, "title": p.title, "message": p.message,
                 "fix": p.fix, "count": p.evidence.get("count", 1), "line": p.evidence.get("line", "")}
                for p in self.findings]


_VERSION = re.compile(r"NCCL version (\S+)")
_DRIVER = re.compile(r"cudaDriverVersion ([0-9]{1,18})")
# launchers put "[rank0]:", "[default0]:" or "[1,0]<stdout>:" before NCCL's own "host:pid:tid [dev]"; the leading
# bracket groups are skipped by _strip_brackets (a regex for them backtracks quadratically on "[a]:[a]:[a]:...")
_PREFIX = re.compile(r"\s*(?:[^\s<]*<stdout>:)?(?P<host>[A-Za-z0-9_.\-]+(?:<[A-Za-z0-9_.\-]*>)?[A-Za-z0-9_.\-]*):"
                     r"(?P<pid>[0-9]{1,18}):(?P<tid>[0-9]{1,18}) \[[0-9]{1,18}\]")


def _strip_brackets(line: str) -> str:
    """``[rank0]:[x] host:...`` -> ``host:...`` (leading ``[...]`` / ``[...]:`` groups, linear time)."""
    i = 0
    while i < len(line) and line[i] == "[":
        end = line.find("]", i)
        if end < 0:
            break
        i = end + 1
        if i < len(line) and line[i] == ":":
            i += 1
    return line[i:]
_RANK = re.compile(r"\brank ([0-9]{1,18}) nranks ([0-9]{1,18})|\[Rank ([0-9]{1,18})\]|\[rank([0-9]{1,18})\]")
_IFACE = re.compile(r"\[[0-9]{1,18}\]([A-Za-z0-9_.\-]+):([0-9A-Fa-f:.%A-Za-z_\-]+)<[0-9]{1,18}>")
_IFACE_OLD = re.compile(r"Using (?:interface )?([A-Za-z0-9_.\-]+):([0-9A-Fa-f:.%]+)<[0-9]{1,18}>")
_IB = re.compile(r"\[[0-9]{1,18}\](mlx[0-9]{1,18}_[0-9]{1,18}:[0-9]{1,18}/\w+)")
_VIA = re.compile(r"via (?:(direct shared memory|direct pointer)|([A-Za-z0-9]+(?:/[A-Za-z_0-9]+)?))")
_NETWORK = re.compile(r"Using network (\w+)")
_ENV = re.compile(r"(NCCL_[A-Z_]+) set (?:by environment )?to (\S+)")
_TIMEOUT = re.compile(r"\[Rank ([0-9]{1,18})\] Watchdog caught collective operation timeout: WorkNCCL\(SeqNum=([0-9]{1,18}), "
                      r"OpType=(\w+).*?Timeout\(ms\)=([0-9]{1,18})\)")


def _transport(m: re.Match[str]) -> str:
    if m.group(1):
        return "SHM" if "shared memory" in m.group(1) else "P2P"
    name = m.group(2)
    head, _, rest = name.partition("/")
    if head == "NET":
        return "NET/IB" if rest.startswith("IB") else f"NET/{rest}"
    return head if head in ("SHM", "NVLS", "CollNet") else f"{head}/{rest}" if rest else head


def parse_nccl_log(text: str) -> NcclLog:
    """Parse an ``NCCL_DEBUG=INFO`` log (one rank's or many ranks' interleaved) into an ``NcclLog``.

    Raises
    ------
    ReportParseError
        When the text holds no NCCL line at all.
    """
    if not isinstance(text, str):
        raise ReportParseError(f"parse_nccl_log expects the NCCL log text (str), got {type(text).__name__}")
    if "NCCL" not in text and "WorkNCCL" not in text:
        head = text.strip().splitlines()[0][:80] if text.strip() else "(empty)"
        raise ReportParseError(
            f"this is not an NCCL log (no line mentions NCCL; it starts with {head!r}); expected the output of a run "
            "with NCCL_DEBUG=INFO, lines like 'host:pid:tid [0] NCCL INFO ...'"
        )
    version = cuda_driver = network = ""
    hosts: dict[str, None] = {}
    ranks: set[int] = set()
    nranks: int | None = None
    interfaces: dict[str, None] = {}
    ib: dict[str, None] = {}
    transports: dict[str, None] = {}
    env: dict[str, str] = {}
    timeouts: list[dict[str, Any]] = []
    hits: dict[str, tuple[Entry, list[str]]] = {}
    for line in text.splitlines():
        line = line[:4000]  # NCCL's lines are short; a longer one is cut before any pattern sees it
        if line.startswith("# source:"):
            continue
        if (m := _VERSION.search(line)) and not version:
            version = m.group(1)
        if (m := _DRIVER.search(line)) and not cuda_driver:
            cuda_driver = m.group(1)
        if m := _PREFIX.match(_strip_brackets(line)):
            hosts.setdefault(m.group("host"))
        for m in _RANK.finditer(line):
            if m.group(1) is not None:
                ranks.add(int(m.group(1)))
                nranks = int(m.group(2))
            else:
                ranks.add(int(m.group(3) or m.group(4)))
        if "Bootstrap : Using" in line or "NET/Socket : Using" in line or "NET : Using interface" in line \
                or "OOB " in line:
            for m in _IFACE.finditer(line):
                interfaces.setdefault(f"{m.group(1)}:{m.group(2)}")
            if not _IFACE.search(line):
                for m in _IFACE_OLD.finditer(line):
                    interfaces.setdefault(f"{m.group(1)}:{m.group(2)}")
            if (m := re.search(r"OOB ([A-Za-z0-9_.\-]+):([0-9.:A-Fa-f]+)<", line)):
                interfaces.setdefault(f"{m.group(1)}:{m.group(2)}")
        for m in _IB.finditer(line):
            ib.setdefault(m.group(1))
        for m in _VIA.finditer(line):
            transports.setdefault(_transport(m))
        if m := _NETWORK.search(line):
            network = m.group(1)
        for m in _ENV.finditer(line):
            env[m.group(1)] = m.group(2).rstrip(".")
        if m := _TIMEOUT.search(line):
            timeouts.append({"rank": int(m.group(1)), "seq": int(m.group(2)), "op": m.group(3),
                             "timeout_ms": int(m.group(4))})
        for e, rx in _compiled():
            if rx.search(line):
                hits.setdefault(e.slug, (e, []))[1].append(line.strip())
                break
    findings = [
        finding(e.slug, meaning(e) + ".", evidence={"line": lines[0][:300], "count": len(lines)})
        for e, lines in hits.values()
    ]
    findings += _interface_problems(tuple(interfaces), tuple(hosts))
    if timeouts:
        seqs = {t["seq"] for t in timeouts}
        if len(seqs) > 1:
            low = min(seqs)
            behind = sorted(t["rank"] for t in timeouts if t["seq"] == low)
            findings.append(finding(
                "ranks_out_of_step", f"ranks {behind} time out at SeqNum {low}, others at a later one",
                where=tuple(f"rank {r}" for r in behind),
                evidence={"line": f"SeqNums seen: {sorted(seqs)}", "count": len(timeouts), "seqs": sorted(seqs)}))
    return NcclLog(
        version=version, cuda_driver=cuda_driver, hosts=tuple(hosts), ranks=tuple(sorted(ranks)), nranks=nranks,
        interfaces=tuple(interfaces), ib_devices=tuple(ib), transports=tuple(transports), network=network, env=env,
        timeouts=tuple(timeouts), findings=sort_findings(findings),
    )


_VIRTUAL = re.compile(r"^(docker|veth|virbr|br-|cni|flannel|cali|tun|tap)")


def _interface_problems(interfaces: tuple[str, ...], hosts: tuple[str, ...]) -> list[Finding]:
    out = []
    names = [i.split(":", 1)[0] for i in interfaces]
    virtual = [n for n in names if _VIRTUAL.match(n)]
    if virtual:
        physical = next((n for n in names if not _VIRTUAL.match(n)), "eth0")
        out.append(finding(
            "virtual_interface", f"NCCL may use a virtual interface ({', '.join(virtual)})", where=tuple(virtual),
            fixes=[Fix("Container/bridge interfaces are not reachable from other nodes: set NCCL_SOCKET_IFNAME to "
                       "the physical interface", f"export NCCL_SOCKET_IFNAME={physical}")],
            evidence={"line": ", ".join(interfaces), "count": 1}))
    if any("fe80:" in i for i in interfaces):
        local = [i for i in interfaces if "fe80:" in i]
        out.append(finding(
            "link_local_ipv6", "an IPv6 link-local address (fe80::) is among the chosen interfaces",
            where=tuple(local), evidence={"line": ", ".join(local), "count": 1}))
    if names and all(n == "lo" for n in names) and len(hosts) > 1:
        out.append(finding(
            "loopback_multinode", f"NCCL uses the loopback interface lo, but the log shows {len(hosts)} hosts",
            where=hosts, evidence={"line": ", ".join(interfaces), "count": 1}))
    return out
