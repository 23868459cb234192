"""Read an ONNX model's graph without its weights' bytes, and identify it by a hash of that graph.

The stages that only analyse the graph (02, 04, 07, 10) never need the weights' payloads, only each
tensor's name, type and dims. A pass over the protobuf wire format, over a memory map of the file, copies
every field except the payload of large tensors (initializers, Constant attributes, in subgraphs too), so
peak memory follows the graph's size, not the file's. A stripped tensor keeps its dims and type and is
marked as external data at the location STRIPPED, with the payload's length and offset in the file.
Small tensors (shape constants, scalars) keep their data: shape arithmetic needs their values.

The graph hash is the SHA-256 of the stripped bytes: it changes with the graph (nodes, attributes, shapes,
small constants, weight names and dims), not with the weights' values.
"""
from __future__ import annotations

import functools
import hashlib
import math
import mmap
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx

from lib.errors import StageError

STRIPPED = "<nn-perf: stripped inline data>"
KEEP_BYTES = 64 * 1024          # tensors up to this size keep their data
BIG_MESSAGE = 4 * 1024          # nodes / attributes smaller than this cannot hold a tensor worth stripping
PAYLOAD_FIELDS = {3, 4, 5, 6, 7, 9, 10, 11}   # TensorProto: segment, *_data, raw_data
EXTERNAL_WIRE = bytes([14 << 3, onnx.TensorProto.EXTERNAL])    # TensorProto.data_location = EXTERNAL, encoded
SUB_BYTE = {getattr(onnx.TensorProto, name): bits for name, bits in
            (("INT4", 4), ("UINT4", 4), ("FLOAT4E2M1", 4), ("INT2", 2), ("UINT2", 2)) if hasattr(onnx.TensorProto, name)}


@dataclass
class LightModel:
    model: onnx.ModelProto       # weights' payloads stripped (see STRIPPED)
    path: Path
    graph_sha256: str
    file_bytes: int
    # False when no tensor can hold an external-data reference of the file's own (only the stripped ones): a
    # reference sets data_location = EXTERNAL, bytes 0x70 0x01 in the wire format, and the stripped tensors
    # hold one each; any other occurrence (in names or small raw data, say) only means "maybe"
    external_refs: bool = True


