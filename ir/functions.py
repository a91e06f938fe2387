# SPDX-License-Identifier: MIT
"""The one table of MORI-IR device functions.

Every function of ``libmori_shmem_device.bc`` is a row here: its Python name, argument names
and types, return type and the C++ body over ``mori/shmem/device.cuh``. From this table come
the ``extern "C"`` wrapper source (:mod:`mori.ir.codegen`), :data:`MORI_DEVICE_FUNCTIONS`
and the Triton wrappers (:mod:`mori.ir.triton`); no name is written twice.

The ABI follows MORI's: pointers are ``uint64`` addresses, functions without a result return
``int32`` 0, transfer functions take a trailing ``qp_id`` (unused: peers are reached over
NVLink P2P, there are no queue pairs). Argument types are MORI's type strings.

This module imports nothing from MORI so that the build can run it before ``mori`` exists.
"""

from __future__ import annotations

from dataclasses import dataclass

# MORI's numbering of the atomic operations (its atomic-type enum, NVSHMEM's too): the value of
# the `amo_type` argument of the generic atomics; SIGNAL_SET/SIGNAL_ADD are also the `signal_op`
# of puts with signal. The wrappers translate to device.cuh's operations; the others trap.
AMO_TYPES = {
    "AMO_ACK": 1,
    "AMO_INC": 2,
    "AMO_SET": 3,
    "AMO_ADD": 4,
    "AMO_AND": 5,
    "AMO_OR": 6,
    "AMO_XOR": 7,
    "AMO_SIGNAL": 8,
    "AMO_SIGNAL_SET": 9,
    "AMO_SIGNAL_ADD": 10,
    "AMO_FETCH": 12,
    "AMO_FETCH_INC": 13,
    "AMO_FETCH_ADD": 14,
    "AMO_FETCH_AND": 15,
    "AMO_FETCH_OR": 16,
    "AMO_FETCH_XOR": 17,
    "AMO_SWAP": 18,
    "AMO_COMPARE_SWAP": 19,
}
SIGNAL_SET = AMO_TYPES["AMO_SIGNAL_SET"]
SIGNAL_ADD = AMO_TYPES["AMO_SIGNAL_ADD"]

# ABI type -> C type. "ptr" is an address: uint64 in the ABI, a pointer in the body.
C_TYPES = {
    "int8": "int8_t",
    "uint8": "uint8_t",
    "int16": "int16_t",
    "uint16": "uint16_t",
    "int32": "int32_t",
    "uint32": "uint32_t",
    "int64": "int64_t",
    "uint64": "uint64_t",
    "float32": "float",
    "float64": "double",
    "ptr": "uint64_t",
}

# MORI's names of the element types of typed puts/gets and immediates -> ABI type.
_PUT_TYPES = {"uint32": "uint32", "uint64": "uint64", "float": "float32", "double": "float64"}
# (int_p ... ushort_p are the C names of MORI's device header: int 32-bit, long and long long 64-bit.)
_P_TYPES = {
    "int32": "int32",
    "int64": "int64",
    "uint32": "uint32",
    "uint64": "uint64",
    "float": "float32",
    "double": "float64",
    "int": "int32",
    "long": "int64",
    "longlong": "int64",
    "char": "int8",
    "short": "int16",
    "uint": "uint32",
    "ulong": "uint64",
    "ulonglong": "uint64",
    "uchar": "uint8",
    "ushort": "uint16",
}
_ATOMIC_TYPES = ("int32", "uint32", "int64", "uint64")
_GENERIC_ATOMIC_TYPES = ("uint32", "uint64", "int64")  # MORI's generic atomic_<T>_{fetch,nonfetch}_thread
_SCOPES = ("thread", "warp", "block")


@dataclass(frozen=True)
class Arg:
    name: str
    type: str  # a key of C_TYPES

    @property
    def abi(self) -> str:
        return "uint64" if self.type == "ptr" else self.type


@dataclass(frozen=True)
class DeviceFunction:
    """One device function: ``mori_shmem_<name>(args) -> ret`` whose body is C++ over device.cuh.

    In ``body``, ``S`` is the module's device state (``mori_shmem_device_state``) and ``dev``
    is ``mori::shmem::dev``; pointer arguments are uint64 and cast by the body."""

    name: str
    args: tuple[Arg, ...]
    ret: str
    body: str
    pure: bool = False
    doc: str = ""

    @property
    def symbol(self) -> str:
        return f"mori_shmem_{self.name}"

    def abi(self) -> dict:
        row = {"symbol": self.symbol, "args": [a.abi for a in self.args], "ret": self.ret}
        if self.pure:
            row["pure"] = True
        return row


