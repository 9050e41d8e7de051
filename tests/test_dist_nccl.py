"""``parse_nccl_log`` on real NCCL_DEBUG=INFO logs collected from public GitHub issues (tests/data/dist/*.log)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from nbdebug.core import knowledge
from nbdebug.core._findings import Finding, Severity
from nbdebug.core.dist._nccl import parse_nccl_log
from nbdebug.errors import ReportParseError
from tests.conftest import REPO

DATA = Path(__file__).parent / "data" / "dist"

# file -> (version, interfaces that must be found, transports, problem kinds (errors first, then in log order), ok)
# "nccl_error" is a failing NCCL WARN line that no more specific entry knows (a proxy that failed to connect,
# a socket recv that failed, ncclInternalError)
CASES = {
    "loopback_2gpu_shm.log": ("", ["lo:127.0.0.1"], ["SHM"], ["no_ibverbs"], True),
    "no_route_to_host.log": ("", [], [], ["no_route_to_host"], False),
    "socket_ifname_not_found.log": ("", [], [], ["nccl_error", "bad_socket_ifname"], False),
    "connection_closed_by_peer.log": ("", [], ["SHM"], ["connection_abort", "nccl_error", "peer_closed"], False),
    "watchdog_timeout.log": ("", [], [], ["nccl_timeout"], False),
    "multinode_socket_no_ib.log": ("2.4.7+cuda9.2", ["ens3:172.31.10.182", "ens3:172.31.3.113"], [], ["no_ib"], True),
    "veth_connect_timeout.log": ("", ["eno1:172.18.40.41"], ["NET/Socket"],
                                 ["connect_timeout", "virtual_interface", "link_local_ipv6", "no_ib"], False),
    "p2p_ipc_and_socket.log": ("", [], ["P2P/IPC", "NET/Socket"], ["nccl_error", "peer_closed"], False),
    "ib_roce_init.log": ("", ["bond0:10.82.177.33"], [], [], True),
    "ipv4_ib_sideband.log": ("2.3.7+cuda9.0", ["ib0:12.12.12.102"], [], [], True),
}


def test_every_fixture_is_covered_and_sourced():
    files = {p.name for p in DATA.glob("*.log")}
    assert files == set(CASES)
    for name in files:
        assert (DATA / name).read_text().startswith("# source: ")


@pytest.mark.parametrize("name", sorted(CASES))
def test_parse_real_log(name):
    version, interfaces, transports, problems, ok = CASES[name]
    log = parse_nccl_log((DATA / name).read_text())
    assert log.version == version
    for iface in interfaces:
        assert iface in log.interfaces
    assert list(log.transports) == transports
    assert [p.kind for p in log.findings] == problems
    assert log.ok is ok
    for p in log.findings:
        assert isinstance(p, Finding) and isinstance(p.severity, Severity)
        assert p.evidence["line"] and p.evidence["count"] >= 1 and p.fix and p.title and p.message
        assert knowledge.entry(p.kind).sources
    bundle = log._repr_mimebundle_()
    assert "text/html" in bundle and "<script" not in bundle["text/html"]
    assert log.to_pandas().shape[0] == len(problems)


def test_details_of_specific_logs():
    log = parse_nccl_log((DATA / "socket_ifname_not_found.log").read_text())
    assert log.env == {"NCCL_SOCKET_IFNAME": "eth2"}
    log = parse_nccl_log((DATA / "watchdog_timeout.log").read_text())
    assert log.ranks == (0, 1, 2)
    assert {t["seq"] for t in log.timeouts} == {808} and log.timeouts[0]["op"] == "ALLREDUCE"
    log = parse_nccl_log((DATA / "ib_roce_init.log").read_text())
    assert log.network == "IB" and len(log.ib_devices) == 10 and log.nranks == 4
    log = parse_nccl_log((DATA / "multinode_socket_no_ib.log").read_text())
    assert len(log.hosts) == 6


def test_ranks_out_of_step():
    text = (DATA / "watchdog_timeout.log").read_text().replace("[Rank 2] Watchdog caught collective operation "
                                                               "timeout: WorkNCCL(SeqNum=808",
                                                               "[Rank 2] Watchdog caught collective operation "
                                                               "timeout: WorkNCCL(SeqNum=805")
    log = parse_nccl_log(text)
    out_of_step = [p for p in log.findings if p.kind == "ranks_out_of_step"]
    assert out_of_step and "[2]" in out_of_step[0].message and out_of_step[0].where == ("rank 2",)
    assert out_of_step[0].evidence["seqs"] == [805, 808]


def test_every_nccl_entry_is_sourced_with_a_url_and_has_a_fix():
    nccl = [e for e in knowledge.entries(domain="dist") if "nccl_log" in e.contexts]
    assert {"nccl_timeout", "nccl_error", "peer_closed", "no_route_to_host", "ranks_out_of_step"} <= {e.slug for e in nccl}
    for e in nccl:
        assert e.fixes and e.title and e.sources
        assert all(s.startswith("https://") for s in e.sources), e.slug


def test_one_line_is_told_by_the_most_specific_entry():
    line = "host:1:2 [0] misc/socket.cc:483 NCCL WARN socketStartConnect: Connect to 10.0.0.2<1> failed : No route to host"
    assert [p.kind for p in parse_nccl_log(line).findings] == ["no_route_to_host"]
    line = "host:1:2 [0] proxy.cc:1519 NCCL WARN [Proxy Service 0] Failed to execute operation Connect"
    assert [p.kind for p in parse_nccl_log(line).findings] == ["nccl_error"]


def test_the_watchdog_message_is_one_entry_for_all_three_readers():
    from nbdebug.core.dist._failures import classify
    from nbdebug.core.explain import explain

    text = ("[Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=808, OpType=ALLREDUCE, "
            "NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600020 milliseconds before timing out.")
    holders = [e.slug for e in knowledge.entries() if any("Watchdog caught" in p for p in e.patterns)]
    assert holders == ["nccl_timeout"]
    assert classify(text)[1].slug == "nccl_timeout"
    assert parse_nccl_log(text).findings[0].kind == "nccl_timeout"
    assert explain(text).kind == "nccl_timeout"


@pytest.mark.parametrize("bad", ["", "just some text\nwithout the library name", 42])
def test_not_an_nccl_log(bad):
    with pytest.raises(ReportParseError, match="NCCL"):
        parse_nccl_log(bad)  # type: ignore[arg-type]


def test_cli_nccl_log():
    proc = subprocess.run(
        [sys.executable, "-m", "nbdebug", "torchrun", "--nccl-log", str(DATA / "no_route_to_host.log"), "--json"],
        capture_output=True, text=True, timeout=60, cwd=REPO,
    )
    assert proc.returncode == 1, proc.stderr
    data = json.loads(proc.stdout)
    assert data["findings"][0]["kind"] == "no_route_to_host"
    assert data["findings"][0]["severity"] == "error" and data["findings"][0]["fixes"]
