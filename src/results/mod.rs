//! Results on disk (to be written).
