"""The wire protocol: typed, versioned messages, msgpack on the wire (docs/protocol.md).

One tagged union per channel direction, decoded by one decoder per socket:
- `ToWorker` (controller → worker) and `FromWorker` (worker → controller);
- `FromClient` (client → controller) and `ToClient` (controller → client).

All times are integer nanoseconds on the **controller's** clock, with `_ns` in their names. A
worker translates action windows to its own clock with an offset it estimates from ping/pong
round trips, and reports results back on the controller's clock, so the controller only ever sees
one clock.

Tensor payloads are `memoryview`s: decoded, they are views into the received frame (no copy);
to send, any buffer (bytes, a contiguous numpy array's memoryview) will do. An input may instead
be a `ShmRef` to bytes in shared memory, where sender and receiver share a host (cw/serve/shm.py).
"""

from __future__ import annotations

import collections
import enum
from collections.abc import Mapping

import msgspec

from cw.serve import collector
from cw.serve.shm import ShmRef

PROTOCOL_VERSION = 4  # 2: INFER inputs in one chunk per request; 3: inputs in shared memory;
# 4: a worker says it is Leaving

# An input's bytes: in the message, or in a shared-memory segment on the receiver's host.
Tensor = memoryview | ShmRef


class Status(enum.IntEnum):
    """Outcome of one action on a worker."""
    OK = 0
    TOO_EARLY = 1        # the window starts beyond the worker's horizon (clock or controller bug)
    TOO_LATE = 2         # could not start by latest_ns: never run late
    NOT_LOADED = 3       # INFER of a model whose weights are not on that GPU (or were unloaded)
    NO_PAGES = 4         # LOAD without enough free cache pages; the worker never evicts
    ALREADY_LOADED = 5
    UNKNOWN_MODEL = 6
    BAD_INPUT = 7        # wrong size or dtype, or batch larger than any compiled size
    BAD_DEVICE = 8       # no such GPU index on this worker
    BAD_WINDOW = 9       # earliest_ns > latest_ns
    RUNTIME_ERROR = 10   # the device failed while executing
    MALFORMED = 11       # a message that could not be decoded, or of an unknown type
    SHUTTING_DOWN = 12


class RequestStatus(enum.IntEnum):
    """Outcome of one client request; every request gets exactly one response."""
    OK = 0
    REJECTED = 1        # could not meet its deadline (admission control); never run late
    TIMED_OUT = 2       # ran out of time in the system (e.g. its worker left)
    UNKNOWN_MODEL = 3
    BAD_INPUT = 4       # wrong shape or dtype for the model
    BAD_SLO = 5         # SLO ≤ 0 or absurd
    ERROR = 6           # a worker or device failed
    MALFORMED = 7
    SHUTTING_DOWN = 8


# Enum `.name` goes through a descriptor: telemetry, on every request's path, looks names up here.
STATUS_NAME = {s: s.name for s in Status}
REQUEST_STATUS_NAME = {s: s.name for s in RequestStatus}


# --- controller → worker --------------------------------------------------------------------

class Action(msgspec.Struct, frozen=True, kw_only=True):
    id: int
    model: str
    gpu: int
    earliest_ns: int
    latest_ns: int
    expected_ns: int  # predicted duration, for telemetry on both sides


class Load(Action, tag="load"):
    pass


class Unload(Action, tag="unload"):
    pass


class Infer(Action, tag="infer"):
    batch_size: int       # compiled batch size to run
    n: int                # real samples in `inputs` (≤ batch_size; the rest is padding)
    # per model input: the batch's n samples (C-contiguous, the model's dtype) as one chunk per
    # request, in order: the controller sends each request's bytes as they came, uncopied, or
    # the client's shared-memory reference where the worker shares the client's host
    inputs: list[list[Tensor]]


class Pong(msgspec.Struct, frozen=True, tag="pong"):
    worker_sent_ns: int    # echoed from the Ping (worker clock)
    controller_ns: int     # controller clock when the Ping was answered


class Welcome(msgspec.Struct, frozen=True, tag="welcome"):
    worker_id: int
    worker_sent_ns: int    # echoed from Register, so that Welcome is also a clock sample
    controller_ns: int
    same_clock: bool = False  # Register's clock_domain is the controller's: the offset is 0
    lane_address: str = ""    # with same_clock: where results may go past ZeroMQ (transport.py)


class Goodbye(msgspec.Struct, frozen=True, tag="goodbye"):
    reason: str
    protocol_version: int = 0  # the controller's (0 from controllers before version 4)
    # the controller will not take this worker as it is (registering again would not help)
    refused: bool = False


ToWorker = Load | Unload | Infer | Pong | Welcome | Goodbye


# --- worker → controller --------------------------------------------------------------------

class TensorInfo(msgspec.Struct, frozen=True):
    name: str
    dtype: str
    sample_shape: list[int]
    sample_bytes: int
    index_limit: int = 0  # as the manifest's TensorSpec: values in [-limit, limit) where > 0


