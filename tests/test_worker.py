"""``ccweb-store worker`` end to end: a real server process, real worker processes and the fake
agent (``tests/fake_agent.py``) as the command, on both backends; the worker's pure logic
(command templates, configuration, the command's environment) as unit tests."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from ccweb_store.store.uow import Store
from ccweb_store.worker.config import (
    BuiltinSpec,
    CommandSpec,
    ConfigError,
    check_template,
    child_environment,
    load_config,
    render_command,
)
from tests.lifecycle_support import messages_of, runs_of
from tests.servers import ROOT, server_env
from tests.worker_support import AGENT, Bench, read_database

# --- pure logic -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "prompt", ["plain", 'it\'s "quoted"', "$(touch /tmp/pwned) `id` $HOME; exit 3", "multi\nline"]
)
def test_a_prompt_reaches_the_command_exactly_as_written(prompt: str) -> None:
    command, on_stdin = render_command(
        "printf %s {prompt}", prompt=prompt, conversation_id="c", run_id="r", hop_count=0
    )
    assert on_stdin is False
    shown = subprocess.run(["/bin/sh", "-c", command], capture_output=True, text=True, check=True)
    assert shown.stdout == prompt


def test_placeholders_fill_in_and_without_prompt_it_goes_on_stdin() -> None:
    command, on_stdin = render_command(
        "agent --conversation {conversation_id} --run {run_id} --hops {hop_count} {unknown}",
        prompt="p", conversation_id="conv-a", run_id="run_1", hop_count=2,
    )  # fmt: skip
    assert command == "agent --conversation conv-a --run run_1 --hops 2 {unknown}"
    assert on_stdin is True


@pytest.mark.parametrize("template", ["claude -p '{prompt}'", 'codex exec "{prompt}"'])
def test_a_quoted_placeholder_is_refused(template: str) -> None:
    with pytest.raises(ConfigError, match="without quotes"):
        check_template(template)


def test_the_config_picks_the_conversation_then_the_agent_then_the_default(tmp_path: Path) -> None:
    config = tmp_path / "worker.toml"
    config.write_text(
        'command = "claude -p {prompt}"\ntimeout = "30m"\n'
        '[agents.codex]\ncommand = "codex exec {prompt}"\ntimeout = 60\n'
        '[conversations.reviewer]\ncommand = "review {prompt}"\n'
    )
    loaded = load_config(config)
    assert loaded.command_for("reviewer", "codex").command == "review {prompt}"
    assert loaded.command_for("reviewer", "codex").timeout == 1800
    assert loaded.command_for("x", "codex") == loaded.agents["codex"]
    assert loaded.command_for("x", "codex").timeout == 60
    assert loaded.command_for("x", None).command == "claude -p {prompt}"
    overridden = load_config(config, command="other {prompt}", timeout=5)
    assert overridden.command_for("x", "claude").command == "other {prompt}"
    assert overridden.command_for("x", "codex").timeout == 60


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('[agents.codex]\ncommand = "x"\nargs = ["-m", "y"]', "give command .* or args"),
        ('[agents.codex]\nargs = "--fast"', "agents.codex.args must be a list of strings"),
        ('[agents.gemini]\nargs = ["-m", "y"]', "args are extra arguments for a built-in agent"),
        ('comand = "x"', "unknown key(s) comand"),
        ('command = "x"\ntimeout = "soon"', "timeout: invalid duration 'soon'"),
        ('command = "x"\ntimeout = -1', "timeout: expected a positive number"),
        ("[agents.codex]\ntimeout = 5", "agents.codex.command must be a non-empty string"),
        ('[agents]\ncodex = "x"', "agents.codex must be a table"),
        ("command = ", "is not valid TOML"),
    ],
)
def test_a_bad_config_says_what_is_wrong(tmp_path: Path, text: str, message: str) -> None:
    config = tmp_path / "worker.toml"
    config.write_text(text)
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load_config(config)


def test_without_a_command_claude_and_codex_run_built_in_and_other_agents_are_refused(
    tmp_path: Path,
) -> None:
    config = tmp_path / "worker.toml"
    config.write_text(
        '[agents.claude]\nargs = ["--model", "sonnet"]\ntimeout = 60\n'
        '[conversations.reviewer]\ncommand = "review {prompt}"\n'
    )
    loaded = load_config(config)
    claude = loaded.command_for("x", "claude")
    assert isinstance(claude, BuiltinSpec)
    assert (claude.agent.name, claude.args, claude.timeout) == ("claude", ("--model", "sonnet"), 60)
    codex = load_config(None).command_for("x", "codex")
    assert isinstance(codex, BuiltinSpec) and codex.agent.name == "codex" and codex.args == ()
    assert loaded.command_for("reviewer", "codex") == CommandSpec("review {prompt}")
    assert load_config(None, command="mine {prompt}").command_for("x", "claude") == CommandSpec(
        "mine {prompt}"
    )
    for agent in ("gemini", None):
        with pytest.raises(
            ConfigError, match=f"no command for conversation 'x' \\(agent {agent!r}"
        ):
            loaded.command_for("x", agent)


def test_the_command_never_sees_the_operator_token_or_the_database() -> None:
    run = {"id": "run_1", "sessionId": "conv-a", "kind": "user_turn", "hopCount": 2}
    env = child_environment(
        {"PATH": "/bin", "CCWEB_TOKEN": "t", "CCWEB_CREDENTIAL_SECRET": "s" * 32,
         "CCWEB_DATABASE_URL": "sqlite+aiosqlite:///x.db", "CCWEB_AGENT_SESSION_ID": "stale"},
        endpoint="http://h/mcp", token="ccw1.x", run=run, agent_session_id="thread-9",
    )  # fmt: skip
    assert env == {
        "PATH": "/bin",
        "CCWEB_AGENT_SESSION_ID": "thread-9",
        "CCWEB_MCP_ENDPOINT": "http://h/mcp",
        "CCWEB_MCP_URL": "http://h/mcp?credential=ccw1.x",
        "CCWEB_CREDENTIAL": "ccw1.x",
        "CCWEB_CONVERSATION_ID": "conv-a",
        "CCWEB_RUN_ID": "run_1",
        "CCWEB_RUN_KIND": "user_turn",
        "CCWEB_HOP_COUNT": "2",
    }


def test_the_worker_loads_neither_sqlalchemy_nor_the_store_nor_the_services() -> None:
    """The worker talks HTTP only: importing it and reading a configuration (a duration
    included) leaves the database layers unloaded, so it installs and starts light."""
    probe = textwrap.dedent(
        """
        import sys, tempfile
        from pathlib import Path

        import ccweb_store.worker.config
        import ccweb_store.worker.runner

        path = Path(tempfile.mkdtemp()) / "worker.toml"
        path.write_text('command = "agent {prompt}"\\ntimeout = "1h30m"\\n')
        assert ccweb_store.worker.config.load_config(path).default.timeout == 5400
        print("\\n".join(sorted(sys.modules)))
        """
    )
    loaded = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd=ROOT
    ).stdout.split()
    assert "ccweb_store.worker.runner" in loaded
    heavy = [
        name
        for name in loaded
        if name.split(".")[0] == "sqlalchemy"
        or name.startswith(("ccweb_store.store", "ccweb_store.services"))
    ]
    assert heavy == []


# --- real processes ---------------------------------------------------------------------------


def pid_in(path: Path) -> int:
    return int(path.read_text()) if path.exists() and path.read_text() else 0


def is_running(pid: int) -> bool:
    """Alive and not a zombie waiting to be reaped."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False
    return "State:\tZ" not in status


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["return_and_continue", "one_way"])
def test_the_worker_drives_an_exchange_between_two_conversations(
    bench: Bench, database_url: str, mode: str
) -> None:
    bench.conversation("conv-a", agent="claude")
    bench.conversation("conv-b", agent="codex")
    bench.person_writes("conv-a", f"ASK conv-b {mode}: how many tests fail?")
    worker = bench.worker()
    expected_runs = 3 if mode == "return_and_continue" else 2
    bench.wait_until(
        f"{expected_runs} runs completed",
        lambda: len(bench.runs(status="completed")) == expected_runs and bench.idle(),
    )
    worker.process.send_signal(signal.SIGINT)
    code, log = worker.finish()
    assert code == 0, log
    assert log.count(" completed in ") == expected_runs

    async def state(store: Store) -> dict[str, Any]:
        async with store.read_uow() as uow:
            replies, _ = await uow.replies.list_page(limit=10)
            credentials = await uow.credentials.list_recent(
                session_id=None, active_at=None, limit=10
            )
        return {
            "a": [(m.role, m.content) for m in await messages_of(store, "conv-a")],
            "b": [(m.role, m.content) for m in await messages_of(store, "conv-b")],
            "a_runs": [(r.kind, r.status, r.hop_count) for r in await runs_of(store, "conv-a")],
            "b_runs": [(r.kind, r.status, r.hop_count) for r in await runs_of(store, "conv-b")],
            "replies": replies,
            "credentials": credentials,
        }

    found = read_database(database_url, state)
    answer = "conv-b (hop 1) answers: done with 'how many tests fail?'"
    assert found["b"] == [("user", "how many tests fail?"), ("assistant", answer)]
    assert found["b_runs"] == [("cross_conversation", "completed", 1)]
    if mode == "return_and_continue":
        (reply,) = found["replies"]
        assert (reply.status, reply.reply_text) == ("returned", answer)
        assert found["a"] == [
            ("user", f"ASK conv-b {mode}: how many tests fail?"),
            ("assistant", f"conv-a (hop 0) asked conv-b ({mode}), request {reply.request_id}"),
            ("assistant", answer),  # the reply, delivered once
            ("assistant", f"conv-a (hop 1) got the reply: {answer}"),
        ]
        assert found["a_runs"] == [
            ("user_turn", "completed", 0),
            ("reply_auto_run", "completed", 1),
        ]
    else:
        assert found["replies"] == []
        assert found["a"] == [
            ("user", f"ASK conv-b {mode}: how many tests fail?"),
            ("assistant", f"conv-a (hop 0) asked conv-b ({mode}), request -"),
        ]
        assert found["a_runs"] == [("user_turn", "completed", 0)]
    # One credential per run, each bound to the run's hop count and revoked after it.
    credentials = found["credentials"]
    assert len(credentials) == expected_runs
    assert all(c.revoked_at is not None for c in credentials)
    assert Counter((c.session_id, c.hop_count) for c in credentials) == Counter(
        [("conv-a", 0), ("conv-b", 1)] + ([("conv-a", 1)] if mode == "return_and_continue" else [])
    )


