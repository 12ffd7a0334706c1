//! `goodput propose`: a ServingPlan's replica change for a GitOps repository, with no
//! cluster. The same evidence checks, formula, edit and pull request body as the operator's
//! Propose mode, for pipelines that open pull requests with their own tooling.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context as _, Result, bail};
use clap::ValueEnum;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;

use goodput::api::parse_kind;
use goodput::api::{CapacityBenchmark, ServingPlan};
use goodput::bench::result::BenchResult;
use goodput::controller::pull_request::{edit_target, plan_hash};
use goodput::controller::serving_plan::{OfflineEvidence, offline_proposal};
use goodput::gitops::edit;
use goodput::pack::proposal::{self, Proposal};
use goodput::pack_files;
use goodput::workload::WorkloadManifest;

/// Flags of `goodput propose`.
#[derive(clap::Args)]
pub struct ProposeArgs {
    /// The ServingPlan (YAML) whose `spec.gitops` names the file and the number to change.
    #[arg(long)]
    plan: PathBuf,
    /// The repository's checkout; `spec.gitops.file` is relative to it.
    #[arg(long, default_value = ".")]
    repo: PathBuf,
    /// The CapacityBenchmark the plan's `capacity.benchmarkRef` names, with its status
    /// (`kubectl get capacitybenchmark NAME -o yaml`).
    #[arg(long)]
    benchmark: Option<PathBuf>,
    /// The capacity pack `goodput bench` wrote for the benchmark the plan's
    /// `capacity.benchmarkRef` names (its `sweep.json` and `workload-manifest.yaml`), in
    /// place of `--benchmark`.
    #[arg(long, conflicts_with = "benchmark")]
    pack: Option<PathBuf>,
    /// The peak (requests per second), replacing the plan's (needed for a Prometheus peak).
    #[arg(long)]
    peak: Option<f64>,
    /// What to print: the unified diff, the pull request's title and body (Markdown), or
    /// JSON with both and the commit message.
    #[arg(long, value_enum, default_value_t = Output::Patch)]
    output: Output,
    /// Also write the changed file in place.
    #[arg(long)]
    write: bool,
}

/// What `goodput propose` prints.
#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Output {
    Patch,
    Body,
    Json,
}

/// A capacity pack's result and frozen manifest.
fn read_pack(dir: &std::path::Path) -> Result<(BenchResult, WorkloadManifest)> {
    let sweep = dir.join(pack_files::SWEEP_JSON);
    let text = std::fs::read_to_string(&sweep).with_context(|| {
        format!(
            "reading {} (is {} a capacity pack?)",
            sweep.display(),
            dir.display()
        )
    })?;
    let result: BenchResult =
        serde_json::from_str(&text).with_context(|| format!("parsing {}", sweep.display()))?;
    let path = dir.join(pack_files::MANIFEST);
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let manifest: WorkloadManifest = serde_saphyr::from_str(&text)
        .map_err(|e| anyhow::anyhow!("parsing {}: {e}", path.display()))?;
    Ok((result, manifest))
}

/// The body limit assumed offline: GitHub's (the smaller of the two forges').
const BODY_LIMIT: usize = 65_536;

pub fn run(args: ProposeArgs) -> Result<ExitCode> {
    let text = std::fs::read_to_string(&args.plan)
        .with_context(|| format!("reading {}", args.plan.display()))?;
    let plan: ServingPlan = parse_kind(&text, "ServingPlan", true)
        .map_err(|e| anyhow::anyhow!("{}: {e}", args.plan.display()))?;
    let Some(gitops) = &plan.spec.gitops else {
        bail!(
            "{}: the plan has no spec.gitops (its file and edit say which number to change)",
            args.plan.display()
        );
    };
    let benchmark: Option<CapacityBenchmark> = match &args.benchmark {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("reading {}", path.display()))?;
            Some(
                parse_kind(&text, "CapacityBenchmark", false)
                    .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?,
            )
        }
        None => None,
    };
    let pack = match &args.pack {
        Some(dir) => Some(read_pack(dir)?),
        None => None,
    };
    let source = match (&benchmark, &pack) {
        (Some(cb), _) => OfflineEvidence::Benchmark(cb),
        (None, Some((result, manifest))) => OfflineEvidence::Pack {
            result,
            manifest,
            path: args
                .pack
                .as_ref()
                .map(|d| d.display().to_string())
                .unwrap_or_default(),
        },
        (None, None) => OfflineEvidence::None,
    };
    let offline = offline_proposal(&plan, source, args.peak, Timestamp::now())
        .map_err(|refusals| anyhow::anyhow!("no proposal: {}", refusals.join("; ")))?;

    let path = args.repo.join(&gitops.file);
    let before =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let target = edit_target(gitops, &plan.spec.target_ref);
    let edit = edit::set_replicas(&before, &target, u64::from(offline.replicas))
        .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    let diff = edit::unified_diff(&gitops.file, &before, &edit.text);

    let name = format!(
        "{}/{}",
        plan.namespace().unwrap_or_else(|| "default".into()),
        plan.name_any()
    );
    let printable = plan.spec.target_ref.printable();
    let facts = Proposal {
        plan: &name,
        target: &printable,
        file: &gitops.file,
        field: target.to_string(),
        from: edit.from.replicas,
        to: offline.replicas,
        gpus: Some(offline.gpus),
        peak_rps: offline.peak_rps,
        peak_source: Some(&offline.peak_source),
        arithmetic: &offline.arithmetic,
        evidence: Some(&offline.evidence),
        sweep: offline.sweep.iter().collect(),
        gate: offline.gate.clone(),
        diff: &diff,
        plan_hash: String::new(),
    };
    let facts = Proposal {
        plan_hash: plan_hash(&facts),
        ..facts
    };
    if args.write && edit.text != before {
        std::fs::write(&path, &edit.text).with_context(|| format!("writing {}", path.display()))?;
    }
    match args.output {
        Output::Patch if diff.is_empty() => eprintln!(
            "{} already declares {} replicas: nothing to change",
            gitops.file, offline.replicas
        ),
        Output::Patch => print!("{diff}"),
        Output::Body => {
            println!("{}\n", proposal::title(&facts));
            print!("{}", proposal::body(&facts, BODY_LIMIT));
        }
        Output::Json => {
            let out = serde_json::json!({
                "file": gitops.file,
                "from": edit.from.replicas,
                "replicas": offline.replicas,
                "gpus": offline.gpus,
                "changed": edit.text != before,
                "diff": diff,
                "title": proposal::title(&facts),
                "body": proposal::body(&facts, BODY_LIMIT),
                "commitMessage": proposal::commit_message(&gitops.commit.message_prefix, &facts),
                "arithmetic": offline.arithmetic,
                "planHash": facts.plan_hash,
            });
            println!("{}", serde_json::to_string_pretty(&out)?);
        }
    }
    Ok(ExitCode::SUCCESS)
}
