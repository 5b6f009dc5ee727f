"""atheris harness for what the sidecar and the consumers read from each other through Kafka:
the capacity report in offset-commit metadata (contract.capacity) and the speed snapshot
(contract.snapshot), hostile or broken; the share-group responses the sidecar reads from
the brokers (contract.kafka_client.share_requests); and what group members send each other through
the coordinator (a member's userdata, an assignment's, commit metadata's release mark); the
Metadata response the SDK reads topic ids from (contract.kafka_client.topic_ids).

The first input byte picks the decoder (its value mod 6: report, snapshot, share offsets,
share group description, group member data, topic ids), the rest is the record. Each
decoder must return a value or raise its own error (CapacityReportError, SnapshotError,
ShareResponseError, TopicIdsError; aiokafka's decoding refuses with ValueError or
struct.error), nothing else; the group member decoders raise nothing at all (garbage reads
as absent); the sidecar's capacity estimate must take any metadata in without raising and
never end with a capacity that is not a finite number > 0. Run by fuzz/run.py:
``python -m fuzz.control_plane [libFuzzer flags] CORPUS...``.
"""

from __future__ import annotations

import contextlib
import io
import math
import struct
import sys

import atheris

with atheris.instrument_imports(
    include=[
        "contract",
        "sidecar.capacity",
        "sidecar.share_groups",
        "assignor",
        "consumer_sdk.kafka_client",
    ]
):
    from assignor.cooperative import (
        decode_assignment_data,
        decode_awaiting,
        decode_handover,
        decode_members,
        decode_one_round,
        released_generation,
    )
    from assignor.member_data import decode_member_data
    from contract.capacity import CapacityReportError
    from contract.capacity import decode as decode_report
    from contract.kafka_client.share_requests import (
        DescribeShareGroupOffsetsResponse_v1,
        ShareGroupDescribeResponse_v1,
        ShareResponseError,
        share_group_description,
        share_offsets,
    )
    from contract.kafka_client.topic_ids import (
        MetadataResponse_v12,
        TopicIdsError,
        topic_ids_in,
    )
    from contract.snapshot import SnapshotError
    from contract.snapshot import decode as decode_snapshot
    from sidecar.capacity import CapacityEstimate


def test_one_input(data: bytes) -> None:
    """One record: decoded or refused with the decoder's own error."""
    if not data:
        return
    body = data[1:]
    kind = data[0] % 6
    if kind == 5:
        try:
            decoded = MetadataResponse_v12.decode(io.BytesIO(body))
        except (ValueError, struct.error):
            return  # aiokafka's decoder refused the bytes
        with contextlib.suppress(TopicIdsError):
            ids = topic_ids_in(decoded)
            if not all(isinstance(k, str) and isinstance(v, str) for k, v in ids.items()):
                raise AssertionError(f"topic ids {ids!r}")
        return
    if kind == 4:
        for decode in (
            decode_member_data,
            decode_assignment_data,
            decode_awaiting,
            decode_handover,
            decode_members,
            decode_one_round,
        ):
            decode(body)
        released_generation(body.decode("utf-8", errors="replace"))
        return
    if kind == 1:
        with contextlib.suppress(SnapshotError):
            decode_snapshot(body)
        return
    if kind in (2, 3):
        response, parse = (
            (DescribeShareGroupOffsetsResponse_v1, share_offsets)
            if kind == 2
            else (ShareGroupDescribeResponse_v1, share_group_description)
        )
        try:
            decoded = response.decode(io.BytesIO(body))
        except (ValueError, struct.error):
            return  # aiokafka's decoder refused the bytes
        with contextlib.suppress(ShareResponseError):
            parse(decoded, "g")
        return
    text = body.decode("utf-8", errors="replace")
    with contextlib.suppress(CapacityReportError):
        decode_report(text)
    estimate = CapacityEstimate(1000.0, auto=True)
    for at in range(3):  # the same metadata seen again, then with a counter moved
        estimate.observe(float(at), [text, text.replace('"c":1', f'"c":{at + 2}')], None)
    used = estimate.in_use(1.0)
    if not (math.isfinite(used) and used > 0):
        raise AssertionError(f"capacity {used!r} from {text!r}")


def main() -> None:
    """Fuzz until libFuzzer's flags say stop."""
    atheris.Setup(sys.argv, test_one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
