//! Propose mode through Git on the in-repo test cluster: the operator as its own process,
//! a ServingPlan with `spec.gitops`, a real bare Git repository on disk (pushed to by the
//! real `git`), and a local stand-in of the GitHub REST endpoints the operator calls.
//!
//! The evidence is the seed's worked example (24 RPS on 4 replicas, peak 36 RPS, so 8
//! replicas), written through `/status` as a finished run leaves it.

use crate::fixture;
use crate::forge_stub;
use crate::git_remote;
use crate::harness;

use std::time::{Duration, Instant};

use fixture::{BENCHMARK, IDENTITY, NS, evidence, result, unstarted_engines};
use forge_stub::ForgeStub;
use git_remote::BareRemote;
use goodput::api::conditions::plan::{PULL_REQUEST, reason};
use goodput::api::{CapacityBenchmark, ServingPlan};
use goodput::gitops::forge::{ForgeKind, PrState};
use harness::{Operator, Setup, setup};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::json;

/// The operator, cluster and forge are shared machinery on a 2-core machine: one test at a
/// time.
use crate::MACHINE;

const PLAN: &str = "qwen-chat";
const TOKEN: &str = "ghp_e2eTOKENnotAsecret0123";
const FILE: &str = "apps/qwen/deployment.yaml";
const BRANCH: &str = "goodput/qwen-chat";
const DEPLOYMENT_YAML: &str = "# synced by Argo CD\r\napiVersion: v1\r\nkind: Service\r\nmetadata:\r\n  name: qwen\r\nspec:\r\n  replicas: 4 # a decoy: not a Deployment\r\n---\r\napiVersion: apps/v1\r\nkind: Deployment\r\nmetadata:\r\n  name: qwen\r\nspec:\r\n  replicas: 4   # goodput sizes this\r\n  template: {spec: {containers: [{name: vllm, image: \"vllm/vllm-openai:v0.11.0\"}]}}\r\n";

struct World {
    s: Setup,
    _operator: Operator,
    remote: BareRemote,
    forge: ForgeStub,
}

async fn world(kind: ForgeKind, gitops_extra: &str) -> World {
    let s = setup().await;
    let c = &s.client;
    let remote = BareRemote::new(
        &[(FILE, DEPLOYMENT_YAML), ("README.md", "manifests\n")],
        "main",
    );
    let forge = ForgeStub::start(kind.clone(), TOKEN);
    let kind_name = match kind {
        ForgeKind::GitHub => "GitHub",
        ForgeKind::GitLab => "GitLab",
    };
    let deployments: Api<Deployment> = Api::namespaced(c.clone(), NS);
    deployments
        .create(
            &PostParams::default(),
            &unstarted_engines("qwen", 4, &IDENTITY),
        )
        .await
        .expect("the Deployment");
    evidence(c).await;
    let secrets: Api<Secret> = Api::namespaced(c.clone(), NS);
    let mut data = std::collections::BTreeMap::from([(
        "token".to_owned(),
        k8s_openapi::ByteString(TOKEN.as_bytes().to_vec()),
    )]);
    if let Some(key) = signing_key() {
        data.insert(
            "signingKey".into(),
            k8s_openapi::ByteString(key.into_bytes()),
        );
    }
    let secret = Secret {
        metadata: kube::api::ObjectMeta {
            name: Some("gitops-bot".into()),
            ..Default::default()
        },
        data: Some(data),
        ..Default::default()
    };
    secrets
        .create(&PostParams::default(), &secret)
        .await
        .expect("the Secret");
    let operator = s.operator("goodput", &["--plan-resync-s", "1"]);
    let yaml = fixture::plan_yaml(
        PLAN,
        "Propose",
        &format!(
            "  scaleDown: {{cooldown: 0s}}\n  revalidation: {{enabled: false}}\n  gitops:\n    \
             repo: \"{}\"\n    credentialsSecret: gitops-bot\n    file: {FILE}\n    \
             edit: {{deployment: qwen}}\n    labels: [capacity]\n    reviewers: [platform-oncall]\n    \
             recheck: 1s\n    forge: {{kind: {kind_name}, apiUrl: \"{}\", project: acme/manifests}}\n{gitops_extra}",
            remote.file_url(),
            forge.url()
        ),
    );
    let plan: ServingPlan = serde_saphyr::from_str(&yaml).expect("plan YAML");
    let plans: Api<ServingPlan> = Api::namespaced(c.clone(), NS);
    plans
        .create(&PostParams::default(), &plan)
        .await
        .expect("the plan is accepted");
    World {
        s,
        _operator: operator,
        remote,
        forge,
    }
}

