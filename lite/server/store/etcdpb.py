"""etcd v3's wire messages, built at import from a table (no generated code, no protoc at build time).

Only the messages and fields lite's etcd backend uses are declared, each with etcd's own field number and type
(api/etcdserverpb/rpc.proto and api/mvccpb/kv.proto of etcd 3.4+), so the bytes are etcd's: fields left out are
skipped by protobuf's decoder as unknown fields. Proto3 semantics: unset scalars read as 0 / b"" / False.

Invariants: the message classes are built once, in a private descriptor pool (nothing is registered in
protobuf's default pool, so another copy of etcd's protos in the same process cannot clash); they are read-only
after import. Method paths (`KV_RANGE`, ...) are gRPC's `/package.Service/Method` names.
"""

from __future__ import annotations

from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

_T = descriptor_pb2.FieldDescriptorProto
_SCALARS = {"int64": _T.TYPE_INT64, "uint64": _T.TYPE_UINT64, "bytes": _T.TYPE_BYTES, "bool": _T.TYPE_BOOL,
            "string": _T.TYPE_STRING}

# message -> [(field name, number, type, repeated, oneof)]; a type not in _SCALARS names a message or an enum
# (enums are listed in _ENUMS); oneof "" = none.
_MESSAGES: dict[str, list[tuple[str, int, str, bool, str]]] = {
    "mvccpb.KeyValue": [("key", 1, "bytes", False, ""), ("create_revision", 2, "int64", False, ""),
                        ("mod_revision", 3, "int64", False, ""), ("version", 4, "int64", False, ""),
                        ("value", 5, "bytes", False, ""), ("lease", 6, "int64", False, "")],
    "mvccpb.Event": [("type", 1, "mvccpb.Event.EventType", False, ""), ("kv", 2, "mvccpb.KeyValue", False, ""),
                     ("prev_kv", 3, "mvccpb.KeyValue", False, "")],
    "etcdserverpb.ResponseHeader": [("cluster_id", 1, "uint64", False, ""), ("member_id", 2, "uint64", False, ""),
                                    ("revision", 3, "int64", False, ""), ("raft_term", 4, "uint64", False, "")],
    "etcdserverpb.RangeRequest": [("key", 1, "bytes", False, ""), ("range_end", 2, "bytes", False, ""),
                                  ("limit", 3, "int64", False, ""), ("revision", 4, "int64", False, ""),
                                  ("serializable", 7, "bool", False, ""), ("keys_only", 8, "bool", False, ""),
                                  ("count_only", 9, "bool", False, "")],
    "etcdserverpb.RangeResponse": [("header", 1, "etcdserverpb.ResponseHeader", False, ""),
                                   ("kvs", 2, "mvccpb.KeyValue", True, ""), ("more", 3, "bool", False, ""),
                                   ("count", 4, "int64", False, "")],
    "etcdserverpb.PutRequest": [("key", 1, "bytes", False, ""), ("value", 2, "bytes", False, ""),
                                ("lease", 3, "int64", False, ""), ("prev_kv", 4, "bool", False, "")],
    "etcdserverpb.PutResponse": [("header", 1, "etcdserverpb.ResponseHeader", False, ""),
                                 ("prev_kv", 2, "mvccpb.KeyValue", False, "")],
    "etcdserverpb.DeleteRangeRequest": [("key", 1, "bytes", False, ""), ("range_end", 2, "bytes", False, ""),
                                        ("prev_kv", 3, "bool", False, "")],
    "etcdserverpb.DeleteRangeResponse": [("header", 1, "etcdserverpb.ResponseHeader", False, ""),
                                         ("deleted", 2, "int64", False, ""),
                                         ("prev_kvs", 3, "mvccpb.KeyValue", True, "")],
    "etcdserverpb.RequestOp": [("request_range", 1, "etcdserverpb.RangeRequest", False, "request"),
                               ("request_put", 2, "etcdserverpb.PutRequest", False, "request"),
                               ("request_delete_range", 3, "etcdserverpb.DeleteRangeRequest", False, "request")],
    "etcdserverpb.ResponseOp": [("response_range", 1, "etcdserverpb.RangeResponse", False, "response"),
                                ("response_put", 2, "etcdserverpb.PutResponse", False, "response"),
                                ("response_delete_range", 3, "etcdserverpb.DeleteRangeResponse", False,
                                 "response")],
    "etcdserverpb.Compare": [("result", 1, "etcdserverpb.Compare.CompareResult", False, ""),
                             ("target", 2, "etcdserverpb.Compare.CompareTarget", False, ""),
                             ("key", 3, "bytes", False, ""),
                             ("version", 4, "int64", False, "target_union"),
                             ("create_revision", 5, "int64", False, "target_union"),
                             ("mod_revision", 6, "int64", False, "target_union"),
                             ("value", 7, "bytes", False, "target_union"),
                             ("range_end", 64, "bytes", False, "")],
    "etcdserverpb.TxnRequest": [("compare", 1, "etcdserverpb.Compare", True, ""),
                                ("success", 2, "etcdserverpb.RequestOp", True, ""),
                                ("failure", 3, "etcdserverpb.RequestOp", True, "")],
    "etcdserverpb.TxnResponse": [("header", 1, "etcdserverpb.ResponseHeader", False, ""),
                                 ("succeeded", 2, "bool", False, ""),
                                 ("responses", 3, "etcdserverpb.ResponseOp", True, "")],
    "etcdserverpb.CompactionRequest": [("revision", 1, "int64", False, ""), ("physical", 2, "bool", False, "")],
    "etcdserverpb.CompactionResponse": [("header", 1, "etcdserverpb.ResponseHeader", False, "")],
    "etcdserverpb.WatchCreateRequest": [("key", 1, "bytes", False, ""), ("range_end", 2, "bytes", False, ""),
                                        ("start_revision", 3, "int64", False, ""),
                                        ("progress_notify", 4, "bool", False, ""),
                                        ("prev_kv", 6, "bool", False, ""), ("watch_id", 7, "int64", False, "")],
    "etcdserverpb.WatchCancelRequest": [("watch_id", 1, "int64", False, "")],
    "etcdserverpb.WatchRequest": [("create_request", 1, "etcdserverpb.WatchCreateRequest", False, "request_union"),
                                  ("cancel_request", 2, "etcdserverpb.WatchCancelRequest", False,
                                   "request_union")],
    "etcdserverpb.WatchResponse": [("header", 1, "etcdserverpb.ResponseHeader", False, ""),
                                   ("watch_id", 2, "int64", False, ""), ("created", 3, "bool", False, ""),
                                   ("canceled", 4, "bool", False, ""), ("compact_revision", 5, "int64", False, ""),
                                   ("cancel_reason", 6, "string", False, ""), ("fragment", 7, "bool", False, ""),
                                   ("events", 11, "mvccpb.Event", True, "")],
    "etcdserverpb.StatusRequest": [],
    "etcdserverpb.StatusResponse": [("header", 1, "etcdserverpb.ResponseHeader", False, ""),
                                    ("version", 2, "string", False, ""), ("dbSize", 3, "int64", False, "")],
    "etcdserverpb.SnapshotRequest": [],
    "etcdserverpb.SnapshotResponse": [("header", 1, "etcdserverpb.ResponseHeader", False, ""),
                                      ("remaining_bytes", 2, "uint64", False, ""), ("blob", 3, "bytes", False, "")],
}
# enum (nested in the message before its last dot) -> [(value name, number)]
_ENUMS: dict[str, list[tuple[str, int]]] = {
    "mvccpb.Event.EventType": [("PUT", 0), ("DELETE", 1)],
    "etcdserverpb.Compare.CompareResult": [("EQUAL", 0), ("GREATER", 1), ("LESS", 2), ("NOT_EQUAL", 3)],
    "etcdserverpb.Compare.CompareTarget": [("VERSION", 0), ("CREATE", 1), ("MOD", 2), ("VALUE", 3), ("LEASE", 4)],
}


