"""Read TensorFlow checkpoints (format V2, ``tf.train.Saver``) with NumPy only.

A V2 checkpoint ``PREFIX`` is a set of files:

* ``PREFIX.index``: a LevelDB-style sorted table (SSTable). Its blocks hold prefix-compressed
  key/value entries followed by restart points; each block is followed by a 5-byte trailer
  (compression type, masked crc32c of block + type byte). A 48-byte footer at the end of the file
  holds the block handles of the meta-index and index blocks and the magic number
  ``0xdb4775248b80fb57``. The index block maps the last key of each data block to its handle.
  The table's first key is ``""``, whose value is a ``BundleHeaderProto`` (number of shards,
  endianness); every other key is a variable name whose value is a ``BundleEntryProto`` (dtype,
  shape, shard id, byte offset and size in the shard, masked crc32c of the bytes).
* ``PREFIX.data-0000k-of-0000n``: raw little-endian tensor bytes, one shard per ``k``.

Everything is checked: the magic number, every block's checksum, the header, that each tensor lies
inside its shard, and (on read) each tensor's crc32c. A violation is one :class:`CheckpointError`
line. Tensors are returned as read-only-on-disk copy-on-write ``numpy.memmap`` views, so reading a
multi-GiB checkpoint costs no more anonymous memory than the arrays the caller actually copies;
checksums are computed through a fixed 32 MiB buffer. ``bfloat16`` (which NumPy lacks) is upcast
exactly to ``float32``; ``float16`` stays ``float16``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Iterator, List, Mapping, Optional, Tuple

import numpy as np

from ..errors import CheckpointError

TABLE_MAGIC = 0xDB4775248B80FB57
FOOTER_SIZE = 48  # two block handles padded to 40 bytes, then the 8-byte magic
BLOCK_TRAILER_SIZE = 5  # compression type (1 byte) + masked crc32c (4 bytes)
_CRC_MASK_DELTA = 0xA282EAD8

# DataType enum of tensorflow/core/framework/types.proto -> (name, numpy dtype of the stored bytes).
DTYPES = {
    1: ("float32", np.dtype("<f4")), 2: ("float64", np.dtype("<f8")), 3: ("int32", np.dtype("<i4")),
    4: ("uint8", np.dtype("u1")), 5: ("int16", np.dtype("<i2")), 6: ("int8", np.dtype("i1")),
    9: ("int64", np.dtype("<i8")), 10: ("bool", np.dtype("?")), 14: ("bfloat16", np.dtype("<u2")),
    17: ("uint16", np.dtype("<u2")), 19: ("float16", np.dtype("<f2")), 22: ("uint32", np.dtype("<u4")),
    23: ("uint64", np.dtype("<u8")),
}
DT_STRING = 7

# Variables a training run saves next to the weights: optimiser slots and counters.
_NON_WEIGHT_SUFFIXES = ("/Adam", "/Adam_1", "/Momentum", "/RMSProp", "/RMSProp_1", "/Adagrad",
                        "/Adafactor_vr", "/Adafactor_vc", "/Adafactor_v")
_NON_WEIGHT_NAMES = ("global_step", "beta1_power", "beta2_power", "_CHECKPOINTABLE_OBJECT_GRAPH")


def is_model_weight(name: str) -> bool:
    """False for optimiser slots (``*/Adam``, ``*/Adam_1`` ...), ``global_step`` and Adam's powers."""
    base = name.rsplit("/", 1)[-1]
    return not (name.endswith(_NON_WEIGHT_SUFFIXES) or base in _NON_WEIGHT_NAMES)


# ---------------------------------------------------------------------------- crc32c (Castagnoli)
def _crc_tables() -> np.ndarray:
    """Slicing-by-4 tables ``[4, 256]`` of the reflected CRC-32C polynomial 0x82F63B78."""
    t0 = np.arange(256, dtype=np.uint32)
    for _ in range(8):
        t0 = np.where(t0 & 1, (t0 >> 1) ^ np.uint32(0x82F63B78), t0 >> 1).astype(np.uint32)
    tables = [t0]
    for _ in range(3):
        prev = tables[-1]
        tables.append((prev >> 8) ^ t0[prev & 0xFF])
    return np.stack(tables)