/// A fresh ed25519 private key from `ssh-keygen`, to sign goodput's commits; `None` (and a
/// `SKIPPED:` line) where there is no ssh-keygen.
fn signing_key() -> Option<String> {
    let dir = tempfile::tempdir().expect("a temp dir");
    let key = dir.path().join("key");
    let made = std::process::Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-C", "goodput-e2e", "-f"])
        .arg(&key)
        .status()
        .is_ok_and(|s| s.success());
    if !made {
        println!("SKIPPED: ssh-keygen is not installed; commits are not signed");
        return None;
    }
    std::fs::read_to_string(key).ok()
}

async fn plan_until(
    client: &kube::Client,
    timeout: Duration,
    what: &str,
    done: impl Fn(&ServingPlan) -> bool,
) -> ServingPlan {
    fixture::plan_until(client, PLAN, timeout, what, done).await
}

fn pr_condition(plan: &ServingPlan) -> Option<(String, String, String)> {
    let c = plan
        .status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == PULL_REQUEST)?;
    Some((c.status.clone(), c.reason.clone(), c.message.clone()))
}

/// An open pull request carries the proposal. (Opened, Updated or, once the next look
/// finds nothing to change, Current: a loaded machine may poll after that look. Whether it
/// was opened or updated is read from the forge's count of pull requests.)
fn carries(plan: &ServingPlan) -> bool {
    let open = plan
        .status
        .as_ref()
        .and_then(|s| s.pull_request.as_ref())
        .is_some_and(|pr| pr.state.as_deref() == Some("Open"));
    open && pr_condition(plan).is_some_and(|(s, r, _)| {
        s == "True"
            && [
                reason::PULL_REQUEST_OPENED,
                reason::PULL_REQUEST_UPDATED,
                reason::PULL_REQUEST_CURRENT,
            ]
            .contains(&r.as_str())
    })
}

fn pr_replicas(plan: &ServingPlan) -> Option<u32> {
    plan.status.as_ref()?.pull_request.as_ref()?.replicas
}

/// Sets the evidence's capacity (RPS on 4 replicas), as a re-run's result would.
async fn set_capacity(client: &kube::Client, capacity: f64) {
    let api: Api<CapacityBenchmark> = Api::namespaced(client.clone(), NS);
    api.patch_status(
        BENCHMARK,
        &PatchParams::default(),
        &Patch::Merge(&result(capacity, None)),
    )
    .await
    .expect("the capacity is written");
}

async fn set_peak(client: &kube::Client, rps: f64) {
    let api: Api<ServingPlan> = Api::namespaced(client.clone(), NS);
    api.patch(
        PLAN,
        &PatchParams::default(),
        &Patch::Merge(&json!({"spec": {"peak": {"rps": rps}}})),
    )
    .await
    .expect("the peak is changed");
}

fn which_ssh_keygen() -> bool {
    std::process::Command::new("ssh-keygen")
        .arg("-?")
        .output()
        .is_ok()
}

/// `ceil(36 / (capacity / 4 × 0.75))`, the one formula, for the expected proposals.
fn proposal_for(capacity: f64) -> u32 {
    goodput::planning::plan_replicas(goodput::planning::PlanInput {
        peak_rps: 36.0,
        capacity_rps: capacity,
        replicas_tested: 4,
        gpus_per_replica: 2,
        target_utilization: 0.75,
    })
    .map(|p| p.required_replicas as u32)
    .expect("a plan")
}