def _build() -> dict[str, Any]:
    files: dict[str, descriptor_pb2.FileDescriptorProto] = {}
    for package in ("mvccpb", "etcdserverpb"):
        f = descriptor_pb2.FileDescriptorProto(name=f"lite_etcd_{package}.proto", package=package, syntax="proto3")
        if package == "etcdserverpb":
            f.dependency.append("lite_etcd_mvccpb.proto")
        files[package] = f
    for full, fields in _MESSAGES.items():
        package, name = full.split(".", 1)
        msg = files[package].message_type.add(name=name)
        oneofs: list[str] = []
        for enum_full, values in _ENUMS.items():
            if enum_full.rsplit(".", 1)[0] == full:
                enum = msg.enum_type.add(name=enum_full.rsplit(".", 1)[1])
                for value_name, number in values:
                    enum.value.add(name=value_name, number=number)
        for fname, number, ftype, repeated, oneof in fields:
            field = msg.field.add(name=fname, number=number,
                                  label=_T.LABEL_REPEATED if repeated else _T.LABEL_OPTIONAL)
            if ftype in _SCALARS:
                field.type = _SCALARS[ftype]
            else:
                field.type = _T.TYPE_ENUM if ftype in _ENUMS else _T.TYPE_MESSAGE
                field.type_name = "." + ftype
            if oneof:
                if oneof not in oneofs:
                    oneofs.append(oneof)
                    msg.oneof_decl.add(name=oneof)
                field.oneof_index = oneofs.index(oneof)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(files["mvccpb"])
    pool.Add(files["etcdserverpb"])
    return {full.split(".", 1)[1]: message_factory.GetMessageClass(pool.FindMessageTypeByName(full))
            for full in _MESSAGES}


