//! The parser's tests, one real message per format (PyTorch 1.x, 2.x, oomlab's CPU budget, the
//! generic forms), with expected sizes written out in bytes; and inputs that are not OOMs or not
//! messages at all.
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

#[test]
fn a_torchscript_failure_keeps_what_the_module_raised() {
    let text = "The following operation failed in the TorchScript interpreter.\nTraceback of TorchScript, \
                serialized code (most recent call last):\n  File \"code/__torch__.py\", line 10, in forward\n    \
                ops.prim.RaiseException(\"boom\")\n\nbuiltins.RuntimeError: boom at big batch\n\
                Exception raised from run at interpreter.cpp:1 (most recent call first):\nframe #0: x";
    assert_eq!(
        headline(text),
        "The following operation failed in the TorchScript interpreter. RuntimeError: boom at big batch"
    );
    assert_eq!(headline("CPU out of memory.\nsecond line"), "CPU out of memory.");
    assert_eq!(headline(""), "");
}

/// The counting allocator's own numbers replace the message's where they are the refusal it
/// reports; another refusal's (which rounds otherwise) leaves the message's.
#[test]
fn the_allocators_exact_refusal_replaces_the_rounded_message() {
    let text = "CPU out of memory. Tried to allocate 95.37 MiB. CPU budget has a total capacity of 2.05 GiB \
                of which 3.58 MiB is free. Of the allocated memory 2.05 GiB is allocated by PyTorch, and 0 \
                bytes is reserved by PyTorch but unallocated.";
    let said = parse(text).unwrap();
    let exact = crate::ffi::Refusal {
        ordinal: 1,
        requested: 100_000_000,
        allocated: 2_202_790_204,
        cap: 2_206_539_448,
    };
    let got = said.clone().with_exact(Some(exact));
    assert_eq!(got.requested, Some(100_000_000));
    assert_eq!(got.allocated, Some(2_202_790_204));
    assert_eq!(got.reserved, Some(2_202_790_204));
    assert_eq!(got.total_capacity, Some(2_206_539_448));
    assert_eq!(got.free, Some(2_206_539_448 - 2_202_790_204));
    assert_eq!(got.device, said.device);
    let other = crate::ffi::Refusal { requested: 50_000_000, ..exact };
    assert_eq!(said.clone().with_exact(Some(other)), said, "another refusal's bytes");
    assert_eq!(said.clone().with_exact(None), said);
}
