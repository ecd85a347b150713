"""Nothing we start outlives us: child processes and temporary directories, ended at exit and on signals.

Every child process the operator or the simulator starts (``spawn``: the pulsar-lite broker behind the
extensible load manager's topics) and every temporary directory (``temp_dir``: ``pulsar-lb-<purpose>-…`` in the
system's temporary directory, a prefix anyone can look for) is registered here until it is stopped or removed;
``cleanup`` ends what is left. ``finish`` — at exit (atexit), or before ``os._exit`` — ends, after that, every
other child process still running: Spark's JVM, which pyspark starts for an in-process aggregation and which
would otherwise notice our end only when its stdin closes, after us. SIGTERM lets Spark's own shutdown hooks
remove its scratch directories (``spark-…``, ``blockmgr-…``) before it exits. ``exit_on_signals`` makes SIGTERM
and SIGHUP raise ``Interrupted`` in the main thread, as Ctrl-C raises KeyboardInterrupt, so every ``finally`` on
the way out runs, and then the exit.

A child we spawn cannot outlive us when we die without cleaning up (SIGKILL, a crash) either: the kernel kills
it when its parent dies (Linux's PR_SET_PDEATHSIG, set between fork and exec). The parent the kernel watches is
the *thread* that forked, so every child is forked by one thread that lives as long as the process. The child
also leads a process group of its own: a terminal's Ctrl-C reaches us, not it, and we stop it in order (SIGTERM
to its group, SIGKILL after a grace period). A directory cannot be removed by a process killed with SIGKILL.

This module imports nothing of ours, so the simulator and Spark's session use it as the operator does.
"""

from __future__ import annotations

import atexit
import concurrent.futures
import contextlib
import ctypes
import os
import queue
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Collection, Iterator, Sequence
from pathlib import Path
from typing import Any

PREFIX = "pulsar-lb-"
STOP_GRACE_S = 10.0  # SIGTERM → SIGKILL
KILLED_GONE_S = 5.0  # SIGKILL → gone, at the most (a child ``stop`` killed; the others ``finish`` killed)
SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
PR_SET_PDEATHSIG = 1  # linux/prctl.h
PR_SET_CHILD_SUBREAPER = 36  # linux/prctl.h
ENDED = ("Z", "X")  # a zombie's and a dead process's state in /proc/<pid>/stat
SWEEPS = 5  # rounds of ``finish``'s search for descendants: each finds those the ones before left orphaned


