//! `ServingPlan`: how many replicas a workload needs for its peak, from measured capacity
//! at a target utilization, proposed or applied, checked against what the workload runs,
//! and revalidated on the new topology after it scales.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::core::Duration;
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{CacheMode, ServiceTarget, WorkloadSource};

/// A serving plan: replicas for a forecast peak from measured capacity.
// Clippy reads the columns' repeated `type_ = "..."` as one attribute given twice: they are
// arguments of different `printcolumn(...)` entries.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Clone, Debug, PartialEq, Serialize, Deserialize, KubeSchema)]
#[kube(
    group = "goodput.dev",
    version = "v1alpha1",
    kind = "ServingPlan",
    plural = "servingplans",
    shortname = "sp",
    namespaced,
    status = "ServingPlanStatus",
    doc = "ServingPlan sizes a workload for its forecast peak from measured capacity: \
           required replicas = ceil(peak / (capacity per replica × target utilization)), \
           clamped to min/max with a scale-down cooldown. The capacity comes from a \
           CapacityBenchmark whose frozen manifest must match what the workload runs \
           (model revision, engine version, TP size, class mix), else the plan is refused. \
           In Propose mode the status carries the proposal and its arithmetic; in Apply \
           mode the workload's /scale (or its HPA's or KEDA ScaledObject's minimum) is set. \
           After the workload reaches a new replica count the plan benchmarks the new \
           topology and records Verified with the scaling efficiency.",
    printcolumn(
        name = "Target",
        type_ = "string",
        json_path = ".status.target",
        description = "The workload sized"
    ),
    printcolumn(
        name = "Peak",
        type_ = "number",
        json_path = ".status.peakRps",
        description = "Forecast peak (RPS)"
    ),
    printcolumn(
        name = "Cap/Replica",
        type_ = "number",
        json_path = ".status.capacityPerReplicaRps",
        description = "Measured capacity per replica (RPS)"
    ),
    printcolumn(
        name = "Current",
        type_ = "integer",
        json_path = ".status.currentReplicas",
        description = "Replicas the workload asks for now"
    ),
    printcolumn(
        name = "Proposed",
        type_ = "integer",
        json_path = ".status.proposedReplicas",
        description = "Replicas the plan proposes"
    ),
    printcolumn(
        name = "GPUs",
        type_ = "integer",
        json_path = ".status.proposedGpus",
        description = "GPUs of the proposed replicas"
    ),
    printcolumn(
        name = "Mode",
        type_ = "string",
        json_path = ".spec.mode",
        description = "Propose or Apply"
    ),
    printcolumn(
        name = "PR",
        type_ = "string",
        json_path = ".status.pullRequest.url",
        description = "The pull request carrying the proposal (spec.gitops)",
        priority = 1
    ),
    printcolumn(
        name = "Verified",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Verified\")].status",
        description = "The new topology passed at the peak"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[x_kube(validation = Rule::new("!has(self.maxReplicas) || self.maxReplicas >= self.minReplicas")
    .message("maxReplicas must be at least minReplicas"))]
#[serde(rename_all = "camelCase")]
pub struct ServingPlanSpec {
    /// The workload to size: any kind with a `/scale` subresource (Deployment,
    /// StatefulSet, LeaderWorkerSet, Argo Rollout, ...), in the plan's namespace.
    pub target_ref: ScaleTargetRef,
    /// Where the capacity per replica comes from.
    pub capacity: CapacitySource,
    /// The forecast peak arrival rate.
    pub peak: PeakSource,
    /// Fraction of measured capacity each replica is planned to carry (0.75 keeps 25%
    /// headroom).
    #[serde(default = "default_utilization")]
    #[schemars(range(min = 0.01, max = 1.0))]
    pub target_utilization: f64,
    /// GPUs per replica (TP × PP), for the GPU count. Default: the benchmark's, else 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub gpus_per_replica: Option<u32>,
    /// The fewest replicas the plan proposes.
    #[serde(default = "one")]
    #[schemars(range(min = 1))]
    pub min_replicas: u32,
    /// The most replicas the plan proposes. Absent: no limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_replicas: Option<u32>,
    /// `Propose` (default): the status carries the proposal. `Apply`: the plan also sets
    /// the workload's replicas.
    #[serde(default)]
    pub mode: PlanMode,
    /// When a lower proposal may replace a higher one.
    #[serde(default)]
    pub scale_down: ScaleDown,
    /// Evidence older than this (since the benchmark became Ready) is refused, e.g.
    /// `720h`. Absent: evidence does not expire.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub evidence_max_age: Option<Duration>,
    /// Benchmarking the workload again after it scales.
    #[serde(default)]
    pub revalidation: Revalidation,
    /// Propose mode through Git: the proposal as one pull request on the repository the
    /// workload is deployed from (a direct write would be reverted by the next sync).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gitops: Option<GitOps>,
}

/// Where the workload's replica count is declared in Git, and how to propose a change to
/// it: one branch (`goodput/<plan>`) with one commit that changes exactly that number, and
/// one pull request (GitHub) or merge request (GitLab) carrying the evidence.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GitOps {
    /// Clone URL: `https://github.com/acme/manifests.git`, `ssh://git@gitlab.example.com/g/r.git`,
    /// `git@github.com:acme/manifests.git`.
    pub repo: String,
    /// A Secret in the plan's namespace with the credentials: `token` (or `username` and
    /// `password`) for HTTPS and the forge API; or `sshPrivateKey` and `knownHosts` for SSH
    /// (with `token` for the forge API); or a GitHub App's `githubAppID`,
    /// `githubAppPrivateKey` and optionally `githubAppInstallationID`. `signingKey`, an SSH
    /// private key, signs the commits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credentials_secret: Option<String>,
    /// The branch the pull request merges into (the one the GitOps tool syncs).
    #[serde(default = "default_base")]
    pub base: String,
    /// The YAML file that declares the replicas, relative to the repository root.
    pub file: String,
    /// Which number in the file. Default: `spec.replicas` of the document whose kind and
    /// name are the plan's `targetRef`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub edit: Option<ReplicaField>,
    /// The branch carrying the change. Default: `goodput/<plan name>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub branch: Option<String>,
    /// Reviewers requested on the pull request (GitHub users, or `org/team`; GitLab users).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reviewers: Vec<String>,
    /// Labels put on the pull request.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub labels: Vec<String>,
    /// Users assigned to the pull request.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub assignees: Vec<String>,
    /// The forge, when the clone URL does not say it (a self-hosted GitHub Enterprise or
    /// GitLab). Default: from the host (`github.com`, `gitlab.com`, or a host naming gitlab).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forge: Option<ForgeRef>,
    /// The commit's author and message.
    #[serde(default)]
    pub commit: CommitSettings,
    /// Compute the edit and show its diff in the status; push nothing, open nothing.
    #[serde(default)]
    pub dry_run: bool,
    /// How often an unchanged proposal's pull request is looked at again (was it merged,
    /// closed, pushed to?). A changed proposal is pushed at once.
    #[serde(default = "default_recheck")]
    pub recheck: Duration,
}

