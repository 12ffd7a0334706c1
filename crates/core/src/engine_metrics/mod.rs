//! An engine's Prometheus page as goodput reads it: the text format (`parse`), the engines'
//! metric names by concept (`profile`), the series a point scraped (`series`), what they
//! say about the point (`findings`) and whether the client and the engine counted it alike
//! (`truth`). Scraping and discovery are IO and live in `goodput::engine_metrics`.

pub mod findings;
pub mod parse;
pub mod profile;
pub mod series;
pub mod truth;

pub use parse::{Exposition, MetricType, Sample, parse};
pub use profile::{
    CacheResetCall, Concept, ContainerArgs, DetectedProfile, EngineDescriptor, EngineKind,
    MetricKind, Profile, detect,
};
pub use series::{Across, Coverage, MetricsSeries, ScrapeSample};
