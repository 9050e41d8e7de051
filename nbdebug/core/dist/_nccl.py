"""Read an ``NCCL_DEBUG=INFO`` log: version, interfaces, transports, and the failures it shows.

The patterns are a data table; each entry names the real log (a public GitHub issue) it was taken from, and
tests/data/dist/ holds those logs.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from nbdebug.core._result import Result
from nbdebug.errors import ReportParseError

__all__ = ["NcclProblem", "NcclLog", "NCCL_PATTERNS", "parse_nccl_log"]


@dataclass(frozen=True)
class _Pattern:
    name: str
    regex: str
    severity: str  # error | warning | info
    title: str
    fix: str
    source: str


NCCL_PATTERNS: tuple[_Pattern, ...] = (
    _Pattern("no_route_to_host", r"No route to host", "error",
             "a rank could not reach another host's address",
             "check that NCCL_SOCKET_IFNAME names an interface every node shares (see the 'Bootstrap : Using' lines), "
             "that MASTER_ADDR is reachable from every node, and that no firewall blocks the ports",
             "https://github.com/sgl-project/sglang/issues/3820"),
    _Pattern("connect_timeout", r"Connection timed out", "error",
             "connecting to a peer timed out (wrong interface, firewall, or the peer is not listening)",
             "set NCCL_SOCKET_IFNAME to the interface the nodes reach each other on (not docker/veth/virbr); "
             "check firewalls between the nodes",
             "https://github.com/Oneflow-Inc/oneflow/issues/3586"),
    _Pattern("connection_refused", r"Connection refused", "error",
             "a peer refused the connection (it is not listening: crashed, not started, or a wrong address)",
             "find the rank that did not start or crashed first; check MASTER_ADDR/MASTER_PORT",
             "NCCL socket.cc connect errors (errno ECONNREFUSED)"),
    _Pattern("connection_abort", r"Software caused connection abort", "error",
             "the connection to a peer was aborted during setup",
             "usually the peer died first: find its error; otherwise check the network between the nodes",
             "https://github.com/NVIDIA/nccl-tests/issues/166"),
    _Pattern("peer_closed", r"Connection closed by remote peer", "error",
             "a peer closed its connection: that process died or aborted (this rank is a victim)",
             "look for the rank that failed first (its own error is the cause)",
             "https://github.com/NVIDIA/nccl/issues/1232"),
    _Pattern("bad_socket_ifname", r"neither AF_INET\(2\) nor AF_INET6|no NCCL_SOCKET_IFNAME interface found", "error",
             "NCCL_SOCKET_IFNAME names an interface that does not exist on this host",
             "run `ip addr` on every node and set NCCL_SOCKET_IFNAME to an existing interface (e.g. eth0, ens3, ib0; a "
             "prefix like 'en' matches all interfaces starting with it)",
             "https://github.com/NVIDIA/nccl/issues/1837"),
    _Pattern("address_family", r"Address family not supported by protocol", "error",
             "IPv4/IPv6 mismatch between nodes",
             "set NCCL_SOCKET_FAMILY=AF_INET (or AF_INET6) on every node",
             "https://github.com/NVIDIA/nccl/issues/210"),
    _Pattern("watchdog_timeout", r"Watchdog caught collective operation timeout", "error",
             "a collective did not complete within the process-group timeout (a rank never joined it, or is stuck)",
             "find the rank that did not reach this collective (nbdebug's %%torchrun names it); compare SeqNum "
             "across ranks: a rank at a lower SeqNum fell behind",
             "https://github.com/XPixelGroup/BasicSR/issues/737"),
    _Pattern("system_error", r"unhandled system error|ncclSystemError", "error",
             "a system call failed inside NCCL (socket, shared memory, ...)",
             "rerun with NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET and read the WARN line just before it; in "
             "containers, /dev/shm may be too small (--shm-size / --ipc=host)",
             "https://github.com/NVIDIA/nccl/issues/375"),
    _Pattern("internal_error", r"ncclInternalError", "error",
             "NCCL's internal check failed (often a configuration problem named in the 'Last error' line)",
             "read the 'Last error:' line that follows",
             "https://github.com/NVIDIA/nccl/issues/1837"),
    _Pattern("no_ib", r"NET/IB : No device found", "info",
             "no InfiniBand device: inter-node traffic goes over TCP sockets (much slower)",
             "expected on Ethernet-only clusters; on IB clusters check the drivers and NCCL_IB_HCA",
             "https://github.com/NVIDIA/nccl/issues/226"),
    _Pattern("no_ibverbs", r"Failed to open libibverbs", "info",
             "libibverbs is not installed: InfiniBand cannot be used",
             "harmless on a single node or Ethernet; install rdma-core for InfiniBand",
             "https://github.com/NVIDIA/nccl/issues/1190"),
)

_COMPILED = tuple((p, re.compile(p.regex)) for p in NCCL_PATTERNS)


@dataclass(frozen=True)
class NcclProblem:
    """One failure (or notable fact) found in an NCCL log."""

    name: str
    severity: str
    title: str
    fix: str
    line: str
    count: int
    source: str


@dataclass(frozen=True, repr=False)
class NcclLog(Result):
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
    problems : tuple of NcclProblem
        Failures and notable facts, errors first.
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
    problems: tuple[NcclProblem, ...]


    @property
    def ok(self) -> bool:
        """No error-severity problem was found."""
        return not any(p.severity == "error" for p in self.problems)

    def _summary_line(self) -> str:
        return f"NCCL {self.version or '?'}: {len(self.problems)} problem(s)"

    def _records(self) -> list[dict[str, Any]]:
        return [{"name": p.name, "severity": p.severity, "title": p.title, "fix": p.fix, "count": p.count,
                 "line": p.line} for p in self.problems]


_VERSION = re.compile(r"NCCL version (\S+)")
_DRIVER = re.compile(r"cudaDriverVersion (\d+)")
_PREFIX = re.compile(r"^(?:\[[^\]]*\]:?)*\s*(?:\S*<stdout>:)?(?P<host>[A-Za-z0-9_.<>\-]+):(?P<pid>\d+):(?P<tid>\d+) \[\d+\]")
_RANK = re.compile(r"\brank (\d+) nranks (\d+)|\[Rank (\d+)\]|\[rank(\d+)\]")
_IFACE = re.compile(r"\[\d+\]([A-Za-z0-9_.\-]+):([0-9A-Fa-f:.%A-Za-z_\-]+)<\d+>")
_IFACE_OLD = re.compile(r"Using (?:interface )?([A-Za-z0-9_.\-]+):([0-9A-Fa-f:.%]+)<\d+>")
_IB = re.compile(r"\[\d+\](mlx\d+_\d+:\d+/\w+)")
_VIA = re.compile(r"via (?:(direct shared memory|direct pointer)|([A-Za-z0-9]+(?:/[A-Za-z_0-9]+)?))")
_NETWORK = re.compile(r"Using network (\w+)")
_ENV = re.compile(r"(NCCL_[A-Z_]+) set (?:by environment )?to (\S+)")
_TIMEOUT = re.compile(r"\[Rank (\d+)\] Watchdog caught collective operation timeout: WorkNCCL\(SeqNum=(\d+), "
                      r"OpType=(\w+).*?Timeout\(ms\)=(\d+)\)")


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
    hits: dict[str, list[str]] = {}
    for line in text.splitlines():
        if line.startswith("# source:"):
            continue
        if (m := _VERSION.search(line)) and not version:
            version = m.group(1)
        if (m := _DRIVER.search(line)) and not cuda_driver:
            cuda_driver = m.group(1)
        if m := _PREFIX.match(line):
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
        for pattern, rx in _COMPILED:
            if rx.search(line):
                hits.setdefault(pattern.name, []).append(line.strip())
    problems = [
        NcclProblem(p.name, p.severity, p.title, p.fix, hits[p.name][0][:300], len(hits[p.name]), p.source)
        for p, _ in _COMPILED if p.name in hits
    ]
    problems += _interface_problems(tuple(interfaces), tuple(hosts))
    if timeouts:
        seqs = {t["seq"] for t in timeouts}
        if len(seqs) > 1:
            low = min(seqs)
            behind = sorted(t["rank"] for t in timeouts if t["seq"] == low)
            problems.append(NcclProblem(
                "ranks_out_of_step", "error", f"ranks {behind} time out at SeqNum {low}, others at a later one",
                "the ranks at the lowest SeqNum fell behind or skipped collectives: look at what they did before it",
                f"SeqNums seen: {sorted(seqs)}", len(timeouts), "pytorch/pytorch#152623 (desync report)"))
    order = {"error": 0, "warning": 1, "info": 2}
    problems.sort(key=lambda p: order.get(p.severity, 3))
    return NcclLog(
        version=version, cuda_driver=cuda_driver, hosts=tuple(hosts), ranks=tuple(sorted(ranks)), nranks=nranks,
        interfaces=tuple(interfaces), ib_devices=tuple(ib), transports=tuple(transports), network=network, env=env,
        timeouts=tuple(timeouts), problems=tuple(problems),
    )


_VIRTUAL = re.compile(r"^(docker|veth|virbr|br-|cni|flannel|cali|tun|tap)")


def _interface_problems(interfaces: tuple[str, ...], hosts: tuple[str, ...]) -> list[NcclProblem]:
    out = []
    names = [i.split(":", 1)[0] for i in interfaces]
    virtual = [n for n in names if _VIRTUAL.match(n)]
    if virtual:
        out.append(NcclProblem(
            "virtual_interface", "warning", f"NCCL may use a virtual interface ({', '.join(virtual)})",
            "container/bridge interfaces are not reachable from other nodes: set NCCL_SOCKET_IFNAME to the physical "
            "interface (e.g. NCCL_SOCKET_IFNAME=" + next((n for n in names if not _VIRTUAL.match(n)), "eth0") + ")",
            ", ".join(interfaces), 1, "https://github.com/Oneflow-Inc/oneflow/issues/3586"))
    if any("fe80:" in i for i in interfaces):
        out.append(NcclProblem(
            "link_local_ipv6", "warning", "an IPv6 link-local address (fe80::) is among the chosen interfaces",
            "link-local addresses only work on one link; set NCCL_SOCKET_FAMILY=AF_INET or NCCL_SOCKET_IFNAME",
            ", ".join(i for i in interfaces if "fe80:" in i), 1, "https://github.com/NVIDIA/nccl/issues/529"))
    if names and all(n == "lo" for n in names) and len(hosts) > 1:
        out.append(NcclProblem(
            "loopback_multinode", "error", "NCCL uses the loopback interface lo, but the log shows several hosts",
            "lo cannot reach other nodes: set NCCL_SOCKET_IFNAME to the inter-node interface",
            ", ".join(interfaces), 1, "https://github.com/NVIDIA/nccl/issues/286"))
    return out
