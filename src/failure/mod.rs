//! Failure tests: the analysis and the report are the core's (`goodput_core::failure`,
//! re-exported here whole); [`local`] runs a test against the simulated engine.

pub use goodput_core::failure::*;

pub mod local;
