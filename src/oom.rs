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
//! **oomlab's CPU budget** (the counting CPU allocator in `src/ffi/shim.cpp`) words its refusal
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
mod tests {
    use super::*;

    // Expected sizes are written out in bytes, computed outside this code as
    // round(x * 1024^k), so a wrong multiplier or rounding fails the test.

    /// The HSF lesson's message (PyTorch 1.x), with prefix and the later 1.x hint.
    const LESSON: &str = "RuntimeError: CUDA out of memory. Tried to allocate 8.74 GiB (GPU 0; \
        15.90 GiB total capacity; 8.84 GiB already allocated; 6.32 GiB free; 8.86 GiB reserved \
        in total by PyTorch) If reserved memory is >> allocated memory try setting \
        max_split_size_mb to avoid fragmentation.  See documentation for Memory Management and \
        PYTORCH_CUDA_ALLOC_CONF";

    const ONE_PROCESS: &str = "CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a \
        total capacity of 79.19 GiB of which 3.44 MiB is free. Process 12345 has 79.17 GiB \
        memory in use. Of the allocated memory 78.10 GiB is allocated by PyTorch, and 500.30 MiB \
        is reserved by PyTorch but unallocated. If reserved but unallocated memory is large try \
        setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See \
        documentation for Memory Management  \
        (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)";

    const CPU_BUDGET: &str = "CPU out of memory. Tried to allocate 4.00 MiB. CPU budget has a \
        total capacity of 4.95 MiB of which 976.56 KiB is free. Of the allocated memory 4.00 MiB \
        is allocated by PyTorch, and 0 bytes is reserved by PyTorch but unallocated.";

    const DEFAULT_CPU: &str = "DefaultCPUAllocator: can't allocate memory: you tried to allocate \
        123 bytes. Error code 12 (Cannot allocate memory)";

    const NOT_OOM: [&str; 3] = [
        "mat1 and mat2 shapes cannot be multiplied (32x20 and 30x5)",
        "CUDA error: an illegal memory access was encountered\nCUDA kernel errors might be \
         asynchronously reported at some other API call",
        "Expected all tensors to be on the same device, but found at least two devices, cuda:0 \
         and cpu!",
    ];

    #[test]
    fn lesson_message_old_format() {
        let expected = OomInfo {
            device: Some("GPU 0".into()),
            requested: Some(9_384_503_542),
            total_capacity: Some(17_072_495_002),
            free: Some(6_786_048_328),
            allocated: Some(9_491_877_724),
            reserved: Some(9_513_352_561),
            reserved_unallocated: Some(9_513_352_561 - 9_491_877_724),
            ..OomInfo::default()
        };
        assert!(is_oom(LESSON));
        assert_eq!(parse(LESSON), Some(expected));
    }

    #[test]
    fn old_format_without_hint_and_with_mib_free() {
        let message = "CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 10.76 GiB total \
            capacity; 9.85 GiB already allocated; 3.44 MiB free; 9.86 GiB reserved in total by \
            PyTorch)";
        let info = parse(message).unwrap();
        assert_eq!(info.requested, Some(20_971_520));
        assert_eq!(info.total_capacity, Some(11_553_462_026));
        assert_eq!(info.allocated, Some(10_576_356_966));
        assert_eq!(info.free, Some(3_607_101));
        assert_eq!(info.reserved, Some(10_587_094_385));
    }

    #[test]
    fn old_format_cached_is_the_unallocated_part() {
        let message = "RuntimeError: CUDA out of memory. Tried to allocate 8.94 GiB (GPU 0; \
            15.90 GiB total capacity; 8.94 GiB already allocated; 6.34 GiB free; 0 bytes cached)";
        let expected = OomInfo {
            device: Some("GPU 0".into()),
            requested: Some(9_599_251_907),
            total_capacity: Some(17_072_495_002),
            free: Some(6_807_523_164),
            allocated: Some(9_599_251_907),
            reserved: Some(9_599_251_907),
            reserved_unallocated: Some(0),
            ..OomInfo::default()
        };
        assert_eq!(parse(message), Some(expected));
    }

