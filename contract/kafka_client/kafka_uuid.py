"""Kafka's 16-byte uuid (a topic id) as a field of aiokafka's protocol structs, shared by the
requests the sidecar and the SDK send that neither client ships."""

from __future__ import annotations

import base64
from io import BytesIO

from aiokafka.protocol.abstract import AbstractType

# Kafka's "no id" (Uuid.ZERO_UUID), as a request names a topic by name only.
ZERO_UUID = "AAAAAAAAAAAAAAAAAAAAAA"


class Uuid(AbstractType[str]):
    """Kafka's 16-byte uuid (a topic id), in its usual URL-safe base64 form."""

    @classmethod
    def encode(cls, value: str) -> bytes:
        return base64.urlsafe_b64decode(value + "==")

    @classmethod
    def decode(cls, data: BytesIO) -> str:
        raw = data.read(16)
        if len(raw) != 16:
            raise ValueError("Buffer underrun decoding a uuid")
        return base64.urlsafe_b64encode(raw).decode().rstrip("=")
