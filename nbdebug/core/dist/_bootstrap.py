"""What each rank process runs: ``python -m nbdebug.core.dist._bootstrap RUN_DIR``.

The launcher (``_launch.py``) starts one of these per rank with RANK / LOCAL_RANK / WORLD_SIZE / MASTER_ADDR /
MASTER_PORT set and ``TORCHELASTIC_USE_AGENT_STORE=True`` (the launcher hosts the TCPStore, so no rank ever binds
a port).  The rank then:

- reports to the launcher over a status pipe (JSON lines): "tick" whenever its main thread's Python frame moves
  (the watchdog's notion of progress), "exc" with a sub-second timestamp when the user's code raises, "dumped"
  with its Python stack and Flight Recorder entries when asked, and results of the in-rank checks;
- listens on a control pipe in a daemon thread, so that it can dump its stacks while the main thread is blocked
  inside a collective (the GIL is released there); ``faulthandler`` on SIGUSR1 is the fallback when the GIL is
  held by stuck native code;
- runs the user's code inside a function wrapped by torch's own ``@record``, so torch's JSON error file
  (``TORCHELASTIC_ERROR_FILE``: message, traceback, timestamp) is written exactly as torchrun would write it.

This module must not import torch at the top: it is imported before the tick sampler starts.
"""

from __future__ import annotations

import faulthandler
import json
import os
import signal
import sys
import threading
import time
import traceback
import types
from typing import Any

from nbdebug._files import open_append
from nbdebug.errors import describe_exception

_LOCK = threading.Lock()
_STATUS_FD: int | None = None
_RUN_DIR = ""
_MAIN_IDENT = threading.main_thread().ident
_THIS_FILE = os.path.abspath(__file__)


def send(event: str, **data: Any) -> None:
    """Send one JSON line to the launcher (no-op outside a launched rank)."""
    if _STATUS_FD is None:
        return
    line = (json.dumps({"ev": event, "t": time.time(), **data}, default=str) + "\n").encode()
    with _LOCK:
        try:
            os.write(_STATUS_FD, line)
        except OSError:
            pass


def _frames_of_main() -> list[dict[str, Any]]:
    frame = sys._current_frames().get(_MAIN_IDENT)  # type: ignore[arg-type]
    if frame is None:
        return []
    out: list[dict[str, Any]] = [
        {"file": fs.filename, "line": fs.lineno, "func": fs.name, "code": (fs.line or "").strip()}
        for fs in traceback.extract_stack(frame)
    ]
    # frames of this bootstrap are plumbing, not the user's code
    return [f for f in out if os.path.abspath(str(f["file"])) != _THIS_FILE
            and "elastic/multiprocessing/errors" not in str(f["file"])
            and not str(f["file"]).startswith("<frozen runpy") and not str(f["file"]).endswith("runpy.py")]


def _stack_text(frames: list[dict[str, Any]]) -> str:
    lines = ["Traceback of the main thread (most recent call last):"]
    for f in frames:
        lines.append(f'  File "{f["file"]}", line {f["line"]}, in {f["func"]}')
        if f["code"]:
            lines.append(f"    {f['code']}")
    return "\n".join(lines)


def _fr_entries() -> list[dict[str, Any]]:
    """The Flight Recorder ring buffer of this process, cut down to what the hang analysis uses."""
    if "torch" not in sys.modules or not os.environ.get("TORCH_FR_BUFFER_SIZE"):
        return []
    try:
        import pickle

        import torch

        dump_fr = getattr(torch._C._distributed_c10d, "_dump_fr_trace")  # noqa: B009  (private, torch >= 2.6)
        dump = dump_fr(True, False, False)  # without C++ stacks: 4 s -> 1 ms on the first call
        entries = pickle.loads(dump).get("entries", [])
    except Exception:
        return []
    keep = ("collective_seq_id", "p2p_seq_id", "profiling_name", "input_sizes", "input_dtypes", "is_p2p",
            "time_created_ns", "state")
    return [{k: e.get(k) for k in keep} for e in entries]


