//! `goodput bench`: the whole capacity benchmark on one machine.

pub mod result;