def test_an_agent_cannot_speak_as_another_conversation_through_its_url(bench: Bench) -> None:
    bench.conversation("conv-a")
    bench.conversation("conv-b")
    run_id = bench.person_writes("conv-a", "IMPERSONATE conv-b")
    worker = bench.worker("--once")
    code, log = worker.finish()
    assert code == 0, log
    (run,) = [run for run in bench.runs() if run["id"] == run_id]
    assert run["output"] == (
        "conv-a (hop 0) tried to speak as conv-b: HTTP 403 credential_conversation_mismatch"
    )
    assert bench.rpc("message.list", {"sessionId": "conv-b"})["messages"] == []


def test_two_workers_at_once_never_run_a_run_twice(bench: Bench, tmp_path: Path) -> None:
    executed = tmp_path / "executed.log"
    wanted = set()
    for number in range(8):
        bench.conversation(f"conv-{number}")
        wanted.add(bench.person_writes(f"conv-{number}", f"job {number}"))
    command = f"{AGENT} --sleep 0.2 {{prompt}}"
    first = bench.worker("--worker-id", "first", command=command, FAKE_AGENT_LOG=str(executed))
    second = bench.worker("--worker-id", "second", command=command, FAKE_AGENT_LOG=str(executed))
    bench.wait_until("8 runs completed", lambda: len(bench.runs(status="completed")) == 8)
    for worker in (first, second):
        worker.process.send_signal(signal.SIGTERM)
        code, log = worker.finish()
        assert code == 0, log
    assert sorted(executed.read_text().split()) == sorted(wanted)  # each exactly once
    runs = bench.runs()
    assert all(run["attempts"] == 0 for run in runs)
    assert {run["workerId"] for run in runs} <= {"first", "second"}


