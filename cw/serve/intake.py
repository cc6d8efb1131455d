"""What the controller checks of a client's request before the scheduler sees it: one problem
(a status and a message the client gets) or none. A bad request is answered alone; the
controller goes on serving the others."""

from __future__ import annotations

import msgspec
import numpy as np

from cw.bundle import index_problem
from cw.serve import protocol as p
from cw.serve.protocol import RequestStatus, describe_models
from cw.serve.shm import ShmError, ShmReader, ShmRef
from cw.units import format_duration_ns


def request_problem(msg: p.InferRequest, scheduler, max_slo_ns: int,
                    shm: ShmReader) -> tuple[RequestStatus, str] | None:
    """Why `msg` cannot be served: an unknown model (`scheduler.model_info`), an SLO outside
    (0, `max_slo_ns`] (0 is the controller's default), a sample count or input the model does not
    take, a shared-memory input `shm` cannot map; None when it can."""
    info = scheduler.model_info(msg.model)
    if info is None:
        # thousands of copies: a summary, not a message of a million characters
        served = scheduler.models()
        if not served:  # (a controller just started or restarted: its workers join soon)
            return RequestStatus.UNKNOWN_MODEL, (f"no model '{msg.model}': no worker serves "
                                                 "this controller yet")
        return (RequestStatus.UNKNOWN_MODEL,
                f"no model '{msg.model}' (servable: {describe_models(served)})")
    if msg.slo_ns < 0 or msg.slo_ns > max_slo_ns:
        return RequestStatus.BAD_SLO, (f"SLO {format_duration_ns(msg.slo_ns)} is not within "
                                       f"(0, {format_duration_ns(max_slo_ns)}]")
    if not 1 <= msg.n <= info.batch_sizes[-1]:
        return RequestStatus.BAD_INPUT, (f"{msg.n} samples; '{msg.model}' takes 1.."
                                         f"{info.batch_sizes[-1]} per request")
    if len(msg.inputs) != len(info.inputs):
        return RequestStatus.BAD_INPUT, (f"{len(msg.inputs)} inputs given, '{msg.model}' "
                                         f"takes {len(info.inputs)}")
    for data, spec in zip(msg.inputs, info.inputs):
        if type(data) is ShmRef:
            try:
                data = shm.view(data)  # checked here, so that a bad one fails alone
            except ShmError as e:
                return RequestStatus.BAD_INPUT, (f"input '{spec.name}': {e} (send the bytes "
                                                 "instead: Client(shared_memory=False))")
        if len(data) != msg.n * spec.sample_bytes:
            return RequestStatus.BAD_INPUT, (
                f"input '{spec.name}' has {len(data)} bytes; {msg.n} sample(s) of "
                f"{spec.dtype}{spec.sample_shape} are {msg.n * spec.sample_bytes}")
        if spec.index_limit:  # (kernels clamp such indices; an answer from clamped ones is wrong)
            problem = index_problem(spec, np.frombuffer(data, dtype=spec.dtype).reshape(
                msg.n, *spec.sample_shape))
            if problem:
                return RequestStatus.BAD_INPUT, problem
    return None


def request_id_of(raw: bytes) -> int:
    """The `request_id` of a client message that failed to decode as one (a wrong type in
    another field, say), or -1 where it has none: a client waiting on that request then hears
    why at once, instead of waiting out its timeout."""
    try:
        fields = msgspec.msgpack.decode(raw)
    except msgspec.DecodeError:
        return -1
    rid = fields.get("request_id") if isinstance(fields, dict) else None
    return rid if type(rid) is int and -2**63 <= rid < 2**63 else -1