def _varint(buf, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise ValueError("malformed varint")


def _encode_varint(v: int) -> bytes:
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _fields(buf, start: int, end: int):
    """(field number, wire type, field start, value start, value end) of each field of a message."""
    pos = start
    while pos < end:
        fstart = pos
        key, pos = _varint(buf, pos)
        fnum, wt = key >> 3, key & 7
        if wt == 0:
            _, vend = _varint(buf, pos)
            yield fnum, wt, fstart, pos, vend
            pos = vend
        elif wt == 2:
            ln, vstart = _varint(buf, pos)
            pos = vstart + ln
            if pos > end:
                raise ValueError("field runs past its message")
            yield fnum, wt, fstart, vstart, pos
        elif wt == 1:
            pos += 8
            yield fnum, wt, fstart, pos - 8, pos
        elif wt == 5:
            pos += 4
            yield fnum, wt, fstart, pos - 4, pos
        else:
            raise ValueError(f"wire type {wt}")
    if pos != end:
        raise ValueError("message runs past its end")


def _field(fnum: int, payload: bytes) -> bytes:
    return _encode_varint(fnum << 3 | 2) + _encode_varint(len(payload)) + payload


def _rewrite(buf, start: int, end: int, rules: dict, min_len: int = 0) -> bytes | None:
    """The message with fields whose number has a rule rewritten (rule(vstart, vend) -> new bytes or None to
    keep); only fields longer than min_len are offered to a rule. None when nothing changed, so the caller
    copies the original bytes. _fields() inlined for one-byte keys and lengths: a 200k-node graph has 200k
    node fields."""
    out, run, changed = [], start, False
    pos = start
    while pos < end:
        fstart = pos
        key = buf[pos]
        pos += 1
        if key >= 0x80:
            key, pos = _varint(buf, fstart)
        wt = key & 7
        if wt == 2:
            ln = buf[pos]
            pos += 1
            if ln >= 0x80:
                ln, pos = _varint(buf, pos - 1)
            vstart, pos = pos, pos + ln
            if pos > end:
                raise ValueError("field runs past its message")
            rule = rules.get(key >> 3) if ln > min_len else None
            new = rule(vstart, pos) if rule else None
            if new is not None:
                out.append(buf[run:fstart])
                out.append(_field(key >> 3, new))
                run, changed = pos, True
        elif wt == 0:
            _, pos = _varint(buf, pos)
        elif wt == 1:
            pos += 8
        elif wt == 5:
            pos += 4
        else:
            raise ValueError(f"wire type {wt}")
    if pos != end:
        raise ValueError("message runs past its end")
    if not changed:
        return None
    out.append(buf[run:end])
    return b"".join(bytes(x) for x in out)


def with_metadata(data: bytes, key: str, value: str) -> bytes:
    """A serialized ModelProto with its metadata_props (field 14) replaced by the one entry key = value, put
    where a serializer puts it (fields in number order): the bytes parse, edit and SerializeToString() give,
    without parsing a 200k-node graph (0.25 s) to tag it."""
    entry = _field(14, _field(1, key.encode()) + _field(2, value.encode()))
    out, placed = [], False
    for fnum, _wt, fstart, _vstart, vend in _fields(data, 0, len(data)):
        if fnum > 14 and not placed:
            out.append(entry)
            placed = True
        if fnum != 14:
            out.append(data[fstart:vend])
    if not placed:
        out.append(entry)
    return b"".join(out)


class _Stripper:
    def __init__(self, buf):
        self.buf = buf
        self.stripped = 0

    def tensor(self, s: int, e: int) -> bytes | None:
        if e - s <= KEEP_BYTES:
            return None
        self.stripped += 1
        kept, payload_at, payload_len = [], None, 0
        for fnum, wt, fstart, vstart, vend in _fields(self.buf, s, e):
            if fnum in PAYLOAD_FIELDS:
                if fnum == 9:
                    payload_at = vstart
                payload_len += vend - vstart
            elif fnum not in (13, 14):
                kept.append(bytes(self.buf[fstart:vend]))
        ext = [("location", STRIPPED), ("length", str(payload_len))]
        if payload_at is not None:
            ext.append(("offset", str(payload_at)))
        entries = b"".join(_field(13, _field(1, k.encode()) + _field(2, v.encode())) for k, v in ext)
        return b"".join(kept) + entries + EXTERNAL_WIRE

    def graph(self, s: int, e: int) -> bytes | None:
        return _rewrite(self.buf, s, e, {1: self.node, 5: self.tensor}, min_len=BIG_MESSAGE)

    def node(self, s: int, e: int) -> bytes | None:
        return _rewrite(self.buf, s, e, {5: self.attribute}, min_len=BIG_MESSAGE)

    def attribute(self, s: int, e: int) -> bytes | None:
        return _rewrite(self.buf, s, e, {5: self.tensor, 6: self.graph, 10: self.tensor, 11: self.graph},
                        min_len=BIG_MESSAGE)

    def model(self, s: int, e: int) -> bytes:
        return _rewrite(self.buf, s, e, {7: self.graph}) or bytes(self.buf[s:e])


def read_light(path: str | Path, check_data: bool = True) -> LightModel:
    """The model's graph with large tensors' payloads stripped; StageError for a missing or unreadable file.
    check_data=False: external data is neither checked nor needed (a copy of the graph alone)."""
    path = Path(path)
    if not path.exists():
        raise StageError(f"model file {path} not found")
    if path.is_dir():
        raise StageError(f"{path} is a folder, not an ONNX model file")
    size = path.stat().st_size
    if size == 0:
        raise StageError(f"{path} is empty (not an ONNX model)")
    try:
        with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
            stripper = _Stripper(buf)
            data = stripper.model(0, size)
        model = onnx.ModelProto.FromString(data)
    except Exception as e:  # noqa: BLE001 - malformed bytes raise many types (IndexError, DecodeError ...)
        raise StageError(f"{path} is not a readable ONNX model (corrupt or truncated?): {type(e).__name__}") from None
    if not model.HasField("graph") or not model.graph.node:
        raise StageError(f"{path} holds no graph nodes (corrupt, truncated or not an ONNX model)")
    light = LightModel(model, path, hashlib.sha256(data).hexdigest(), size,
                       external_refs=data.count(EXTERNAL_WIRE) > stripper.stripped)
    if check_data:
        check_external_data(light)
    return light


def attribute_subgraphs(a: onnx.AttributeProto) -> list[onnx.GraphProto]:
    """The bodies an attribute holds (an If branch, a Loop/Scan body): [] for other attributes."""
    if a.type == onnx.AttributeProto.GRAPH:
        return [a.g]
    return list(a.graphs) if a.type == onnx.AttributeProto.GRAPHS else []


@functools.cache
def elem_size(elem_type: int) -> int | None:
    """Bytes per element of an ONNX element type (None for strings, sub-byte and unknown types)."""
    if elem_type in (onnx.TensorProto.STRING, onnx.TensorProto.UNDEFINED) or elem_type in SUB_BYTE:
        return None
    try:
        return np.dtype(onnx.helper.tensor_dtype_to_np_dtype(elem_type)).itemsize
    except Exception:  # noqa: BLE001 - unknown enum values
        return None


def all_tensors(graph: onnx.GraphProto):
    """Every TensorProto of a graph: initializers and Constant/attribute tensors, in subgraphs too."""
    yield from graph.initializer
    for n in graph.node:
        for a in n.attribute:
            if a.HasField("t"):
                yield a.t
            yield from a.tensors
            if a.HasField("g"):
                yield from all_tensors(a.g)
            for sub in a.graphs:
                yield from all_tensors(sub)


def strip_external_references(model: onnx.ModelProto) -> None:
    """Mark every external-data tensor as stripped: a graph-only copy written elsewhere must not point at data
    files that are not beside it (ORT's optimized model keeps the original's references in If/Loop bodies)."""
    for t in all_tensors(model.graph):
        if t.data_location == onnx.TensorProto.EXTERNAL:
            for e in t.external_data:
                if e.key == "location":
                    e.value = STRIPPED


def check_external_data(light: LightModel) -> None:
    """Refuse, before any read, external data that would resolve outside the model's folder (absolute paths,
    '..', symlinks pointing out: a model file must not make us read /etc/passwd), and external data that is
    missing or shorter than the model says (found with stat alone: the weights are never read here). Skipped
    when the light bytes show no external reference to check (the walk reads every node's attributes: 0.3 s
    at 200k nodes)."""
    if not light.external_refs:
        return
    model, path = light.model, light.path
    base = path.resolve().parent
    sizes: dict[Path, int] = {}
    for t in all_tensors(model.graph):
        if t.data_location != onnx.TensorProto.EXTERNAL:
            continue
        ext = {e.key: e.value for e in t.external_data}
        loc = ext.get("location")
        if loc == STRIPPED:
            continue
        if not loc:
            raise StageError(f"{path}: tensor {t.name!r} is external data without a location")
        target = Path(os.path.normpath(base / loc))
        if Path(loc).is_absolute() or not (target == base or base in target.parents):
            raise StageError(f"{path}: tensor {t.name!r} points at external data outside the model's folder ({loc!r})")
        if target.exists() and base not in target.resolve().parents:
            raise StageError(f"{path}: external data {loc!r} of tensor {t.name!r} is a link to outside the model's folder")
        if target not in sizes:
            if not target.is_file():
                raise StageError(f"{path}: external data file {loc!r} (tensor {t.name!r}) not found next to the model")
            sizes[target] = target.stat().st_size
        end = int(ext.get("offset", 0) or 0) + int(ext.get("length", 0) or 0)
        if end > sizes[target]:
            raise StageError(f"{path}: tensor {t.name!r} reads bytes up to {end} of {loc!r}, which holds "
                             f"{sizes[target]}: the external data is truncated")
        size = elem_size(t.data_type)
        need = None if size is None else math.prod(t.dims) * size
        have = int(ext.get("length") or 0) or sizes[target] - int(ext.get("offset", 0) or 0)
        if need is not None and need > have:
            raise StageError(f"{path}: tensor {t.name!r} of dims {list(t.dims)} needs {need} bytes, its external "
                             f"data holds {have}")


def tensor_array(light: LightModel, t: onnx.TensorProto) -> np.ndarray | None:
    """A tensor's values without loading the model's weights: its inline data (a small tensor), its payload in the
    model file (a stripped raw_data) or its external data file (read_light checked where it points), both
    through a memory map. None where the payload is not raw bytes (packed float_data of a stripped tensor) or
    the type has no numpy form."""
    ext = {e.key: e.value for e in t.external_data}
    if t.data_location != onnx.TensorProto.EXTERNAL:
        return onnx.numpy_helper.to_array(t)
    if ext.get("location") == STRIPPED and "offset" not in ext:
        return None
    try:
        dtype = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(t.data_type))
    except Exception:  # noqa: BLE001 - types numpy has no form of
        return None
    path = light.path if ext.get("location") == STRIPPED else light.path.resolve().parent / ext["location"]
    n = math.prod(t.dims)
    if n == 0:
        return np.zeros(tuple(t.dims), dtype)
    return np.memmap(path, dtype=dtype.newbyteorder("<"), mode="r", offset=int(ext.get("offset", 0) or 0),
                     shape=(n,))


def attr(node: onnx.NodeProto, name: str, default=None):
    """A node attribute's value (the one helper every module uses)."""
    for a in node.attribute:
        if a.name == name:
            return onnx.helper.get_attribute_value(a)
    return default