_TABLES = _crc_tables()
_T0 = [int(v) for v in _TABLES[0]]
_LANE_BYTES = 2048  # bytes each lane checks in the vectorised pass
_BUFFER_BYTES = 32 << 20  # bytes read at a time when checking a file region


def _raw_bytes(state: int, data: bytes) -> int:
    """The CRC register after ``data``, one byte at a time (for short pieces)."""
    t0 = _T0
    for b in data:
        state = t0[(state ^ b) & 0xFF] ^ (state >> 8)
    return state


def _zero_tables() -> Tuple[np.ndarray, ...]:
    """Tables of the linear maps Z_4, Z_8 ('register after 4 or 8 zero bytes') on 16-bit halves."""
    t0, t1, t2, t3 = _TABLES

    def z4(x: np.ndarray) -> np.ndarray:
        return t3[x & 0xFF] ^ t2[(x >> 8) & 0xFF] ^ t1[(x >> 16) & 0xFF] ^ t0[x >> 24]

    low = np.arange(65536, dtype=np.uint32)
    z4_lo, z4_hi = z4(low), z4(low << 16)
    return z4(z4_lo), z4(z4_hi), z4_lo, z4_hi


_Z8_LO, _Z8_HI, _Z4_LO, _Z4_HI = _zero_tables()


def _raw_lanes(words: np.ndarray) -> np.ndarray:
    """Registers (start 0) of ``N`` equal chunks given as little-endian words ``[N, W]`` (W even) -> ``[N]``.

    Eight bytes per step: register' = Z_8(register ^ w0) ^ Z_4(w1), each map read from two 16-bit tables.
    """
    z8_lo, z8_hi, z4_lo, z4_hi = _Z8_LO, _Z8_HI, _Z4_LO, _Z4_HI
    columns = np.ascontiguousarray(words.T)  # [W, N]: one contiguous row per step
    state = np.zeros(words.shape[0], dtype=np.uint32)
    for j in range(0, columns.shape[0], 2):
        state ^= columns[j]
        w1 = columns[j + 1]
        state = z8_lo[state & 0xFFFF] ^ z8_hi[state >> 16] ^ z4_lo[w1 & 0xFFFF] ^ z4_hi[w1 >> 16]
    return state


