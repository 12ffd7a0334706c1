//! The simulated inference engine: the engine model (`goodput-model`: a replica's
//! discrete-event model `engine`, its presets `setup`, the offline what-if driver `offline`,
//! a fleet behind a router `fleet_model`) and the model served live (`goodput-sim`, as
//! `live`: replicas, the router in front of them, the fleet of both), re-exported here.

pub use goodput_model::{
    Engine, EngineStats, KvPolicy, NewRequest, PRESETS, PresetError, RequestId, Setup, Step,
    TokenEvent, apply_overrides, apply_yaml_overrides, engine, fleet_model, offline, preset,
    preset_names, resolve_preset, setup,
};
pub use goodput_sim as live;
