//! Out-of-memory as data: tells an OOM from other libtorch errors and parses what its message
//! says.
//!
//! A sweep grows a trial until it runs out of memory, so an OOM is an expected outcome, not a
//! crash. The allocator that refused the request already wrote down the state of the device at
//! that instant (what was asked for, what was free, what PyTorch held), and that is exactly the
//! evidence a report needs; libtorch only hands it over as text, so this module reads the text
//! back into numbers ([`OomInfo`]).
//!
//! # Formats
//!
//! Sizes in every format are PyTorch's `format_size`: `N bytes`, or two decimals of `KiB`, `MiB`
//! or `GiB`. They are converted back to bytes by multiplying by 1024^k and rounding, so they are
//! only as exact as the message (a "GiB" figure is within 5 MiB of the truth).
//!
//! **PyTorch 1.x** (CUDA caching allocator) puts everything in one parenthesised list after the
//! request, one `;`-separated field each:
//!
//! ```text
//! CUDA out of memory. Tried to allocate 8.74 GiB (GPU 0; 15.90 GiB total capacity;
//! 8.84 GiB already allocated; 6.32 GiB free; 8.86 GiB reserved in total by PyTorch)
//! ```
//!
//! `X allowed` appears before the reserved field when a memory fraction is set. Before 1.4 the
//! last field was `X cached`, which then meant reserved *minus* allocated (the cache PyTorch held
//! but had not handed out), so it is read as [`OomInfo::reserved_unallocated`].
//!
//! **PyTorch 2.x** (`c10/cuda/CUDACachingAllocator.cpp`) builds sentences from pieces, some of
//! them optional:
//!
//! ```text
//! CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total capacity of 79.19 GiB of
//! which 3.44 MiB is free. [Process 12345 has 79.17 GiB memory in use. ]* [15.90 GiB allowed; ]
//! Of the allocated memory 78.10 GiB is allocated by PyTorch, [with 200.00 MiB allocated in
//! private pools (e.g., CUDA Graphs), ]and 500.30 MiB is reserved by PyTorch but unallocated. ...
//! ```
//!
//! The process list comes from NVML, one sentence per process on the device; the entry for the
//! current process reads `Including non-PyTorch memory, this process has X memory in use.`
//! instead (inside a container PIDs differ, so the own process can show up as `Process N`).
//!
//! **oomlab's CPU budget** (the counting CPU allocator in `ffi/shim.cpp`) words its refusal
//! like 2.x on purpose, with `CPU budget` as the device, so the same parser reads both.
//!
//! Two generic forms are OOMs too but carry little: `CUDA error: out of memory` (a `cudaMalloc`
//! outside the caching allocator failed) and the stock CPU allocator's `DefaultCPUAllocator:
//! can't allocate memory: you tried to allocate N bytes.`
//!
//! Parsing is plain string scanning, field by field, each field independent of the others: a
//! field that is missing or worded differently stays `None` instead of failing the whole parse,
//! and nothing here can panic on any input.
use serde::{Deserialize, Serialize};

/// The numbers an OOM message gives, in bytes (as rounded in the message).
///
/// Every field is optional because every format leaves some out. `#[serde(default)]` so records
/// written before a field existed still load.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct OomInfo {
    /// "GPU 0", "CPU", "MPS"; `None` when the message names no device (`CUDA error: out of
    /// memory`).
    pub device: Option<String>,
    /// "Tried to allocate X".
    pub requested: Option<u64>,
    /// The device's total memory (for oomlab's CPU allocator: the budget).
    pub total_capacity: Option<u64>,
    /// Free memory on the device as the driver reported it.
    pub free: Option<u64>,
    /// The cap set by a per-process memory fraction ("X allowed").
    pub allowed: Option<u64>,
    /// Old format: "X already allocated"; 2.x: "X is allocated by PyTorch" (which already
    /// includes [`private_pools`](Self::private_pools)).
    pub allocated: Option<u64>,
    /// Old format: "X reserved in total by PyTorch" (or allocated + "X cached" before 1.4);
    /// 2.x: allocated + reserved-but-unallocated. Private pools are not added on top: 2.x counts
    /// them inside "allocated" already.
    pub reserved: Option<u64>,
    /// 2.x: "X is reserved by PyTorch but unallocated"; before 1.4: "X cached". Old 1.4+
    /// messages: reserved - allocated.
    pub reserved_unallocated: Option<u64>,
    /// 2.x with CUDA graphs: "with X allocated in private pools" (part of `allocated`).
    pub private_pools: Option<u64>,
    /// 2.x: this process's memory in use, non-PyTorch memory (CUDA context, cuBLAS workspaces)
    /// included. From "this process has X memory in use", or from "Process N has X memory in
    /// use" when that is the only process listed (then it can only be this one, under another
    /// PID namespace). With several `Process N` entries and no "this process" it is `None`: which
    /// one is ours is unknown; see [`processes_in_use`](Self::processes_in_use).
    pub process_in_use: Option<u64>,
    /// 2.x: the sum over every process the message lists, this one included, i.e. what all
    /// CUDA processes together held on the device.
    pub processes_in_use: Option<u64>,
}

