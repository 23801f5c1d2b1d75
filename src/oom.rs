//! Out-of-memory as data: tells an OOM from other libtorch errors and parses what its message
//! says. (To be filled in.)
use serde::{Deserialize, Serialize};

/// The numbers an OOM message gives, in bytes (as rounded in the message).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct OomInfo {
    /// "GPU 0", "CPU".
    pub device: Option<String>,
    /// "Tried to allocate X".
    pub requested: Option<u64>,
    pub total_capacity: Option<u64>,
    pub free: Option<u64>,
    /// Old format: "X already allocated"; 2.x: "X is allocated by PyTorch".
    pub allocated: Option<u64>,
    /// Old format: "X reserved in total by PyTorch"; 2.x: allocated + reserved-but-unallocated.
    pub reserved: Option<u64>,
    /// 2.x: "X is reserved by PyTorch but unallocated".
    pub reserved_unallocated: Option<u64>,
    /// 2.x: "this process has X memory in use" / "Process N has X memory in use".
    pub process_in_use: Option<u64>,
}

/// Whether a libtorch error message reports an out-of-memory.
pub fn is_oom(message: &str) -> bool {
    message.contains("out of memory")
}

/// Parses an OOM message; `None` when the message is not an OOM.
pub fn parse(message: &str) -> Option<OomInfo> {
    is_oom(message).then(OomInfo::default)
}

/// The message without libtorch's C++ backtrace ("Exception raised from ...").
pub fn clean(message: &str) -> &str {
    message.split("\nException raised from").next().unwrap_or(message).trim()
}