/// One pull request per plan: it opens with the evidence and exactly the replica change;
/// 20 successive capacity changes update the same pull request and the same one-commit
/// branch; setting the peak back (so the file already declares the proposal) closes it with
/// a comment and deletes the branch; a new proposal then opens a new one; once a person
/// merges that, the plan is up to date, and the next proposal opens another on the new
/// base; and a commit a person pushes to the branch stops goodput's pushes, said once on
/// the pull request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_pull_request_follows_the_proposal_and_closes_when_it_no_longer_applies() {
    let _machine = MACHINE.part().await;
    let w = world(ForgeKind::GitHub, "").await;
    let c = &w.s.client;

    let plan = plan_until(c, Duration::from_secs(60), "the pull request", |p| {
        carries(p)
    })
    .await;
    let status = plan.status.as_ref().expect("a status");
    let pr = status.pull_request.as_ref().expect("status.pullRequest");
    assert_eq!(pr.replicas, Some(8));
    assert_eq!(pr.branch, BRANCH);
    assert_eq!(pr.state.as_deref(), Some("Open"));
    let prs = w.forge.prs();
    assert_eq!(prs.len(), 1, "{prs:#?}");
    assert_eq!(Some(prs[0].number), pr.number);
    assert_eq!(prs[0].head, BRANCH);
    assert_eq!(prs[0].base, "main");
    assert_eq!(prs[0].labels, ["capacity"]);
    assert_eq!(prs[0].reviewers, ["platform-oncall"]);
    // The body carries the status's numbers and the evidence.
    for line in &status.arithmetic {
        assert!(
            prs[0].body.contains(line.as_str()),
            "{line} not in {}",
            prs[0].body
        );
    }
    assert!(prs[0].body.contains("ceil(36 / (6 × 0.75)) = ceil(8) = 8"));
    assert!(
        prs[0]
            .body
            .contains(&format!("CapacityBenchmark {BENCHMARK}"))
    );
    assert!(prs[0].body.contains("```mermaid"));
    assert!(
        prs[0].body.contains("| 24 | 24 | pass |"),
        "{}",
        prs[0].body
    );
    // Exactly the digits changed, CRLF and the decoy kept.
    let on_branch = w
        .remote
        .show(BRANCH, FILE)
        .expect("the branch has the file");
    assert_eq!(
        on_branch,
        DEPLOYMENT_YAML.replace("replicas: 4   #", "replicas: 8   #")
    );
    assert_eq!(w.remote.changed_files(BRANCH), [FILE]);
    assert_eq!(w.remote.log(BRANCH).len(), 2, "base + one commit");
    assert_eq!(pr.last_pushed_commit, w.remote.head(BRANCH));
    let (sha, author, subject) = &w.remote.log(BRANCH)[0];
    if which_ssh_keygen() {
        assert!(
            w.remote
                .raw_commit(sha)
                .contains("gpgsig -----BEGIN SSH SIGNATURE-----"),
            "the Secret's signingKey signs the commit"
        );
    }
    assert_eq!(author, "goodput");
    assert_eq!(
        subject,
        "chore(capacity): scale deployment/qwen from 4 to 8 replicas"
    );

    // 20 successive proposal changes: one pull request, one commit on the base.
    let capacities = [
        20.0, 16.0, 28.0, 24.0, 12.0, 32.0, 20.0, 24.0, 16.0, 28.0, 12.0, 36.0, 20.0, 24.0, 16.0,
        32.0, 28.0, 20.0, 12.0, 24.0,
    ];
    let mut last = 8;
    for (i, &capacity) in capacities.iter().enumerate() {
        let want = proposal_for(capacity);
        assert_ne!(want, last, "change {i} must change the proposal");
        set_capacity(c, capacity).await;
        plan_until(
            c,
            Duration::from_secs(60),
            &format!("change {i} to {want}"),
            |p| {
                pr_replicas(p) == Some(want) && pr_condition(p).is_some_and(|(s, _, _)| s == "True")
            },
        )
        .await;
        let body_ok = w.forge.prs()[0]
            .body
            .contains(&format!("to {want} replicas"));
        assert!(body_ok, "change {i}: the body names {want}");
        assert_eq!(
            w.remote.show(BRANCH, FILE),
            Some(DEPLOYMENT_YAML.replace("replicas: 4   #", &format!("replicas: {want}   #")))
        );
        last = want;
    }
    let prs = w.forge.prs();
    assert_eq!(prs.len(), 1, "one pull request across 20 changes: {prs:#?}");
    assert_eq!(w.remote.log(BRANCH).len(), 2, "still base + one commit");
    assert_eq!(last, 8);

    // The peak back to what 4 replicas carry: the file already says 4, nothing to propose.
    set_peak(c, 18.0).await;
    let plan = plan_until(c, Duration::from_secs(60), "the close", |p| {
        pr_condition(p).is_some_and(|(_, r, _)| r == reason::UP_TO_DATE)
    })
    .await;
    let pr = plan
        .status
        .and_then(|s| s.pull_request)
        .expect("status.pullRequest");
    assert_eq!(pr.state.as_deref(), Some("Closed"));
    assert_eq!(pr.closed_by.as_deref(), Some("goodput"));
    let prs = w.forge.prs();
    assert_eq!(prs[0].state, PrState::Closed);
    assert!(
        prs[0]
            .comments
            .iter()
            .any(|c| c.contains("no longer needed")),
        "{:?}",
        prs[0].comments
    );
    assert_eq!(w.remote.head(BRANCH), None, "our branch is deleted");

    // A new proposal opens a new pull request (goodput closed the last one itself).
    set_peak(c, 36.0).await;
    plan_until(c, Duration::from_secs(60), "a new pull request", |p| {
        carries(p)
            && p.status
                .as_ref()
                .and_then(|s| s.pull_request.as_ref())
                .and_then(|pr| pr.number)
                != Some(prs[0].number)
    })
    .await;
    assert_eq!(w.forge.prs().len(), 2);
    let second = w.forge.prs()[1].number;

    // A person merges it: the base now declares 8, the plan is up to date and says merged.
    let merged = w.remote.show(BRANCH, FILE).expect("the branch's file");
    w.remote
        .commit_as_human("main", FILE, &merged, "Merge pull request");
    w.forge.merge_as_human(second);
    let plan = plan_until(c, Duration::from_secs(60), "the merge", |p| {
        pr_condition(p).is_some_and(|(_, r, _)| r == reason::UP_TO_DATE)
    })
    .await;
    let pr = plan
        .status
        .and_then(|s| s.pull_request)
        .expect("status.pullRequest");
    assert_eq!(
        (pr.number, pr.state.as_deref()),
        (Some(second), Some("Merged"))
    );
    assert!(
        w.forge.prs()[1].comments.is_empty(),
        "a merged one gets no comment"
    );

    // The next proposal opens a new pull request on the new base.
    set_capacity(c, 20.0).await;
    let plan = plan_until(c, Duration::from_secs(60), "a third pull request", |p| {
        pr_replicas(p) == Some(10) && carries(p)
    })
    .await;
    assert_eq!(w.forge.prs().len(), 3);
    assert_eq!(
        w.remote.show(BRANCH, FILE),
        Some(DEPLOYMENT_YAML.replace("replicas: 4   #", "replicas: 10   #"))
    );
    assert_eq!(w.remote.log(BRANCH).len(), 3, "base, the merge, one commit");
    let ours = plan
        .status
        .and_then(|s| s.pull_request)
        .and_then(|p| p.last_pushed_commit);

    // A person pushes to the branch: goodput stops, says so once, pushes nothing over it.
    w.remote
        .commit_as_human(BRANCH, FILE, "replicas: 9\n", "hand edit");
    let human = w.remote.head(BRANCH);
    assert_ne!(human, ours);
    set_capacity(c, 16.0).await;
    plan_until(c, Duration::from_secs(60), "the stop", |p| {
        pr_condition(p).is_some_and(|(s, r, _)| s == "False" && r == reason::BRANCH_EDITED_BY_HUMAN)
    })
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        w.remote.head(BRANCH),
        human,
        "nothing pushed over the person's commit"
    );
    let prs = w.forge.prs();
    let comments = &prs[2].comments;
    assert_eq!(
        comments
            .iter()
            .filter(|c| c.contains("goodput did not push"))
            .count(),
        1,
        "{comments:?}"
    );
    // No secret anywhere a user reads.
    let plans: Api<ServingPlan> = Api::namespaced(c.clone(), NS);
    let text = serde_json::to_string(&plans.get(PLAN).await.expect("plan")).expect("JSON");
    assert!(!text.contains(TOKEN));
    let log = std::fs::read_to_string(w.s.dir.path().join("operator.log")).unwrap_or_default();
    assert!(!log.contains(TOKEN), "the token is in the operator's log");
}

