//! The simulated inference engine: a discrete-event model of a continuous-batching replica
//! (`engine`), its presets (`setup`) and the offline what-if driver (`offline`).

pub mod engine;
pub mod fleet;
pub mod live;
pub mod offline;
pub mod router;
pub mod setup;

pub use engine::{Engine, EngineStats, NewRequest, RequestId, Step, TokenEvent};
pub use setup::{KvPolicy, PRESETS, Setup, apply_overrides, apply_yaml_overrides, preset};

#[cfg(test)]
mod tests;