fn default_recheck() -> Duration {
    std::time::Duration::from_secs(300).into()
}

fn default_base() -> String {
    "main".to_owned()
}

/// Which replica number in the file: exactly one of the fields.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, KubeSchema)]
#[x_kube(validation = Rule::new(
    "(has(self.deployment) ? 1 : 0) + (has(self.statefulSet) ? 1 : 0) + \
     (has(self.leaderWorkerSet) ? 1 : 0) + (has(self.helmValues) ? 1 : 0) + \
     (has(self.kustomizeReplicas) ? 1 : 0) == 1"
).message("give exactly one of deployment, statefulSet, leaderWorkerSet, helmValues and kustomizeReplicas"))]
#[serde(rename_all = "camelCase")]
pub struct ReplicaField {
    /// `spec.replicas` of the Deployment with this name (in a file of several documents).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deployment: Option<String>,
    /// `spec.replicas` of the StatefulSet with this name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stateful_set: Option<String>,
    /// `spec.replicas` of the LeaderWorkerSet with this name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leader_worker_set: Option<String>,
    /// A dotted key path in a Helm values file, e.g. `vllm.replicaCount`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub helm_values: Option<String>,
    /// The `count` of the Kustomize `replicas:` entry with this name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kustomize_replicas: Option<String>,
}

/// The forge hosting the repository.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ForgeRef {
    /// `GitHub` or `GitLab`.
    pub kind: ForgeName,
    /// The API base URL, e.g. `https://github.example.com/api/v3` or
    /// `https://gitlab.example.com/api/v4`. Default: the forge's public API for the host.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_url: Option<String>,
    /// The project path (`owner/name`, `group/sub/name`) when the clone URL does not end in it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub project: Option<String>,
}

/// A forge.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum ForgeName {
    /// GitHub or GitHub Enterprise Server (pull requests).
    GitHub,
    /// GitLab (merge requests).
    GitLab,
}

