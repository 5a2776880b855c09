"""A private CUDA MPS control daemon: started for one scenario, stopped on every exit path.

The tool never touches the system's MPS daemon (/tmp/nvidia-mps) and never changes a
GPU setting (compute mode or any other). It starts its own `nvidia-cuda-mps-control -d`
with its own pipe and log directories (tempfile.mkdtemp, mode 0700), so that only the
processes given `MpsDaemon.env()` before they initialise CUDA become its clients:

    daemon = MpsDaemon.start()          # MpsUnavailable(reason) when it cannot
    os.environ.update(daemon.env())     # in a worker, before its first CUDA call
    daemon.server_pids(), daemon.client_pids(pid)   # prove the workers are its clients
    daemon.stop()                       # quit, then SIGTERM/SIGKILL by pid, then remove the dirs

The daemon never outlives the run, however the run ends: start() also starts a guard,
a small process in a session of its own that holds one end of a pipe whose other end
only the run holds. When the pipe closes without the word "stopped" (the run was
SIGKILLed, or died before it could stop the daemon), the guard stops the daemon. And a
run that finds a daemon of an earlier run whose owner is gone (owner file in the pipe
directory) stops it and says so (stop_stale_daemons).

The daemon writes its pid to <pipe dir>/nvidia-cuda-mps-control.pid (removed when it
stops); control commands go through `nvidia-cuda-mps-control` (no argument) with the same
CUDA_MPS_PIPE_DIRECTORY, one command a line on its standard input. A process is only
ever signalled when its /proc environment names this daemon's pipe directory.
"""

from __future__ import annotations

import contextlib
import dataclasses
import glob
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path

from gpuipc_bench.errors import BenchError

BINARY = "nvidia-cuda-mps-control"
PID_FILE = "nvidia-cuda-mps-control.pid"
CONTROL = "control"  # the control socket (a FIFO in old drivers)
PIPE_ENV = "CUDA_MPS_PIPE_DIRECTORY"
LOG_ENV = "CUDA_MPS_LOG_DIRECTORY"
START_TIMEOUT_S = 10.0
COMMAND_TIMEOUT_S = 10.0
STOP_TIMEOUT_S = 10.0
PREFIX = "gpuipc-bench-mps-"
TIME_SLICED_FOLDER = PREFIX + "none-"  # a time-sliced run's empty pipe folder: then <pid>-<start time>-<random>
OWNER_FILE = "gpuipc-bench-owner"  # in the pipe directory: the run's pid, its start time, log dir, binary
END_GRACE_S = 2.0  # how long a process of the daemon gets to exit on its own after 'quit'
REAP_WAIT_S = 5.0  # how long to wait for init to reap an exited daemon


class MpsUnavailable(BenchError):
    """MPS cannot be used here; the message is the reason (the MPS half is waived with it)."""


def find_binary(path: str | None = None) -> str | None:
    """The nvidia-cuda-mps-control on PATH (or on `path`), or None."""
    return shutil.which(BINARY, path=path)