    #[test]
    fn old_format_without_reserved_and_with_allowed() {
        let no_reserved = "CUDA out of memory. Tried to allocate 2.00 MiB (GPU 1; 15.90 GiB total \
            capacity; 8.84 GiB already allocated; 6.32 GiB free)";
        let info = parse(no_reserved).unwrap();
        assert_eq!(info.device.as_deref(), Some("GPU 1"));
        assert_eq!(info.free, Some(6_786_048_328));
        assert_eq!((info.reserved, info.reserved_unallocated), (None, None));

        let allowed = "CUDA out of memory. Tried to allocate 2.00 MiB (GPU 0; 15.90 GiB total \
            capacity; 8.84 GiB already allocated; 6.32 GiB free; 8.74 GiB allowed; 8.86 GiB \
            reserved in total by PyTorch)";
        let info = parse(allowed).unwrap();
        assert_eq!(info.allowed, Some(9_384_503_542));
        assert_eq!(info.reserved, Some(9_513_352_561));
    }

    #[test]
    fn new_format_one_process() {
        let expected = OomInfo {
            device: Some("GPU 0".into()),
            requested: Some(20_971_520),
            total_capacity: Some(85_029_615_043),
            free: Some(3_607_101),
            allocated: Some(83_859_236_454),
            reserved_unallocated: Some(524_602_573),
            reserved: Some(83_859_236_454 + 524_602_573),
            process_in_use: Some(85_008_140_206),
            processes_in_use: Some(85_008_140_206),
            ..OomInfo::default()
        };
        assert_eq!(parse(ONE_PROCESS), Some(expected));
    }

    #[test]
    fn new_format_through_tch_with_backtrace() {
        // What `format!("{err:?}")` of a tch error looks like: the newline is escaped.
        let debug = format!(
            "Torch(\"{ONE_PROCESS}\\nException raised from malloc at \
             /pytorch/c10/cuda/CUDACachingAllocator.cpp:1234 (most recent call first):\\nframe #0: \
             c10::Error::Error(...)\")"
        );
        let real = format!("{ONE_PROCESS}\nException raised from malloc at x.cpp:1\nframe #0: f");
        assert_eq!(parse(&debug), parse(ONE_PROCESS));
        assert_eq!(parse(&real), parse(ONE_PROCESS));
    }

    #[test]
    fn new_format_this_process() {
        let message = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 448.00 MiB. \
            GPU 1 has a total capacity of 79.10 GiB of which 364.31 MiB is free. Including \
            non-PyTorch memory, this process has 77.26 GiB memory in use. Of the allocated memory \
            72.12 GiB is allocated by PyTorch, and 3.78 GiB is reserved by PyTorch but \
            unallocated.";
        let expected = OomInfo {
            device: Some("GPU 1".into()),
            requested: Some(469_762_048),
            total_capacity: Some(84_932_978_278),
            free: Some(382_006_723),
            allocated: Some(77_438_260_347),
            reserved_unallocated: Some(4_058_744_095),
            reserved: Some(77_438_260_347 + 4_058_744_095),
            process_in_use: Some(82_957_293_322),
            processes_in_use: Some(82_957_293_322),
            ..OomInfo::default()
        };
        assert_eq!(parse(message), Some(expected));
    }