class ModelInfo(msgspec.Struct, frozen=True):
    model_id: str
    bundle: str
    weights_bytes: int
    pages: int
    batch_sizes: list[int]
    inputs: list[TensorInfo]
    outputs: list[TensorInfo]
    load_ns: int                 # profiled LOAD time (p99), the controller's first estimate
    exec_ns: dict[int, int]      # profiled EXEC time (p99) per compiled batch size
    estimates_from: str  # "profile" | "profile-partial" | "paper" (Table 1) | "default"


def describe_models(models: Mapping[str, ModelInfo], limit: int = 12) -> str:
    """Servable models for one line: their ids, or with thousands of copies (`--copies`), each
    bundle and its number of instances; never thousands of names."""
    if len(models) <= limit:
        return ", ".join(sorted(models)) or "none"
    per_bundle = sorted(collections.Counter(info.bundle for info in models.values()).items())
    more = f" and {len(per_bundle) - limit:,} more bundles" if len(per_bundle) > limit else ""
    return f"{len(models):,} model instances: " + ", ".join(
        f"{bundle} ×{n:,}" for bundle, n in per_bundle[:limit]) + more


def model_difference(a: ModelInfo, b: ModelInfo) -> str | None:
    """How two descriptions of one model id differ in what a request sees (inputs, outputs,
    batch sizes, weights) or in the pages the scheduler counts for it, or None: timings may
    differ, they are each worker's own."""
    if a.inputs != b.inputs:
        return f"inputs {tensors_text(a.inputs)} vs {tensors_text(b.inputs)}"
    if a.outputs != b.outputs:
        return f"outputs {tensors_text(a.outputs)} vs {tensors_text(b.outputs)}"
    if a.batch_sizes != b.batch_sizes:
        return f"batch sizes {a.batch_sizes} vs {b.batch_sizes}"
    if a.weights_bytes != b.weights_bytes:
        return f"weights of {a.weights_bytes:,} vs {b.weights_bytes:,} bytes"
    if a.pages != b.pages:  # the scheduler counts one page count per model
        return f"weights in {a.pages} vs {b.pages} pages"
    return None


def tensors_text(specs: list[TensorInfo]) -> str:
    """`input float32[3, 224, 224]` for each: a model's inputs or outputs in one line."""
    return ", ".join(f"{t.name} {t.dtype}{t.sample_shape}" for t in specs) or "none"


class DeviceDesc(msgspec.Struct, frozen=True):
    index: int
    name: str
    page_size: int
    pages: int  # page-cache pages on this device


class Register(msgspec.Struct, frozen=True, tag="register"):
    protocol_version: int
    name: str
    runtime: str          # "tvm-cuda" | "tvm-cpu" | "simulated"
    simulated: bool
    devices: list[DeviceDesc]
    models: list[ModelInfo]
    worker_ns: int
    shm_domain: str = ""  # the /dev/shm it sees (shm.shm_domain()); "" for none
    clock_domain: str = ""  # the CLOCK_MONOTONIC it reads (clock.clock_domain()); "" unknown
    result_peers: list[bytes] = []  # routing ids of its threads' own result connections
    # random, once per worker: a repeat of a registration the controller already welcomed
    # (sent again before the Welcome arrived: thousands of models take over a second to
    # register) is welcomed again, not taken for a restart that lost the worker's state
    incarnation: int = 0  # 0: unknown (every registration starts over)


class Ping(msgspec.Struct, frozen=True, tag="ping"):
    worker_sent_ns: int
    # the worker's clock translation as it stands, for the controller's metrics
    offset_ns: int = 0     # in use (0 when pinned to the same clock)
    estimate_ns: int = 0   # what the round trips alone say
    rtt_ns: int = 0        # of the sample the estimate comes from (0: none yet)


class Timing(msgspec.Struct, frozen=True):
    """One phase of an action on the controller's clock, plus its device-measured duration."""
    start_ns: int
    end_ns: int
    device_ns: int


class Result(msgspec.Struct, frozen=True, tag="result"):
    id: int
    kind: str               # "load" | "unload" | "infer"
    status: Status
    received_ns: int        # when the worker got the action
    message: str = ""
    # LOAD: [weights]; INFER: [input, exec, output]; empty when not run
    timings: list[Timing] = []
    outputs: list[memoryview] = []  # INFER: per model output, n samples
    simulated: bool = False    # produced by a simulated device (outputs are zeros)
    sent_ns: int = 0           # when the worker encoded it (0: not stamped)


class Leaving(msgspec.Struct, frozen=True, tag="leaving"):
    """A worker that stops on purpose says so after its last results, so that the controller
    re-plans at once instead of finding it unreachable or silent."""
    reason: str


FromWorker = Register | Ping | Result | Leaving


# --- client ↔ controller --------------------------------------------------------------------

