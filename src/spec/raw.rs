//! The spec as written: serde structs with unknown keys rejected. (To be filled in.)