    #[test]
    fn new_format_several_processes() {
        let others_only = "CUDA out of memory. Tried to allocate 448.00 MiB. GPU 1 has a total \
            capacty of 79.10 GiB of which 364.31 MiB is free. Process 175080 has 1.46 GiB memory \
            in use. Process 175356 has 77.26 GiB memory in use. Of the allocated memory 72.12 GiB \
            is allocated by PyTorch, and 3.78 GiB is reserved by PyTorch but unallocated.";
        let info = parse(others_only).unwrap();
        // Which PID is ours is unknown, so no own figure; the sum is still known.
        assert_eq!(info.process_in_use, None);
        assert_eq!(info.processes_in_use, Some(1_567_663_063 + 82_957_293_322));
        // 2.1's "capacty" typo still yields the capacity.
        assert_eq!(info.total_capacity, Some(84_932_978_278));

        let with_own = "CUDA out of memory. Tried to allocate 448.00 MiB. GPU 1 has a total \
            capacity of 79.10 GiB of which 364.31 MiB is free. Process 175080 has 1.46 GiB memory \
            in use. Including non-PyTorch memory, this process has 77.26 GiB memory in use. Of \
            the allocated memory 72.12 GiB is allocated by PyTorch, and 3.78 GiB is reserved by \
            PyTorch but unallocated.";
        let info = parse(with_own).unwrap();
        assert_eq!(info.process_in_use, Some(82_957_293_322));
        assert_eq!(info.processes_in_use, Some(1_567_663_063 + 82_957_293_322));
    }

    #[test]
    fn new_format_allowed() {
        let message = "CUDA out of memory. Tried to allocate 1.00 GiB. GPU 0 has a total capacity \
            of 79.19 GiB of which 17.33 GiB is free. Including non-PyTorch memory, this process \
            has 17.33 GiB memory in use. 15.90 GiB allowed; Of the allocated memory 15.90 GiB is \
            allocated by PyTorch, and 3.00 MiB is reserved by PyTorch but unallocated.";
        let expected = OomInfo {
            device: Some("GPU 0".into()),
            requested: Some(1_073_741_824),
            total_capacity: Some(85_029_615_043),
            free: Some(18_607_945_810),
            allowed: Some(17_072_495_002),
            allocated: Some(17_072_495_002),
            reserved_unallocated: Some(3_145_728),
            reserved: Some(17_072_495_002 + 3_145_728),
            process_in_use: Some(18_607_945_810),
            processes_in_use: Some(18_607_945_810),
            ..OomInfo::default()
        };
        assert_eq!(parse(message), Some(expected));
    }

    #[test]
    fn new_format_private_pools_wrapped_over_lines() {
        // As a log shows it: wrapped, with the sentences split mid-phrase.
        let message = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB.\n\
            GPU 0 has a total capacity of 79.19 GiB of which 3.44 MiB is free.\n\
            Process 12345 has 79.17 GiB memory in use.\n\
            Of the allocated memory 1.00 GiB is allocated by PyTorch, with 200.00 MiB\n\
            allocated in private pools (e.g., CUDA Graphs), and 3.00\n  MiB is reserved by\n\
            PyTorch but unallocated.";
        let info = parse(message).unwrap();
        assert_eq!(info.allocated, Some(1_073_741_824));
        assert_eq!(info.private_pools, Some(209_715_200));
        assert_eq!(info.reserved_unallocated, Some(3_145_728));
        // Private pools are inside "allocated": not added again.
        assert_eq!(info.reserved, Some(1_073_741_824 + 3_145_728));
        assert_eq!(info.process_in_use, Some(85_008_140_206));
    }

    #[test]
    fn oomlab_cpu_budget_message() {
        let expected = OomInfo {
            device: Some("CPU".into()),
            requested: Some(4_194_304),
            total_capacity: Some(5_190_451),
            free: Some(999_997),
            allocated: Some(4_194_304),
            reserved_unallocated: Some(0),
            reserved: Some(4_194_304),
            ..OomInfo::default()
        };
        assert_eq!(parse(CPU_BUDGET), Some(expected));
    }

    #[test]
    fn default_cpu_allocator_message() {
        let expected = OomInfo { device: Some("CPU".into()), requested: Some(123), ..OomInfo::default() };
        assert!(is_oom(DEFAULT_CPU));
        assert_eq!(parse(DEFAULT_CPU), Some(expected));
    }