def test_a_killed_workers_run_is_requeued_and_finished_by_another(
    bench: Bench, tmp_path: Path
) -> None:
    bench.conversation("conv-a")
    run_id = bench.person_writes("conv-a", "slow work")
    pid_file = tmp_path / "agent.pid"
    doomed = bench.worker(
        "--worker-id", "doomed", "--lease-seconds", "2",
        command=f"{AGENT} --sleep 600 --pid-file {pid_file} {{prompt}}",
    )  # fmt: skip
    bench.wait_until("the first agent started", lambda: pid_in(pid_file))
    doomed.process.kill()  # SIGKILL: no goodbye, the lease is all the server has
    doomed.process.wait()
    os.kill(pid_in(pid_file), signal.SIGKILL)  # the machine is gone: its agent too
    rescuer = bench.worker("--worker-id", "rescuer")
    run = bench.wait_until(
        "the run completed by the rescuer",
        lambda: next((r for r in bench.runs(status="completed") if r["id"] == run_id), None),
    )
    assert (run["workerId"], run["attempts"]) == ("rescuer", 1)
    assert run["output"] == "conv-a (hop 0) says: slow work"
    rescuer.process.send_signal(signal.SIGINT)
    assert rescuer.finish()[0] == 0


def test_a_worker_whose_run_moved_to_another_drops_its_answer_and_does_not_retry(
    bench: Bench, tmp_path: Path
) -> None:
    bench.conversation("conv-a")
    run_id = bench.person_writes("conv-a", "slow work")
    pid_file, go = tmp_path / "agent.pid", tmp_path / "go"
    stale = bench.worker(
        "--worker-id", "stale", "--once", "--lease-seconds", "600",  # no heartbeat meanwhile
        command=f"{AGENT} --pid-file {pid_file} --wait-for {go} {{prompt}}",
    )  # fmt: skip
    bench.wait_until("the agent started", lambda: pid_in(pid_file))
    # The stale worker's lease is gone (an operator requeued the run), and another claims it.
    bench.rpc("run.requeue", {"runId": run_id})
    assert bench.rpc("run.claim", {"workerId": "new-holder"})["run"]["id"] == run_id
    go.touch()  # now the stale worker's command answers, and the worker reports its end

    code, log = stale.finish()

    assert code == 0, log
    refusals = [line for line in log.splitlines() if run_id in line and "lease lost" in line]
    assert len(refusals) == 1, log  # one clear line, no retry
    assert "moved to worker 'new-holder'" in refusals[0]
    assert "trying again" not in log and " completed in " not in log
    [run] = bench.runs()
    assert (run["status"], run["workerId"], run["output"]) == ("running", "new-holder", None)
    done = bench.rpc(
        "run.complete",
        {"runId": run_id, "workerId": "new-holder", "status": "completed", "output": "mine"},
    )
    assert done["run"]["output"] == "mine"
    listed = bench.rpc("message.list", {"sessionId": "conv-a"})["messages"]
    assert [(m["role"], m["content"]) for m in listed] == [
        ("user", "slow work"),
        ("assistant", "mine"),
    ]


