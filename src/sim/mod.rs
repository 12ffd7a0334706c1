//! The simulated inference engine: a discrete-event model of a continuous-batching replica
//! (`engine`), its presets (`setup`), the offline what-if driver (`offline`), and the model
//! served live (`live`: replicas, the router in front of them, the fleet of both).

pub mod engine;
pub mod fleet_model;
pub mod live;
pub mod offline;
pub mod setup;

pub use engine::{Engine, EngineStats, NewRequest, RequestId, Step, TokenEvent};
pub use setup::{KvPolicy, PRESETS, Setup, apply_overrides, apply_yaml_overrides, preset};

#[cfg(test)]
mod tests;
