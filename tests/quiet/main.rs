//! The tests whose claim is about step times, which a machine busy with other tests would move:
//! `oomlab advise`'s calibration, measured on a quiet machine and on one made busy on purpose.
//! A binary of their own, so that cargo runs it before or after the suite (`tests/suite`), never
//! beside it; and inside it one test at a time ([`common::alone`]), since the busy test's load
//! would make the other's calibration busy too. The helpers are the suite's.
#[path = "../suite/common/mod.rs"]
mod common;

mod advise_busy;
mod advise_calibrated;