def test_a_command_that_runs_too_long_is_killed_and_its_run_fails(
    bench: Bench, tmp_path: Path
) -> None:
    bench.conversation("conv-a")
    run_id = bench.person_writes("conv-a", "never ends")
    pid_file = tmp_path / "agent.pid"
    worker = bench.worker(
        "--once", "--timeout", "1", command=f"{AGENT} --sleep 600 --pid-file {pid_file}"
    )
    code, log = worker.finish()
    assert code == 1, log  # --once: its run failed
    (run,) = bench.runs()
    assert (run["id"], run["status"]) == (run_id, "failed")
    assert run["error"] == "timed out after 1s; the worker killed the command"
    assert f"run {run_id} failed in " in log
    assert not is_running(pid_in(pid_file))


def test_a_failing_command_fails_its_run_with_the_end_of_its_stderr(bench: Bench) -> None:
    bench.conversation("conv-a")
    bench.conversation("conv-b")
    bench.person_writes("conv-a", "ASK conv-b return_and_continue: check it")
    worker = bench.worker("--once")
    assert worker.finish()[0] == 0
    failing = bench.worker("--once", command=f"{AGENT} --exit 3 {{prompt}}")
    assert failing.finish()[0] == 1
    target = bench.runs(sessionId="conv-b")[0]
    assert target["status"] == "failed"
    assert target["error"] == (
        "the command exited with code 3: fake agent failing on purpose with 3"
    )
    # The source is told, and runs again to deal with it.
    (request,) = bench.rpc("reply.list", {})["replies"]
    assert (request["status"], request["lastError"]) == ("failed", target["error"])
    assert [r["kind"] for r in bench.runs(sessionId="conv-a", status="queued")] == [
        "reply_auto_run"
    ]