def daemon_env(pipe_dir: str, log_dir: str, base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of the daemon and of its clients: `base` (default os.environ) with the
    pipe and log directories set."""
    env = dict(os.environ if base is None else base)
    env[PIPE_ENV] = str(pipe_dir)
    env[LOG_ENV] = str(log_dir)
    return env


def start_command(binary: str) -> list[str]:
    """Start the control daemon in the background (it forks and returns)."""
    return [binary, "-d"]


def control_command(binary: str) -> list[str]:
    """Send commands (standard input, one a line) to the daemon of CUDA_MPS_PIPE_DIRECTORY."""
    return [binary]


def parse_pids(text: str) -> list[int]:
    """The process ids in get_server_list / get_client_list output (one a line; other text ignored)."""
    pids = []
    for line in text.splitlines():
        word = line.strip()
        if word.isdigit() and int(word) > 0:
            pids.append(int(word))
    return pids


def stale_reason(pipe_dir: str | Path) -> str | None:
    """Why `pipe_dir` cannot take a new daemon (a control socket or pid file is there), or None."""
    pipe_dir = Path(pipe_dir)
    found = [name for name in (CONTROL, PID_FILE) if os.path.lexists(pipe_dir / name)]
    if not found:
        return None
    return (f"the MPS pipe directory {pipe_dir} already holds {' and '.join(found)} (a daemon runs "
            "there, or a dead one left them); not starting another")


def _read_pid(pipe_dir: str) -> int | None:
    try:
        text = Path(pipe_dir, PID_FILE).read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() and int(text) > 0 else None


def proc_stat(pid: int | str) -> tuple[str, list[str]]:
    """(its name, the fields after it) of /proc/<pid>/stat, '<pid> (<comm>) <state> <ppid> ...':
    fields[0] is the state ('Z': exited, not yet reaped), fields[1] the parent. OSError where gone."""
    comm, _, rest = Path(f"/proc/{pid}/stat").read_text().partition(" (")[2].rpartition(")")
    return comm, rest.split()


def alive(pid: int) -> bool:
    """The process exists and is not a zombie."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        return proc_stat(pid)[1][0] != "Z"
    except (OSError, IndexError):
        return True


def belongs_to(pid: int, pipe_dir: str) -> bool:
    """True when process `pid` runs with CUDA_MPS_PIPE_DIRECTORY=pipe_dir (so it is this daemon
    or its server, not a process that took a recycled pid)."""
    try:
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return False
    return f"{PIPE_ENV}={pipe_dir}".encode() in environ


DEFAULT_PIPE_DIR = "/tmp/nvidia-mps"


def serves_this_process(environ: Mapping[str, str] | None = None) -> bool:
    """Would CUDA, initialised now in this process, become an MPS client? True when a live
    (not zombie) control daemon owns the pipe directory this process would use
    (CUDA_MPS_PIPE_DIRECTORY, default /tmp/nvidia-mps). A private daemon elsewhere, or the
    remains of one that stopped, do not count."""
    env: Mapping[str, str] = os.environ if environ is None else environ
    pipe_dir = env.get(PIPE_ENV) or DEFAULT_PIPE_DIR
    if not os.path.lexists(os.path.join(pipe_dir, CONTROL)):
        return False
    pid = _read_pid(pipe_dir)
    return pid is not None and alive(pid)


@dataclasses.dataclass
class MpsDaemon:
    binary: str
    pipe_dir: str
    log_dir: str
    pid: int | None = None
    owns_dirs: bool = True
    known_servers: set[int] = dataclasses.field(default_factory=set)
    guard: subprocess.Popen | None = None
    subreaper_was: int | None = None  # this process's subreaper setting before start(), set back by stop()

    # ---------------------------------------------------------------- start

    @classmethod
    def start(cls, binary: str | None = None, pipe_dir: str | None = None, log_dir: str | None = None,
              timeout: float = START_TIMEOUT_S) -> "MpsDaemon":
        """Start a private daemon, or raise MpsUnavailable with the reason (leaving nothing behind).
        Without pipe_dir/log_dir, fresh ones are made (and removed by stop())."""
        binary = binary or find_binary()
        if not binary:
            raise MpsUnavailable(f"{BINARY} is not on PATH")
        if pipe_dir is not None:
            reason = stale_reason(pipe_dir)
            if reason:
                raise MpsUnavailable(reason)
        owns = pipe_dir is None and log_dir is None
        try:
            pipe_dir = pipe_dir or tempfile.mkdtemp(prefix=PREFIX + "pipe-")
            log_dir = log_dir or tempfile.mkdtemp(prefix=PREFIX + "log-")
        except OSError as exc:
            raise MpsUnavailable(f"cannot make the MPS pipe and log directories: {exc.strerror}") from None
        daemon = cls(binary, str(pipe_dir), str(log_dir), owns_dirs=owns)
        try:
            daemon._write_owner()
            daemon._launch(timeout)
            daemon._start_guard()
        except BaseException:
            daemon.stop()
            raise
        return daemon

    def _write_owner(self) -> None:
        me = os.getpid()
        Path(self.pipe_dir, OWNER_FILE).write_text(
            f"{me}\n{start_time(me)}\n{self.log_dir}\n{self.binary}\n", encoding="utf-8")

    def _start_guard(self) -> None:
        """The process that stops the daemon if this one dies first (see the module's doc)."""
        package_root = str(Path(__file__).resolve().parent.parent)
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH")) if p)
        try:
            self.guard = subprocess.Popen(
                [sys.executable, "-m", "gpuipc_bench.modes.daemon", "guard", self.binary, self.pipe_dir, self.log_dir,
                 str(self.pid), "1" if self.owns_dirs else "0"],
                stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                env=env, close_fds=True, start_new_session=True)
        except OSError as exc:
            raise MpsUnavailable(f"cannot start the guard of the MPS daemon: {exc.strerror}") from None

    def _release_guard(self) -> None:
        """The daemon is stopped: tell the guard, which then exits without doing anything."""
        guard, self.guard = self.guard, None
        if guard is None:
            return
        try:
            assert guard.stdin is not None  # started with stdin=PIPE
            guard.stdin.write(b"stopped\n")
            guard.stdin.close()
        except OSError:
            pass
        try:
            guard.wait(timeout=5)
        except subprocess.TimeoutExpired:
            guard.kill()
            guard.wait()

    def _launch(self, timeout: float) -> None:
        out_path = Path(self.log_dir, "gpuipc-bench-start.out")
        try:
            # `-d` forks the daemon and exits: as a subreaper while the daemon lives, this process becomes
            # the orphaned daemon's parent (and its server's, should the daemon quit first), and reaps
            # them the moment they exit (stop) instead of leaving their zombies to the container's init
            # (1.7 s of a run's end on an H200 node)
            if self.subreaper_was is None:
                self.subreaper_was = set_subreaper(1)
            with open(out_path, "wb") as out:  # not a pipe: the daemon may keep it open
                proc = subprocess.run(start_command(self.binary), env=self.full_env(), stdin=subprocess.DEVNULL,
                                      stdout=out, stderr=subprocess.STDOUT, timeout=timeout, close_fds=True)
        except subprocess.TimeoutExpired:
            raise MpsUnavailable(f"{BINARY} -d did not return within {timeout:g} s") from None
        except OSError as exc:
            raise MpsUnavailable(f"cannot run {self.binary}: {exc.strerror}") from None
        if proc.returncode != 0:
            raise MpsUnavailable(f"{BINARY} -d exited with code {proc.returncode}{self._said(out_path)}")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            pid = _read_pid(self.pipe_dir)
            if pid is not None and alive(pid):
                self.pid = pid
                break
            time.sleep(0.05)
        else:
            raise MpsUnavailable(f"the MPS control daemon did not start within {timeout:g} s "
                                 f"(no live pid in {Path(self.pipe_dir, PID_FILE)}){self._said(out_path)}")
        self.control("get_server_list", timeout=timeout)  # it answers commands

    def _said(self, out_path: Path) -> str:
        text = ""
        for path in (out_path, Path(self.log_dir, "control.log")):
            try:
                text += path.read_text(errors="replace")
            except OSError:
                pass
        lines = [line.strip() for line in text.splitlines() if line.strip()]
        return f": {' / '.join(lines[-3:])}" if lines else ""

    # ---------------------------------------------------------------- use

    def env(self) -> dict[str, str]:
        """What a client sets before it initialises CUDA."""
        return {PIPE_ENV: self.pipe_dir, LOG_ENV: self.log_dir}

    def full_env(self) -> dict[str, str]:
        return daemon_env(self.pipe_dir, self.log_dir)

    def control(self, command: str, timeout: float = COMMAND_TIMEOUT_S) -> str:
        """Send one command; its output. MpsUnavailable when the daemon does not answer."""
        try:
            proc = subprocess.run(control_command(self.binary), input=command + "\n", env=self.full_env(),
                                  capture_output=True, text=True, timeout=timeout, close_fds=True)
        except subprocess.TimeoutExpired:
            raise MpsUnavailable(f"the MPS daemon did not answer '{command}' within {timeout:g} s") from None
        except OSError as exc:
            raise MpsUnavailable(f"cannot run {self.binary}: {exc.strerror}") from None
        if proc.returncode != 0:
            said = (proc.stderr or proc.stdout).strip().splitlines()
            raise MpsUnavailable(f"the MPS daemon refused '{command}' (exit code {proc.returncode})"
                                 + (f": {said[-1]}" if said else ""))
        return proc.stdout

    def server_pids(self) -> list[int]:
        pids = parse_pids(self.control("get_server_list"))
        self.known_servers.update(pids)
        return pids

    def client_pids(self, server_pid: int) -> list[int]:
        return parse_pids(self.control(f"get_client_list {server_pid}"))

    def running(self) -> bool:
        return self.pid is not None and alive(self.pid)

    # ---------------------------------------------------------------- stop

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> list[str]:
        """Quit the daemon and its servers, kill what is left (by pid, only processes of this
        pipe directory), remove the directories made by start(). Never raises; returns what
        went wrong, one sentence each."""
        problems: list[str] = []
        if self.pid is not None and alive(self.pid):
            try:
                self.server_pids()
            except MpsUnavailable:
                pass
            try:
                self.control("quit", timeout=timeout)
            except MpsUnavailable as exc:
                problems.append(str(exc))
            deadline = time.monotonic() + timeout
            while alive(self.pid) and time.monotonic() < deadline:
                time.sleep(0.05)
        for pid in [p for p in (self.pid, *sorted(self.known_servers)) if p]:
            problem = self._end(pid)
            if problem:
                problems.append(problem)
        for pid in [p for p in (self.pid, *sorted(self.known_servers)) if p]:
            self._await_reaped(pid)
        if self.subreaper_was is not None:  # a server no get_server_list named, orphaned to this process
            reap_children("nvidia-cuda-mps", END_GRACE_S)
            set_subreaper(self.subreaper_was)
            self.subreaper_was = None
        self.pid = None
        if self.owns_dirs:
            for folder in (self.pipe_dir, self.log_dir):
                shutil.rmtree(folder, ignore_errors=True)
                if os.path.exists(folder):
                    problems.append(f"could not remove {folder}")
        else:
            try:
                os.unlink(Path(self.pipe_dir, OWNER_FILE))
            except OSError:
                pass
        self._release_guard()
        return problems

    @staticmethod
    def _await_reaped(pid: int, timeout: float | None = None) -> None:
        """A daemon that exited stays a zombie (its /proc entry, named nvidia-cuda-mps-*, is still
        there) until its parent reaps it: this process where it is the parent (see _launch), at
        once; else init, a few seconds later, so wait a little for the entry to go (not an error
        if it stays: the probe takes no zombie for a daemon)."""
        deadline = time.monotonic() + (REAP_WAIT_S if timeout is None else timeout)
        while time.monotonic() < deadline:
            try:  # our child (the subreaper's, or orphaned to it while we wait): reaped as soon as it exits
                if os.waitpid(pid, os.WNOHANG)[0] == pid:
                    return
            except ChildProcessError:  # init's (or reaped already): wait for its entry to go
                try:
                    if proc_stat(pid)[1][0] != "Z":
                        return  # alive and not ours to wait for (a recycled pid)
                except (OSError, IndexError):
                    return  # gone
            time.sleep(0.01)

    def _end(self, pid: int) -> str | None:
        """Wait a little for `pid` to go, then SIGTERM, then SIGKILL it, if it is ours."""
        deadline = time.monotonic() + END_GRACE_S
        while alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        if not alive(pid):
            return None
        if not belongs_to(pid, self.pipe_dir):
            return f"process {pid} of the MPS daemon did not exit, and is not ours to signal"
        for sig, wait in ((signal.SIGTERM, 2.0), (signal.SIGKILL, 2.0)):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                return None
            except PermissionError:
                return f"not allowed to stop process {pid} of the MPS daemon"
            deadline = time.monotonic() + wait
            while alive(pid) and time.monotonic() < deadline:
                time.sleep(0.05)
            if not alive(pid):
                return None
        return f"process {pid} of the MPS daemon is still there after SIGKILL"


PR_SET_CHILD_SUBREAPER, PR_GET_CHILD_SUBREAPER = 36, 37  # prctl(2), Linux 3.4


def set_subreaper(on: int) -> int | None:
    """Make this process the child subreaper of its orphaned descendants, or not (prctl(2)); its
    setting before, or None where prctl is not there (not Linux) or refused."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        was = ctypes.c_int(0)
        if libc.prctl(PR_GET_CHILD_SUBREAPER, ctypes.byref(was), 0, 0, 0) != 0 or \
                libc.prctl(PR_SET_CHILD_SUBREAPER, int(on), 0, 0, 0) != 0:
            return None
    except (OSError, AttributeError):
        return None
    return was.value


def reap_children(prefix: str, timeout: float) -> None:
    """Reap this process's children whose name starts with `prefix` (the daemon's processes, ours as
    the subreaper), waiting up to `timeout` for those still exiting."""
    deadline = time.monotonic() + timeout
    while True:
        left = []
        for entry in Path("/proc").glob("[0-9]*"):
            try:
                comm, fields = proc_stat(entry.name)
                if comm.startswith(prefix[:15]) and int(fields[1]) == os.getpid():
                    pid = int(entry.name)
                    if os.waitpid(pid, os.WNOHANG)[0] != pid:
                        left.append(pid)
            except (OSError, IndexError, ValueError, ChildProcessError):
                continue
        if not left or time.monotonic() >= deadline:
            return
        time.sleep(0.02)


def start_time(pid: int) -> str:
    """The start time of process `pid` (field 22 of /proc/<pid>/stat), '' if it is gone:
    a pid and its start time name one process, even once the pid is recycled."""
    try:
        return proc_stat(pid)[1][19]
    except (OSError, IndexError):
        return ""


def stop_stale_daemons(temp_dir: str | None = None) -> list[str]:
    """Stop the private daemons of earlier runs whose owner is gone (its guard was killed too),
    and remove their folders; one sentence for each daemon stopped."""
    notes = []
    pattern = os.path.join(temp_dir or tempfile.gettempdir(), PREFIX + "pipe-*")
    for pipe_dir in sorted(glob.glob(pattern)):
        try:
            owner, started, log_dir, binary = Path(pipe_dir, OWNER_FILE).read_text(encoding="utf-8").split("\n")[:4]
            owner_pid = int(owner)
        except (OSError, ValueError):
            continue  # not one of ours, or still being set up
        if started and start_time(owner_pid) == started:
            continue  # its run is still going
        pid = _read_pid(pipe_dir)
        running = pid is not None and alive(pid) and belongs_to(pid, pipe_dir)
        daemon = MpsDaemon(find_binary() or binary, pipe_dir, log_dir, pid=pid if running else None)
        problems = daemon.stop()
        if running:
            notes.append(f"stopped the private MPS daemon (pid {pid}) that an earlier run (pid {owner_pid}) "
                         "left running" + "".join(f"; {p}" for p in problems))
    remove_stale_folders(temp_dir)  # a killed run's empty time-sliced pipe folders (no note: nothing ran there)
    return notes


def remove_stale_folders(temp_dir: str | None = None) -> None:
    """Remove the empty time-sliced pipe folders (modes.time_sliced) of earlier runs that are gone
    (killed: their own stop never ran). A folder whose run still goes, that is not empty or not
    named as ours is left alone."""
    for folder in glob.glob(os.path.join(temp_dir or tempfile.gettempdir(), TIME_SLICED_FOLDER + "*")):
        pid, _, rest = os.path.basename(folder)[len(TIME_SLICED_FOLDER):].partition("-")
        started = rest.partition("-")[0]
        if not (pid.isdigit() and started.isdigit()) or start_time(int(pid)) == started:
            continue  # not named by this version, or its run is still going
        with contextlib.suppress(OSError):
            os.rmdir(folder)  # only an empty one: a worker never writes there


def _guard_main(binary: str, pipe_dir: str, log_dir: str, pid: str, owns_dirs: str) -> None:
    """The guard: wait for the run's end of the pipe to close; unless the run said it stopped
    the daemon, stop it."""
    for signum in (signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, signal.SIG_IGN)  # the run's Ctrl-C or hang-up is the run's to handle
    said = sys.stdin.buffer.read()
    if said.endswith(b"stopped\n"):
        return
    MpsDaemon(binary, pipe_dir, log_dir, pid=int(pid) if pid.isdigit() else None,
              owns_dirs=owns_dirs == "1").stop()


if __name__ == "__main__" and len(sys.argv) == 7 and sys.argv[1] == "guard":
    _guard_main(*sys.argv[2:])