/// The commit that changes the replicas.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(default, rename_all = "camelCase")]
pub struct CommitSettings {
    /// Author and committer name.
    pub author_name: String,
    /// Author and committer email.
    pub author_email: String,
    /// The subject's type and scope (Conventional Commits): the subject is
    /// `<prefix>: scale <kind>/<name> from 4 to 8 replicas`.
    pub message_prefix: String,
}

impl Default for CommitSettings {
    fn default() -> Self {
        CommitSettings {
            author_name: "goodput".to_owned(),
            author_email: "goodput@noreply.goodput.dev".to_owned(),
            message_prefix: "chore(capacity)".to_owned(),
        }
    }
}

fn default_utilization() -> f64 {
    0.75
}

fn one() -> u32 {
    1
}

/// A workload with a `/scale` subresource.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ScaleTargetRef {
    /// API group and version, e.g. `apps/v1`.
    pub api_version: String,
    /// Kind, e.g. `Deployment`.
    pub kind: String,
    /// Name, in the plan's namespace.
    pub name: String,
}

impl ScaleTargetRef {
    /// `deployment/qwen-7b`, as `kubectl` names it.
    pub fn printable(&self) -> String {
        format!("{}/{}", self.kind.to_lowercase(), self.name)
    }

    /// The API group (empty for the core group).
    pub fn group(&self) -> &str {
        self.api_version
            .rsplit_once('/')
            .map_or("", |(group, _)| group)
    }
}

/// Where the capacity per replica comes from: exactly one of `benchmarkRef` and
/// `perReplicaRps`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, KubeSchema)]
#[x_kube(
    validation = Rule::new("has(self.benchmarkRef) != has(self.perReplicaRps)")
        .message("give exactly one of benchmarkRef and perReplicaRps"),
    validation = Rule::new("!has(self.perReplicaRps) || (has(self.reason) && size(self.reason) > 0)")
        .message("a typed-in perReplicaRps needs a reason")
)]
#[serde(rename_all = "camelCase")]
pub struct CapacitySource {
    /// A CapacityBenchmark in the plan's namespace whose measured capacity is the evidence.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub benchmark_ref: Option<BenchmarkRef>,
    /// A capacity per replica typed in (requests per second), not measured here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub per_replica_rps: Option<f64>,
    /// Why a typed-in capacity is trusted (required with `perReplicaRps`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// A CapacityBenchmark and which of its cache modes to plan with.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BenchmarkRef {
    /// The CapacityBenchmark's name.
    pub name: String,
    /// The cache mode whose capacity to use. Default: the lowest capacity among the modes
    /// the benchmark ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_mode: Option<CacheMode>,
}

/// The forecast peak: exactly one of `rps` and `prometheus`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, KubeSchema)]
#[x_kube(validation = Rule::new("has(self.rps) != has(self.prometheus)")
    .message("give exactly one of rps and prometheus"))]
#[serde(rename_all = "camelCase")]
pub struct PeakSource {
    /// A static peak arrival rate (requests per second).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rps: Option<f64>,
    /// A peak read from Prometheus: a request-rate query over a lookback window, reduced
    /// by a quantile, times a growth factor.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prometheus: Option<PrometheusPeak>,
}

/// A peak from a PromQL request-rate query.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PrometheusPeak {
    /// Base URL of the Prometheus HTTP API, e.g. `http://prometheus.monitoring:9090`.
    pub url: String,
    /// A PromQL expression giving requests per second, e.g.
    /// `sum(rate(vllm:request_success_total{namespace="llm"}[5m]))`. Several series are
    /// summed per timestamp.
    pub query: String,
    /// How far back to look, e.g. `336h` (14 days).
    #[serde(default = "default_lookback")]
    pub lookback: Duration,
    /// Resolution of the range query, e.g. `5m`.
    #[serde(default = "default_step")]
    pub step: Duration,
    /// Which quantile of the samples is the peak (0.99: the P99 of the window's rates).
    #[serde(default = "default_quantile")]
    #[schemars(range(min = 0.0, max = 1.0))]
    pub quantile: f64,
    /// The peak is the quantile times this (1.2: plan for 20% growth).
    #[serde(default = "default_growth")]
    #[schemars(range(min = 0.0))]
    pub growth_factor: f64,
    /// How long the query may take.
    #[serde(default = "default_query_timeout")]
    pub timeout: Duration,
    /// How often the peak is read again.
    #[serde(default = "default_refresh")]
    pub refresh: Duration,
}

fn default_lookback() -> Duration {
    std::time::Duration::from_secs(14 * 24 * 3600).into()
}

fn default_step() -> Duration {
    std::time::Duration::from_secs(300).into()
}