def test_ctrl_c_lets_the_current_run_finish_then_exits(bench: Bench, tmp_path: Path) -> None:
    bench.conversation("conv-a")
    bench.conversation("conv-b")
    first = bench.person_writes("conv-a", "first")
    second = bench.person_writes("conv-b", "second")
    pid_file = tmp_path / "agent.pid"
    # The prompt on stdin this time; a lease shorter than the command, kept by heartbeats.
    worker = bench.worker(
        "--lease-seconds", "3", command=f"{AGENT} --sleep 4 --pid-file {pid_file}"
    )
    bench.wait_until("the first command started", lambda: pid_in(pid_file))
    worker.process.send_signal(signal.SIGINT)
    code, log = worker.finish()
    assert code == 0, log
    assert f"stopping: no new runs; waiting up to 30s for {first} to finish" in log
    runs = {run["id"]: run for run in bench.runs()}
    assert (runs[first]["status"], runs[first]["attempts"]) == ("completed", 0)
    assert runs[first]["output"] == "conv-a (hop 0) says: first"
    assert runs[second]["status"] == "queued"


def test_a_second_ctrl_c_kills_the_command_and_requeues_its_run(
    bench: Bench, tmp_path: Path
) -> None:
    bench.conversation("conv-a")
    run_id = bench.person_writes("conv-a", "long")
    pid_file = tmp_path / "agent.pid"
    worker = bench.worker(command=f"{AGENT} --sleep 600 --pid-file {pid_file} {{prompt}}")
    bench.wait_until("the command started", lambda: pid_in(pid_file))
    worker.process.send_signal(signal.SIGINT)
    bench.wait_until("the worker said it stops", lambda: "stopping: no new runs" in worker.text())
    worker.process.send_signal(signal.SIGINT)
    code, log = worker.finish()
    assert code == 130, log
    assert f"run {run_id} interrupted and put back in the queue" in log
    (run,) = bench.runs()
    assert (run["status"], run["attempts"], run["workerId"]) == ("queued", 1, None)
    assert not is_running(pid_in(pid_file))


def read_marks(path: Path) -> list[tuple[str, str, str]]:
    """The ``--marks`` lines of the fake agents: (start|end, conversation, run), in order."""
    if not path.exists():
        return []
    return [
        (what, conversation, run)
        for what, conversation, run in map(str.split, path.read_text().splitlines())
    ]


def most_at_once(marks: list[tuple[str, str, str]]) -> tuple[int, int]:
    """The most commands that ran at the same time, over all and of one conversation."""
    running: Counter[str] = Counter()
    most = most_of_one = 0
    for what, conversation, _ in marks:
        running[conversation] += 1 if what == "start" else -1
        most = max(most, running.total())
        most_of_one = max(most_of_one, running[conversation])
    return most, most_of_one


def test_concurrency_3_runs_three_conversations_at_once_never_two_of_one(
    bench: Bench, tmp_path: Path
) -> None:
    marks, go = tmp_path / "marks", tmp_path / "go"
    runs = set()
    for conversation in ("conv-a", "conv-b", "conv-c", "conv-d"):
        bench.conversation(conversation)
        runs.add(bench.person_writes(conversation, f"first of {conversation}"))
    runs.add(bench.person_writes("conv-a", "second of conv-a"))
    worker = bench.worker(
        "--concurrency", "3", command=f"{AGENT} --marks {marks} --wait-for {go} {{prompt}}"
    )
    bench.wait_until("three commands started", lambda: len(read_marks(marks)) >= 3)
    # No command ends before ``go`` exists: three starts in a row are three commands at once.
    first_three = read_marks(marks)[:3]
    assert [what for what, _, _ in first_three] == ["start"] * 3
    assert len({conversation for _, conversation, _ in first_three}) == 3
    go.touch()
    bench.wait_until("five runs completed", lambda: len(bench.runs(status="completed")) == 5)
    worker.process.send_signal(signal.SIGTERM)
    code, log = worker.finish()
    assert code == 0, log
    marks_seen = read_marks(marks)
    assert Counter(what for what, _, _ in marks_seen) == {"start": 5, "end": 5}
    assert {run for _, _, run in marks_seen} == runs
    assert most_at_once(marks_seen) == (3, 1)  # never more than --concurrency, one per conversation
    conv_a = [(what, run) for what, conversation, run in marks_seen if conversation == "conv-a"]
    assert [what for what, _ in conv_a] == ["start", "end", "start", "end"]