def _shift_tables(n_bytes: int) -> List[List[int]]:
    """Byte tables of the linear map 'register after n_bytes zero bytes', for combining lanes."""
    basis = np.array([1 << k for k in range(32)], dtype=np.uint32)  # [32]
    images = _raw_lanes_from(basis, n_bytes // 4)
    tables = []
    for j in range(4):
        table = [0] * 256
        for b in range(1, 256):
            low = b & -b
            table[b] = table[b ^ low] ^ int(images[8 * j + low.bit_length() - 1])
        tables.append(table)
    return tables


def _raw_lanes_from(state: np.ndarray, n_words: int) -> np.ndarray:
    t0, t1, t2, t3 = _TABLES
    state = state.copy()
    for _ in range(n_words):
        state = t3[state & 0xFF] ^ t2[(state >> 8) & 0xFF] ^ t1[(state >> 16) & 0xFF] ^ t0[state >> 24]
    return state


_SHIFT = _shift_tables(_LANE_BYTES)


class Crc32c:
    """Incremental CRC-32C: ``Crc32c().update(a).update(b).value``; long inputs run vectorised."""

    def __init__(self) -> None:
        self._state = 0xFFFFFFFF

    def update(self, data) -> "Crc32c":
        is_array = isinstance(data, np.ndarray)
        view = data.reshape(-1).view(np.uint8) if is_array else np.frombuffer(data, dtype=np.uint8)
        n_lanes = view.size // _LANE_BYTES
        if n_lanes >= 8:
            body = view[: n_lanes * _LANE_BYTES]
            lanes = _raw_lanes(body.view("<u4").reshape(n_lanes, _LANE_BYTES // 4))
            s0, s1, s2, s3 = _SHIFT
            state = self._state
            for lane in lanes.tolist():  # register(A + chunk) = shift(register(A)) ^ register(chunk)
                state = s0[state & 0xFF] ^ s1[(state >> 8) & 0xFF] ^ s2[(state >> 16) & 0xFF] ^ s3[state >> 24] ^ lane
            self._state = state
            view = view[n_lanes * _LANE_BYTES:]
        self._state = _raw_bytes(self._state, view.tobytes())
        return self

    @property
    def value(self) -> int:
        return self._state ^ 0xFFFFFFFF


def crc32c(data) -> int:
    """CRC-32C (Castagnoli) of bytes or a NumPy array's bytes."""
    return Crc32c().update(data).value


def mask_crc(crc: int) -> int:
    """LevelDB's and TensorFlow's masking of stored checksums: rotate right 15, add a constant."""
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + _CRC_MASK_DELTA) & 0xFFFFFFFF


# ---------------------------------------------------------------------------- protobuf wire format
def _varint(buf: bytes, pos: int, what: str) -> Tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(buf) or shift > 63:
            raise CheckpointError(f"{what}: malformed varint")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7


def _fields(buf: bytes, what: str) -> Iterator[Tuple[int, object]]:
    """``(field number, value)`` of a protobuf message: ints for varint/fixed, bytes for length-delimited."""
    pos = 0
    while pos < len(buf):
        key, pos = _varint(buf, pos, what)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(buf, pos, what)
        elif wire == 1:
            value, pos = int.from_bytes(buf[pos:pos + 8], "little"), pos + 8
        elif wire == 5:
            value, pos = int.from_bytes(buf[pos:pos + 4], "little"), pos + 4
        elif wire == 2:
            size, pos = _varint(buf, pos, what)
            value, pos = buf[pos:pos + size], pos + size
        else:
            raise CheckpointError(f"{what}: unsupported protobuf wire type {wire}")
        if pos > len(buf):
            raise CheckpointError(f"{what}: truncated protobuf message")
        yield number, value


@dataclass(frozen=True)
class TensorEntry:
    """Where one variable lives: ``BundleEntryProto``."""

    name: str
    dtype: str  # "float32", "bfloat16", ... or "string"/"dtype N" for what cannot be read
    shape: Tuple[int, ...]
    shard_id: int
    offset: int
    size: int
    crc32c: int  # masked, as stored
    sliced: bool = False


def _signed64(v: int) -> int:
    return v - (1 << 64) if v >= 1 << 63 else v


def _parse_shape(buf: bytes, what: str) -> Tuple[int, ...]:
    dims = []
    for number, value in _fields(buf, what):
        if number == 2:
            size = 0
            for n, v in _fields(value, what):
                if n == 1:
                    size = _signed64(v)
            dims.append(size)
        elif number == 3 and value:
            raise CheckpointError(f"{what}: shape of unknown rank")
    return tuple(dims)


def _parse_entry(name: str, buf: bytes) -> TensorEntry:
    what = f"entry {name!r}"
    dtype_code, shape, shard, offset, size, crc, sliced = 0, (), 0, 0, 0, 0, False
    for number, value in _fields(buf, what):
        if number == 1:
            dtype_code = value
        elif number == 2:
            shape = _parse_shape(value, what)
        elif number == 3:
            shard = value
        elif number == 4:
            offset = _signed64(value)
        elif number == 5:
            size = _signed64(value)
        elif number == 6:
            crc = value
        elif number == 7:
            sliced = True
    other = "string" if dtype_code == DT_STRING else f"dtype {dtype_code}"
    dtype = DTYPES[dtype_code][0] if dtype_code in DTYPES else other
    return TensorEntry(name, dtype, shape, shard, offset, size, crc, sliced)


# ---------------------------------------------------------------------------- the SSTable
def _block_handle(buf: bytes, pos: int, what: str) -> Tuple[int, int, int]:
    offset, pos = _varint(buf, pos, what)
    size, pos = _varint(buf, pos, what)
    return offset, size, pos


def _read_block(data: bytes, offset: int, size: int, path: Path) -> bytes:
    end = offset + size + BLOCK_TRAILER_SIZE
    if offset < 0 or end > len(data) - FOOTER_SIZE:
        raise CheckpointError(f"{path}: truncated index (a block ends at byte {end}, "
                              f"the file has {len(data)} bytes)")
    block, kind = data[offset:offset + size], data[offset + size]
    stored = int.from_bytes(data[offset + size + 1:end], "little")
    if mask_crc(Crc32c().update(block).update(bytes([kind])).value) != stored:
        raise CheckpointError(f"{path}: checksum mismatch in the index block at byte {offset} (corrupted file)")
    if kind != 0:
        raise CheckpointError(f"{path}: compressed index blocks (type {kind}) are not supported")
    return block


def _block_entries(block: bytes, path: Path) -> Iterator[Tuple[bytes, bytes]]:
    what = f"{path}: index block"
    if len(block) < 4:
        raise CheckpointError(f"{what} is too short")
    n_restarts = int.from_bytes(block[-4:], "little")
    limit = len(block) - 4 - 4 * n_restarts
    if limit < 0:
        raise CheckpointError(f"{what} has a bad restart count")
    pos, key = 0, b""
    while pos < limit:
        shared, pos = _varint(block, pos, what)
        unshared, pos = _varint(block, pos, what)
        vlen, pos = _varint(block, pos, what)
        if shared > len(key) or pos + unshared + vlen > limit:
            raise CheckpointError(f"{what} has a malformed entry")
        key = key[:shared] + block[pos:pos + unshared]
        pos += unshared
        yield key, block[pos:pos + vlen]
        pos += vlen


def _table_entries(path: Path) -> Iterator[Tuple[bytes, bytes]]:
    data = path.read_bytes()
    if len(data) < FOOTER_SIZE:
        raise CheckpointError(f"{path}: truncated index ({len(data)} bytes, shorter than the 48-byte footer)")
    footer = data[-FOOTER_SIZE:]
    if int.from_bytes(footer[-8:], "little") != TABLE_MAGIC:
        raise CheckpointError(f"{path}: not a TensorFlow checkpoint index (bad magic number; truncated or foreign "
                              f"file)")
    _, _, pos = _block_handle(footer, 0, f"{path}: footer")
    index_offset, index_size, _ = _block_handle(footer, pos, f"{path}: footer")
    for _, handle in _block_entries(_read_block(data, index_offset, index_size, path), path):
        offset, size, _ = _block_handle(handle, 0, f"{path}: index entry")
        yield from _block_entries(_read_block(data, offset, size, path), path)


# ---------------------------------------------------------------------------- the checkpoint
def index_path(prefix) -> Path:
    return Path(f"{os.fspath(prefix)}.index")


def shard_path(prefix, shard: int, num_shards: int) -> Path:
    return Path(f"{os.fspath(prefix)}.data-{shard:05d}-of-{num_shards:05d}")


class TFCheckpoint(Mapping[str, TensorEntry]):
    """The entries of a V2 checkpoint, by variable name; :meth:`read` gives the arrays.

    ``TFCheckpoint("run/model.ckpt-0")`` parses and checks the index and that every shard
    exists and is long enough; tensor bytes are checked (crc32c) when read.
    """

    def __init__(self, prefix):
        self.prefix = os.fspath(prefix)
        path = index_path(prefix)
        if not path.is_file():
            raise CheckpointError(f"{path}: file not found (give the checkpoint prefix, e.g. model.ckpt-0)")
        self.index = path
        self.num_shards = 0
        self._entries: Dict[str, TensorEntry] = {}
        for key, value in _table_entries(path):
            if key == b"":
                self._parse_header(value)
            else:
                name = key.decode("utf-8", errors="replace")
                self._entries[name] = _parse_entry(name, value)
        if self.num_shards == 0:
            raise CheckpointError(f"{path}: no bundle header (not a V2 checkpoint index)")
        self._shard_sizes = self._check_shards()

    def _parse_header(self, value: bytes) -> None:
        what = f"{self.index}: header"
        endianness = 0
        for number, v in _fields(value, what):
            if number == 1:
                self.num_shards = v
            elif number == 2:
                endianness = v
        if endianness != 0:
            raise CheckpointError(f"{self.index}: big-endian checkpoints are not supported")

    def _check_shards(self) -> Dict[int, int]:
        sizes = {}
        for shard in range(self.num_shards):
            path = shard_path(self.prefix, shard, self.num_shards)
            if not path.is_file():
                raise CheckpointError(f"{path}: data shard not found ({self.num_shards} shard(s) listed in "
                                      f"{self.index.name})")
            sizes[shard] = path.stat().st_size
        for e in self._entries.values():
            if e.sliced or e.size == 0:
                continue
            if not 0 <= e.shard_id < self.num_shards:
                raise CheckpointError(f"{self.index}: {e.name} is in shard {e.shard_id} of {self.num_shards}")
            if e.offset < 0 or e.offset + e.size > sizes[e.shard_id]:
                path = shard_path(self.prefix, e.shard_id, self.num_shards)
                raise CheckpointError(f"{path}: truncated data shard ({e.name} ends at byte {e.offset + e.size}, "
                                      f"the file has {sizes[e.shard_id]} bytes)")
        return sizes

    # Mapping interface
    def __getitem__(self, name: str) -> TensorEntry:
        return self._entries[name]

    def __iter__(self):
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def read(self, name: str, verify: bool = True) -> np.ndarray:
        """The array of variable ``name`` (a copy-on-write memmap; bfloat16 upcast to float32)."""
        e = self._entries[name]
        if e.sliced:
            raise CheckpointError(f"{self.index}: {name} is a partitioned variable (not supported)")
        if e.dtype not in {v[0] for v in DTYPES.values()}:
            raise CheckpointError(f"{self.index}: {name} has dtype {e.dtype}, not a numeric tensor")
        stored = next(v[1] for v in DTYPES.values() if v[0] == e.dtype)
        count = int(np.prod(e.shape, dtype=np.int64))
        if count * stored.itemsize != e.size:
            raise CheckpointError(f"{self.index}: {name} has {e.size} bytes, expected {count * stored.itemsize} "
                                  f"for {e.dtype} {list(e.shape)}")
        path = shard_path(self.prefix, e.shard_id, self.num_shards)
        if verify:
            self._verify(e, path)
        if count == 0:
            array = np.zeros(e.shape, dtype=stored)
        else:
            array = np.memmap(path, dtype=stored, mode="c", offset=e.offset, shape=e.shape)
        if e.dtype == "bfloat16":  # the high half of a float32: exact upcast
            return (array.astype(np.uint32) << 16).view(np.float32)
        return array

    def _verify(self, e: TensorEntry, path: Path) -> None:
        crc = Crc32c()
        buf = bytearray(min(_BUFFER_BYTES, max(e.size, 1)))
        with open(path, "rb") as fh:
            fh.seek(e.offset)
            left = e.size
            while left > 0:
                n = fh.readinto(memoryview(buf)[:min(left, len(buf))])
                if n == 0:
                    raise CheckpointError(f"{path}: truncated data shard while reading {e.name}")
                crc.update(memoryview(buf)[:n])
                left -= n
        if mask_crc(crc.value) != e.crc32c:
            raise CheckpointError(f"{path}: checksum mismatch for {e.name} (corrupted file)")


def read_tf_checkpoint(prefix, weights_only: bool = True, verify: bool = True,
                       names: Optional[List[str]] = None) -> Dict[str, np.ndarray]:
    """All variables of a V2 checkpoint as NumPy arrays (memory-mapped), checksums checked.

    ``weights_only`` skips optimiser slots and counters (:func:`is_model_weight`) and tensors
    that are not numbers; ``names`` restricts the result to those variables.
    """
    ckpt = TFCheckpoint(prefix)
    wanted = names if names is not None else [
        n for n, e in ckpt.items() if not weights_only or (is_model_weight(n) and e.dtype in _NUMERIC)]
    missing = [n for n in wanted if n not in ckpt]
    if missing:
        raise CheckpointError(f"{ckpt.index}: no variable {missing[0]!r}")
    return {n: ckpt.read(n, verify=verify) for n in wanted}


_NUMERIC = {v[0] for v in DTYPES.values()}

__all__ = ["TFCheckpoint", "TensorEntry", "read_tf_checkpoint", "is_model_weight", "crc32c", "mask_crc"]
