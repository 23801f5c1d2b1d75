//! Sweeps (to be written).
