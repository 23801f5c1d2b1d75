//! Command-line interface (to be written).
