"""``parse_nccl_log`` on real NCCL_DEBUG=INFO logs collected from public GitHub issues (tests/data/dist/*.log)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from nbdebug.core.dist._nccl import NCCL_PATTERNS, parse_nccl_log
from nbdebug.errors import ReportParseError
from tests.conftest import REPO

DATA = Path(__file__).parent / "data" / "dist"

# file -> (version, interfaces that must be found, transports, problem names in order of severity, ok)
CASES = {
    "loopback_2gpu_shm.log": ("", ["lo:127.0.0.1"], ["SHM"], ["no_ibverbs"], True),
    "no_route_to_host.log": ("", [], [], ["no_route_to_host"], False),
    "socket_ifname_not_found.log": ("", [], [], ["bad_socket_ifname", "internal_error"], False),
    "connection_closed_by_peer.log": ("", [], ["SHM"], ["connection_abort", "peer_closed"], False),
    "watchdog_timeout.log": ("", [], [], ["watchdog_timeout"], False),
    "multinode_socket_no_ib.log": ("2.4.7+cuda9.2", ["ens3:172.31.10.182", "ens3:172.31.3.113"], [], ["no_ib"], True),
    "veth_connect_timeout.log": ("", ["eno1:172.18.40.41"], ["NET/Socket"],
                                 ["connect_timeout", "virtual_interface", "link_local_ipv6", "no_ib"], False),
    "p2p_ipc_and_socket.log": ("", [], ["P2P/IPC", "NET/Socket"], ["peer_closed"], False),
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
    assert [p.name for p in log.problems] == problems
    assert log.ok is ok
    for p in log.problems:
        assert p.line and p.fix and p.source
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
    out_of_step = [p for p in log.problems if p.name == "ranks_out_of_step"]
    assert out_of_step and "[2]" in out_of_step[0].title


def test_every_pattern_is_sourced():
    for p in NCCL_PATTERNS:
        assert p.source and p.fix and p.title


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
    assert data["problems"][0]["name"] == "no_route_to_host"
