"""``ccweb-store worker`` at its edges, with real worker processes against a real server on
both backends: a run cancelled while its command ran, ``--once`` with the server down, and
a conversation's box that a symlink swapped in after its creation cannot widen."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

from tests.servers import free_port
from tests.test_worker import pid_in
from tests.worker_support import AGENT, Bench


def test_a_run_cancelled_while_its_command_ran_is_logged_as_cancelled_not_completed(
    bench: Bench, tmp_path: Path
) -> None:
    bench.conversation("conv-a")
    run_id = bench.person_writes("conv-a", "slow work")
    pid_file, go = tmp_path / "agent.pid", tmp_path / "go"
    worker = bench.worker(
        "--once", "--lease-seconds", "600",  # no heartbeat while the command runs
        command=f"{AGENT} --pid-file {pid_file} --wait-for {go} {{prompt}}",
    )  # fmt: skip
    bench.wait_until("the agent started", lambda: pid_in(pid_file))
    bench.rpc("run.cancel", {"runId": run_id, "force": True, "reason": "not needed"})
    go.touch()  # the command ends now, and the worker reports its end

    code, log = worker.finish()

    assert code == 0, log  # as for a lost lease: not this worker's failure
    said = [line for line in log.splitlines() if run_id in line and "cancelled" in line]
    assert len(said) == 1, log
    assert f"run {run_id} was cancelled while it ran: its output (" in said[0]
    assert "was not recorded, and the run is not retried (not needed)" in said[0]
    assert " completed in " not in log and "trying again" not in log
    [run] = bench.runs()
    assert (run["status"], run["output"]) == ("cancelled", None)
    messages = bench.rpc("message.list", {"sessionId": "conv-a"})["messages"]
    assert [message["role"] for message in messages] == ["user"]


def test_once_with_the_server_down_says_it_gives_up_once_and_exits_2(bench: Bench) -> None:
    nowhere = f"http://127.0.0.1:{free_port()}"
    worker = bench.worker("--once", "--url", nowhere)

    code, log = worker.finish()

    assert code == 2, log
    assert "trying again" not in log
    [line] = [line for line in log.splitlines() if "cannot claim" in line]
    assert f"cannot claim a run from {nowhere} (" in line
    assert line.endswith("--once gives up (exit 2)")


def created_by_credential(bench: Bench, creator: str, cwd: str) -> dict[str, Any]:
    """``ccweb_create_conversation`` called by ``creator``'s agent, through a credential bound
    to it, asking for the folder ``cwd``: the new conversation, as ``session.get`` shows it."""
    token = bench.rpc("credential.mint", {"sessionId": creator})["token"]
    call = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": "ccweb_create_conversation", "arguments": {"cwd": cwd}},
    }
    answer = bench.http.post(
        f"/mcp?credential={token}", json=call, headers={"Accept": "application/json"}
    ).json()
    assert answer["result"]["isError"] is False, answer
    created: dict[str, Any] = bench.rpc(
        "session.get", {"id": answer["result"]["structuredContent"]["conversationId"]}
    )
    return created


def test_a_symlink_swapped_into_a_conversations_path_cannot_move_its_run_out_of_its_box(
    bench: Bench, tmp_path: Path
) -> None:
    root = Path(os.path.realpath(tmp_path))
    project, elsewhere = root / "p" / "a", root / "p" / "b"
    (project / "sub").mkdir(parents=True)
    (project / "kept").mkdir()
    elsewhere.mkdir()
    (elsewhere / "secret.txt").write_text("not for the agent of a")
    bench.conversation("planner", cwd=str(project))
    swapped = created_by_credential(bench, "planner", "sub")
    linked_later = created_by_credential(bench, "planner", "later")  # not there yet
    kept = created_by_credential(bench, "planner", "kept")
    for created in (swapped, linked_later, kept):
        assert created["box"] == str(project), created
    # A conversation a boxed one creates keeps that box: a box never widens.
    assert created_by_credential(bench, kept["id"], ".")["box"] == str(project)
    assert bench.rpc("session.get", {"id": "planner"})["box"] is None  # the host's: no box
    # The agent of a replaces a folder of its box by a link out of it, and makes a link
    # where the other conversation's folder was to be.
    (project / "sub").rmdir()
    (project / "sub").symlink_to(elsewhere, target_is_directory=True)
    (project / "later").symlink_to(elsewhere, target_is_directory=True)
    runs = {c["id"]: bench.person_writes(c["id"], "PWD") for c in (swapped, linked_later, kept)}

    worker = bench.worker()
    bench.wait_until("the three runs ended", bench.idle)
    worker.process.send_signal(signal.SIGTERM)
    code, log = worker.finish()

    assert code == 0, log
    ended = {run["id"]: run for run in bench.runs()}
    assert ended[runs[kept["id"]]]["status"] == "completed"
    assert ended[runs[kept["id"]]]["output"] == f"{kept['id']} (hop 0) works in {project}/kept"
    for created, link in ((swapped, "sub"), (linked_later, "later")):
        run = ended[runs[created["id"]]]
        assert run["status"] == "failed" and run["output"] is None, run
        assert run["error"] == (
            "refused to run outside the conversation's box: its working directory "
            f"'{project}/{link}' resolves to '{elsewhere}', which is not inside '{project}', "
            "the folder its creator was confined to (a symlink in its path now leads "
            "elsewhere). Remove the link, or run this work from a conversation whose folder "
            "is there"
        )
        assert f"run {run['id']} refused: {project}/{link} resolves to {elsewhere}" in log
