//! The engine model: a discrete-event model of a continuous-batching replica (`engine`), its
//! presets (`setup`), the offline what-if driver (`offline`) and a fleet of replicas behind
//! a router (`fleet_model`). Pure, like the core it builds on: the simulated engine served
//! live over HTTP is `goodput::sim::live`, which runs this model.

// The core's modules under the names the model's code has always used.
use goodput_core::{analysis, workload};

pub mod engine;
pub mod fleet_model;
pub mod offline;
pub mod setup;

pub use engine::{Engine, EngineStats, NewRequest, RequestId, Step, TokenEvent};
pub use setup::{
    KvPolicy, PRESETS, PresetError, Setup, apply_overrides, apply_yaml_overrides, preset,
    preset_names, resolve_preset,
};

#[cfg(test)]
mod tests;
