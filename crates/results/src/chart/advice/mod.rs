//! `advice.png`: every option `oomlab advise` weighed, its predicted peak across and its
//! predicted step time up, the budget as a line, those that fit filled, the spec as written
//! and the options the advice names labelled. Data ([`data`]) apart from drawing ([`draw`]).
mod data;
mod draw;
#[cfg(test)]
mod tests;

pub use data::{AdviceChart, AdvicePoint, Mark};