def test_a_run_of_a_conversation_the_worker_still_runs_waits_for_that_one_to_end(
    bench: Bench, tmp_path: Path
) -> None:
    """The client's own guard: the server leased a second run of conv-a (its first was taken
    away by an operator), while the worker still ran the first's command."""
    marks = tmp_path / "marks"
    bench.conversation("conv-a")
    bench.conversation("conv-b")
    first = bench.person_writes("conv-a", "first")
    other = bench.person_writes("conv-b", "other")
    worker = bench.worker(
        "--concurrency", "2",
        command=f"{AGENT} --marks {marks} --wait-for {tmp_path}/go-{{conversation_id}} {{prompt}}",
    )  # fmt: skip
    # Both slots taken, so the worker claims nothing until one ends.
    bench.wait_until("both commands started", lambda: len(read_marks(marks)) == 2)
    bench.rpc("run.requeue", {"runId": first})
    assert bench.rpc("run.claim", {"workerId": "operator"})["run"]["id"] == first
    done = {"runId": first, "workerId": "operator", "status": "completed", "output": "by hand"}
    bench.rpc("run.complete", done)
    second = bench.person_writes("conv-a", "second")
    (tmp_path / "go-conv-b").touch()  # a slot frees: the worker claims conv-a's second run
    bench.wait_until(
        "the second run waits",
        lambda: f"run {second} waits until this worker's run of conv-a" in worker.text(),
    )
    (tmp_path / "go-conv-a").touch()
    bench.wait_until("three runs completed", lambda: len(bench.runs(status="completed")) == 3)
    worker.process.send_signal(signal.SIGTERM)
    code, log = worker.finish()
    assert code == 0, log
    assert [
        (what, run) for what, conversation, run in read_marks(marks) if conversation == "conv-a"
    ] == [("start", first), ("end", first), ("start", second), ("end", second)]
    ended = {run["id"]: (run["workerId"], run["output"]) for run in bench.runs()}
    assert ended[first] == ("operator", "by hand")  # the worker's late answer was dropped
    assert ended[second][1] == "conv-a (hop 0) says: second"
    assert ended[other][1] == "conv-b (hop 0) says: other"


def test_sigterm_gives_running_commands_the_grace_period_then_requeues_their_runs(
    bench: Bench, tmp_path: Path
) -> None:
    bench.conversation("conv-a")
    bench.conversation("conv-b")
    run_id = bench.person_writes("conv-a", "long")
    waiting = bench.person_writes("conv-b", "never claimed")
    pid_file = tmp_path / "agent.pid"
    worker = bench.worker(
        "--grace", "1", command=f"{AGENT} --sleep 600 --pid-file {pid_file} {{prompt}}"
    )
    bench.wait_until("the command started", lambda: pid_in(pid_file))
    worker.process.send_signal(signal.SIGTERM)
    code, log = worker.finish()
    assert code == 130, log
    assert f"stopping: no new runs; waiting up to 1s for {run_id} to finish" in log
    requeued = [line for line in log.splitlines() if "put back in the queue" in line]
    assert len(requeued) == 1, log  # one line per run
    assert (
        f"run {run_id} interrupted and put back in the queue (user_turn of conv-a: still "
        "running when the 1s grace period ended)" in requeued[0]
    )
    runs = {run["id"]: run for run in bench.runs()}
    assert (runs[run_id]["status"], runs[run_id]["attempts"], runs[run_id]["workerId"]) == (
        "queued",
        1,
        None,
    )
    assert (runs[waiting]["status"], runs[waiting]["attempts"]) == ("queued", 0)
    assert not is_running(pid_in(pid_file))


def test_once_exits_1_when_its_run_failed_and_0_when_it_succeeded(bench: Bench) -> None:
    bench.conversation("conv-a")
    failing = bench.person_writes("conv-a", "fails")
    code, log = bench.worker("--once", command=f"{AGENT} --exit 4 {{prompt}}").finish()
    assert code == 1, log
    working = bench.person_writes("conv-a", "works")
    code, log = bench.worker("--once", "--poll-interval", "0.1").finish()
    assert code == 0, log
    assert "--poll-interval is no longer used" in log  # accepted, so old scripts still start
    statuses = {run["id"]: run["status"] for run in bench.runs()}
    assert statuses == {failing: "failed", working: "completed"}


