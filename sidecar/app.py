"""The sidecar's loop: measure -> publish the snapshot -> (leader only) decide -> scale.

Every ``interval``: the monitor reads offsets; a snapshot of the speeds goes to the speeds
topic (every sidecar publishes, so the consumers' assignor stays fed even while the leader
restarts); the leader steps the controller and applies its decision through the scaler.
When the scaler's replica count differs from the controller's (a crash, a manual scale, a
failed scale), the controller resynchronises first.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

from aiokafka.errors import KafkaError

from assignor import TopicPartition
from assignor.group_plan import SpeedView
from assignor.plugin import PROTOCOL_NAME
from contract.refusals import Refusal, refusal
from contract.refusals import flags as refusal_flags
from contract.stopping import finished_unless_stopped, sleep_unless_stopped
from sidecar import metrics
from sidecar.broker_plans.planner import BrokerPlanner
from sidecar.capacity import READING_WITHIN_S, CapacityEstimate
from sidecar.config import SidecarConfig
from sidecar.controller import Action, Controller, ControllerConfig, Decision, Observation
from sidecar.http import Endpoints
from sidecar.join_watch import JoinWatch, MemberFailure
from sidecar.keda import KedaController
from sidecar.leader import Lease
from sidecar.monitor import Monitor, Reading
from sidecar.publisher import SnapshotPublisher, ensure_speeds_topic
from sidecar.scalers.base import Scaler
from sidecar.share_groups.loads import partition_loads
from sidecar.share_groups.publisher import ShareLoadsPublisher

log = logging.getLogger(__name__)
CLOSE_TIMEOUT_S = 5.0  # each Kafka client's close on the way out
# /livez: a loop with no tick and no connection attempt for this long is stuck. Longer than
# the connection back-off's 30 s cap plus an attempt's own time-outs.
STUCK_AFTER_S = 120.0
STATUS_CLOSED = (
    "/status is closed: --http-host {host!r} is not loopback and no --status-token-file is "
    "set (AUTOSCALER_STATUS_TOKEN_FILE); --status-open true serves it without a token"
)


class Sidecar:
    """One sidecar process: see the module docstring."""

    def __init__(
        self,
        config: SidecarConfig,
        scaler: Scaler | None,
        lease: Lease | None,
        *,
        clock: Callable[[], float] = time.monotonic,
        planner: BrokerPlanner | None = None,
    ) -> None:
        self.config = config
        # --group-protocol consumer: plans for the brokers' assignor (its scaler empties a
        # member before removing it).
        self.planner = planner
        self.scaler = scaler
        self.lease = lease
        self.clock = clock
        # Read at each connection attempt (a password file rotated meanwhile, an SSL context)
        # for every client of the sidecar: see :meth:`start`.
        self.client_options = config.kafka_client_options()
        self.monitor = Monitor(
            config.bootstrap_servers,
            config.group,
            config.topics,
            window_s=config.window,
            min_span_s=config.min_window,
            unit=config.capacity_unit,
            clock=clock,
            client_options=self.client_options,
            rack_locality=config.rack_locality,
            group_type=config.group_type,
            describe_group=config.group_protocol != "consumer",
            isolation_level=config.isolation_level,
        )
        self.publisher = SnapshotPublisher(
            config.bootstrap_servers, config.snapshot_topic, self.client_options
        )
        # --group-type share: the partition loads for the brokers' share assignor.
        self.share_loads = (
            ShareLoadsPublisher(
                config.bootstrap_servers,
                config.share_loads_topic,
                config.group,
                self.client_options,
                clock=clock,
            )
            if config.group_type == "share"
            else None
        )
        controller_config = ControllerConfig(
            capacity=config.capacity,
            heuristic=config.heuristic,
            min_replicas=config.min_replicas,
            max_replicas=config.max_replicas,
            scale_down_window_s=config.scale_down_window,
            drain_seconds=config.drain_seconds,
            lag_allowance_s=config.wait_time_secs,
            max_data_age_s=config.max_data_age,
            scale_up_settle_s=config.scale_up_settle,
            group_type=config.group_type,
        )
        self.controller: Controller = (
            KedaController(controller_config, clock, config.keda_lag_threshold)
            if config.keda_lag_threshold > 0
            else Controller(controller_config, clock)
        )
        self.capacity = CapacityEstimate(config.capacity, auto=config.capacity_auto)
        metrics.INFO.labels(config.group).set(1)
        metrics.MAX_REPLICAS.set(config.max_replicas)
        self._warned: str | None = None
        self.last_tick: float | None = None
        # When the loop last got somewhere: a tick (done or failed) or a connection attempt.
        self.last_beat = clock()
        self.last_reading: Reading | None = None
        self.last_decision: Decision | None = None
        self.decisions: list[Decision] = []
        # The (current, demand) of the scale being held, to log each hold once.
        self._held: tuple[int, int] | None = None
        self.connect_problem: str | None = None
        self._sized: int | None = None
        # Whether the consumers asked for are at work (no scale-up adds more while not).
        self.join_watch = JoinWatch()
        self.join_problem: str | None = None

    async def start(self) -> None:
        """Connect the monitor and publisher, with the credentials as their files say now
        (a Secret rotated while Kafka refused the old password is taken at the next try)."""
        try:
            self.client_options = self.config.kafka_client_options()
        except OSError as exc:  # mid-rotation: the file is briefly gone; keep what was read
            log.warning("credentials not read again (%s); using the ones read before", exc)
        self.monitor.use_options(self.client_options)
        self.publisher.use_options(self.client_options)
        await self.monitor.start()
        await self.publisher.start()
        if self.planner is not None:  # compacted, a day's retention: plans are republished
            await ensure_speeds_topic(
                self.config.bootstrap_servers,
                self.planner.plans_topic,
                self.client_options,
                what="plans topic",
            )
        if self.capacity.auto and self.last_tick is None and self.capacity.carried is None:
            await self._carry_over_capacity()
        if self.share_loads is not None:
            self.share_loads.use_options(self.client_options)
            await self.share_loads.start()

    async def _carry_over_capacity(self) -> None:
        """Start from the capacity the previous sidecar published, when it is recent."""
        previous = await self.publisher.last_published(self.config.group)
        if previous is None or previous.capacity is None:
            return
        if previous.unit != self.config.capacity_unit:
            return
        age = previous.age(time.time())  # its stamp is this wall clock's
        if self.capacity.carry_over(previous.capacity, age):
            log.info(
                "sizing with the capacity %.0f %s the previous sidecar published %.0f s ago "
                "until the consumers measure again",
                previous.capacity,
                previous.unit,
                age,
            )

    async def stop(self) -> None:
        """Disconnect (each client given ``CLOSE_TIMEOUT_S``: a producer flushing to a
        broker that just died would hold a SIGTERM for its request timeout); release
        leadership; the scaler's consumers are left to the caller."""
        closing = [self.publisher.stop(), self.monitor.stop()]
        if self.share_loads is not None:
            closing.insert(1, self.share_loads.stop())
        for close in closing:
            try:
                await asyncio.wait_for(close, CLOSE_TIMEOUT_S)
            except TimeoutError:
                log.warning("a Kafka client did not close within %.0f s: left", CLOSE_TIMEOUT_S)
            except Exception as exc:  # on the way out: the others still close, the lease goes
                log.warning("a Kafka client failed to close: %r", exc)
        if self.lease is not None:
            self.lease.release()

    async def connect(self, stop: asyncio.Event) -> bool:
        """Start, retrying with a back-off while Kafka cannot be reached (one log line each
        time; unhealthy meanwhile: no tick yet). False if ``stop`` came first."""
        backoff = 1.0
        while not stop.is_set():
            starting = asyncio.create_task(self.start())
            if not await finished_unless_stopped(starting, stop):  # SIGTERM while connecting
                await self.stop()
                return False
            try:
                starting.result()
                return True
            except KafkaError as exc:
                self.last_beat = self.clock()
                metrics.ERRORS.labels("connect").inc()
                await self.stop()
                found = await refusal(
                    exc, self.config.bootstrap_servers, self.config, self.client_options
                )
                self._show_refusal(found)
                log.warning("%s; retrying in %.0f s", found.line, backoff)
                await sleep_unless_stopped(stop, backoff)
                backoff = min(30.0, backoff * 2)
        return False

    def _show_refusal(self, found: Refusal | None) -> None:
        """Show why Kafka refused the connection (``None``: it took it) in /status,
        /healthz and the connect-problem metric."""
        self.connect_problem = None if found is None else found.line
        for kind, flag in refusal_flags(found).items():
            metrics.KAFKA_REFUSED.labels(kind.value).set(flag)

    async def run(self, stop: asyncio.Event) -> None:
        """Connect, then tick every ``interval`` until ``stop`` is set."""
        if not await self.connect(stop):
            return
        self._show_refusal(None)
        try:
            while not stop.is_set():
                started = self.clock()
                # A SIGTERM mid-tick (a broker gone, a request waiting for its timeout) ends
                # the tick; scaling is synchronous inside it, so it is never left half done.
                ticking = asyncio.create_task(self.tick())
                if not await finished_unless_stopped(ticking, stop):
                    break
                try:
                    ticking.result()
                except Exception as exc:  # the loop must survive anything one tick meets
                    self.last_beat = self.clock()
                    metrics.ERRORS.labels("tick").inc()
                    log.exception("tick failed: %r", exc)
                elapsed = self.clock() - started
                await sleep_unless_stopped(stop, max(0.0, self.config.interval - elapsed))
        finally:
            await self.stop()

    def take_lead(self) -> bool:
        """Take or renew leadership; whether this sidecar scales (no lease: always)."""
        return self.lease is None or self.lease.acquire()

    async def tick(self) -> Decision | None:
        """One round; returns the controller's decision if this sidecar leads."""
        reading = await self.monitor.poll()
        self.last_reading = reading
        speeds = self.monitor.speeds()
        lags = reading.lags()
        # The backlog joins the speeds, so in their unit (bytes when capacity is bytes/s).
        unit_lags = self.monitor.lags(reading)
        self._export(speeds, lags)
        self._export_open_transactions(reading)
        per_record = self.monitor.per_record()
        self._measure_capacity(reading, per_record)
        if speeds and reading.lags_known:  # else the assignor keeps the last good snapshot
            drain = self.controller.config.drain_rule
            snapshot = self.monitor.snapshot(
                reading,
                drain=drain,
                speeds=speeds,
                lags=unit_lags,
                capacity=self.capacity.published(per_record),
            )
            await self.publisher.publish(snapshot)
            metrics.SNAPSHOTS.inc()
        self.last_tick = self.last_beat = self.clock()
        leading = self.take_lead()
        metrics.LEADER.set(1 if leading else 0)
        if not leading:
            self._sized = None
            self.join_problem = None  # the leader watches the members it scales
        if not leading or self.scaler is None:
            return None
        actual = self.scaler.replicas()
        metrics.ACTUAL.set(actual)
        if self.controller.replicas != actual:
            self.controller.synchronise(actual)
        if self.monitor.unit != self.config.capacity_unit:
            # Capacity in bytes/s but the cluster only tells records/s: scaling on mixed
            # units would be wrong, so hold and say why.
            metrics.ERRORS.labels("unit").inc()
            reading.problems.append(
                f"speeds are in {self.monitor.unit} but --capacity-unit is "
                f"{self.config.capacity_unit}: not scaling"
            )
            return None
        if self.planner is not None:
            self.planner.describe_into(reading)
        self._watch_joins(reading, actual)
        members_report = reading.group_protocol == PROTOCOL_NAME
        observation_capacity = self.capacity.in_use(per_record)
        observation = (
            Observation(
                reading.at,
                speeds,
                unit_lags,
                record_lags=lags,
                group_stable=reading.group_stable,
                group_members=reading.group_members,
                capacity=observation_capacity,
                committed_total=sum(reading.committed.values()) if reading.committed else None,
                reading_members=self.capacity.reading_members(reading.at, READING_WITHIN_S),
                members_report=members_report,
                saturated_members=self.capacity.saturated_members(reading.at, reading.member_ids)
                if members_report
                else None,
                lags_known=reading.lags_known,
                partition_racks=reading.partition_racks,
                max_members=self.share_loads.max_size if self.share_loads else None,
                join_problem=self.join_problem,
            )
            if speeds
            else None
        )
        decision = self.controller.step(observation)
        self.record(decision)
        if decision.demand is not None:
            self._sized = decision.desired
        if self.planner is not None:
            # Before the scale: a member joining finds its plan waiting; one leaving is
            # emptied by this plan before the scaler stops it.
            view = SpeedView(
                speeds, unit_lags, self.controller.config.drain_rule, observation_capacity
            )
            await self.planner.step(
                decision.desired, partitions_of(reading), view, observation_capacity
            )
        if self.share_loads is not None and observation is not None and reading.topic_ids:
            # Before the scale: members joining find the loads the broker splits them by.
            effective = self.controller.config.drain_rule.effective_speeds(speeds, unit_lags)
            await self.share_loads.publish(
                partition_loads(effective, observation_capacity),
                {topic: len(ps) for topic, ps in partitions_of(reading).items()},
                reading.topic_ids,
            )
        if decision.action in (Action.SCALE_UP, Action.SCALE_DOWN):
            try:
                self.scaler.scale(decision.desired)
            except Exception as exc:
                metrics.ERRORS.labels("scale").inc()
                log.error("scaling to %d failed: %r; resynchronising", decision.desired, exc)
                self.controller.synchronise(self.scaler.replicas())
        return decision

    def _watch_joins(self, reading: Reading, asked: int) -> None:
        """Whether the ``asked`` consumers are at work: the scaler's failing members and the
        group's members (sidecar.join_watch). Said in the log when it starts and when it
        ends, kept for /status, /healthz and the scale-up it holds."""
        assert self.scaler is not None
        try:
            failures = self.scaler.failing_members()
            words = self.scaler.member_words()
        except Exception as exc:  # the pods unreadable this round: judged by the group alone
            metrics.ERRORS.labels("failing_members").inc()
            log.debug("failing members not read: %r", exc)
            failures, words = [], []
        problem = self.join_watch.observe(reading.at, asked, reading.group_members, failures, words)
        line = problem.line(reading.at) if problem is not None else None
        if problem is not None and self.join_problem is None:
            log.warning("%s: no scale-up until they join", line)
        elif problem is None and self.join_problem is not None:
            log.info("the consumers asked for joined the group: scaling resumes")
        self.join_problem = line
        metrics.MEMBERS_FAILING.set(len(failures))
        metrics.NOT_JOINING.set(0 if problem is None else 1)

    def failing_members(self) -> list[MemberFailure]:
        """The members failing as the last round saw them."""
        problem = self.join_watch.problem
        return list(problem.failures) if problem is not None else []

    def _measure_capacity(self, reading: Reading, per_record: float | None) -> None:
        """Take in the consumers' capacity reports; export, and warn (once per change) when
        the measured capacity has differed from the declared one for several minutes."""
        estimate = self.capacity
        before = dict(estimate.rejected)
        ceiling = self.controller.drain_ceiling
        replicas = self.controller.replicas or 0
        drain = ceiling.drains.get(replicas)
        estimate.observe(
            reading.at,
            reading.commit_metadata.values(),
            reading.member_ids,
            (replicas, drain[0], drain[1]) if drain is not None else None,
            per_record,
        )
        for reason, ignored in estimate.rejected.items():
            if ignored > before.get(reason, 0):
                metrics.CAPACITY_REPORTS_IGNORED.labels(reason).inc(ignored - before.get(reason, 0))
                log.warning("capacity report ignored: %s", estimate.last_rejection)
        measured = estimate.in_unit(per_record)
        metrics.CAPACITY_DECLARED.set(estimate.declared)
        metrics.CAPACITY_MEASURED.set(measured if measured is not None else float("nan"))
        metrics.CAPACITY_IN_USE.set(estimate.in_use(per_record))
        age = estimate.age(reading.at)
        metrics.CAPACITY_AGE.set(age if age is not None else float("nan"))
        warning = estimate.warning(reading.at, per_record)
        metrics.CAPACITY_MISMATCH.set(1 if warning else 0)
        if warning is not None:
            reading.problems.append(warning)
            if self._warned is None:
                log.warning("%s", warning)
        self._warned = warning
        limit = ceiling.limit()
        metrics.DRAIN_CEILING.set(limit if limit is not None else 0)

    def _export(
        self, speeds: dict[TopicPartition, float], lags: dict[TopicPartition, float]
    ) -> None:
        metrics.SPEED.clear()
        metrics.LAG.clear()
        for tp, speed in speeds.items():
            metrics.SPEED.labels(tp.topic, str(tp.partition)).set(speed)
        for tp, lag in lags.items():
            metrics.LAG.labels(tp.topic, str(tp.partition)).set(lag)

    def _export_open_transactions(self, reading: Reading) -> None:
        metrics.OPEN_TRANSACTION.clear()
        for tp, held in reading.open_transactions.items():
            metrics.OPEN_TRANSACTION.labels(tp.topic, str(tp.partition)).set(
                reading.at - held.since
            )

    def record(self, decision: Decision) -> None:
        """Keep a decision: last and recent, metrics, and a log line for every scale and
        for each scale-up held (once per current and demand)."""
        self.last_decision = decision
        self.decisions = [*self.decisions[-99:], decision]
        metrics.DECISIONS.labels(decision.action.value).inc()
        metrics.DESIRED.set(decision.desired)
        if decision.demand is not None:
            metrics.DEMAND.set(decision.demand)
        metrics.PLAN_RSCORE.set(decision.planned_rscore)
        demand, held = decision.demand, None
        if decision.action is Action.HOLD and demand is not None and demand > decision.current:
            held = (decision.current, demand)
        # A scale-up held (one round at a time, members starting, the drain ceiling) is
        # said once when it begins or its demand changes: the log then tells why the group
        # did not grow, without a line every tick.
        first_hold = held is not None and held != self._held
        self._held = held
        level = (
            logging.INFO
            if decision.action in (Action.SCALE_UP, Action.SCALE_DOWN) or first_hold
            else logging.DEBUG
        )
        log.log(
            level,
            "%s %d -> %d: %s (planned Rscore %.2f)",
            decision.action.value,
            decision.current,
            decision.desired,
            decision.reason,
            decision.planned_rscore,
        )

    def sized(self) -> int | None:
        """The consumer count this sidecar last decided on measured data while leading;
        None before that or while another sidecar leads (what KEDA is told)."""
        return self._sized

    def healthy(self) -> bool:
        """A tick completed recently (within three intervals plus 5 s) and the scaler
        reports no problem (such as a crash-looping consumer)."""
        return not self.unhealthy_reasons()

    def unhealthy_reasons(self) -> list[str]:
        """Why :meth:`healthy` is false, a line each (what /healthz shows)."""
        interval = self.config.interval
        reasons = []
        if self.last_tick is None:
            reasons.append(self.connect_problem or "starting: no tick yet")
        elif (age := self.clock() - self.last_tick) > 3 * interval + 5:
            reasons.append(f"no tick for {age:.0f} s (interval {interval:g} s)")
        if self.monitor.share_unsupported:
            reasons.append(self.monitor.share_unsupported)
        return reasons + self.scaler_problems()

    def degraded_reasons(self) -> list[str]:
        """What /healthz shows while still passing (200, "degraded"): consumers that are not
        joining hold scale-ups, but the sidecar itself works, and restarting it or taking it
        out of a Service cures nothing."""
        return [self.join_problem] if self.join_problem is not None else []

    def liveness_problems(self) -> list[str]:
        """What /livez shows: the loop stuck (no tick done or failed, no connection tried)
        for :data:`STUCK_AFTER_S` or three intervals plus 5 s, whichever is longer. Kafka
        out of reach is not one: restarting does not cure it (/healthz says it)."""
        stuck_after = max(STUCK_AFTER_S, 3 * self.config.interval + 5)
        age = self.clock() - self.last_beat
        if age <= stuck_after:
            return []
        return [f"the sidecar's loop has not moved for {age:.0f} s (limit {stuck_after:g} s)"]

    def scaler_problems(self) -> list[str]:
        """The scaler's problems (none without a scaler)."""
        return self.scaler.problems() if self.scaler is not None else []

    def endpoints(self) -> Endpoints:
        """What the HTTP endpoints ask this sidecar."""
        return Endpoints(
            self.unhealthy_reasons,
            self.status,
            self.config.status_token_file,
            self.liveness_problems,
            self.degraded_reasons,
            STATUS_CLOSED.format(host=self.config.http_host) if self.config.status_closed else None,
        )

    def problems(self) -> list[str]:
        """What is wrong now, a line each: the last reading's, the connection's, the
        share loads', the scaler's."""
        reading = self.last_reading
        share = self.share_loads.problem if self.share_loads is not None else None
        return (
            (reading.problems if reading else [])
            + ([self.connect_problem] if self.connect_problem else [])
            + ([share] if share else [])
            + self.scaler_problems()
        )

    def status(self) -> dict[str, Any]:
        """What /status shows."""
        decision = self.last_decision
        reading = self.last_reading
        return {
            "group": self.config.group,
            "heuristic": self.config.heuristic,
            "leader": self.lease is None or self.lease.held,
            "healthy": self.healthy(),
            "replicas": self.controller.replicas,
            # The count decided on measured data while leading (what KEDA is told).
            "sized": self._sized,
            "phase": self.controller.phase.value,
            "unit": self.monitor.unit,
            # The group as the coordinator describes it (None: not described) and the
            # members seen committing lately: whether the last scale-up has been taken in.
            "group_members": {
                "state": reading.group_state if reading else None,
                "protocol": reading.group_protocol if reading else None,
                "described": reading.group_members if reading else None,
                "reading": self.capacity.reading_members(self.clock(), READING_WITHIN_S),
            },
            "capacity": self.capacity.status(self.clock(), self.monitor.per_record()),
            "drain_ceiling": {
                "replicas": self.controller.drain_ceiling.limit(),
                "reason": self.controller.drain_ceiling.reason,
                "drains": {
                    str(count): round(rate, 1)
                    for count, (rate, _) in sorted(self.controller.drain_ceiling.drains.items())
                },
            },
            # The sizing plan (consumer -> its partitions), what the assignor packs alike.
            "plan": _by_consumer(self.controller.plan),
            "speeds": {
                f"{tp.topic}:{tp.partition}": s for tp, s in sorted(self.monitor.speeds().items())
            },
            "lags": {f"{tp.topic}:{tp.partition}": v for tp, v in sorted(reading.lags().items())}
            if reading
            else {},
            "problems": self.problems(),
            # Partitions whose last stable offset a transaction left open holds.
            "open_transactions": {
                f"{tp.topic}:{tp.partition}": {
                    "last_stable_offset": held.stable,
                    "end_offset": held.end,
                    "open_for_s": round(reading.at - held.since, 1),
                }
                for tp, held in sorted(reading.open_transactions.items())
            }
            if reading
            else {},
            # Why the consumers asked for are not at work (None: they are), and the failing
            # ones in their own words: no scale-up meanwhile.
            "not_joining": None
            if self.join_problem is None
            else {
                "problem": self.join_problem,
                "failing": [
                    {"member": failure.member, "reason": failure.reason}
                    for failure in self.failing_members()
                ],
            },
            "broker_plans": None if self.planner is None else self.planner.status(),
            "share_group": None if self.share_loads is None else self.share_loads.status(),
            "last_decision": None
            if decision is None
            else {
                "action": decision.action.value,
                "current": decision.current,
                "desired": decision.desired,
                "demand": decision.demand,
                "reason": decision.reason,
                "planned_rscore": decision.planned_rscore,
            },
        }


def partitions_of(reading: Reading) -> dict[str, set[int]]:
    """Topic -> its partitions, as the reading found them."""
    found: dict[str, set[int]] = {}
    for tp in reading.end_offsets:
        found.setdefault(tp.topic, set()).add(tp.partition)
    return found


def _by_consumer(plan: dict[TopicPartition, str]) -> dict[str, list[str]]:
    grouped: dict[str, list[str]] = {}
    for tp, consumer in sorted(plan.items()):
        grouped.setdefault(consumer, []).append(f"{tp.topic}:{tp.partition}")
    return grouped
