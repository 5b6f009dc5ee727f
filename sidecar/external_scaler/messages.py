"""The messages of KEDA's external scaler protocol (package ``externalscaler``), described in
code: the same wire format as KEDA's ``externalscaler.proto`` without a protoc step or
generated files. Field names and numbers follow that file; they are the protocol."""

from __future__ import annotations

from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

PACKAGE = "externalscaler"
SERVICE = f"{PACKAGE}.ExternalScaler"

_STRING = descriptor_pb2.FieldDescriptorProto.TYPE_STRING
_BOOL = descriptor_pb2.FieldDescriptorProto.TYPE_BOOL
_INT64 = descriptor_pb2.FieldDescriptorProto.TYPE_INT64
_DOUBLE = descriptor_pb2.FieldDescriptorProto.TYPE_DOUBLE
_MESSAGE = descriptor_pb2.FieldDescriptorProto.TYPE_MESSAGE
_OPTIONAL = descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL
_REPEATED = descriptor_pb2.FieldDescriptorProto.LABEL_REPEATED

# message name -> its fields: (name, number, type, repeated, message type or "")
_MESSAGES: dict[str, list[tuple[str, int, int, bool, str]]] = {
    "ScaledObjectRef": [
        ("name", 1, _STRING, False, ""),
        ("namespace", 2, _STRING, False, ""),
        ("scalerMetadata", 3, _MESSAGE, True, "ScaledObjectRef.ScalerMetadataEntry"),
    ],
    "IsActiveResponse": [("result", 1, _BOOL, False, "")],
    "GetMetricSpecResponse": [("metricSpecs", 1, _MESSAGE, True, "MetricSpec")],
    "MetricSpec": [
        ("metricName", 1, _STRING, False, ""),
        ("targetSize", 2, _INT64, False, ""),
        ("targetSizeFloat", 3, _DOUBLE, False, ""),
    ],
    "GetMetricsRequest": [
        ("scaledObjectRef", 1, _MESSAGE, False, "ScaledObjectRef"),
        ("metricName", 2, _STRING, False, ""),
    ],
    "GetMetricsResponse": [("metricValues", 1, _MESSAGE, True, "MetricValue")],
    "MetricValue": [
        ("metricName", 1, _STRING, False, ""),
        ("metricValue", 2, _INT64, False, ""),
        ("metricValueFloat", 3, _DOUBLE, False, ""),
    ],
}


def _add_fields(
    message: descriptor_pb2.DescriptorProto, fields: list[tuple[str, int, int, bool, str]]
) -> None:
    for name, number, kind, repeated, type_name in fields:
        field = message.field.add(
            name=name,
            number=number,
            type=kind,
            label=_REPEATED if repeated else _OPTIONAL,
            json_name=name,
        )
        if type_name:  # set only for message fields: present-but-empty is refused
            field.type_name = f".{PACKAGE}.{type_name}"


def _file() -> descriptor_pb2.FileDescriptorProto:
    proto = descriptor_pb2.FileDescriptorProto(
        name="kafka_autoscaler/externalscaler.proto", package=PACKAGE, syntax="proto3"
    )
    for name, fields in _MESSAGES.items():
        message = proto.message_type.add(name=name)
        _add_fields(message, fields)
        if name == "ScaledObjectRef":
            entry = message.nested_type.add(name="ScalerMetadataEntry")
            entry.options.map_entry = True
            _add_fields(entry, [("key", 1, _STRING, False, ""), ("value", 2, _STRING, False, "")])
    return proto


# A pool of our own: the default pool may already hold another externalscaler.proto.
_POOL = descriptor_pool.DescriptorPool()
_POOL.Add(_file())


def _class(name: str) -> Any:
    return message_factory.GetMessageClass(_POOL.FindMessageTypeByName(f"{PACKAGE}.{name}"))


ScaledObjectRef = _class("ScaledObjectRef")
IsActiveResponse = _class("IsActiveResponse")
GetMetricSpecResponse = _class("GetMetricSpecResponse")
MetricSpec = _class("MetricSpec")
GetMetricsRequest = _class("GetMetricsRequest")
GetMetricsResponse = _class("GetMetricsResponse")
MetricValue = _class("MetricValue")