    #[test]
    fn generic_cuda_error_out_of_memory() {
        let message = "CUDA error: out of memory\nCUDA kernel errors might be asynchronously \
            reported at some other API call, so the stacktrace below might be incorrect.";
        assert!(is_oom(message));
        assert_eq!(parse(message), Some(OomInfo::default()));
        let cublas = "CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`";
        assert!(is_oom(cublas));
    }

    #[test]
    fn other_errors_are_not_oom() {
        for message in NOT_OOM {
            assert!(!is_oom(message), "{message}");
            assert_eq!(parse(message), None, "{message}");
        }
        // An allocator named only in the backtrace does not make an OOM.
        let shape = "mat1 and mat2 shapes cannot be multiplied (32x20 and 30x5)\nException raised \
            from meta at aten/src/ATen/native/LinearAlgebra.cpp:192 (most recent call first):\n\
            frame #3: at::DefaultCPUAllocator can't allocate memory";
        assert!(!is_oom(shape));
    }

    #[test]
    fn clean_strips_backtrace() {
        let message = "CUDA out of memory. Tried to allocate 2.00 MiB.\nException raised from \
            malloc at /pytorch/c10/cuda/CUDACachingAllocator.cpp:1234 (most recent call first):\n\
            frame #0: c10::Error::Error(c10::SourceLocation, std::string) + 0x9c";
        assert_eq!(clean(message), "CUDA out of memory. Tried to allocate 2.00 MiB.");
        assert_eq!(clean("  no backtrace here \n"), "no backtrace here");
        assert_eq!(clean("a\\nException raised from b"), "a");
        assert_eq!(clean(""), "");
    }

    #[test]
    fn size_text() {
        assert_eq!(parse_size_text("8.74 GiB"), Some(9_384_503_542));
        assert_eq!(parse_size_text("976.56 KiB"), Some(999_997));
        assert_eq!(parse_size_text("0 bytes"), Some(0));
        assert_eq!(parse_size_text(" 1023 bytes "), Some(1023));
        assert_eq!(parse_size_text("2 TiB"), Some(2 << 40));
        assert_eq!(parse_size_text("18446744073709551615 bytes"), Some(u64::MAX));
        for bad in [
            "",
            "GiB",
            "1.2.3 MiB",
            "-1 MiB",
            "nan GiB",
            "inf GiB",
            "1e3 MiB",
            "5 GB",
            "8.74 GiB extra",
            "99999999999999999999 GiB",
            "18446744073709551615 KiB",
        ] {
            assert_eq!(parse_size_text(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn garbage_never_panics() {
        let samples = [
            LESSON,
            ONE_PROCESS,
            CPU_BUDGET,
            DEFAULT_CPU,
            "",
            " ",
            "out of memory",
            "Tried to allocate",
            "out of memory (GPU ; total capacity;)",
            "out of memory ) total capacity; (",
            "out of memory. Process  has . GPU  has a total capacity of",
            "out of memory. Process 1 has 5 memory in use. 1 allowed; allowed;",
            "out of memory: ünïcödé 🦀 GPU 🦀 Tried to allocate 🦀 MiB",
        ];
        for sample in samples {
            // Every prefix, cut at char boundaries: truncated messages are common in logs.
            for (end, _) in sample.char_indices().chain([(sample.len(), ' ')]) {
                let text = &sample[..end];
                let _ = (is_oom(text), parse(text), clean(text));
            }
        }
        let info = parse("out of memory (GPU ; total capacity;)").unwrap();
        assert_eq!(info, OomInfo::default());
    }

    #[test]
    fn serde_round_trip_and_old_records() {
        let info = parse(ONE_PROCESS).unwrap();
        let json = serde_json::to_string(&info).unwrap();
        assert_eq!(serde_json::from_str::<OomInfo>(&json).unwrap(), info);
        // A record from before `allowed` and friends existed still loads.
        let old: OomInfo = serde_json::from_str(r#"{"device":"GPU 0","requested":1}"#).unwrap();
        assert_eq!(old.requested, Some(1));
        assert_eq!(old.allowed, None);
    }
}
