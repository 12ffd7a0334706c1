//! Requests → point report: per-class attainment, nearest-rank percentiles, the gate.
//!
//! Pure apart from [`read_requests_csv`], which opens the file it is given.

mod early_stop;
mod figures;
mod formulas;
mod gate;
mod littles_law;
mod queue;
mod report;
mod requests_csv;
mod statistic;
mod summary;

pub use early_stop::*;
pub use figures::{decimal, rate_label};
pub use formulas::*;
pub use gate::*;
pub use littles_law::*;
pub use queue::*;
pub use report::*;
pub use requests_csv::*;
pub use statistic::Statistic;
pub use summary::*;

#[cfg(test)]
mod tests;