CLAIMING = "claiming a run (waiting up to 30s)"


def test_an_idle_worker_takes_a_run_in_the_claim_that_was_waiting_when_it_was_queued(
    bench: Bench,
) -> None:
    bench.conversation("conv-a")
    worker = bench.worker("--log-level", "debug")
    bench.wait_until("the worker waits for a run", lambda: CLAIMING in worker.text())
    claims_before = worker.text().count(CLAIMING)
    run_id = bench.person_writes("conv-a", "hello")
    bench.wait_until("the run completed", lambda: bench.runs(status="completed"))
    worker.process.send_signal(signal.SIGINT)
    code, log = worker.finish()
    assert code == 0, log
    # The long-poll that was waiting when the run was queued is the one that took it: no
    # further claim was needed.
    assert log[: log.index(f"run {run_id} claimed")].count(CLAIMING) == claims_before


def test_per_agent_commands_and_the_conversations_directory(bench: Bench, tmp_path: Path) -> None:
    workdir = tmp_path / "project"
    workdir.mkdir()
    bench.conversation("conv-codex", agent="codex", cwd=str(workdir))
    bench.conversation("conv-claude", agent="claude")
    bench.conversation("conv-gone", agent="codex", cwd=str(tmp_path / "missing"))
    for conversation in ("conv-codex", "conv-claude", "conv-gone"):
        bench.person_writes(conversation, "PWD")
    config = tmp_path / "worker.toml"
    config.write_text(
        f'command = "{AGENT} --exit 5 {{prompt}}"\n[agents.codex]\ncommand = "{AGENT} {{prompt}}"\n'
    )
    worker = bench.worker("--config", str(config), command=None)
    bench.wait_until("three runs ended", bench.idle)
    worker.process.send_signal(signal.SIGTERM)
    assert worker.finish()[0] == 0
    ended = {run["sessionId"]: run for run in bench.runs()}
    assert ended["conv-codex"]["output"] == f"conv-codex (hop 0) works in {workdir}"
    assert ended["conv-claude"]["status"] == "failed"
    assert "exited with code 5" in ended["conv-claude"]["error"]
    assert ended["conv-gone"]["status"] == "failed"
    assert "working directory" in ended["conv-gone"]["error"]


def test_once_with_nothing_queued_exits_and_a_wrong_token_says_so(bench: Bench) -> None:
    idle = bench.worker("--once")
    assert idle.finish()[0] == 0
    refused = bench.worker("--once", CCWEB_TOKEN="wrong-operator-token-1234")
    code, log = refused.finish()
    assert code == 2
    assert "refused this worker: it sent a wrong operator token" in log
    assert "Start the worker with the server's CCWEB_TOKEN" in log
    assert "agent" not in log  # the server's words for agents are not passed on
    assert "wrong-operator-token-1234" not in log  # the token itself is not echoed


def test_show_commands_prints_each_agents_command_line_without_the_credential(
    tmp_path: Path,
) -> None:
    config = tmp_path / "worker.toml"
    config.write_text('[agents.gemini]\ncommand = "gemini -p {prompt}"\n')
    completed = subprocess.run(
        [sys.executable, "-m", "ccweb_store", "worker", "--show-commands", "--config", str(config),
         "--url", "http://127.0.0.1:9123"],
        cwd=ROOT, env=server_env(), capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert completed.returncode == 0, completed.stderr
    lines = completed.stdout.splitlines()
    assert "[agents.gemini]: gemini -p {prompt}" in lines
    claude = next(line for line in lines if line.startswith("  new session:") and "claude" in line)
    assert "-p --output-format json --allowedTools mcp__ccweb --mcp-config" in claude
    assert '"url":"http://127.0.0.1:9123/mcp"' in claude
    assert '"Authorization":"Bearer ${CCWEB_CREDENTIAL}"' in claude
    codex = next(line for line in lines if line.startswith("  resuming:") and "codex" in line)
    assert "exec --json --skip-git-repo-check" in codex and codex.endswith(
        "resume AGENT_SESSION_ID -"
    )
    assert 'bearer_token_env_var="CCWEB_CREDENTIAL"' in codex
    assert lines[-1].startswith("any other agent: none (its runs fail")
