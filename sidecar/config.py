"""Sidecar configuration: command-line flags, each with an ``AUTOSCALER_*`` variable as
its default; validated with messages naming the flag, the variable and the range."""

from __future__ import annotations

import argparse
import ipaddress
import math
import os
import re
import shlex
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from assignor.member_data import RACK_NAME_RULE, is_rack_name
from contract.broker_plans import PLANS_TOPIC, PlanError, group_id_rule, plans_topic_for
from contract.settings import (
    ConfigError,
    GroupSettings,
    capacity_setting,
    env_name,
    is_capacity_auto,
    setting,
    setting_help,
)
from contract.share_loads import SHARE_LOADS_TOPIC
from sidecar.leader import default_lock_dir

SCALERS = ("local", "kubernetes", "keda", "none")
SIZING_RACK_LOCALITIES = ("none", "leader", "replicas")


def flag_name(name: str) -> str:
    """``max_replicas`` -> ``--max-replicas``."""
    return "--" + name.replace("_", "-")


def flag_label(name: str) -> str:
    """How a sidecar user meets a field: its flag and its variable."""
    return f"{flag_name(name)} ({env_name(name)})"


WORKLOAD_KINDS = ("deployment", "statefulset")
GROUP_PROTOCOLS = ("classic", "consumer")


