"""One warden run per MCP session. A run lives in a task of its own (so the SDK's
bounded per-connection teardown never cuts its cleanup short): it opens with the
server's `RunConfig`, serves the session's tool calls, and when the session ends
(the client disconnects, deletes the session, or goes idle) every task still running
is stopped as Ctrl-C stops it, every container of the run is removed and the run's
result files are written. Stopping the server (a signal) stops every run the same way."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from orchestrator.api import RunConfig, WardenRun, open_session
from orchestrator.config import Settings
from orchestrator.errors import ConfigError, WardenError
from orchestrator.mcp_server.elicit import ElicitationApprover, ElicitChannel, client_elicits

if TYPE_CHECKING:
    from mcp.server.session import ServerSession

log = logging.getLogger(__name__)


@dataclass
class SessionRun:
    """The run of one MCP session, and where its questions go."""

    channel: ElicitChannel = field(default_factory=ElicitChannel)
    ready: asyncio.Future[WardenRun] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )
    ending: asyncio.Event = field(default_factory=asyncio.Event)
    holder: asyncio.Task[None] | None = None
    asks: bool = False
    """Whether the client's elicitation is one of the run's approval channels."""

    async def run(self, session: ServerSession) -> WardenRun:
        """The open run (raises what opening it raised: a ConfigError, PolicyError…);
        the first time, a client that declared elicitation becomes an approval channel."""
        run = await asyncio.shield(self.ready)
        if not self.asks and client_elicits(session):
            self.asks = True
            run.add_approver(ElicitationApprover(self.channel))
        return run

    def end(self) -> None:
        """The session is over: stop its tasks and close its run."""
        self.ending.set()


class SessionRuns:
    """The server's runs, one per MCP session."""

    def __init__(
        self,
        config: RunConfig | None,
        settings: Settings,
        *,
        one_session: bool = False,
        failure: WardenError | None = None,
    ) -> None:
        """`one_session` (stdio): the transport carries exactly one session, so its run
        starts at once, before the client's first call. `failure` (with no `config`):
        what kept the server from configuring its run; every session's run fails with
        it, so each tool call says what went wrong."""
        self.config = config
        self.settings = settings
        self.failure = failure
        self._runs: list[SessionRun] = []
        self._sessions = 0
        self._spare: SessionRun | None = self._start() if one_session else None

    def claim(self) -> SessionRun:
        """A run for a new session (the one started ahead, if any)."""
        spare, self._spare = self._spare, None
        return spare or self._start()

    def _start(self) -> SessionRun:
        slot = SessionRun()
        self._sessions += 1
        config = self.config
        if (
            config is not None and self._sessions > 1
        ):  # several sessions (HTTP): each writes its own files
            config = config.model_copy(
                update={
                    k: _numbered(v, self._sessions)
                    for k in ("junit", "result_file", "audit_out")
                    if (v := getattr(config, k)) is not None
                }
            )
        slot.holder = asyncio.create_task(self._hold(slot, config), name="warden-mcp-run")
        self._runs.append(slot)
        return slot

    async def _hold(self, slot: SessionRun, config: RunConfig | None) -> None:
        try:
            if config is None:
                raise self.failure or ConfigError("warden mcp has no run configuration")
            async with open_session(config, settings=self.settings) as run:
                # Warm the built-in types' sandboxes while the client starts (as warden run).
                run.prewarm("general-purpose", "bash")
                slot.ready.set_result(run)
                log.info("MCP session opened warden run %s", run.run_id)
                await slot.ending.wait()
                stopped = await run.stop_all()
                if stopped:
                    log.warning(
                        "the MCP session ended: stopped %d task(s) %s",
                        len(stopped),
                        " ".join(stopped),
                    )
        except asyncio.CancelledError:
            if not slot.ready.done():
                slot.ready.cancel()
            raise
        except Exception as exc:
            if not slot.ready.done():
                slot.ready.set_exception(exc)
                slot.ready.exception()  # retrieved here; run() raises it to each caller
            log.error("the MCP session's run failed: %s", exc)

    async def close(self, *, stopping: bool) -> None:
        """End every run: as its session ends (tasks still running are stopped, the
        run completes), or, `stopping` (a signal), as Ctrl-C ends a run."""
        holders = [s.holder for s in self._runs if s.holder is not None]
        # A run whose session already ended is closing itself (stopping its tasks,
        # writing its result files): cancelling it now would cut that short and lose
        # its result document, so only runs still serving a session are interrupted.
        serving = [s.holder for s in self._runs if s.holder is not None and not s.ending.is_set()]
        for slot in self._runs:
            slot.end()
        if stopping:
            for holder in serving:
                holder.cancel()
        await asyncio.gather(*holders, return_exceptions=True)


def _numbered(path: Path, n: int) -> Path:
    """`results.json` → `results-2.json` for the server's second session."""
    return path.with_name(f"{path.stem}-{n}{path.suffix}")