# waiting for the other ranks to *start* is not a collective hang: a slow import on one rank is normal
_SETUP_CALLS = frozenset({"init_process_group", "new_group", "_new_group_with_tag", "_store_based_barrier",
                          "destroy_process_group", "_rendezvous_helper"})


def _in_collective(frame: Any) -> bool:
    """Whether the main thread is inside a torch.distributed collective call (its few innermost frames)."""
    for _ in range(6):
        if frame is None:
            return False
        if frame.f_code.co_filename.endswith(("distributed_c10d.py", "rendezvous.py")):
            if frame.f_code.co_name in _SETUP_CALLS or frame.f_code.co_filename.endswith("rendezvous.py"):
                return False
            if frame.f_back is None or not frame.f_back.f_code.co_filename.endswith("distributed_c10d.py"):
                return True  # the outermost c10d frame decides (init_process_group calls barrier inside)
        frame = frame.f_back
    return False


def _sampler(interval: float) -> None:
    """Send a tick whenever the main thread's innermost Python frame moves; a blocked rank sends none.

    Each tick says whether the rank is now inside a collective, so that the launcher can tell "waits in a
    collective for too long" (a hang, even while another rank polls in a loop) from "is busy".
    """
    last: tuple[int, int] | None = None
    while True:
        time.sleep(interval)
        frame = sys._current_frames().get(_MAIN_IDENT)  # type: ignore[arg-type]
        key = (id(frame.f_code), frame.f_lasti) if frame is not None else None
        if key != last:
            last = key
            send("tick", coll=_in_collective(frame))


def _control(fd: int) -> None:
    """Answer the launcher's requests; runs while the main thread may be blocked in a collective."""
    with os.fdopen(fd, "r", encoding="utf-8", errors="replace") as pipe:
        for line in pipe:
            if line.strip() == "dump":
                checks = sys.modules.get("nbdebug.core.dist._checks")
                if checks is not None:  # the steps logged so far belong in the report of a hang
                    try:
                        checks.flush_steps()
                    except Exception:
                        pass
                frames = _frames_of_main()
                send("dumped", stack=_stack_text(frames), frames=frames, fr=_fr_entries())
    # end of file: the launcher is gone (SIGKILL, SIGTERM, the kernel restarted) -- never outlive it: remove the
    # run folder that the launcher can no longer remove, then end this rank's whole process group (this rank leads
    # its own session), so that what the user's code started (os.fork, subprocess) goes too
    _end_everything()


def _end_everything() -> None:
    if _RUN_DIR:
        import shutil

        shutil.rmtree(_RUN_DIR, ignore_errors=True)
    try:
        if os.getpgid(0) == os.getpid():
            os.killpg(0, signal.SIGKILL)
    except OSError:
        pass
    os._exit(70)


def _install_init_defaults(pg_timeout: float, cell_mode: bool) -> None:
    """Give ``init_process_group`` the launcher's timeout, and make a second call in a cell a harmless no-op."""
    import datetime

    import torch.distributed as dist

    original = dist.init_process_group

    def init_process_group(*args: Any, **kwargs: Any) -> Any:
        if cell_mode and dist.is_initialized():
            print("[nbdebug] the process group is already initialised by %%torchrun; this init_process_group "
                  "call is ignored", file=sys.stderr, flush=True)
            return None
        kwargs.setdefault("timeout", datetime.timedelta(seconds=pg_timeout))
        return original(*args, **kwargs)

    init_process_group.__doc__ = original.__doc__
    dist.init_process_group = init_process_group  # type: ignore[assignment]


def _flush_arrivals() -> None:
    checks = sys.modules.get("nbdebug.core.dist._checks")
    if checks is not None:
        try:
            checks.flush_arrivals()
        except Exception:  # a report detail must never fail the user's run
            pass


def _clean_traceback(exc: BaseException) -> str:
    te = traceback.TracebackException.from_exception(exc)
    te.stack = traceback.StackSummary.from_list(
        [fs for fs in te.stack if os.path.abspath(fs.filename) != _THIS_FILE
         and "elastic/multiprocessing/errors" not in fs.filename and not fs.filename.startswith("<frozen runpy")
         and not fs.filename.endswith("runpy.py")]
    )
    return "".join(te.format())