@dataclass(frozen=True)
class SidecarConfig(GroupSettings):
    """Everything the sidecar needs (the shared fields come from GroupSettings)."""

    interval: float = setting(
        "seconds between measurements, > 0",
        1.0,
    )
    window: float = setting(
        "seconds of offsets a speed is the slope of, > 0",
        30.0,
    )
    min_window: float = setting(
        "seconds of data before a speed is reported, (0, --window]",
        3.0,
    )
    min_replicas: int = setting(
        "fewest consumers, >= 0 (0: none when there is no traffic and no backlog)",
        1,
    )
    max_replicas: int = setting(
        "most consumers, >= max(1, --min-replicas); never more than partitions",
        100,
    )
    scale_down_window: float = setting(
        "seconds one surplus consumer is held before scaling down, >= 0 (k surplus consumers:"
        " about 1/k of it, at least a quarter); also the no-flap window",
        120.0,
    )
    scale_up_settle: float = setting(
        "seconds after a scale-up before another one, >= 0: the step is still showing in the "
        "speeds and the new members are joining; the next decision sizes the rest",
        5.0,
    )
    drain_seconds: float = setting(
        "a backlog is paid off within this many seconds, > 0",
        30.0,
    )
    max_data_age: float = setting(
        "never act on measurements older than this many seconds, > 0",
        10.0,
    )
    keda_lag_threshold: float = setting(
        "> 0: size the group like KEDA's Kafka scaler and the HPA's defaults instead "
        "(ceil(total lag / this) every 15 s, 10 % tolerance, up to at most max(2x, 4) per "
        "decision, 300 s stabilisation: the HPA KEDA creates), for comparisons; 0: ours",
        0.0,
    )
    rack_locality: str = setting(
        "size the group with the consumers' racks: none (rack-blind), or where a consumer "
        "fetches without leaving its rack, as the consumers' rack_locality: leader or "
        "replicas; the count then leaves each rack room for its partitions (at most one "
        "consumer more than rack-blind)",
        "none",
    )
    scaler: str = setting(
        "local (consumer processes here), kubernetes (a Deployment or StatefulSet), keda "
        "(KEDA scales the workload to the count this sidecar serves as its external scaler), "
        "or none (measure and publish only)",
        "local",
    )
    consumer_command: str = setting(
        "with --scaler local: the consumer to start, quoted as in a shell; {identity} in it "
        "becomes the member's identity (PREFIX-ORDINAL: a KIP-848 consumer's "
        "group.instance.id), which every consumer also finds in AUTOSCALER_MEMBER_IDENTITY",
        f"{shlex.quote(sys.executable)} -m consumer_sdk.cli",
    )
    identity_prefix: str = setting(
        "with --scaler local: member identities are PREFIX-ORDINAL",
        "consumer",
    )
    local_racks: str = setting(
        "with --scaler local: the racks (zones) the consumers are in, comma-separated, by "
        "ordinal in turn (PREFIX-0 in the first, PREFIX-1 in the second, ...), each a rack "
        "name of 1-255 characters without whitespace; empty: none",
        "",
    )
    group_protocol: str = setting(
        "classic (the group's members are our SDK consumers, which pack themselves) or consumer"
        " (KIP-848 consumers of any client with group.remote.assignor=autoscaler: the brokers'"
        " assignor follows the plans this sidecar publishes to --plans-topic); consumer needs "
        "--scaler local or a kubernetes statefulset (members are named before they join)",
        "classic",
    )
    share_loads_topic: str = setting(
        "with --group-type share: the compacted topic the brokers' share assignor reads "
        "partition loads from (its autoscaler.share.loads.topic)",
        SHARE_LOADS_TOPIC,
    )
    plans_topic: str = setting(
        "with --group-protocol consumer: the brokers' assignor reads each group's plans from"
        " the compacted topic <this>.<group> (its autoscaler.plans.topic), which the sidecar"
        " creates if it may",
        PLANS_TOPIC,
    )
    namespace: str = setting(
        "with --scaler kubernetes or keda: the workload's (and ScaledObject's) namespace",
        "default",
    )
    workload_kind: str = setting(
        "with --scaler kubernetes: deployment or statefulset",
        "deployment",
    )
    workload_name: str = setting(
        "with --scaler kubernetes: the workload to scale (required there)",
        "",
    )
    scaled_object: str = setting(
        "with --scaler keda: the ScaledObject KEDA asks about, in --namespace (empty: "
        "--workload-name)",
        "",
    )
    keda_host: str = setting(
        "with --scaler keda: the address KEDA's external-scaler gRPC listens on",
        "127.0.0.1",
    )
    keda_port: int = setting(
        "with --scaler keda: its port, [0, 65535] (0: any free port)",
        6000,
    )
    keda_tls_cert_file: str = setting(
        "with --scaler keda: the gRPC service's certificate (PEM); with --keda-tls-key-file, "
        "TLS (empty: plain text, only for a loopback --keda-host)",
        "",
    )
    keda_tls_key_file: str = setting(
        "with --scaler keda: the key of --keda-tls-cert-file (PEM)",
        "",
    )
    keda_client_ca_file: str = setting(
        "with --scaler keda: the CA a client certificate must be signed by: mutual TLS, "
        "calls without one refused (KEDA's tlsClientCert and tlsClientKey)",
        "",
    )
    lock_file: str = setting(
        "leader lock of local sidecars (empty: <group>.lock in /tmp/kafka-autoscaler-<uid>, "
        "a directory of this user's own, mode 0700)",
        "",
    )
    lease_name: str = setting(
        "Kubernetes Lease of the leader (empty: kafka-autoscaler-<group>)",
        "",
    )
    http_host: str = setting(
        "address /metrics, /healthz and /status listen on",
        "127.0.0.1",
    )
    http_port: int = setting(
        "their port, [0, 65535]; 0: no HTTP endpoint",
        8080,
    )
    status_token_file: str = setting(
        "a file whose first line is the bearer token /status asks for, read at each request "
        "(empty: /status is open on a loopback http_host, closed on any other unless "
        "--status-open)",
        "",
    )
    status_open: bool = setting(
        "true or false: serve /status and /healthz's reasons without a token on a "
        "non-loopback http_host (they name brokers, users and topics)",
        False,
    )
    # Set by ``--capacity auto`` (not a flag of its own): size with the measured capacity.
    capacity_auto: bool = setting("derived from --capacity auto", False)

    @property
    def status_closed(self) -> bool:
        """Whether /status (and /healthz's reasons) are refused for want of a token: no
        token file, a non-loopback http_host, and --status-open not given."""
        return not self.status_token_file and not self.status_open and not loopback(self.http_host)

    def label(self, name: str) -> str:
        """Flags are how sidecar users meet a field."""
        return flag_label(name)

    def __post_init__(self) -> None:
        self._check_group()
        fail = self._fail
        positive = {
            "interval": self.interval,
            "window": self.window,
            "drain_seconds": self.drain_seconds,
            "max_data_age": self.max_data_age,
        }
        for name, value in positive.items():
            if not (math.isfinite(value) and value > 0):
                fail(name, "a finite number > 0")
        if not 0 < self.min_window <= self.window:
            fail("min_window", f"in (0, --window={self.window}]")
        if not (math.isfinite(self.scale_down_window) and self.scale_down_window >= 0):
            fail("scale_down_window", "a number of seconds >= 0")
        if not (math.isfinite(self.scale_up_settle) and self.scale_up_settle >= 0):
            fail("scale_up_settle", "a number of seconds >= 0")
        if not (math.isfinite(self.keda_lag_threshold) and self.keda_lag_threshold >= 0):
            fail("keda_lag_threshold", "a number of records >= 0 (0: our policy)")
        if self.min_replicas < 0:
            fail("min_replicas", "an integer >= 0")
        if self.max_replicas < max(1, self.min_replicas):
            fail("max_replicas", "an integer >= max(1, --min-replicas)")
        if self.scaler not in SCALERS:
            fail("scaler", f"one of {', '.join(SCALERS)}")
        if not all(is_rack_name(r) for r in self.racks()):
            fail("local_racks", f"comma-separated rack names ({RACK_NAME_RULE})")
        if self.rack_locality not in SIZING_RACK_LOCALITIES:
            fail("rack_locality", f"one of {', '.join(SIZING_RACK_LOCALITIES)}")
        if self.workload_kind not in WORKLOAD_KINDS:
            fail("workload_kind", f"one of {', '.join(WORKLOAD_KINDS)}")
        if self.scaler == "kubernetes" and not self.workload_name:
            fail("workload_name", "the Deployment or StatefulSet to scale (--scaler kubernetes)")
        if self.scaler == "local" and not _command_words(self.consumer_command):
            fail("consumer_command", "the consumer program to start, quoted as in a shell")
        if self.scaler == "keda" and not (self.scaled_object or self.workload_name):
            fail("scaled_object", "the ScaledObject's name (--scaler keda), in --namespace")
        if not 0 <= self.keda_port <= 65535:
            fail("keda_port", "a TCP port in [0, 65535] (0: any free port)")
        if bool(self.keda_tls_cert_file) != bool(self.keda_tls_key_file):
            fail("keda_tls_key_file", "given together with keda_tls_cert_file")
        if self.keda_client_ca_file and not self.keda_tls_cert_file:
            fail("keda_client_ca_file", "given with keda_tls_cert_file (mutual TLS is TLS)")
        for name in ("keda_tls_cert_file", "keda_tls_key_file", "keda_client_ca_file"):
            if getattr(self, name) and not Path(getattr(self, name)).is_file():
                fail(name, "a readable PEM file; this one does not exist")
        if not 0 <= self.http_port <= 65535:
            fail("http_port", "a TCP port in [0, 65535] (0: no HTTP endpoint)")
        if self.status_token_file and not _first_line(self.status_token_file):
            fail("status_token_file", "a readable file whose first line is the token")
        if self.group_protocol not in GROUP_PROTOCOLS:
            fail("group_protocol", f"one of {', '.join(GROUP_PROTOCOLS)}")
        if self.group_protocol == "consumer" and not self.names_members():
            fail(
                "group_protocol",
                "classic unless the members are named before they join (--scaler local, or "
                "kubernetes with --workload-kind statefulset)",
            )
        if not self.plans_topic.strip():
            fail("plans_topic", "a topic name")
        if self.group_protocol == "consumer":
            try:
                plans_topic_for(self.group, self.plans_topic)
            except PlanError:
                fail("group", f"with --group-protocol consumer, {group_id_rule(self.plans_topic)}")
        if self.group_type == "share" and self.group_protocol != "classic":
            fail("group_type", "consumer with --group-protocol consumer (share groups have one)")
        if self.group_type == "share" and self.keda_lag_threshold > 0:
            fail("group_type", "consumer with --keda-lag-threshold (KEDA sizes consumer groups)")
        if not self.share_loads_topic.strip():
            fail("share_loads_topic", "a topic name")
        if not self.scaled_object:
            object.__setattr__(self, "scaled_object", self.workload_name)
        if not self.lock_file:
            safe = re.sub(r"[^a-zA-Z0-9._-]", "_", self.group)
            object.__setattr__(self, "lock_file", str(default_lock_dir() / f"{safe}.lock"))
        if not self.lease_name:
            safe = re.sub(r"[^a-z0-9-]", "-", self.group.lower())[:50].strip("-") or "group"
            object.__setattr__(self, "lease_name", f"kafka-autoscaler-{safe}")

    def names_members(self) -> bool:
        """Whether the scaler's members have names known before they join (their
        ``group.instance.id``): local consumers and StatefulSet pods."""
        return self.scaler == "local" or (
            self.scaler == "kubernetes" and self.workload_kind == "statefulset"
        )

    def member_name(self, ordinal: int) -> str:
        """The name (``group.instance.id``) of the scaler's member ``ordinal``."""
        prefix = self.identity_prefix if self.scaler == "local" else self.workload_name
        return f"{prefix}-{ordinal}"

    @property
    def lock_path(self) -> Path:
        """The local leader lock."""
        return Path(self.lock_file)

    def racks(self) -> tuple[str, ...]:
        """``--local-racks`` as a list (empty: none)."""
        return tuple(r.strip() for r in self.local_racks.split(",")) if self.local_racks else ()