def _args(spec: str) -> tuple[Arg, ...]:
    """ "dest:ptr, pe:int32" -> (Arg, ...)."""
    out = []
    for item in filter(None, (s.strip() for s in spec.split(","))):
        name, typ = item.split(":")
        if typ not in C_TYPES:
            raise ValueError(f"unknown type {typ!r} in {spec!r}")
        out.append(Arg(name, typ))
    return tuple(out)


def _table() -> list[DeviceFunction]:
    t: list[DeviceFunction] = []

    def add(name: str, args: str, ret: str, body: str, pure: bool = False, doc: str = "") -> None:
        t.append(DeviceFunction(name, _args(args), ret, body, pure, doc))

    # ---- queries
    add("my_pe", "", "int32", "return S.my_pe;", pure=True, doc="this PE's number")
    add("n_pes", "", "int32", "return S.n_pes;", pure=True, doc="number of PEs")
    add(
        "ptr_p2p",
        "dest:ptr, my_pe:int32, dest_pe:int32",
        "uint64",
        "(void)my_pe;\n  return mori_ir_peer_address(dest, dest_pe);",
        doc="symmetric `dest` as mapped for `dest_pe` on this GPU, 0 if not load/store reachable",
    )
    add(
        "ptr", "dest:ptr, dest_pe:int32", "uint64", "return mori_ir_peer_address(dest, dest_pe);", doc="same as ptr_p2p"
    )

    # ---- ordering and barriers
    add("quiet_thread", "", "int32", "dev::quiet();\n  return 0;", doc="complete this thread's puts/AMOs")
    add(
        "quiet_thread_pe",
        "pe:int32",
        "int32",
        "(void)pe;\n  dev::quiet();\n  return 0;",
        doc="complete this thread's puts/AMOs (to every PE)",
    )
    add("fence_thread", "", "int32", "dev::fence();\n  return 0;", doc="order this thread's puts/AMOs")
    add(
        "fence_thread_pe",
        "pe:int32",
        "int32",
        "(void)pe;\n  dev::fence();\n  return 0;",
        doc="order this thread's puts/AMOs (to every PE)",
    )
    add(
        "quiet_thread_pe_qp",
        "pe:int32, qp_id:int32",
        "int32",
        "(void)pe, (void)qp_id;\n  dev::quiet();\n  return 0;",
        doc="complete this thread's puts/AMOs (to every PE; no queue pairs over P2P)",
    )
    add(
        "fence_thread_pe_qp",
        "pe:int32, qp_id:int32",
        "int32",
        "(void)pe, (void)qp_id;\n  dev::fence();\n  return 0;",
        doc="order this thread's puts/AMOs (to every PE; no queue pairs over P2P)",
    )
    add(
        "barrier_all_thread",
        "",
        "int32",
        "dev::barrier_all_thread(S);\n  return 0;",
        doc="barrier over all PEs, called by one thread per PE",
    )
    add(
        "barrier_all_block",
        "",
        "int32",
        "dev::barrier_all_block(S);\n  return 0;",
        doc="barrier over all PEs, called by every thread of one block per PE",
    )

    # ---- contiguous puts and gets (nbi and blocking are the same over P2P: the source is
    # reusable on return, remote visibility comes with quiet/fence or a signal)
    for scope in _SCOPES:
        for op, call in (("putmem", "putmem"), ("getmem", "getmem")):
            for nbi in ("_nbi", ""):
                add(
                    f"{op}{nbi}_{scope}",
                    "dest:ptr, source:ptr, nbytes:uint64, pe:int32, qp_id:int32",
                    "int32",
                    f"(void)qp_id;\n  dev::{call}_{scope}(S, reinterpret_cast<void*>(dest), "
                    f"reinterpret_cast<const void*>(source), nbytes, pe);\n  return 0;",
                    doc=f"{'put' if op == 'putmem' else 'get'} `nbytes` bytes, {scope} scope",
                )
        for tname, abi in _PUT_TYPES.items():
            ctype = C_TYPES[abi]
            for op, call in (("put", "putmem"), ("get", "getmem")):
                for nbi in ("_nbi", ""):
                    add(
                        f"{op}_{tname}{nbi}_{scope}",
                        "dest:ptr, source:ptr, nelems:uint64, pe:int32, qp_id:int32",
                        "int32",
                        f"(void)qp_id;\n  dev::{call}_{scope}(S, reinterpret_cast<void*>(dest), "
                        f"reinterpret_cast<const void*>(source), nelems * sizeof({ctype}), pe);\n  return 0;",
                        doc=f"{op} `nelems` {tname} elements, {scope} scope",
                    )
        add(
            f"putmem_nbi_signal_{scope}",
            "dest:ptr, source:ptr, nbytes:uint64, signal:ptr, signal_value:uint64, signal_op:int32, pe:int32, "
            "qp_id:int32",
            "int32",
            f"(void)qp_id;\n  dev::putmem_signal_{scope}(S, reinterpret_cast<void*>(dest), "
            f"reinterpret_cast<const void*>(source), nbytes, reinterpret_cast<uint64_t*>(signal), signal_value, "
            f"mori_ir_signal_op(signal_op), pe);\n  return 0;",
            doc=f"put, then SIGNAL_SET/SIGNAL_ADD `signal` on `pe` (release), {scope} scope",
        )
    add(
        "signal_op",
        "signal:ptr, signal_value:uint64, signal_op:int32, pe:int32",
        "int32",
        "dev::signal_op(S, reinterpret_cast<uint64_t*>(signal), signal_value, mori_ir_signal_op(signal_op), pe);\n"
        "  return 0;",
        doc="SIGNAL_SET/SIGNAL_ADD `signal` on `pe` (release), after the caller's own stores",
    )
    add(
        "signal_wait_until",
        "signal:ptr, cmp:int32, value:uint64",
        "uint64",
        "return dev::signal_wait_until(S, reinterpret_cast<uint64_t*>(signal), cmp, value);",
        doc="wait (acquire) until the local signal compares true (CMP_* numbering); returns the value seen",
    )

    # ---- immediates
    add(
        "put_size_imm_nbi_thread",
        "dest:ptr, val:ptr, nbytes:uint64, pe:int32, qp_id:int32",
        "int32",
        "(void)qp_id;\n  mori_ir_put_size_imm(dest, val, nbytes, pe);\n  return 0;",
        doc="store the `nbytes` (1, 2, 4 or 8; else trap) bytes at local `val` to `dest` on `pe` as one access",
    )
    for tname, abi in _P_TYPES.items():
        ctype = C_TYPES[abi]
        add(
            f"{tname}_p",
            f"dest:ptr, value:{abi}, pe:int32, qp_id:int32",
            "int32",
            f"(void)qp_id;\n  dev::p<{ctype}>(S, reinterpret_cast<{ctype}*>(dest), value, pe);\n  return 0;",
            doc=f"store one {tname} on `pe`",
        )

    # ---- atomics (relaxed, system scope), one thread each
    for tname in _ATOMIC_TYPES:
        c = C_TYPES[tname]
        target = f"reinterpret_cast<{c}*>(dest)"
        fetch_ops = {
            "fetch_add": "atomic_fetch_add",
            "swap": "atomic_swap",
            "fetch_and": "atomic_fetch_and",
            "fetch_or": "atomic_fetch_or",
            "fetch_xor": "atomic_fetch_xor",
        }
        for op, call in fetch_ops.items():
            add(
                f"{tname}_atomic_{op}_thread",
                f"dest:ptr, value:{tname}, pe:int32, qp_id:int32",
                tname,
                f"(void)qp_id;\n  return dev::{call}<{c}>(S, {target}, value, pe);",
                doc=f"atomic {op} on `pe`, returns the old value",
            )
        for op, call in (("add", "atomic_add"), ("set", "atomic_set")):
            add(
                f"{tname}_atomic_{op}_thread",
                f"dest:ptr, value:{tname}, pe:int32, qp_id:int32",
                "int32",
                f"(void)qp_id;\n  dev::{call}<{c}>(S, {target}, value, pe);\n  return 0;",
                doc=f"atomic {op} on `pe`",
            )
        add(
            f"{tname}_atomic_fetch_thread",
            "dest:ptr, pe:int32, qp_id:int32",
            tname,
            f"(void)qp_id;\n  return dev::atomic_fetch<{c}>(S, {target}, pe);",
            doc="atomic load from `pe`",
        )
        add(
            f"{tname}_atomic_fetch_inc_thread",
            "dest:ptr, pe:int32, qp_id:int32",
            tname,
            f"(void)qp_id;\n  return dev::atomic_fetch_inc<{c}>(S, {target}, pe);",
            doc="atomic increment on `pe`, returns the old value",
        )
        add(
            f"{tname}_atomic_inc_thread",
            "dest:ptr, pe:int32, qp_id:int32",
            "int32",
            f"(void)qp_id;\n  dev::atomic_inc<{c}>(S, {target}, pe);\n  return 0;",
            doc="atomic increment on `pe`",
        )
        add(
            f"{tname}_atomic_compare_swap_thread",
            f"dest:ptr, cond:{tname}, value:{tname}, pe:int32, qp_id:int32",
            tname,
            f"(void)qp_id;\n  return dev::atomic_compare_swap<{c}>(S, {target}, cond, value, pe);",
            doc="atomic compare-and-swap on `pe`, returns the old value",
        )

    # ---- generic atomics: MORI's `amo_type` (AMO_TYPES numbering) picks the operation; a number the
    # form does not implement traps with a message (never a silent no-op or a wrong result)
    add(
        "atomic_size_nonfetch_thread",
        "dest:ptr, val:ptr, nbytes:uint64, amo_type:int32, pe:int32, qp_id:int32",
        "int32",
        "(void)qp_id;\n  mori_ir_amo_size_nonfetch(dest, val, nbytes, amo_type, pe);\n  return 0;",
        doc="non-fetching atomic `amo_type` of the `nbytes` (4 or 8; else trap) operand at local `val` on `pe`",
    )
    for tname in _GENERIC_ATOMIC_TYPES:
        c = C_TYPES[tname]
        add(
            f"atomic_{tname}_nonfetch_thread",
            f"dest:ptr, value:{tname}, amo_type:int32, pe:int32, qp_id:int32",
            "int32",
            f"(void)qp_id;\n  mori_ir_amo_nonfetch<{c}>(reinterpret_cast<{c}*>(dest), value, amo_type, pe);\n"
            "  return 0;",
            doc="non-fetching atomic `amo_type` (INC, SET, ADD, AND, OR, XOR, SIGNAL_SET, SIGNAL_ADD) on `pe`",
        )
        add(
            f"atomic_{tname}_fetch_thread",
            f"dest:ptr, value:{tname}, compare:{tname}, amo_type:int32, pe:int32, qp_id:int32",
            tname,
            f"(void)qp_id;\n  return mori_ir_amo_fetch<{c}>(reinterpret_cast<{c}*>(dest), value, compare, amo_type, "
            "pe);",
            doc="fetching atomic `amo_type` (FETCH, FETCH_INC, FETCH_ADD, FETCH_AND, FETCH_OR, FETCH_XOR, SWAP, "
            "COMPARE_SWAP with `compare`) on `pe`, returns the old value",
        )

    # ---- waits on local symmetric variables (acquire, system scope; trap after the runtime's timeout)
    for tname in _ATOMIC_TYPES:
        c = C_TYPES[tname]
        ivar = f"reinterpret_cast<{c}*>(addr)"
        add(
            f"{tname}_wait_until",
            f"addr:ptr, cmp:int32, value:{tname}",
            tname,
            f"return dev::wait_until<{c}>(S, {ivar}, cmp, value);",
            doc="wait until `*addr` compares true against `value` (CMP_* numbering); returns the value seen",
        )
        add(
            f"{tname}_wait_until_greater_than",
            f"addr:ptr, value:{tname}",
            tname,
            f"return dev::wait_until<{c}>(S, {ivar}, dev::kCmpGt, value);",
            doc="wait until `*addr` > `value`; returns the value seen",
        )
        add(
            f"{tname}_wait_until_equals",
            f"addr:ptr, value:{tname}",
            "int32",
            f"dev::wait_until<{c}>(S, {ivar}, dev::kCmpEq, value);\n  return 0;",
            doc="wait until `*addr` == `value`",
        )
    return t


DEVICE_FUNCTIONS: tuple[DeviceFunction, ...] = tuple(_table())
MORI_DEVICE_FUNCTIONS: dict[str, dict] = {f.name: f.abi() for f in DEVICE_FUNCTIONS}
if len(MORI_DEVICE_FUNCTIONS) != len(DEVICE_FUNCTIONS):
    raise RuntimeError("mori.ir: two device functions share a name")