class Interrupted(KeyboardInterrupt):
    """SIGTERM or SIGHUP, raised in the main thread as SIGINT raises KeyboardInterrupt (and caught alike)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


class Finishing(KeyboardInterrupt):
    """Asked for a directory or a child process while ``finish`` ends the process: none is made. A stop, not an
    error, as ``Interrupted`` is: no ``except Exception`` on the way out of the thread that asked swallows it (nor
    logs it as a failure)."""


_lock = threading.RLock()
_children: dict[int, subprocess.Popen[Any]] = {}  # pid → a child ``spawn`` started (it leads its own group)
_directories: list[Path] = []
_finishing = threading.Event()


def temp_dir(purpose: str, parent: str | None = None) -> Path:
    """A new directory ``pulsar-lb-<purpose>-…`` (in ``parent``, else the temporary directory), removed at exit
    unless ``remove`` did it before. Refused (``Finishing``) once ``finish`` has begun."""
    with _lock:
        _refuse_when_finishing(f"a {purpose} directory")
        path = Path(tempfile.mkdtemp(prefix=f"{PREFIX}{purpose}-", dir=parent))
        _directories.append(path)
    return path


def _refuse_when_finishing(what: str) -> None:
    """A thread still running as ``finish`` ends the process (a Spark session starting, when the stop came)
    would make what nothing removes any more."""
    if _finishing.is_set():
        raise Finishing(f"not making {what}: the process is ending")


@contextlib.contextmanager
def temp_files_inside(purpose: str) -> Iterator[Path]:
    """Meanwhile Python's ``tempfile`` makes everything — ours and every library's (pyspark's connection file,
    which it removes only once its JVM has started) — inside one ``temp_dir(purpose)``, removed after."""
    path, before = temp_dir(purpose), tempfile.tempdir
    tempfile.tempdir = str(path)
    try:
        yield path
    finally:
        tempfile.tempdir = before
        remove(path)


def remove(path: Path) -> None:
    """Remove a directory ``temp_dir`` made (and forget it)."""
    shutil.rmtree(path, ignore_errors=True)
    with _lock, contextlib.suppress(ValueError):
        _directories.remove(path)


def spawn(argv: Sequence[str], **popen: Any) -> subprocess.Popen[Any]:
    """``subprocess.Popen(argv, **popen)`` in a process group of its own, killed by the kernel if we die first,
    and stopped by ``cleanup`` unless ``stop`` did it before. Refused (``Finishing``) once ``finish`` has begun."""
    _refuse_when_finishing(f"a process ({argv[0]})")
    process = _launcher.run(
        lambda: subprocess.Popen(argv, start_new_session=True, preexec_fn=_die_with(os.getpid()), **popen)
    )
    with _lock:
        _children[process.pid] = process
    return process


def stop(process: subprocess.Popen[Any], grace_s: float = STOP_GRACE_S) -> None:
    """SIGTERM (to its whole group, when ``spawn`` started it), SIGKILL after ``grace_s``; then forgotten."""
    with _lock:
        own_group = process.pid in _children
    if process.poll() is None:
        _signal(process, signal.SIGTERM, own_group)
        try:
            process.wait(grace_s)
        except subprocess.TimeoutExpired:
            _signal(process, signal.SIGKILL, own_group)
            process.wait(KILLED_GONE_S)
    with _lock:
        _children.pop(process.pid, None)


def cleanup() -> None:
    """Stop every child still registered (the newest first) and remove every directory. Safe to call again.

    SIGTERM, SIGINT and SIGHUP are ignored meanwhile (a second Ctrl-C must not cut the cleanup short)."""
    with handlers(dict.fromkeys(SIGNALS, signal.SIG_IGN)):
        with _lock:
            children = list(reversed(_children.values()))
            directories = list(reversed(_directories))
        for process in children:
            stop(process)
        for path in directories:
            remove(path)


def finish() -> None:
    """``cleanup``, then every other process this one started, directly or not, still running (SIGTERM, then
    SIGKILL after the grace period): for the end of the process only — what someone else started ends too.
    From its start no directory or child is made any more (``Finishing``): a thread still running, a Spark
    session starting when the stop came, would make one nothing removes.

    A process that ends may leave children of its own (a script's background job, what a stopping JVM starts):
    orphans the kernel gives to their nearest subreaper — this process, from here on (Linux) — so the search
    for descendants is repeated until it finds none. The directories are removed once more after all of those
    have ended: a JVM stopping under us may still write in one (Spark makes its scratch directories with their
    parents) after ``cleanup`` removed it."""
    with _lock:
        _finishing.set()
        directories = list(_directories)  # ``cleanup`` forgets those it removes
    cleanup()
    with handlers(dict.fromkeys(SIGNALS, signal.SIG_IGN)):
        _become_subreaper()
        for sweep in range(SWEEPS):
            others = _descendants()
            if not others:
                break
            if sweep == 0:  # what our threads print as these end under them (pyspark's, of its JVM) is noise
                quiet()
            _end(others)
        with _lock:
            directories += _directories
        for path in directories:
            shutil.rmtree(path, ignore_errors=True)


def _end(pids: list[int]) -> None:
    """SIGTERM to ``pids``, SIGKILL to those still running after the grace period; returns once all have ended
    (or the time for that is up)."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    pids = _ended(pids, STOP_GRACE_S)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    # a process is gone some time after SIGKILL (the kernel ends its threads one by one): until then a JVM's
    # threads may still make files in the directories, and a removal running meanwhile would leave them
    _ended(pids, KILLED_GONE_S)


def _become_subreaper() -> None:
    """Orphaned descendants come to this process rather than to init, where ``_descendants`` finds them. Only at
    the end: a subreaper must reap them, and ours are reaped by the process's exit."""
    if _PRCTL is not None:
        _PRCTL(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def _ended(pids: list[int], seconds: float) -> list[int]:
    """Waits up to ``seconds`` for ``pids`` to end; those still running."""
    deadline = time.monotonic() + seconds
    while pids and time.monotonic() < deadline:
        time.sleep(0.05)
        pids = [pid for pid in pids if pid in _processes()]
    return pids


_stranded: set[str] = set()


def strand(what: str) -> None:
    """``what`` is a thread of ours inside a native library's call that has not returned (pulsar-client waiting on
    a broker that accepted the connection and says nothing) and that we therefore left open. Finalizing the
    interpreter under that call aborts the process (the C++ library's destructors meet a thread still running:
    ``terminate called without an active exception``, exit status 134): ``end_if_stranded`` ends it first."""
    _stranded.add(what)


def end_if_stranded(code: int) -> None:
    """At the very end of a command: when a native call was left open (``strand``), end the process with ``code``
    now, the way ``os._exit`` does, after ``finish`` (which atexit would have run) and with our output flushed."""
    if _stranded:
        exit_now(code)


def exit_now(code: int) -> None:
    """End the process with ``code`` at once, joining no thread: our output flushed and then silenced (what threads
    left behind say from here is only their own ending), and ``finish`` run first, as atexit would have."""
    quiet()
    finish()
    os._exit(code)


def quiet() -> None:
    """From now on nothing more reaches our stdout and stderr (flushed first): for the very end of the process,
    when threads left behind would only report their own ending."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
            os.dup2(os.open(os.devnull, os.O_WRONLY), stream.fileno())


@contextlib.contextmanager
def stdout_for_python_alone() -> Iterator[None]:
    """Meanwhile what reaches file descriptor 1 from outside Python — a C library's printf — goes to stderr, and
    Python's ``sys.stdout`` still to the real stdout: a JSON stream stays JSON, a table a table. HiGHS, the MILP
    solver the predictive shedder plans with, prints a debug line now and then whatever its options say
    (ERGO-Code/HiGHS issue 2783). Nothing changes unless ``sys.stdout`` is the process's own (a test's capture is
    left alone)."""
    stream = sys.stdout
    try:
        fd = stream.fileno() if stream is sys.__stdout__ and stream is not None else -1
    except (OSError, ValueError):
        fd = -1
    if fd < 0:
        yield
        return
    stream.flush()
    ours = os.dup(fd)
    os.dup2(2, fd)
    sys.stdout = open(  # noqa: SIM115  closed below, after the C library's buffer went where it belongs
        ours, "w", 1 if stream.line_buffering else -1, stream.encoding, stream.errors, closefd=False
    )
    try:
        yield
    finally:
        if _LIBC is not None:
            _LIBC.fflush(None)  # C's stdout buffer, to stderr now rather than to the real stdout at exit
        ours_stream, sys.stdout = sys.stdout, stream
        try:
            ours_stream.close()  # flushes: a reader gone (`| head`) raises BrokenPipeError here, as it would have
        finally:
            os.dup2(ours, fd)
            os.close(ours)


def _descendants() -> list[int]:
    """The processes this one started, and theirs, that still run (Linux: /proc; elsewhere none are found)."""
    parents = _processes()
    found, frontier = [], {os.getpid()}
    while frontier:
        frontier = {pid for pid, parent in parents.items() if parent in frontier and pid not in found}
        found += sorted(frontier)
    return found


def _processes() -> dict[int, int]:
    """Every running process and its parent. A zombie has ended, unless threads of it still run: a process whose
    first thread has exited shows that thread's state (Z) while the others go on (a JVM going down)."""
    running = {}
    with contextlib.suppress(OSError):
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            try:
                state, ppid = process_stat(entry.path)
            except (OSError, ValueError):
                continue
            if state not in ENDED or _threads_run(entry.path):
                running[int(entry.name)] = ppid
    return running


def process_stat(entry: str) -> tuple[str, int]:
    """The state and the parent of the process or thread at ``entry`` (/proc/<pid>, /proc/<pid>/task/<tid>), from
    its ``stat``: "pid (comm) state ppid …", the command in parentheses may hold any character. ValueError when it
    reads otherwise."""
    _, paren, rest = Path(entry, "stat").read_text().rpartition(")")
    if not paren:
        raise ValueError(f"{entry}/stat has no command in parentheses")
    state, ppid = rest.split()[:2]
    return state, int(ppid)


def _threads_run(process: str) -> bool:
    """Whether a thread of the process at /proc/<pid> still runs."""
    try:
        tasks = list(os.scandir(Path(process, "task")))
    except OSError:
        return False
    for task in tasks:
        with contextlib.suppress(OSError, ValueError):
            if process_stat(task.path)[0] not in ENDED:
                return True
    return False


@contextlib.contextmanager
def exit_on_signals(stop: threading.Event | None = None) -> Iterator[None]:
    """Meanwhile SIGTERM, SIGINT and SIGHUP end the command in order. With ``stop``, they set it and the command's
    loop ends at its next look: nothing is raised, so nothing can swallow it (an exception a signal handler raises
    surfaces wherever the main thread happens to be, a ``__del__`` included, which only prints it). Without, they
    raise ``Interrupted`` (SIGINT: KeyboardInterrupt) in the main thread, so every ``finally`` runs. In another
    thread nothing changes. A signal the process was started ignoring stays ignored (``nohup`` ignores SIGHUP; a
    shell starts a background job ignoring SIGINT)."""
    with contextlib.ExitStack() as stack:
        if stop is not None:
            wanted: dict[int, Any] = dict.fromkeys(SIGNALS, stack.enter_context(relayed(stop.set, SIGNALS)))
        else:
            wanted = {s: signal.default_int_handler if s == signal.SIGINT else _interrupt for s in SIGNALS}
        stack.enter_context(handlers({s: h for s, h in wanted.items() if signal.getsignal(s) != signal.SIG_IGN}))
        yield


@contextlib.contextmanager
def relayed(action: Callable[[], None], signals: Collection[int]) -> Iterator[Callable[[int, Any], None]]:
    """Meanwhile ``action`` runs on a thread of its own for each of ``signals`` the process receives; yields the
    handler to install for them, which itself does nothing.

    A handler that acts itself can fail twice. It runs in the main thread between two of its bytecodes: one that
    sets an Event waits forever when the main thread was inside that Event's ``wait(timeout)``, holding its lock,
    and the process then hears no signal at all until a SIGKILL ends it. And it runs only once the main thread
    runs: a signal the kernel gave another thread waits on a main thread blocked in a wait with no timeout. Python's
    C-level handler, in whichever thread receives the signal, writes its number to the wakeup descriptor
    (``signal.set_wakeup_fd``) at once; the thread reading it acts. Only the main thread can set that descriptor:
    elsewhere nothing is relayed (nor could a handler be installed)."""
    if threading.current_thread() is not threading.main_thread():
        yield _ignore
        return
    read, write = os.pipe()
    os.set_blocking(write, False)
    wanted = {int(s) for s in signals}

    def pass_on() -> None:
        while numbers := os.read(read, 64):  # b"" once ``write`` is closed
            for _ in range(sum(1 for number in numbers if number in wanted)):
                action()

    thread = threading.Thread(target=pass_on, name="pulsar-lb-signals", daemon=True)
    thread.start()
    previous = signal.set_wakeup_fd(write, warn_on_full_buffer=False)
    try:
        yield _ignore
    finally:
        signal.set_wakeup_fd(previous)
        os.close(write)
        thread.join(5.0)
        if not thread.is_alive():  # else the thread still reads it: a leaked descriptor, never a reused one
            os.close(read)


def _ignore(_signum: int, _frame: Any) -> None:
    """A Python-level handler, so that Python's C-level one writes to the wakeup descriptor; the rest is
    ``relayed``'s thread's."""


def _interrupt(signum: int, _frame: Any) -> None:
    raise Interrupted(signum)


@contextlib.contextmanager
def handlers(wanted: dict[int, Any]) -> Iterator[None]:
    """Signal handlers set meanwhile, the previous ones after (only the main thread may set them: elsewhere,
    nothing changes)."""
    main = threading.current_thread() is threading.main_thread()
    previous = {signum: signal.signal(signum, handler) for signum, handler in wanted.items()} if main else {}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _signal(process: subprocess.Popen[Any], signum: int, own_group: bool) -> None:
    with contextlib.suppress(ProcessLookupError):
        if own_group:
            os.killpg(process.pid, signum)
        else:
            process.send_signal(signum)


def _libc() -> ctypes.CDLL | None:
    """The C library this process runs on (prctl, fflush), or None where it cannot be loaded so."""
    if not sys.platform.startswith(("linux", "darwin")):
        return None
    try:
        return ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None


_LIBC = _libc()


def _prctl() -> Callable[..., int] | None:
    if not sys.platform.startswith("linux") or _LIBC is None:
        return None
    try:
        prctl = _LIBC.prctl
    except AttributeError:
        return None
    prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    prctl.restype = ctypes.c_int
    return prctl


_PRCTL = _prctl()  # looked up once, before any fork: the child only calls it


def _die_with(parent: int) -> Callable[[], None]:
    """Between fork and exec: SIGKILL when the forking thread ends; and end at once if the parent already has."""

    def preexec() -> None:
        if _PRCTL is not None:
            _PRCTL(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent:  # the parent died before the line above: no signal would ever come
            os._exit(1)

    return preexec


class _Launcher:
    """The one thread that forks every child, alive as long as the process (PR_SET_PDEATHSIG watches the
    forking thread: a child forked by a short-lived worker would be killed when that worker ends)."""

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[tuple[Callable[[], Any], concurrent.futures.Future[Any]]] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None

    def run(self, job: Callable[[], Any]) -> Any:
        with _lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._loop, name="pulsar-lb-launcher", daemon=True)
                self._thread.start()
        done: concurrent.futures.Future[Any] = concurrent.futures.Future()
        self._jobs.put((job, done))
        return done.result()

    def _loop(self) -> None:
        while True:
            job, done = self._jobs.get()
            try:
                done.set_result(job())
            except BaseException as exc:
                done.set_exception(exc)


_launcher = _Launcher()


def _forget_in_child() -> None:
    """A forked copy of this process owns none of its parent's children or directories."""
    _children.clear()
    _directories.clear()


os.register_at_fork(after_in_child=_forget_in_child)
atexit.register(finish)