fn default_quantile() -> f64 {
    0.99
}

fn default_growth() -> f64 {
    1.0
}

fn default_query_timeout() -> Duration {
    std::time::Duration::from_secs(30).into()
}

fn default_refresh() -> Duration {
    std::time::Duration::from_secs(300).into()
}

/// Whether the plan only proposes or also applies.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum PlanMode {
    /// The status carries the proposal; nothing is changed.
    #[default]
    Propose,
    /// The workload's replicas are set to the proposal (through its `/scale`, or its
    /// autoscaler's minimum when one manages it).
    Apply,
}

/// When a lower proposal may replace a higher one (scaling up is never delayed).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(default, rename_all = "camelCase")]
pub struct ScaleDown {
    /// A lower proposal takes effect only once every requirement computed during this
    /// window is at or below it (the highest of the window wins), so a peak oscillating
    /// around a boundary does not flap the proposal.
    pub cooldown: Duration,
    /// The smallest reduction worth making, in replicas: a lower requirement within this
    /// of the proposal keeps the proposal.
    #[schemars(range(min = 1))]
    pub min_step: u32,
}

impl Default for ScaleDown {
    fn default() -> Self {
        ScaleDown {
            cooldown: std::time::Duration::from_secs(900).into(),
            min_step: 1,
        }
    }
}

/// Benchmarking the workload again after it reaches a new replica count (or runs another
/// engine version or model revision): the peak and the expected fleet capacity, with the
/// same class mix and acceptance.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(default, rename_all = "camelCase")]
pub struct Revalidation {
    /// Run it. Default: true.
    pub enabled: bool,
    /// The workload manifest to send. Default: the referenced benchmark's (required with a
    /// typed-in capacity).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub workload: Option<WorkloadSource>,
    /// The Service in front of the workload. Default: the referenced benchmark's target
    /// Service (required with a typed-in capacity or a benchmark of another target).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub service: Option<ServiceTarget>,
    /// The server runs its model this many times faster than real time (a simulated
    /// engine, `goodput serve-sim --time-scale`). Default: the benchmark's target's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub time_scale: Option<f64>,
}

impl Default for Revalidation {
    fn default() -> Self {
        Revalidation {
            enabled: true,
            workload: None,
            service: None,
            time_scale: None,
        }
    }
}

/// What the plan found, proposed, applied and verified.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct ServingPlanStatus {
    /// The `metadata.generation` of the spec this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `Ready` (a proposal stands on valid evidence), `EvidenceValid`, `Applied` (Apply
    /// mode) and `Verified` (the new topology passed at the peak).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[x_kube(merge_strategy = ListMerge::Map(vec!["type".into()]))]
    pub conditions: Vec<Condition>,
    /// The workload, as `kubectl` names it: `deployment/qwen-7b`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    /// The forecast peak planned for (requests per second).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peak_rps: Option<f64>,
    /// How the peak was found: the static value, or the query, window and quantile.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peak_source: Option<String>,
    /// When the peak was last read from Prometheus.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peak_read_at: Option<Time>,
    /// Capacity per replica the plan uses (requests per second).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity_per_replica_rps: Option<f64>,
    /// Replicas the workload asks for now (`/scale` `spec.replicas`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_replicas: Option<u32>,
    /// Replicas the formula requires now, before min/max and the scale-down cooldown.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub required_replicas: Option<u32>,
    /// Replicas the plan proposes (and applies in Apply mode).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proposed_replicas: Option<u32>,
    /// GPUs of the proposed replicas.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proposed_gpus: Option<u64>,
    /// The arithmetic with its numbers: `ceil(36 / (6 × 0.75)) = 8`, then any clamp or
    /// hold, in words.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub arithmetic: Vec<String>,
    /// The capacity the plan stands on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub evidence: Option<PlanEvidence>,
    /// Each requirement computed during the scale-down cooldown, as it changed (the
    /// highest is the proposal floor).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub recommendations: Vec<Recommendation>,
    /// What Apply mode last wrote.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub applied: Option<AppliedScale>,
    /// The last revalidation of the workload on its current topology.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verification: Option<Verification>,
    /// `spec.gitops`: the pull request carrying the proposal.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pull_request: Option<PullRequestStatus>,
}

