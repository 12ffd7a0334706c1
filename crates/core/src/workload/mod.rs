//! The frozen workload manifest: types, loading, validation, and what the analyzer derives
//! from it (class cutoffs and gate thresholds).

mod cache;
pub mod hashing;
mod manifest;
pub mod schedule;
mod validate;

use std::path::{Path, PathBuf};

pub use cache::CacheMode;
pub use manifest::*;
pub use validate::{Finding, Findings, MIX_SUM_TOLERANCE, Severity, validate};

use crate::analysis::{ClassSlo, GateConfig};

/// The seed's manifest (70B-class model, three classes); also the defaults when no manifest
/// is given.
pub const SEED_MANIFEST_YAML: &str = include_str!("../../../../examples/workload-manifest.yaml");

/// Why a manifest could not be used.
#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    /// The file could not be read.
    #[error("cannot read manifest {path}: {source}")]
    Io {
        /// The manifest file.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// The YAML does not match the manifest schema.
    #[error("manifest {path}: {message}")]
    Parse {
        /// The manifest file.
        path: PathBuf,
        /// The parser's message, with line and column.
        message: String,
    },
    /// The manifest parsed but breaks a rule.
    #[error("manifest {path} is invalid:\n{}", list(.findings))]
    Invalid {
        /// The manifest file.
        path: PathBuf,
        /// Every finding (warnings included, for context).
        findings: Vec<Finding>,
    },
}