impl OomInfo {
    /// The message's numbers replaced by the allocator's own, to the byte, where `exact` is the
    /// refusal this message reports: its request and allocation round to the message's (a
    /// two-decimal size is within 0.5% of the bytes, plus a unit's rounding below 1 KiB).
    /// Otherwise (another refusal, or none kept) the message's stand.
    pub fn with_exact(self, exact: Option<crate::ffi::Refusal>) -> OomInfo {
        let near =
            |rounded: Option<u64>, bytes: u64| rounded.is_some_and(|r| r.abs_diff(bytes) <= bytes / 200 + 8);
        match exact {
            Some(e) if near(self.requested, e.requested) && near(self.allocated, e.allocated) => OomInfo {
                requested: Some(e.requested),
                total_capacity: Some(e.cap),
                free: Some(e.cap.saturating_sub(e.allocated)),
                allocated: Some(e.allocated),
                // The counting allocator has no cache: what it holds is what is allocated.
                reserved: Some(e.allocated),
                ..self
            },
            _ => self,
        }
    }
}

/// Phrases that mean an allocation failed for lack of memory, lower-case.
///
/// `cuBLAS`/`cuDNN` report their own failed `cudaMalloc` as `*_STATUS_ALLOC_FAILED`, typically
/// when creating a handle on a full GPU; that is an OOM in all but wording.
const OOM_MARKERS: [&str; 4] =
    ["out of memory", "can't allocate memory", "cublas_status_alloc_failed", "cudnn_status_alloc_failed"];

/// Whether a libtorch error message reports an out-of-memory.
///
/// Looks only at the message proper (see [`clean`]), so a backtrace that happens to mention an
/// allocator cannot turn another error into an OOM.
pub fn is_oom(message: &str) -> bool {
    let head = clean(message).to_ascii_lowercase();
    OOM_MARKERS.iter().any(|marker| head.contains(marker))
}

/// Parses an OOM message; `None` when the message is not an OOM.
///
/// Accepts the message however it arrives: bare, behind `RuntimeError: ` or
/// `torch.OutOfMemoryError: `, inside tch's `Torch("...")`, with a backtrace, or wrapped over
/// several lines by a log. Fields the message does not give stay `None`.
pub fn parse(message: &str) -> Option<OomInfo> {
    if !is_oom(message) {
        return None;
    }
    // Logs wrap long lines and PyTorch itself emits double spaces; one space everywhere lets
    // every marker below be matched literally.
    let text = squash_whitespace(clean(message));
    let mut info = OomInfo { device: device(&text), requested: requested(&text), ..OomInfo::default() };
    match old_details(&text) {
        Some(details) => parse_old_details(details, &mut info),
        None => parse_sentences(&text, &mut info),
    }
    Some(info)
}

/// The message without libtorch's C++ backtrace ("Exception raised from ...").
///
/// Also cuts at an escaped `\n` (two characters), which is what the backtrace starts with when
/// the error went through `{:?}` first, as in `Torch("... \nException raised from ...")`.
pub fn clean(message: &str) -> &str {
    let cut = ["\nException raised from", "\\nException raised from"]
        .iter()
        .filter_map(|marker| message.find(marker))
        .min()
        .unwrap_or(message.len());
    message[..cut].trim()
}

