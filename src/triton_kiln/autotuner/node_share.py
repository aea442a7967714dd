"""Tune together across GPUs: processes on different GPUs of one kind split a run's benchmarks.

The tuning process (the *leader*: it holds the run identity's node lock, :mod:`.node_tuning`)
opens a share beside that lock; a process waiting for the same identity on another GPU of the
same kind (same name and capability, so the same identity and lock) joins it as a *helper*,
benchmarks the configs it claims on its own GPU (in its own sandbox) and writes each result
there; the leader takes those results instead of benchmarking them, times the final round's
contenders on its own GPU, finishes the run, and every process adopts it from the database::

    leader (GPU 0)                    <db dir>/node/tune/<id>.share/      helper (GPU 1, GPU 2...)
    --------------                    -------------------------------     ----------------------
    holds <id>.lock; gpus/<uuid0>     gpus/<uuid>.lock (flock): one        waits on <id>.lock; sees
      .lock; clears results/; writes    process per GPU in the share        leader.json; takes
      leader.json -------------------> leader.json                          gpus/<uuid1>.lock (held:
    compiles all (the pool: once                                            another process of its
      per node), and as each is       claims/<h>.lock (flock): who          GPU is in: it just waits)
      compiled: its turn (every         benchmarks config <h> now          compiles all (store hits),
      (helpers+1)-th)? claim, bench,                                        as each is compiled:
      put results/<h>.json; else      results/<h>.json: its result,         claims it? bench on its
      defer it to the helpers
    deferred: result there? take it;    verdict and timings (helpers)       GPU, put its result
      unclaimed after a grace, or                                           (ConfigResult, timings,
      claim freed without a result                                          verdict); else skip it
      (its helper died)? bench here;
      held past KILN_NODE_SHARE_WAIT_S                                     lets go of its GPU, waits
      (lags)? bench it here too                                            for the run in the database
    output rule (each process's verdicts apart: they ran on its own inputs); a contender or
      winner a helper screened: checked again on GPU 0, decided with its own (check_here);
      final round on GPU 0, finish the run; removes leader.json and results/ -> all adopt the run

Processes on the same GPU never split (``gpus/<uuid>.lock``: their timings would disturb each
other): the second waits for the run, as without sharing. A GPU of another kind has another run
identity, so another lock and share: timings of different kinds never mix. A process that
cannot tell its GPU's uuid does not share. Claims are ``flock``'d, so a helper killed mid-config
frees its claim at once and the leader re-runs that config; nothing waits past
``KILN_NODE_SHARE_WAIT_S`` on a live but slow helper. ``torch.distributed`` is not used: a
collective would hang on a dead rank, and ranks of one node already meet in the shared store.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import math
import os
import shutil
import time
from collections.abc import Callable, Sequence
from concurrent.futures import as_completed
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from triton_kiln.autotuner.bench import make_bencher, screen_phase
from triton_kiln.autotuner.compile_requests import Candidate, submit_compiles
from triton_kiln.autotuner.outputs import InProcessCheck, OutputChecks, apply_here
from triton_kiln.autotuner.plan import Bencher, LocalDevice, Services, TuningPlan
from triton_kiln.autotuner.screening import Evaluator, Scores, as_compiled
from triton_kiln.node.locks import FileLock, marker_since, remove_file, write_marker
from triton_kiln.sandbox.compare import OutputCheck, Verdict
from triton_kiln.tuning.results import ConfigResult

log = logging.getLogger("kiln.autotune")

CHECKED_HERE = "benchmarked on another GPU; its outputs checked on the tuning process's GPU too"
"""The note on a config another GPU's process benchmarked that the leader checked before it
could race or win (:func:`check_here`)."""

GRACE_POLLS = 10
"""Polls (``KILN_NODE_POLL_S``) the leader leaves an unclaimed config to the helpers once it has
nothing else to do, before screening it itself."""


def _name(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:32]


@dataclass
class Share:
    """This process's part in one run identity's share (see the module docstring)."""

    directory: Path
    device: LocalDevice
    gpu: FileLock
    leader: bool
    wait_s: float
    poll_s: float
    claims: dict[str, FileLock] = field(default_factory=dict)
    turn: int = 0  # the leader's count of compiled configs: it screens every (helpers + 1)-th

    def helpers(self) -> int:
        """Processes of the share on other GPUs now (their GPU's lock is held), this one left out."""
        count = 0
        for path in (self.directory / "gpus").glob("*.lock"):
            if path == self.gpu.path:
                continue
            probe = FileLock(path)
            try:
                if probe.try_acquire():
                    probe.release(remove=False)
                else:
                    count += 1
            except OSError:
                continue
        return count

    def take_turn(self, label: str) -> bool:
        """The leader's part as each config compiles: with ``n`` helpers it claims every
        ``(n + 1)``-th config at once and leaves the others to them (:meth:`gather` takes back
        any that no helper claims in time)."""
        self.turn += 1
        shares = self.helpers() + 1
        if shares > 1 and (self.turn - 1) % shares != 0:
            return False
        return self.claim(label)

    @classmethod
    def open(
        cls, tune_lock: Path, device: LocalDevice | None, leader: bool, wait_s: float, poll_s: float
    ) -> Share | None:
        """The leader's share (it holds ``tune_lock``), or a helper's joining one (``None``: no
        leader shares now, this GPU is in already, or the GPU's uuid is unknown)."""
        if device is None or not device.uuid:
            return None
        directory = tune_lock.with_suffix(".share")
        if not leader and not (directory / "leader.json").exists():
            return None
        gpu = FileLock(directory / "gpus" / f"{_name(device.uuid)}.lock")
        try:
            if not gpu.try_acquire():
                return None
        except OSError:
            return None
        share = cls(directory, device, gpu, leader, wait_s, poll_s)
        if leader:
            shutil.rmtree(directory / "results", ignore_errors=True)  # a dead leader's share's
            write_marker(directory / "leader.json", {"pid": os.getpid(), "device": device.uuid})
        return share

    def claim(self, label: str) -> bool:
        """Take ``label`` to benchmark here (``False``: done, or another process has it now)."""
        if self.result(label) is not None:
            return False
        lock = FileLock(self.directory / "claims" / f"{_name(label)}.lock")
        try:
            if not lock.try_acquire():
                return False
        except OSError:
            return False
        if self.result(label) is not None or self.closed():  # finished between the look and the lock
            lock.release()  # (or the run is: the leader removes leader.json before the results)
            return False
        self.claims[label] = lock
        return True

    def closed(self) -> bool:
        """A helper's view: the leader no longer shares (its run is finished, or it failed)."""
        return not self.leader and not (self.directory / "leader.json").exists()

    def put(self, label: str, record: dict[str, Any]) -> None:
        """``label``'s result (the record is JSON), then its claim is let go."""
        write_marker(self.directory / "results" / f"{_name(label)}.json", {"label": label, **record})
        lock = self.claims.pop(label, None)
        if lock is not None:
            lock.release()

    def result(self, label: str) -> dict[str, Any] | None:
        record = marker_since(self.directory / "results" / f"{_name(label)}.json", 0.0)
        return record if record is not None and record.get("label") == label else None

    def release(self) -> None:
        for lock in self.claims.values():
            lock.release()
        self.claims.clear()
        if self.leader:  # the run is finished (or failed): nothing more to share
            remove_file(self.directory / "leader.json")
            shutil.rmtree(self.directory / "results", ignore_errors=True)
        self.gpu.release(remove=False)

    def gather(
        self,
        deferred: Sequence[Candidate],
        screen: Callable[[Candidate], None],
        take: Callable[[Candidate, dict[str, Any]], None],
    ) -> None:
        """The leader's wait for the configs it deferred: each helper's result is taken; a config
        that no helper claimed within ``GRACE_POLLS`` polls (none is left, or each is busy) or whose
        claim freed without a result (its helper died) is screened here, as is one held past
        ``wait_s`` (its helper lags)."""
        waiting = list(deferred)
        since = time.monotonic()
        while waiting:
            grace = self.helpers() == 0 or time.monotonic() - since > GRACE_POLLS * self.poll_s
            for candidate in list(waiting):
                record = self.result(candidate.label)
                if record is not None:
                    take(candidate, record)
                elif (grace and self.claim(candidate.label)) or time.monotonic() - since > self.wait_s:
                    if candidate.label not in self.claims:
                        log.warning("kiln: %s: waited %.0f s (KILN_NODE_SHARE_WAIT_S) for another GPU's "
                                    "process to benchmark it; benchmarking it here", candidate.label,
                                    self.wait_s)  # fmt: skip
                    screen(candidate)
                    self.put(candidate.label, {"by": "leader"})
                else:
                    continue
                waiting.remove(candidate)
            if waiting:
                time.sleep(self.poll_s)
        if deferred:
            log.info("kiln: %d configs benchmarked by processes on other GPUs of this node", len(deferred))


class NodeShared:
    """The leader's strategy (:class:`~.screening.Strategy`): the first pass split with the
    helpers of ``share`` (every ``(helpers + 1)``-th config screened here as it compiles, the
    others taken from their results, :meth:`Share.gather`), and each finalist a helper screened
    checked here before it may race or win (:func:`check_here`)."""

    def __init__(self, share: Share) -> None:
        self.share = share
        self.shared: set[str] = set()  # another GPU's ok configs: checked here before they race or win

    def screen(self, scores: Scores, screen_one: Callable[[Candidate], None]) -> None:
        deferred: list[Candidate] = []
        for candidate in as_compiled(scores.candidates):
            if not self.share.take_turn(candidate.label):
                deferred.append(candidate)  # another GPU's process is benchmarking it
                continue
            screen_one(candidate)
            self.share.put(candidate.label, {"by": "leader"})

        def take(candidate: Candidate, record_: dict[str, Any]) -> None:  # another GPU's result
            result, times, verdict, by = taken(record_)
            if verdict is not None and result.status == "ok":
                scores.checker.groups.setdefault(by, {})[candidate.label] = verdict
            if result.status == "ok":
                self.shared.add(candidate.label)
            scores.put(candidate, result, times)

        self.share.gather(deferred, screen_one, take)

    def confirm(
        self, scores: Scores, finalists: Sequence[Candidate], check_one: Callable[[Candidate], Any]
    ) -> bool:
        return check_here(finalists, self.shared, scores, check_one)


def help_tune(
    plan: TuningPlan, services: Services, share: Share, candidates: list[Candidate], args: Sequence[Any],
    kwargs: dict[str, Any], grid: Any,
) -> int:  # fmt: skip
    """A helper's part: screen every config it can claim on its own GPU, put each result in the
    share; returns how many it benchmarked. The leader finishes the run."""
    pool = services.pool()
    bencher: Bencher | None = None
    benched = 0
    try:
        bencher = make_bencher(plan, services, args, kwargs)
        reference = bencher.user_reference()
        checker = OutputChecks(reference is not None, InProcessCheck(plan.checks.tolerances, reference))
        phase = screen_phase(plan.timing, bencher)
        evaluator = Evaluator(plan.name, bencher, grid)
        submit_compiles(pool, candidates, plan.settings.prebuild_launchers)
        futures = {c.future for c in candidates if c.future is not None}
        for future in as_completed(futures):
            if share.closed():
                break  # nothing left to help with: the run is finished (or its tuner failed)
            for candidate in [c for c in candidates if c.future is future]:
                if not share.claim(candidate.label):
                    continue
                result, times = evaluator.evaluate(candidate, phase, checker)
                share.put(candidate.label, record(result, times, checker.verdicts.get(candidate.label)))
                benched += 1
    except Exception as exc:  # helping is best effort: the leader screens what this did not
        log.warning("kiln: %s: helping another GPU's process tune it failed (%s: %s); waiting for its run",
                    plan.name, type(exc).__name__, exc)  # fmt: skip
    finally:  # a claim let go without a result is the leader's to screen
        if bencher is not None:
            bencher.finish()
        share.release()
    return benched


def record(result: ConfigResult, times: Any, verdict: Verdict | None) -> dict[str, Any]:
    """A helper's result as JSON: the config's result, its timings and its outputs' verdict."""
    timings = [float(t) for t in times] if isinstance(times, list | tuple) else [float(times)] * 3
    outputs = {k: asdict(v) for k, v in verdict.outputs.items()} if verdict is not None else {}
    return {
        "by": f"{os.getpid()}",
        "result": result.to_json(),
        "timings": [t if math.isfinite(t) else None for t in timings],
        "verdict": None if verdict is None else [verdict[0], float(verdict[1]), verdict[2], outputs],
    }


def taken(record_: dict[str, Any]) -> tuple[ConfigResult, list[float], Verdict | None, str]:
    """A helper's result read back: its ``ConfigResult``, timings, verdict and who ran it."""
    result = ConfigResult.from_json(record_["result"])
    timings = [math.inf if t is None else float(t) for t in record_.get("timings") or []] or [math.inf] * 3
    if result.status != "ok":
        timings = [math.inf] * 3
    verdict = None
    raw = record_.get("verdict")
    if isinstance(raw, list) and len(raw) == 4:
        with contextlib.suppress(TypeError, KeyError):
            outputs = {k: OutputCheck(v["cluster"], tuple(v["differs_from"]), bool(v["nonfinite"]),
                                      tuple(v["details"])) for k, v in raw[3].items()}  # fmt: skip
            verdict = Verdict(bool(raw[0]), float(raw[1]), str(raw[2]), outputs)
    return result, timings, verdict, str(record_.get("by", "?"))


def check_here(
    finalists: Sequence[Candidate],
    shared: set[str],
    scores: Scores,
    check_one: Callable[[Candidate], tuple[ConfigResult, Any]],
) -> bool:
    """The leader's check of the ``finalists`` (final-round contenders, or the winner) whose
    result another GPU's process sent (``shared``): their verdicts there were decided among that
    process's few configs, on its inputs, so each runs here once more (``check_one``: the same
    check as this process's own configs, on its inputs, in its sandbox) and is decided by this
    process's verdicts (:func:`~.outputs.apply_here`); one that fails here is dropped with its
    reason. Returns whether any was checked (the contenders, or the winner, may change)."""
    results, timings = scores.results, scores.timings
    todo = [c for c in finalists if c.label in shared and results[c.label].status == "ok"]
    for candidate in todo:
        shared.discard(candidate.label)
        result, _ = check_one(candidate)  # the timings stay the other GPU's: the final round retimes
        if result.status != "ok":
            results[candidate.label] = replace(result, reason=f"{result.reason}; {CHECKED_HERE}")
    apply_here([c.label for c in todo], results, scores.checker, CHECKED_HERE)
    for candidate in todo:
        if results[candidate.label].status != "ok":
            timings[candidate.config] = [math.inf] * 3
        scores.record(results[candidate.label])
    if todo:
        log.info("kiln: %d configs benchmarked on other GPUs checked here before they may win: %s",
                 len(todo), ", ".join(c.label for c in todo))  # fmt: skip
    return bool(todo)