fn list(findings: &[Finding]) -> String {
    findings
        .iter()
        .map(|f| format!("  {f}"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// A manifest that parsed and passed validation, with the warnings found on the way.
#[derive(Clone, Debug)]
pub struct LoadedManifest {
    /// The manifest.
    pub manifest: WorkloadManifest,
    /// Findings of severity `Warning`.
    pub warnings: Vec<Finding>,
}

/// Parses and validates manifest YAML; `path` is used in messages only.
pub fn parse_manifest(yaml: &str, path: &Path) -> Result<LoadedManifest, ManifestError> {
    // serde_path_to_error adds the field path (`workload[1].mix`) to the parser's
    // line/column message.
    let mut field = String::new();
    let parsed = serde_saphyr::with_deserializer_from_str(yaml, |de| {
        serde_path_to_error::deserialize(de).map_err(|e| {
            field = e.path().to_string();
            e.into_inner()
        })
    });
    let manifest: WorkloadManifest = parsed.map_err(|e| ManifestError::Parse {
        path: path.to_path_buf(),
        message: if field.is_empty() || field == "." {
            e.to_string()
        } else {
            format!("field `{field}`: {e}")
        },
    })?;
    let findings = validate(&manifest);
    if findings.iter().any(|f| f.severity == Severity::Error) {
        return Err(ManifestError::Invalid {
            path: path.to_path_buf(),
            findings,
        });
    }
    Ok(LoadedManifest {
        manifest,
        warnings: findings,
    })
}

/// Reads, parses and validates a manifest file.
pub fn load_manifest(path: &Path) -> Result<LoadedManifest, ManifestError> {
    let yaml = std::fs::read_to_string(path).map_err(|source| ManifestError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    parse_manifest(&yaml, path)
}

/// The seed's manifest, parsed.
pub fn seed_manifest() -> WorkloadManifest {
    // The embedded file is checked by the `seed_manifest_parses_and_validates` test, so
    // this cannot fail in a built binary.
    parse_manifest(SEED_MANIFEST_YAML, Path::new("<built-in seed manifest>"))
        .expect("the embedded seed manifest is valid")
        .manifest
}

impl WorkloadManifest {
    /// The per-class cutoffs and gate thresholds the analyzer applies, all from the manifest.
    pub fn gate_config(&self) -> GateConfig {
        GateConfig {
            classes: self
                .workload
                .iter()
                .map(|c| ClassSlo {
                    name: c.name.clone(),
                    ttft_cutoff_ms: c.request_ttft_cutoff_ms,
                    tpot_cutoff_ms: c.request_tpot_cutoff_ms,
                })
                .collect(),
            attainment_min: self.acceptance.class_slo_attainment_min,
            min_successes_per_class: self.acceptance.min_successful_samples_per_class,
            error_rate_max: self.acceptance.error_rate_max,
            queue_trend_required: self.acceptance.queue_trend_required,
            ..GateConfig::default()
        }
    }

    /// The manifest's generated arrival process; `None` for `trace`, whose arrivals come
    /// from a recorded file.
    pub fn arrival(&self) -> Option<schedule::Arrival> {
        use schedule::Arrival;
        match self.client.arrival_pattern {
            ArrivalPattern::Poisson => Some(Arrival::Poisson),
            ArrivalPattern::Constant => Some(Arrival::Constant),
            // Validation requires a burstiness shape for gamma; 1 is Poisson.
            ArrivalPattern::Gamma => Some(Arrival::Gamma {
                shape: self.client.burstiness.unwrap_or(1.0),
            }),
            ArrivalPattern::Trace => None,
        }
    }

    /// The classes as a schedule sees them (names, mix, lengths).
    pub fn schedule_classes(&self) -> Vec<schedule::ScheduleClass> {
        self.workload
            .iter()
            .map(|w| schedule::ScheduleClass {
                name: w.name.clone(),
                mix: w.mix,
                input_tokens: w.input_tokens,
                output_tokens: w.output_tokens,
            })
            .collect()
    }

    /// Mean input tokens per request over the class mix.
    pub fn weighted_input_tokens(&self) -> f64 {
        self.workload
            .iter()
            .map(|c| c.mix * f64::from(c.input_tokens))
            .sum()
    }

    /// Mean output tokens per request over the class mix.
    pub fn weighted_output_tokens(&self) -> f64 {
        self.workload
            .iter()
            .map(|c| c.mix * f64::from(c.output_tokens))
            .sum()
    }
}

/// Exact per-class request counts for `total` requests split by `mixes` (largest-remainder
/// method). Quotas that are whole numbers up to float noise (0.7 × 22,000 is
/// 15,399.999999999998 in binary) count as whole; leftover requests go to the largest
/// remainders, ties to the earlier class (round after round, when mixes that do not quite
/// sum to 1 leave more than one per class). The counts sum to `total` whenever the mixes
/// sum to at most 1; the work is linear in the classes, whatever `total`.
pub fn stratified_counts(mixes: &[f64], total: u64) -> Vec<u64> {
    const WHOLE: f64 = 1e-6;
    let quotas: Vec<f64> = mixes.iter().map(|m| m * total as f64).collect();
    let mut counts: Vec<u64> = quotas.iter().map(|q| (q + WHOLE).floor() as u64).collect();
    // Saturating: quotas near u64::MAX can round past `total` in binary.
    let assigned = counts.iter().fold(0u64, |sum, &c| sum.saturating_add(c));
    let mut order: Vec<usize> = (0..mixes.len()).collect();
    let remainder = |i: usize| quotas[i] - counts[i] as f64;
    order.sort_by(|&a, &b| remainder(b).total_cmp(&remainder(a)).then(a.cmp(&b)));
    if order.is_empty() {
        return counts;
    }
    // Handing out the leftover one at a time in `order`, round after round, gives every
    // class `rounds` and the first `extra` one more: done in one step, as `left` can be
    // near `total` (mixes summing to 1 - 1e-9 of 10^19 requests leave 10^10).
    let left = total.saturating_sub(assigned);
    let n = order.len() as u64;
    let (rounds, extra) = (left / n, left % n);
    for (k, &i) in order.iter().enumerate() {
        // `assigned + left` is at most `total`, so no count can pass it.
        counts[i] += rounds + u64::from((k as u64) < extra);
    }
    counts
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seed_manifest_parses_and_validates() {
        let loaded = parse_manifest(SEED_MANIFEST_YAML, Path::new("seed")).unwrap();
        let m = loaded.manifest;
        assert_eq!(m.workload.len(), 3);
        assert_eq!(m.client.class_schedule_counts["long_context"], 4400);
        assert_eq!(m.engine.placement.gpus_per_replica(), Some(2));
        assert!((m.weighted_input_tokens() - 2406.4).abs() < 1e-9);
        assert!((m.weighted_output_tokens() - 243.2).abs() < 1e-9);
        let gate = m.gate_config();
        assert_eq!(gate.classes[2].name, "generation_heavy");
        assert_eq!(gate.classes[2].ttft_cutoff_ms, 800.0);
        assert_eq!(gate.min_successes_per_class, 2000);
    }

    #[test]
    fn stratified_counts_match_the_seed_and_always_sum() {
        assert_eq!(
            stratified_counts(&[0.7, 0.2, 0.1], 22_000),
            vec![15_400, 4_400, 2_200]
        );
        assert_eq!(stratified_counts(&[0.5, 0.5], 3), vec![2, 1]);
        assert_eq!(
            stratified_counts(&[1.0 / 3.0, 1.0 / 3.0, 1.0 / 3.0], 100),
            vec![34, 33, 33]
        );
        assert_eq!(stratified_counts(&[0.7, 0.2, 0.1], 0), vec![0, 0, 0]);
    }

    /// Found while writing the `manifest_yaml` fuzz target: validation computes the counts
    /// of `initial_scheduled_requests`, and a huge one made the leftover loop run ~10^10
    /// times (mixes just under 1) or the sum of the counts overflow.
    #[test]
    fn stratified_counts_of_huge_totals_are_immediate_and_never_overflow() {
        // Mixes within the validator's tolerance of 1, but under it.
        let mixes = [0.7, 0.2, 0.1 - 5e-10];
        let counts = stratified_counts(&mixes, 1 << 62);
        assert_eq!(counts.iter().sum::<u64>(), 1 << 62);
        let counts = stratified_counts(&[0.5, 0.5], u64::MAX);
        assert!(counts.iter().all(|&c| c <= u64::MAX / 2 + 1), "{counts:?}");
        // The round-robin result for small leftovers is unchanged.
        assert_eq!(stratified_counts(&[0.25, 0.25, 0.25], 10), vec![4, 3, 3]);
        assert_eq!(stratified_counts(&[0.1, 0.1], 25), vec![13, 12]);
    }

    fn seed_with(edit: impl FnOnce(&mut WorkloadManifest)) -> Vec<Finding> {
        let mut m = seed_manifest();
        edit(&mut m);
        validate(&m)
            .into_iter()
            .filter(|f| f.severity == Severity::Error)
            .collect()
    }

    fn paths(findings: &[Finding]) -> Vec<&str> {
        findings.iter().map(|f| f.path.as_str()).collect()
    }

    #[test]
    fn mutable_and_empty_revisions_are_rejected() {
        let f = seed_with(|m| {
            m.model.revision = "latest".into();
            m.engine.version = "".into();
        });
        assert_eq!(paths(&f), ["model.revision", "engine.version"]);
        assert!(f[0].message.contains("mutable"));
    }

    #[test]
    fn mixes_must_sum_to_one() {
        let f = seed_with(|m| m.workload[1].mix = 0.25);
        assert!(paths(&f).contains(&"workload"), "{f:?}");
        // Within 1e-9 is accepted (0.1 + 0.2 + 0.7 is not exactly 1 in binary).
        assert!(seed_with(|m| m.workload[1].mix = 0.2 + 5e-10).is_empty());
    }

    #[test]
    fn schedule_counts_must_sum_and_match_the_mix() {
        let f = seed_with(|m| {
            m.client
                .class_schedule_counts
                .insert("interactive".into(), 15_300);
        });
        assert_eq!(paths(&f), ["client.class_schedule_counts"]);
        let f = seed_with(|m| {
            m.client
                .class_schedule_counts
                .insert("interactive".into(), 15_300);
            m.client
                .class_schedule_counts
                .insert("long_context".into(), 4_500);
        });
        assert_eq!(
            paths(&f),
            [
                "client.class_schedule_counts.interactive",
                "client.class_schedule_counts.long_context"
            ]
        );
        let f = seed_with(|m| {
            m.client.class_schedule_counts.remove("generation_heavy");
        });
        assert!(paths(&f).contains(&"client.class_schedule_counts.generation_heavy"));
    }

    /// Found with the `manifest_yaml` fuzz target: counts whose sum passes u64::MAX panicked
    /// (overflow) in validation instead of being reported.
    #[test]
    fn schedule_counts_summing_past_u64_are_a_finding() {
        let yaml =
            SEED_MANIFEST_YAML.replace("interactive: 15400,", "interactive: 18446744073709551615,");
        let Err(ManifestError::Invalid { findings, .. }) =
            parse_manifest(&yaml, Path::new("m.yaml"))
        else {
            panic!("the manifest must be invalid");
        };
        let f = findings
            .iter()
            .find(|f| f.path == "client.class_schedule_counts")
            .expect("a finding about the counts");
        assert!(f.message.contains("18446744073709558215"), "{f}");
        // A huge total with consistent counts is judged at once (no per-request work), and
        // refused only for its size: a schedule block is built in memory.
        let yaml = SEED_MANIFEST_YAML
            .replace("22000", "2200000000000000000")
            .replace(
                "{interactive: 15400, long_context: 4400, generation_heavy: 2200}",
                "{interactive: 1540000000000000000, long_context: 440000000000000000, \
                 generation_heavy: 220000000000000000}",
            );
        let Err(ManifestError::Invalid { findings, .. }) =
            parse_manifest(&yaml, Path::new("m.yaml"))
        else {
            panic!("a schedule block of 2.2e18 requests must be refused");
        };
        assert_eq!(paths(&findings), ["client.initial_scheduled_requests"]);
        assert!(
            findings[0].message.contains("limit of 1000000"),
            "{}",
            findings[0]
        );
        // The limit itself is accepted.
        let yaml = SEED_MANIFEST_YAML.replace("22000", "1000000").replace(
            "{interactive: 15400, long_context: 4400, generation_heavy: 2200}",
            "{interactive: 700000, long_context: 200000, generation_heavy: 100000}",
        );
        assert!(parse_manifest(&yaml, Path::new("m.yaml")).is_ok());
    }

    #[test]
    fn cutoffs_and_thresholds_must_be_in_range() {
        let f = seed_with(|m| {
            m.workload[0].request_ttft_cutoff_ms = 0.0;
            m.workload[2].request_tpot_cutoff_ms = f64::NAN;
            m.acceptance.class_slo_attainment_min = 1.5;
            m.acceptance.error_rate_max = -0.1;
            m.acceptance.target_utilization = 0.0;
        });
        assert_eq!(
            paths(&f),
            [
                "workload[0].request_ttft_cutoff_ms",
                "workload[2].request_tpot_cutoff_ms",
                "acceptance.class_slo_attainment_min",
                "acceptance.error_rate_max",
                "acceptance.target_utilization",
            ]
        );
    }

    #[test]
    fn parse_errors_name_the_field() {
        let bad = SEED_MANIFEST_YAML.replace("mix: 0.20", "mix: lots");
        let err = parse_manifest(&bad, Path::new("m.yaml")).unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains("m.yaml"), "{msg}");
        assert!(msg.contains("line"), "{msg}");
        assert!(msg.contains("field `workload[1].mix`"), "{msg}");

        let bad = SEED_MANIFEST_YAML.replace("model:", "modle:");
        let msg = parse_manifest(&bad, Path::new("m.yaml"))
            .unwrap_err()
            .to_string();
        assert!(msg.contains("modle"), "{msg}");
    }
}