/// The line a one-line report (a trial's `message`) keeps of libtorch's error: its first. A
/// failure inside the TorchScript interpreter says only that on its first line, and what the
/// module raised on its last (`builtins.RuntimeError: ...`, after the traceback): both, then.
pub fn headline(message: &str) -> String {
    let text = clean(message);
    let first = text.lines().next().unwrap_or_default().trim();
    if first.contains("failed in the TorchScript interpreter") {
        if let Some(last) = text.lines().map(str::trim).rfind(|l| !l.is_empty()).filter(|l| *l != first) {
            return format!("{first} {}", last.strip_prefix("builtins.").unwrap_or(last));
        }
    }
    first.to_string()
}

/// Bytes in a PyTorch `format_size` text: `"8.74 GiB"` → 9_384_503_542, `"123 bytes"` → 123.
///
/// The whole text must be one size (surrounding whitespace aside). Units are `bytes`, `KiB`,
/// `MiB`, `GiB` and `TiB`; decimal units (`GB`) are refused rather than guessed at.
pub fn parse_size_text(text: &str) -> Option<u64> {
    match split_size(text) {
        Some((bytes, rest)) if rest.trim().is_empty() => Some(bytes),
        _ => None,
    }
}

/// Collapses every run of whitespace (newlines included) to one space.
fn squash_whitespace(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// "GPU N" wherever the message names one (both CUDA formats, XPU too), else the device implied
/// by which allocator spoke.
fn device(text: &str) -> Option<String> {
    for (at, _) in text.match_indices("GPU ") {
        let index = leading_digits(&text[at + 4..]);
        if !index.is_empty() {
            return Some(format!("GPU {index}"));
        }
    }
    let implied =
        [("CPU out of memory", "CPU"), ("DefaultCPUAllocator", "CPU"), ("MPS backend out of memory", "MPS")];
    implied.iter().find(|(marker, _)| text.contains(marker)).map(|(_, device)| (*device).to_string())
}

/// "Tried to allocate X"; the stock CPU allocator writes it lower-case ("you tried to allocate").
fn requested(text: &str) -> Option<u64> {
    size_after(text, "Tried to allocate ").or_else(|| size_after(text, "tried to allocate "))
}

/// The inside of the 1.x parenthesised list, found by its one fixed field.
fn old_details(text: &str) -> Option<&str> {
    let capacity = text.find(" total capacity;")?;
    let open = text[..capacity].rfind('(')?;
    let close = capacity + text[capacity..].find(')')?;
    Some(&text[open + 1..close])
}

/// Reads the 1.x fields: each is "<size> <label>", in any order, unknown labels skipped (NPU
/// ports add "current active").
fn parse_old_details(details: &str, info: &mut OomInfo) {
    let mut cached = None;
    for field in details.split(';') {
        let Some((bytes, label)) = split_size(field) else {
            continue;
        };
        match label.trim() {
            "total capacity" => info.total_capacity = Some(bytes),
            "already allocated" => info.allocated = Some(bytes),
            "free" => info.free = Some(bytes),
            "allowed" => info.allowed = Some(bytes),
            "reserved in total by PyTorch" => info.reserved = Some(bytes),
            "cached" => cached = Some(bytes),
            _ => {}
        }
    }
    match (info.reserved, info.allocated, cached) {
        // 1.4+: derive the unallocated part so both formats fill the same fields.
        (Some(reserved), Some(allocated), _) => {
            info.reserved_unallocated = reserved.checked_sub(allocated);
        }
        // Before 1.4 "cached" was the unallocated part; rebuild the total from it.
        (None, allocated, Some(cached)) => {
            info.reserved_unallocated = Some(cached);
            info.reserved = allocated.and_then(|a| a.checked_add(cached));
        }
        _ => {}
    }
}

/// Reads the 2.x sentences (and oomlab's CPU message, which copies them).
fn parse_sentences(text: &str, info: &mut OomInfo) {
    if let Some((total, free)) = capacity_sentence(text) {
        info.total_capacity = Some(total);
        info.free = free;
    }
    let (own, all) = processes(text);
    info.process_in_use = own;
    info.processes_in_use = all;
    info.allowed = size_before(text, " allowed;");
    info.allocated = size_after(text, "Of the allocated memory ");
    info.private_pools = size_before(text, " allocated in private pools");
    info.reserved_unallocated = size_before(text, " is reserved by PyTorch but unallocated");
    // "allocated" already counts private pools (the allocator prints allocated + private and
    // reserved - allocated - private), so the two printed numbers add up to everything reserved.
    info.reserved = match (info.allocated, info.reserved_unallocated) {
        (Some(allocated), Some(unallocated)) => allocated.checked_add(unallocated),
        _ => None,
    };
}

/// "has a total capacity of X of which Y is free": (X, Y). PyTorch 2.1 spelled it "capacty",
/// and XPU's message stops after X.
fn capacity_sentence(text: &str) -> Option<(u64, Option<u64>)> {
    let rest = ["total capacity of ", "total capacty of "]
        .iter()
        .find_map(|marker| text.find(marker).map(|at| &text[at + marker.len()..]))?;
    let (total, rest) = split_size(rest)?;
    let free = rest.strip_prefix(" of which ").and_then(split_size).map(|(free, _)| free);
    Some((total, free))
}

/// From the NVML process sentences: (this process's use, the sum over all listed processes).
fn processes(text: &str) -> (Option<u64>, Option<u64>) {
    let own = size_after(text, "this process has ");
    let others: Vec<u64> = text
        .match_indices("Process ")
        .filter_map(|(at, marker)| other_process(&text[at + marker.len()..]))
        .collect();
    let listed = own.into_iter().chain(others.iter().copied());
    let all = listed.fold(None, |sum: Option<u64>, bytes| Some(sum.unwrap_or(0).saturating_add(bytes)));
    let own = match (own, others.as_slice()) {
        (Some(own), _) => Some(own),
        (None, [only]) => Some(*only),
        _ => None,
    };
    (own, all)
}

/// "<pid> has X memory in use" (the text after "Process "): X.
fn other_process(text: &str) -> Option<u64> {
    let pid = leading_digits(text);
    if pid.is_empty() {
        return None;
    }
    let rest = text[pid.len()..].strip_prefix(" has ")?;
    let (bytes, rest) = split_size(rest)?;
    rest.starts_with(" memory in use").then_some(bytes)
}

/// The size written right after the first `marker`.
fn size_after(text: &str, marker: &str) -> Option<u64> {
    let at = text.find(marker)?;
    split_size(&text[at + marker.len()..]).map(|(bytes, _)| bytes)
}

/// The size written right before the first `marker` ("15.90 GiB allowed;").
fn size_before(text: &str, marker: &str) -> Option<u64> {
    let before = text[..text.find(marker)?].trim_end();
    let (before, unit) = before.rsplit_once(' ')?;
    let number = before.rsplit(' ').next()?;
    size_in_bytes(number, unit)
}

/// A size at the start of `text` ("8.74 GiB (GPU 0; ..."), and the text after its unit.
fn split_size(text: &str) -> Option<(u64, &str)> {
    let text = text.trim_start();
    let number_end = text.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(text.len());
    let (number, rest) = text.split_at(number_end);
    let rest = rest.trim_start();
    let unit_end = rest.find(|c: char| !c.is_ascii_alphabetic()).unwrap_or(rest.len());
    let (unit, rest) = rest.split_at(unit_end);
    Some((size_in_bytes(number, unit)?, rest))
}

/// `number` × the unit's power of 1024, rounded; `None` for anything that is not a plain
/// non-negative decimal and a known unit.
fn size_in_bytes(number: &str, unit: &str) -> Option<u64> {
    let plain = number.chars().any(|c| c.is_ascii_digit())
        && number.chars().all(|c| c.is_ascii_digit() || c == '.')
        && number.matches('.').count() <= 1;
    if !plain {
        return None;
    }
    let scale: u64 = match unit {
        "bytes" | "byte" | "B" => 1,
        "KiB" => 1 << 10,
        "MiB" => 1 << 20,
        "GiB" => 1 << 30,
        "TiB" => 1 << 40,
        _ => return None,
    };
    // Whole byte counts can exceed f64's 53 exact bits; keep them integral.
    if let Ok(whole) = number.parse::<u64>() {
        return whole.checked_mul(scale);
    }
    let bytes = (number.parse::<f64>().ok()? * scale as f64).round();
    (bytes.is_finite() && bytes < u64::MAX as f64).then_some(bytes as u64)
}

/// The ASCII digits `text` starts with.
fn leading_digits(text: &str) -> &str {
    let end = text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len());
    &text[..end]
}

#[cfg(test)]
mod tests;