/// On GitLab (merge requests): a dry run shows the diff and pushes nothing; a merge request
/// a person closed is not opened again for the same proposal, only for a different one; a
/// rate limit is a condition and the plan comes back when the forge says; a wrong token is
/// a condition naming the forge's refusal, without the token; a protected branch rejects
/// the push and nothing is half-done.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_human_close_is_respected_and_faults_are_conditions() {
    let _machine = MACHINE.part().await;
    let w = world(ForgeKind::GitLab, "    dryRun: true\n").await;
    let c = &w.s.client;

    let plan = plan_until(c, Duration::from_secs(60), "the dry run", |p| {
        pr_condition(p).is_some_and(|(_, r, _)| r == reason::DRY_RUN)
    })
    .await;
    let diff = plan
        .status
        .and_then(|s| s.pull_request)
        .and_then(|p| p.diff)
        .expect("the diff in status");
    // One line out, one in; the diff is for reading (CRLF shown as plain line ends).
    assert!(
        diff.contains(
            "\n-  replicas: 4   # goodput sizes this\n+  replicas: 8   # goodput sizes this\n"
        ),
        "{diff}"
    );
    assert_eq!(
        diff.lines().filter(|l| l.starts_with(['-', '+'])).count(),
        4,
        "{diff}"
    );
    assert!(w.forge.prs().is_empty());
    assert_eq!(w.remote.head(BRANCH), None);

    let plans: Api<ServingPlan> = Api::namespaced(c.clone(), NS);
    plans
        .patch(
            PLAN,
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"gitops": {"dryRun": false}}})),
        )
        .await
        .expect("dry run off");
    plan_until(c, Duration::from_secs(60), "the pull request", |p| {
        carries(p)
    })
    .await;
    let number = w.forge.prs()[0].number;
    w.forge.close_as_human(number);
    plan_until(c, Duration::from_secs(60), "the human close", |p| {
        pr_condition(p).is_some_and(|(s, r, _)| s == "False" && r == reason::CLOSED_BY_HUMAN)
    })
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(w.forge.prs().len(), 1, "not reopened for the same proposal");
    assert_eq!(w.forge.prs()[0].state, PrState::Closed);

    // A different proposal is news: a new pull request.
    set_capacity(c, 16.0).await;
    plan_until(c, Duration::from_secs(60), "a new pull request", |p| {
        pr_replicas(p) == Some(12) && carries(p)
    })
    .await;
    assert_eq!(w.forge.prs().len(), 2);

    // Rate limited: said (a Warning Event), and looked at again when the forge says (2 s
    // after the refused call, which came after the change), not before.
    w.forge.rate_limit_next(1, 2);
    let changed = Instant::now();
    set_capacity(c, 28.0).await;
    plan_until(
        c,
        Duration::from_secs(60),
        "the update after the limit",
        |p| pr_replicas(p) == Some(7) && carries(p),
    )
    .await;
    assert!(
        changed.elapsed() >= Duration::from_millis(1900),
        "the plan waited for the limit: {:?}",
        changed.elapsed()
    );
    let events: Api<k8s_openapi::api::core::v1::Event> = Api::namespaced(c.clone(), NS);
    let limited = events
        .list(&Default::default())
        .await
        .expect("events")
        .items
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some("ForgeRateLimited"))
        .count();
    assert_eq!(limited, 1, "one Warning for the rate limit");
    assert_eq!(w.forge.prs().len(), 2);

    // A wrong token: the forge's 401 is a condition, retried, and the token is nowhere.
    let secrets: Api<Secret> = Api::namespaced(c.clone(), NS);
    secrets
        .patch(
            "gitops-bot",
            &PatchParams::default(),
            &Patch::Merge(&json!({"data": {"token": "d3Jvbmc="}})),
        )
        .await
        .expect("the Secret changes");
    set_capacity(c, 20.0).await;
    let plan = plan_until(c, Duration::from_secs(60), "the refusal", |p| {
        pr_condition(p).is_some_and(|(s, r, _)| s == "False" && r == "ForgeUnauthorized")
    })
    .await;
    let text = serde_json::to_string(&plan).expect("JSON");
    assert!(!text.contains("wrong") && !text.contains(TOKEN));
    // The proposal itself stands.
    assert_eq!(plan.status.and_then(|s| s.proposed_replicas), Some(10));

    // The right token again, and a branch the forge protects: the push is refused, the
    // merge request keeps its last proposal, the branch its last commit.
    secrets
        .patch(
            "gitops-bot",
            &PatchParams::default(),
            &Patch::Merge(
                &json!({"data": {"token": k8s_openapi::ByteString(TOKEN.as_bytes().to_vec())}}),
            ),
        )
        .await
        .expect("the Secret changes back");
    let before = w.remote.head(BRANCH);
    w.remote.protect(BRANCH);
    let plan = plan_until(c, Duration::from_secs(60), "the refused push", |p| {
        pr_condition(p).is_some_and(|(s, r, _)| s == "False" && r == "PushRejected")
    })
    .await;
    let (_, _, message) = pr_condition(&plan).expect("the condition");
    assert!(
        message.contains("protected branch hook declined"),
        "{message}"
    );
    assert_eq!(w.remote.head(BRANCH), before);
    let open = w
        .forge
        .prs()
        .into_iter()
        .find(|p| p.state == PrState::Open)
        .expect("open");
    assert!(open.body.contains("to 7 replicas"), "{}", open.body);
}