/// The plan's pull request (merge request on GitLab).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PullRequestStatus {
    /// Its number (`!iid` on GitLab).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub number: Option<u64>,
    /// Where to review it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// `Open`, `Closed` (by goodput: no longer needed, or by a person) or `Merged`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<String>,
    /// Who closed it: `goodput` or `human`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub closed_by: Option<String>,
    /// The branch carrying the change.
    pub branch: String,
    /// The commit goodput last pushed to the branch; a different head means someone else
    /// pushed, and goodput stops pushing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_pushed_commit: Option<String>,
    /// The replicas the pull request proposes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<u32>,
    /// A hash of the proposal and its evidence: the pull request is updated when it changes,
    /// and one a person closed is reopened only for a different one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan_hash: Option<String>,
    /// The change as a unified diff (always with `dryRun`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub diff: Option<String>,
    /// When goodput last changed the pull request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub updated_at: Option<Time>,
    /// When goodput last looked at the repository and the pull request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checked_at: Option<Time>,
    /// The forge rate-limited goodput: it is not called again before this time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_before: Option<Time>,
    /// A hash of what the last look started from (proposal, evidence, spec.gitops): when it
    /// is unchanged and the last look is recent, the repository is not cloned again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inputs_hash: Option<String>,
}

impl PullRequestStatus {
    /// An open pull request.
    pub const OPEN: &'static str = "Open";
    /// A closed, unmerged pull request.
    pub const CLOSED: &'static str = "Closed";
    /// A merged pull request.
    pub const MERGED: &'static str = "Merged";
    /// Closed by goodput.
    pub const BY_GOODPUT: &'static str = "goodput";
    /// Closed by someone else.
    pub const BY_HUMAN: &'static str = "human";
}

/// The capacity a plan stands on.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PlanEvidence {
    /// The CapacityBenchmark, or `typed-in`.
    pub source: String,
    /// The benchmark's `metadata.generation` the result is of.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generation: Option<i64>,
    /// The cache mode whose capacity is used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_mode: Option<CacheMode>,
    /// The capacity point: the highest passing offered rate (requests per second).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity_rps: Option<f64>,
    /// Replicas the benchmark measured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas_tested: Option<u32>,
    /// The class furthest from its SLO at the capacity point, and its attainment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weakest_class: Option<String>,
    /// That class's attainment at the capacity point.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weakest_attainment: Option<f64>,
    /// Where the benchmark's raw results are.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pack: Option<String>,
    /// When the benchmark became Ready.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub measured_at: Option<Time>,
    /// Why a typed-in capacity is trusted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Why the evidence is refused, one line per difference; empty when it is used.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub refused: Vec<String>,
    /// What the workload does not declare and so could not be compared.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unchecked: Vec<String>,
}

/// One requirement, from the time it was first computed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Recommendation {
    /// When the requirement took this value.
    pub time: Time,
    /// The required replicas (after min/max).
    pub replicas: u32,
}

/// What Apply mode wrote.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AppliedScale {
    /// The replicas written.
    pub replicas: u32,
    /// Where: `scale` (the workload's `/scale`), `hpa/<name>` (its `minReplicas`) or
    /// `scaledobject/<name>` (its `minReplicaCount`).
    pub via: String,
    /// When.
    pub time: Time,
}

/// A revalidation: the workload benchmarked on its new topology.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Verification {
    /// Replicas ready when it started.
    pub replicas: u32,
    /// What the workload declared it runs then (engine version, model revision).
    #[serde(default)]
    pub identity: String,
    /// The owned CapacityBenchmark that measures it.
    pub benchmark: String,
    /// `Running`, `Verified`, `Shortfall` or `Failed` (the benchmark ended without a
    /// result).
    pub state: String,
    /// The peak it was checked at (requests per second).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peak_rps: Option<f64>,
    /// Replicas × capacity per replica: what linear scaling promises.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_fleet_rps: Option<f64>,
    /// The highest rate that passed on the new topology.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub measured_fleet_rps: Option<f64>,
    /// Measured ÷ expected fleet capacity: 1 is linear, below 1 a shortfall, above 1 a
    /// fleet that carries more than the evidence credits it with (the sweep goes on above
    /// the expectation while rates pass).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scaling_efficiency: Option<f64>,
    /// How far the measured capacity falls short of the peak (requests per second).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shortfall_rps: Option<f64>,
    /// On a shortfall: the replicas the measured capacity per replica requires.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proposed_replicas: Option<u32>,
    /// What it found, in words.
    #[serde(default)]
    pub message: String,
}

impl Verification {
    /// Still measuring.
    pub const RUNNING: &'static str = "Running";
    /// The peak passed on the new topology.
    pub const VERIFIED: &'static str = "Verified";
    /// The peak failed on the new topology.
    pub const SHORTFALL: &'static str = "Shortfall";
    /// The benchmark ended without a result.
    pub const FAILED: &'static str = "Failed";
}
