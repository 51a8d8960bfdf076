"""``ccweb-store worker`` at its edges, with real worker processes against a real server on
both backends: a run cancelled while its command ran, ``--once`` with the server down, and
a conversation's box that a symlink swapped in after its creation cannot widen."""

from __future__ import annotations

from pathlib import Path

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