def main(run_dir: str) -> int:
    global _STATUS_FD, _RUN_DIR
    _STATUS_FD = int(os.environ["NBDEBUG_DIST_STATUS_FD"])
    _RUN_DIR = run_dir
    control_fd = int(os.environ["NBDEBUG_DIST_CONTROL_FD"])
    rank = int(os.environ["RANK"])
    rank_dir = os.path.join(run_dir, f"rank_{rank}")
    os.makedirs(rank_dir, exist_ok=True)
    # fallback when the GIL is held by stuck native code and the control thread cannot run
    fault_file = open_append(os.path.join(rank_dir, "faulthandler.txt"))  # kept open for the signal; no symlink
    faulthandler.register(signal.SIGUSR1, file=fault_file, all_threads=True)
    threading.Thread(target=_sampler, args=(0.25,), daemon=True, name="nbdebug-ticks").start()
    threading.Thread(target=_control, args=(control_fd,), daemon=True, name="nbdebug-control").start()
    send("started", pid=os.getpid(), main=_MAIN_IDENT)

    with open(os.path.join(run_dir, "spec.json"), encoding="utf-8") as fh:
        spec = json.load(fh)
    cell_mode = spec["mode"] == "cell"
    for entry in spec.get("sys_path", ()):
        if entry not in sys.path:
            sys.path.append(entry)

    from torch.distributed.elastic.multiprocessing.errors import record

    # a fresh __main__ for the user's code: values pickled from the notebook refer to ``__main__.Name``
    user_main = types.ModuleType("__main__")
    user_main.__file__ = spec["source_path"]
    sys.modules["__main__"] = user_main
    namespace = user_main.__dict__

    @record
    def run_user_code() -> None:
        try:
            _install_init_defaults(spec["pg_timeout"], cell_mode)
            if cell_mode:
                import torch.distributed as dist

                if spec["backend"] == "nccl":
                    import torch

                    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
                dist.init_process_group(spec["backend"])
                send("ready")
                preamble = os.path.join(run_dir, "preamble.py")
                if os.path.exists(preamble):
                    with open(preamble, encoding="utf-8") as fh:
                        exec(compile(fh.read(), preamble, "exec"), namespace)
                values = os.path.join(run_dir, "values.pkl")
                if os.path.exists(values):
                    import pickle

                    with open(values, "rb") as fh:
                        namespace.update(pickle.load(fh))
                with open(spec["source_path"], encoding="utf-8") as fh:
                    code = compile(fh.read(), spec["source_path"], "exec")
                exec(code, namespace)
                _flush_arrivals()
                send("finished")  # before destroy_process_group: peers may fail as soon as the group goes away
                if dist.is_initialized():
                    dist.destroy_process_group()
            else:
                import runpy

                sys.argv = [spec["source_path"], *spec.get("argv", [])]
                runpy.run_path(spec["source_path"], run_name="__main__")
                _flush_arrivals()
                send("finished")
        except SystemExit as e:
            if e.code not in (0, None):
                send("exc", type="SystemExit", message=f"SystemExit: {e.code}", traceback=_clean_traceback(e))
            raise
        except BaseException as e:
            _flush_arrivals()  # the steps logged before the failure belong in the report
            send("exc", type=type(e).__name__, message=describe_exception(e), traceback=_clean_traceback(e))
            raise

    try:
        run_user_code()
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        return code
    except BaseException as e:
        sys.stderr.write(_clean_traceback(e))
        sys.stderr.flush()
        return 1
    finally:
        sys.stdout.flush()
    send("done")
    return 0


if __name__ == "__main__":
    # code in the rank that imports this module (nbdebug.dist.log_step, the checks) must get this very instance,
    # whose status pipe is open, not a second copy
    sys.modules.setdefault("nbdebug.core.dist._bootstrap", sys.modules[__name__])
    status = main(sys.argv[1])
    sys.stdout.flush()
    sys.stderr.flush()
    # os._exit: a rank whose peers died must not hang in interpreter shutdown (gloo threads, atexit handlers)
    os._exit(status)