class InferRequest(msgspec.Struct, frozen=True, tag="infer"):
    request_id: int        # chosen by the client, echoed in the response
    model: str
    inputs: list[Tensor]   # per model input: n samples, C-contiguous
    n: int                 # samples in this request (1 for a single request)
    slo_ns: int = 0        # 0: the controller's default SLO
    # when the caller asked, on the controller's CLOCK_MONOTONIC (a client that reads the same
    # clock: ModelsResponse.clock_domain), so that time spent waiting to be taken in counts
    # against the SLO; 0: unknown, the SLO runs from when the controller takes it in
    sent_ns: int = 0
    # how much of its latency this client saw that the controller does not: lately (the most of
    # its last 100 answers) its receipt less the answer's latency_ns, i.e. the answer's way
    # back (and for a client on another clock, the way in). With `clockwork:way-back=1` the
    # request is planned to be answered that much before its deadline (at most half its SLO
    # off). 0: none said.
    unseen_ns: int = 0


class ListModels(msgspec.Struct, frozen=True, tag="models"):
    request_id: int
    # None: every servable model; else those of these ids that are (a client about to send to
    # one model need not fetch thousands: 40,000 copies make a 12 MB answer). Older
    # controllers ignore the field and answer with all.
    only: list[str] | None = None
    # a lane this client opened on its host (ZmqDealer.open_lane): the controller sends its
    # answers there, past ZeroMQ's I/O threads, where it can reach it ("": none; older
    # controllers ignore it)
    lane_address: str = ""


FromClient = InferRequest | ListModels


class InferResponse(msgspec.Struct, frozen=True, tag="infer_response"):
    request_id: int
    status: RequestStatus
    message: str = ""
    outputs: list[memoryview] = []
    latency_ns: int = 0     # the request's send (arrival where unknown) to response sent
    batch_size: int = 0     # the compiled batch size it ran in
    simulated: bool = False  # answered by a simulated worker: outputs are zeros


class ModelsResponse(msgspec.Struct, frozen=True, tag="models_response"):
    request_id: int
    models: list[ModelInfo]
    shm_domain: str = ""  # the controller's /dev/shm: clients there may send ShmRef inputs
    scheduler: str = ""   # its policy spec (clockwork, batch-timeout:delay=5ms); "" from older
    workers: int = 0      # workers joined, and their GPUs, now (0 from older controllers)
    gpus: int = 0
    default_slo_ns: int = 0  # the SLO of a request that names none (0 from older controllers)
    max_request_bytes: int = 0  # the largest request it takes (0: older, unsaid)
    clock_domain: str = ""  # the CLOCK_MONOTONIC it reads (clock.clock_domain()); "" unsaid
    packed_frames: bool = False  # it takes several requests in one frame (`pack`; False: older)
    answer_lane: bool = False  # it sends answers to this client's lane (ListModels.lane_address)


class ErrorResponse(msgspec.Struct, frozen=True, tag="error"):
    request_id: int         # -1 when the request could not be decoded
    status: RequestStatus
    message: str


ToClient = InferResponse | ModelsResponse | ErrorResponse


# A packed frame: several messages of one direction in one frame, as a msgpack array of them.
# A message alone is a map (a tagged struct), so a frame's first byte tells the two apart. Over
# loopback TCP, ZeroMQ costs ~11 µs of CPU a message, both ends and their I/O threads together,
# against ~1.3 µs a message packed ten to a frame (docs/benchmarks.md, "packed frames"): at
# 10,000 requests a second, a fifth of a core for a request and its answer. A client packs
# what its I/O thread sends at once (once the controller says it takes packed frames,
# ModelsResponse.packed_frames), and the controller packs its answers to a client that packs.
PACKED_LEADS = frozenset((*range(0x90, 0xa0), 0xdc, 0xdd))  # msgpack array headers
PACK_MAX_MESSAGES = 64
PACK_MAX_BYTES = 64 << 10
PACK_MAX_MESSAGE_BYTES = 8 << 10  # larger messages go alone: joining would copy them again


def pack(frames: list) -> bytes:
    """Encoded messages (each under PACK_MAX_MESSAGE_BYTES, at most PACK_MAX_MESSAGES) as one
    packed frame."""
    n = len(frames)
    head = bytes((0x90 | n,)) if n < 16 else b"\xdc" + n.to_bytes(2, "big")
    return head + b"".join(frames)


class Packed(list):
    """The messages of one packed frame, in their order."""


class Codec:
    """One encoder and one decoder for one socket direction."""

    def __init__(self, union):
        self.decoder = msgspec.msgpack.Decoder(union)
        self.packed_decoder = msgspec.msgpack.Decoder(list[union])
        self.encoder = msgspec.msgpack.Encoder()

    def encode(self, msg) -> bytes:
        return self.encoder.encode(msg)

    def decode(self, data: bytes):
        """A message, or the `Packed` messages of a packed frame. Raises msgspec.DecodeError /
        ValidationError on malformed or unknown messages (one bad message in a packed frame
        fails the frame here; the transport then decodes its messages one by one)."""
        decoder = self.packed_decoder if data and data[0] in PACKED_LEADS else self.decoder
        if len(data) < collector.LARGE_MESSAGE_BYTES:
            decoded = decoder.decode(data)
        else:
            with collector.paused():  # a registration of thousands of models: no garbage made
                decoded = decoder.decode(data)
        return Packed(decoded) if decoder is self.packed_decoder else decoded