_CLASSES = _build()
KeyValue: Any = _CLASSES["KeyValue"]
Event: Any = _CLASSES["Event"]
RangeRequest: Any = _CLASSES["RangeRequest"]
RangeResponse: Any = _CLASSES["RangeResponse"]
PutRequest: Any = _CLASSES["PutRequest"]
PutResponse: Any = _CLASSES["PutResponse"]
DeleteRangeRequest: Any = _CLASSES["DeleteRangeRequest"]
RequestOp: Any = _CLASSES["RequestOp"]
Compare: Any = _CLASSES["Compare"]
TxnRequest: Any = _CLASSES["TxnRequest"]
TxnResponse: Any = _CLASSES["TxnResponse"]
CompactionRequest: Any = _CLASSES["CompactionRequest"]
CompactionResponse: Any = _CLASSES["CompactionResponse"]
WatchCreateRequest: Any = _CLASSES["WatchCreateRequest"]
WatchRequest: Any = _CLASSES["WatchRequest"]
WatchResponse: Any = _CLASSES["WatchResponse"]
StatusRequest: Any = _CLASSES["StatusRequest"]
StatusResponse: Any = _CLASSES["StatusResponse"]
SnapshotRequest: Any = _CLASSES["SnapshotRequest"]
SnapshotResponse: Any = _CLASSES["SnapshotResponse"]

# Compare.result / Compare.target / Event.type values
EQUAL, GREATER, LESS, NOT_EQUAL = 0, 1, 2, 3
VERSION, CREATE, MOD, VALUE = 0, 1, 2, 3
PUT, DELETE = 0, 1

KV_RANGE = "/etcdserverpb.KV/Range"
KV_PUT = "/etcdserverpb.KV/Put"
KV_TXN = "/etcdserverpb.KV/Txn"
KV_COMPACT = "/etcdserverpb.KV/Compact"
WATCH = "/etcdserverpb.Watch/Watch"
STATUS = "/etcdserverpb.Maintenance/Status"
SNAPSHOT = "/etcdserverpb.Maintenance/Snapshot"
