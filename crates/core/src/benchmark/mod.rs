//! A benchmark's pure parts, shared by both shells: the driver (`driver`: from the sweep
//! plan and the points so far to the next point, and the conclusion), the sweep's bracket
//! and spread (`sweep`), the result every pack and status is written from (`result`,
//! `sweep.json`), and the records of the simulated engine's fidelity (`calibration`,
//! `fidelity`). The shells that run the points are `goodput::bench` (local) and the
//! operator.

pub mod calibration;
pub mod driver;
pub mod fidelity;
pub mod result;
pub mod sweep;
