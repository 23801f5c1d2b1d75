//! Running a spec (to be written).
