#!/usr/bin/env python3
"""A byte-exact CPU memory oracle for plain eager PyTorch.

PyTorch keeps no allocator statistics on the CPU. This module compiles cpu_alloc.cpp (beside
it) into a small shared library, loads it with ctypes and installs its counting allocator as
libtorch's CPU allocator, so every CPU tensor allocated afterwards is counted to the byte, as
oomlab's own shim (src/ffi/shim.cpp) counts them from Rust:

    import cpu_memory as mem
    mem.install()
    base = mem.allocated()
    x = torch.empty(1000)            # +4000 bytes
    with mem.region("forward") as r:
        y = model(x)
    print(r.events)                  # [Event(delta=+..., live=..., serial=..., thread=..., ptr=...)]

API: install(), allocated(), peak(), reset_peak(), allocations(), events(), clear_events(),
logging(on) (a context manager that switches the event log on), region(name) (a context manager
that logs and records (name, events within it) in `regions`).

The library is built with g++ on first use into $XDG_CACHE_HOME/oomlab/cpu_alloc (or
~/.cache/oomlab/cpu_alloc when XDG_CACHE_HOME is unset), in a file named by a hash of the source,
the torch version and the flags, so an edit to cpu_alloc.cpp or another torch rebuilds it. It
reads nothing but this folder's cpu_alloc.cpp, the torch it imports (its headers and libc10) and
that cache folder.

Only tensors allocated after install() are counted; tensors that existed before keep their own
deleters and are never counted, even when they are freed later.

Run it (PYTHONPATH pointing at a torch install) to check it: `python3 cpu_memory.py`.
"""
from __future__ import annotations

import contextlib
import ctypes
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, NamedTuple

import torch  # first: the library links against the libc10 torch has loaded

SOURCE = Path(__file__).resolve().parent / "cpu_alloc.cpp"
CXXFLAGS = ["-std=c++17", "-O2", "-D_GLIBCXX_USE_CXX11_ABI=1", "-fPIC", "-shared"]


class Event(NamedTuple):
    delta: int  # +bytes for an allocation, -bytes for a free
    live: int  # live (counted) bytes right after the event
    serial: int  # the allocation's serial number; a free carries its allocation's
    thread: int  # ordinal of the thread that made the event (0: the first thread seen)
    ptr: int  # the data pointer (compare with a tensor's untyped_storage().data_ptr())


@dataclass
class Region:
    name: str
    events: list[Event] = field(default_factory=list)
    start_live: int = 0
    end_live: int = 0
    peak: int = 0  # the highest live value inside the region (start_live if nothing happened)

    @property
    def net(self) -> int:
        return self.end_live - self.start_live


_FIELDS = len(Event._fields)  # int64 fields per logged event, as in cpu_alloc.cpp's Event
regions: list[Region] = []
_lib: ctypes.CDLL | None = None


def _cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME")
    root = Path(base) if base else Path.home() / ".cache"
    return root / "oomlab" / "cpu_alloc"


def _torch_paths() -> tuple[Path, Path, Path]:
    root = Path(torch.__file__).resolve().parent
    include = root / "include"
    api_include = include / "torch" / "csrc" / "api" / "include"
    lib = root / "lib"
    if not (include / "c10" / "core" / "CPUAllocator.h").is_file():
        raise RuntimeError(
            f"cpu_memory: torch at {root} has no C++ headers (include/c10/core/CPUAllocator.h); "
            "a torch wheel with headers is needed to build the counting allocator"
        )
    return include, api_include, lib


def _build() -> Path:
    if not SOURCE.is_file():
        raise RuntimeError(f"cpu_memory: {SOURCE} is missing")
    source = SOURCE.read_bytes()
    key = hashlib.sha256(
        source + torch.__version__.encode() + " ".join(CXXFLAGS).encode()
    ).hexdigest()[:16]
    out = _cache_dir() / f"cpu_alloc-{key}.so"
    if out.is_file():
        return out
    cxx = shutil.which("g++")
    if cxx is None:
        raise RuntimeError(
            "cpu_memory: g++ is not on PATH; it is needed once to build the counting allocator "
            f"from {SOURCE} (install g++, e.g. `apt-get install g++`)"
        )
    include, api_include, lib = _torch_paths()
    out.parent.mkdir(parents=True, exist_ok=True)
    # Build into a temporary file in the same folder and rename it, so that two processes
    # building at once never load a half-written library.
    fd, tmp = tempfile.mkstemp(prefix=".cpu_alloc-", suffix=".so", dir=out.parent)
    os.close(fd)
    cmd = [
        cxx, *CXXFLAGS, "-I", str(include), "-I", str(api_include), str(SOURCE), "-o", tmp,
        f"-L{lib}", f"-Wl,-rpath,{lib}", "-lc10",
    ]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(
                f"cpu_memory: building the counting allocator failed:\n{' '.join(cmd)}\n"
                f"{proc.stderr}"
            )
        os.replace(tmp, out)
        # Builds of an earlier source are stale now (unlinking a loaded one is safe on Linux).
        for stale in out.parent.glob("cpu_alloc-*.so"):
            if stale != out:
                with contextlib.suppress(OSError):
                    stale.unlink()
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return out


