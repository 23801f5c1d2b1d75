//! Training (to be written).
