"""A process that has ``ccweb_store`` imported and forks one child per ``ccweb-store`` call.

``tests/cli_support.run_cli`` runs the command in a process of its own, as ``python -m
ccweb_store`` would: its own arguments, environment, working folder, stdin, stdout, stderr and
exit code. What it saves is the imports: a fresh interpreter spends most of a short command's
time importing SQLAlchemy, pydantic and the package, and the suite runs hundreds of commands.
The child is forked from this process after those imports, so it runs the same code from the
same files; the tests of the start itself (what a command imports, the installed wheel, a
server's start) run a fresh interpreter.

Protocol, over a Unix socket (one connection per call): the caller sends a JSON header
``{"argv", "env", "cwd"}`` with three file descriptors (stdin, stdout, stderr) attached; this
process forks a monitor, which forks the command and answers ``{"pid"}`` then, when the command
ends, ``{"status"}`` (its wait status). The monitor exists so that this process never waits:
it ignores ``SIGCHLD`` (monitors are reaped by the kernel) and never runs a thread, so every
fork is of a single-threaded process.
"""

from __future__ import annotations

import gc
import importlib
import json
import os
import pkgutil
import runpy
import signal
import socket
import sys

#: Packages imported before the first fork; each command then finds them loaded.
PRELOAD = ("ccweb_store",)
#: Modules left out of the preload: each starts something or wants its own interpreter.
NOT_PRELOADED = ("ccweb_store.__main__",)
HEADER_LIMIT = 1 << 20


def preload() -> None:
    for name in PRELOAD:
        package = importlib.import_module(name)
        for module in pkgutil.walk_packages(package.__path__, f"{name}."):
            if module.name not in NOT_PRELOADED:
                importlib.import_module(module.name)


def send(connection: socket.socket, message: dict[str, int]) -> None:
    connection.sendall(json.dumps(message).encode() + b"\n")


def run_command(header: dict[str, object], fds: list[int]) -> None:
    """In the forked child: become the command, then run it as ``python -m ccweb_store``."""
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    os.chdir(str(header["cwd"]))
    env = header["env"]
    assert isinstance(env, dict)
    os.environ.clear()
    os.environ.update(env)
    argv = header["argv"]
    assert isinstance(argv, list)
    sys.argv = [sys.argv[0], *argv]
    runpy.run_module("ccweb_store", run_name="__main__", alter_sys=True)


def serve_call(listener: socket.socket, connection: socket.socket) -> None:
    """In the monitor: fork the command, report its pid, wait for it, report its status."""
    message, fds, _flags, _address = socket.recv_fds(connection, HEADER_LIMIT, 3)
    header = json.loads(message)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # this process waits for its child
    pid = os.fork()
    if pid == 0:
        listener.close()
        connection.close()
        run_command(header, fds)
        sys.exit(0)
    for fd in fds:
        os.close(fd)
    send(connection, {"pid": pid})
    _, status = os.waitpid(pid, 0)
    send(connection, {"status": status})
    connection.close()
    os._exit(0)


def main(path: str) -> None:
    preload()
    # What the imports made stays out of the collector's sight: a child's collections and its
    # exit then leave those pages shared instead of copying every one of them.
    gc.freeze()
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(16)
    print("ready", flush=True)
    while True:
        connection, _ = listener.accept()
        if os.fork() == 0:
            serve_call(listener, connection)  # never returns: the command or os._exit
        connection.close()


if __name__ == "__main__":
    main(sys.argv[1])