def _load() -> ctypes.CDLL:
    global _lib
    if _lib is not None:
        return _lib
    lib = ctypes.CDLL(str(_build()))
    i64, c_int = ctypes.c_int64, ctypes.c_int
    for name, res, args in [
        ("oomlab_count_install", c_int, []),
        ("oomlab_count_is_active", c_int, []),
        ("oomlab_count_allocated", i64, []),
        ("oomlab_count_peak", i64, []),
        ("oomlab_count_reset_peak", None, []),
        ("oomlab_count_allocations", i64, []),
        ("oomlab_count_frees", i64, []),
        ("oomlab_count_set_logging", None, [c_int]),
        ("oomlab_count_logging", c_int, []),
        ("oomlab_count_num_events", i64, []),
        ("oomlab_count_read_events", i64, [i64, ctypes.POINTER(i64), i64]),
        ("oomlab_count_clear_events", None, []),
    ]:
        fn = getattr(lib, name)
        fn.restype = res
        fn.argtypes = args
    _lib = lib
    return lib


def install() -> None:
    """Installs the counting allocator as libtorch's CPU allocator (once)."""
    lib = _load()
    if lib.oomlab_count_install() != 0:
        raise RuntimeError("cpu_memory: installing the counting allocator failed")
    if lib.oomlab_count_is_active() != 1:
        raise RuntimeError(
            "cpu_memory: another CPU allocator with a higher priority is installed; "
            "the counting allocator is not in use"
        )


def _installed() -> ctypes.CDLL:
    if _lib is None:
        raise RuntimeError("cpu_memory: call install() first")
    return _lib


def allocated() -> int:
    """Live bytes allocated through the counting allocator."""
    return _installed().oomlab_count_allocated()


def peak() -> int:
    """The highest allocated() since install() or the last reset_peak()."""
    return _installed().oomlab_count_peak()


def reset_peak() -> None:
    """Sets peak() to allocated()."""
    _installed().oomlab_count_reset_peak()


def allocations() -> int:
    """Counted (non-zero) allocations ever made."""
    return _installed().oomlab_count_allocations()


def set_logging(on: bool) -> None:
    _installed().oomlab_count_set_logging(1 if on else 0)


def is_logging() -> bool:
    return _installed().oomlab_count_logging() == 1


def num_events() -> int:
    return _installed().oomlab_count_num_events()


def events(start: int = 0) -> list[Event]:
    """The logged events from index `start` on (logging must have been on to log any)."""
    lib = _installed()
    n = lib.oomlab_count_num_events() - start
    if n <= 0:
        return []
    buf = (ctypes.c_int64 * (_FIELDS * n))()
    got = lib.oomlab_count_read_events(start, buf, n)
    return [Event(*buf[_FIELDS * i : _FIELDS * (i + 1)]) for i in range(got)]


def clear_events() -> None:
    _installed().oomlab_count_clear_events()


@contextlib.contextmanager
def logging(on: bool = True) -> Iterator[None]:
    """Switches the event log on (or off) inside the block, restoring it after."""
    before = is_logging()
    set_logging(on)
    try:
        yield
    finally:
        set_logging(before)


@contextlib.contextmanager
def region(name: str) -> Iterator[Region]:
    """Records the events made inside the block as Region(name, events), appended to `regions`.

    The log is on inside the block; events logged before it are kept (regions nest)."""
    r = Region(name)
    start = num_events()
    r.start_live = allocated()
    try:
        with logging(True):
            yield r
    finally:
        r.events = events(start)
        r.end_live = allocated()
        r.peak = max([r.start_live] + [e.live for e in r.events])
        regions.append(r)


def format_events(evs: list[Event]) -> str:
    """One line per event: +bytes / -bytes, live after, #serial, thread."""
    return "\n".join(
        f"{'+' if e.delta > 0 else '-'}{abs(e.delta)} live={e.live} #{e.serial} t{e.thread}"
        for e in evs
    )


def _self_check() -> None:
    install()
    base = allocated()
    with region("empty(1000)") as r:
        x = torch.empty(1000)
    assert allocated() - base == 4000, allocated() - base
    assert [e.delta for e in r.events] == [4000], r.events
    with region("free") as f:
        del x
    assert allocated() == base, (allocated(), base)
    assert [e.delta for e in f.events] == [-4000], f.events
    assert f.events[0].serial == r.events[0].serial
    # Zero-byte allocations are not counted.
    n = allocations()
    z = torch.empty(0)
    assert allocations() == n and allocated() == base
    del z
    # Peak, and its reset.
    reset_peak()
    a = torch.ones(250, 4)  # 4000 bytes
    b = a + a  # 4000 more (a Python scalar, as in a * 2, would add 8 + 4 transient bytes)
    del a, b
    assert peak() - base == 8000, peak() - base
    reset_peak()
    assert peak() == allocated() == base
    # raw_allocate / raw_deallocate go through the same allocator (a bf16 matmul uses them).
    m = torch.randn(64, 64, dtype=torch.bfloat16)  # 8192 bytes
    before = allocated()
    (m @ m).sum()
    del m
    assert allocated() == before - 8192, (allocated(), before)
    print(
        f"cpu_memory self-check passed (torch {torch.__version__}): torch.empty(1000) counts "
        f"4000 bytes and freeing it returns to the baseline ({base}); zero-byte allocations "
        "are not counted; peak and reset_peak; a bf16 matmul frees all it allocates"
    )


if __name__ == "__main__":
    _self_check()
    sys.exit(0)