def _first_line(path: str) -> str:
    """The first line of a file, stripped; empty when it cannot be read."""
    try:
        lines = Path(path).read_text().splitlines()
    except (OSError, UnicodeDecodeError):
        return ""
    return lines[0].strip() if lines else ""


def _command_words(command: str) -> list[str]:
    """The words of a shell-quoted command; none when it is empty or badly quoted."""
    try:
        return shlex.split(command)
    except ValueError:  # unbalanced quotes
        return []


def loopback(host: str) -> bool:
    """Whether ``host`` is a loopback address (``localhost`` included; ``""``, every
    interface, and other names are not)."""
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _refuse_on_command_line(name: str) -> Callable[[str], Any]:
    def refuse(_raw: str) -> Any:
        raise argparse.ArgumentTypeError(
            f"a secret on the command line shows in the process list (/proc/*/cmdline): set "
            f"{env_name(name)} or the matching *_file setting instead"
        )

    return refuse


def _converter(name: str, kind: str) -> Callable[[str], Any]:
    def convert(raw: str) -> Any:
        if name == "capacity" and is_capacity_auto(raw):
            return raw
        if kind.startswith("bool"):
            if raw.strip().lower() not in ("true", "false"):
                raise argparse.ArgumentTypeError(
                    f"{flag_label(name)} must be true or false, got {raw!r}"
                )
            return raw.strip().lower() == "true"
        try:
            if kind.startswith("int"):
                return int(raw)
            if kind.startswith("float"):
                return float(raw)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{flag_label(name)} must be "
                f"{'an integer' if kind.startswith('int') else 'a number'}, got {raw!r}"
            ) from None
        if kind.startswith("tuple"):
            return tuple(t.strip() for t in raw.split(",") if t.strip())
        return raw

    return convert


