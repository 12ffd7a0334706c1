//! Model-guided placement: what the engine model expects of the deployment under test,
//! computed once before the sweep, so that the driver can calibrate it to the measured
//! saturation and place the first rates around the capacity it then predicts. Like
//! [`CapacityBenchmarkSpec::sweep_plan`], what a spec resolves to for the driver (pure: both
//! shells call it; re-exported as `goodput::bench::model`).

use crate::sim::Setup;
use crate::sim::fleet_model::{fleet_capacity, fleet_closed_loop_rps};
use crate::sim::offline::WorkloadSpec;
use crate::workload::WorkloadManifest;
use crate::workload::schedule::{ScheduleError, SharedPrefix};
use crate::{CacheMode, CapacityBenchmarkSpec};

pub use crate::benchmark::driver::ModelPrior;

/// How the model's prediction is calibrated and used (stated in every report).
pub const PLACEMENT_RULE: &str = "model-guided placement: before the sweep, the engine model \
    of the deployment (its setup, replicas behind a round-robin router, the manifest's \
    workload and schedule) gives its capacity and, at each saturation level, the rate the \
    engine sustains as the live level measures it (the concurrency ÷ the mean end-to-end \
    latency of the requests sent after the warmup, the last ones drained); after the \
    saturation sweep, its speed is calibrated at the knee and the highest level below it that \
    met the SLOs (what the engine sustained there ÷ what the model sustains, both summed) and \
    the predicted capacity is the model's × that factor; the first two rates sit just below \
    and just above the prediction (one resolution apart), each further one beyond the sweep \
    (one resolution, then 10%, 20%, 40% and 80% steps) until a fail lies above a pass, then \
    refinement bisects. \
    Without a model or a knee, the fixed-fraction grid is used";

/// The workload of one cache mode as the model runs it: the manifest's, with the warm
/// pool's shared prefixes in warm mode; `None` for trace arrivals.
pub fn model_workload(
    spec: &CapacityBenchmarkSpec,
    manifest: &WorkloadManifest,
    cache: CacheMode,
) -> Option<WorkloadSpec> {
    let pool = &spec.experiments.warm_pool;
    Some(WorkloadSpec {
        shared_prefix: (cache == CacheMode::Warm).then_some(SharedPrefix {
            pool: pool.prefixes.max(1),
            tokens: pool.prefix_tokens,
            zipf: pool.zipf,
        }),
        ..WorkloadSpec::for_manifest(manifest)?
    })
}

/// The model's expectations for each of the spec's cache modes on `replicas` replicas of
/// `setup`: saturation levels as the spec runs them (the manifest's warmup, then the
/// level's duration), capacity bisected up to twice the best closed-loop throughput.
pub fn model_priors(
    spec: &CapacityBenchmarkSpec,
    manifest: &WorkloadManifest,
    setup: &Setup,
    replicas: u32,
) -> Result<Vec<ModelPrior>, ScheduleError> {
    let ex = &spec.experiments;
    let saturation = ex.saturation.clone().unwrap_or_default();
    let gate = manifest.gate_config();
    let mut priors = Vec::new();
    for &cache in &ex.cache_modes {
        let Some(workload) = model_workload(spec, manifest, cache) else {
            return Ok(Vec::new());
        };
        let mut saturation_rps = Vec::new();
        for &c in &saturation.concurrency {
            let rps = fleet_closed_loop_rps(
                setup,
                &workload,
                c,
                replicas,
                manifest.client.warmup_seconds,
                saturation.duration_seconds,
            )?;
            saturation_rps.push((c, rps));
        }
        let best = saturation_rps.iter().map(|l| l.1).fold(1.0, f64::max);
        let capacity_rps = fleet_capacity(setup, &workload, replicas, &gate, (0.01, 2.0 * best))?;
        priors.push(ModelPrior {
            cache,
            capacity_rps,
            saturation_rps,
        });
    }
    Ok(priors)
}
