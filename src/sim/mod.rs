//! The simulated inference engine: the engine model (`goodput-model`: a replica's
//! discrete-event model `engine`, its presets `setup`, the offline what-if driver `offline`,
//! a fleet behind a router `fleet_model`), re-exported here, and the model served live
//! (`live`: replicas, the router in front of them, the fleet of both).

pub use goodput_model::{
    Engine, EngineStats, KvPolicy, NewRequest, PRESETS, RequestId, Setup, Step, TokenEvent,
    apply_overrides, apply_yaml_overrides, engine, fleet_model, offline, preset, setup,
};

pub mod live;