REQUIRED = ("bootstrap_servers", "group", "topics", "capacity")
# Fields that are not flags (derived from others).
DERIVED = ("capacity_auto",)


def parse_args(
    argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None
) -> SidecarConfig:
    """Flags first, then ``AUTOSCALER_*`` variables, then defaults."""
    env = os.environ if environ is None else environ
    parser = argparse.ArgumentParser(
        prog="kafka-autoscaler-sidecar",
        description="Measure partition write speeds, publish them for the consumers' "
        "assignor, and scale the consumer group to what the load needs.",
    )
    flags = [f for f in fields(SidecarConfig) if f.name not in DERIVED]
    for f in flags:
        default = "required" if f.name in REQUIRED else f"default {f.default!r}"
        secret = bool(f.metadata.get("secret"))
        parser.add_argument(
            flag_name(f.name),
            dest=f.name,
            type=_refuse_on_command_line(f.name) if secret else _converter(f.name, str(f.type)),
            help=(
                f"not a flag: a secret on the command line shows in the process list; set "
                f"env {env_name(f.name)} or its file setting"
                if secret
                else f"{setting_help(f)} ({default}; env {env_name(f.name)})".replace("%", "%%")
            ),
        )
    defaults: dict[str, Any] = {}
    secrets: dict[str, Any] = {}  # from the environment only, past argparse (no flag)
    try:
        for f in flags:
            if env_name(f.name) in env:
                found = secrets if f.metadata.get("secret") else defaults
                found[f.name] = _converter(f.name, str(f.type))(env[env_name(f.name)])
    except argparse.ArgumentTypeError as exc:
        parser.error(str(exc))
    parser.set_defaults(**defaults)
    parsed = {k: v for k, v in vars(parser.parse_args(argv)).items() if v is not None}
    values = {**parsed, **secrets}
    missing = [name for name in REQUIRED if name not in values]
    if missing:
        parser.error("missing " + ", ".join(flag_label(m) for m in missing))
    values["capacity"], values["capacity_auto"] = capacity_setting(
        values["capacity"],
        values.get("capacity_initial", 0.0),
        values.get("capacity_unit", "records/s"),
    )
    try:
        return SidecarConfig(**values)
    except ConfigError as exc:
        parser.error(str(exc))
    raise AssertionError("unreachable")
