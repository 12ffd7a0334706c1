//! A plan's proposal as one pull request (`spec.gitops`): the replica number changed in
//! the GitOps repository on the plan's branch, and one pull request carrying the evidence,
//! updated in place when the proposal changes, closed when it no longer applies, never
//! reopened after a person closed it unless the plan changed, and never pushed over
//! anyone else's commit.
//!
//! Credentials come from a Secret and go to `git` through its environment and to the forge
//! in request headers: never into arguments, URLs, the status, Events or logs.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::{Api, Client};

use goodput_api::conditions::plan::reason;
use goodput_api::{
    FinishedPoint, ForgeName, GitOps, PlanEvidence, PullRequestStatus, ScaleTargetRef,
};
use goodput_core::analysis::GateConfig;
use goodput_core::workload::hashing::fnv1a;
use goodput_gitops::edit::{self, EditTarget};
use goodput_gitops::forge::{
    self, AnyForge, Forge, ForgeAuth, ForgeKind, NewPullRequest, PrState, PullRequest,
    RepoCoordinates,
};
use goodput_gitops::git::{Author, Checkout, GitAuth, Signing};
use goodput_pack::proposal::{self, Proposal};

/// What a plan proposes, as the pull request tells it.
pub struct Inputs<'a> {
    /// `namespace/name`.
    pub plan: String,
    /// The plan's name (the default branch is named after it).
    pub plan_name: &'a str,
    /// The plan's namespace (the credentials Secret is read there).
    pub namespace: &'a str,
    /// The workload.
    pub target_ref: &'a ScaleTargetRef,
    /// `spec.gitops`.
    pub gitops: &'a GitOps,
    /// The proposal.
    pub replicas: u32,
    /// Its GPUs.
    pub gpus: Option<u64>,
    /// The peak and its source.
    pub peak_rps: f64,
    /// How the peak was found.
    pub peak_source: Option<&'a str>,
    /// The arithmetic, as the status has it.
    pub arithmetic: &'a [String],
    /// The evidence.
    pub evidence: Option<&'a PlanEvidence>,
    /// The benchmark's rate points in the evidence's cache mode.
    pub sweep: Vec<&'a FinishedPoint>,
    /// The benchmark's gate.
    pub gate: Option<GateConfig>,
    /// The last look already found (and said on the pull request) that someone else pushed
    /// to the branch.
    pub said_edited: bool,
}

/// What one look at the repository and the pull request found.
#[derive(Debug)]
pub struct Synced {
    /// The new `status.pullRequest`.
    pub status: PullRequestStatus,
    /// The `PullRequest` condition: whether it holds, its reason and message.
    pub holds: bool,
    /// The condition's reason.
    pub reason: &'static str,
    /// The condition's message.
    pub message: String,
    /// Whether this look changed something worth an Event (opened, updated, closed).
    pub news: bool,
}

/// Why the pull request could not be brought up to the proposal.
#[derive(Debug)]
pub struct Failure {
    /// The condition reason.
    pub reason: &'static str,
    /// What went wrong, with no secret in it.
    pub message: String,
    /// When trying again can help: after this long (`None`: with backoff).
    pub retry_after: Option<Duration>,
    /// Whether trying again can help at all (a missing file needs the user).
    pub retryable: bool,
    /// The status to keep (the last pushed commit stays known).
    pub status: Option<Box<PullRequestStatus>>,
}

impl Failure {
    fn new(reason: &'static str, message: impl Into<String>, retryable: bool) -> Self {
        Failure {
            reason,
            message: message.into(),
            retry_after: None,
            retryable,
            status: None,
        }
    }
}

impl From<edit::EditError> for Failure {
    fn from(e: edit::EditError) -> Self {
        Failure::new(e.reason(), format!("spec.gitops.file: {e}"), false)
    }
}

impl From<goodput_gitops::git::GitError> for Failure {
    fn from(e: goodput_gitops::git::GitError) -> Self {
        let retryable = e.retryable();
        Failure::new(e.reason(), e.to_string(), retryable)
    }
}

impl From<forge::ForgeError> for Failure {
    fn from(e: forge::ForgeError) -> Self {
        let mut f = Failure::new(e.reason(), e.to_string(), e.retry_after().is_some());
        f.retry_after = e.retry_after();
        f
    }
}

/// The branch carrying a plan's change.
pub fn branch(gitops: &GitOps, plan_name: &str) -> String {
    gitops
        .branch
        .clone()
        .unwrap_or_else(|| format!("goodput/{plan_name}"))
}

/// Which number in the file: `spec.gitops.edit`, else the target's own `spec.replicas`.
pub fn edit_target(gitops: &GitOps, target: &ScaleTargetRef) -> EditTarget {
    let workload = |kind: &str, name: &str| EditTarget::Workload {
        kind: kind.to_owned(),
        name: name.to_owned(),
        namespace: None,
    };
    let Some(e) = &gitops.edit else {
        return workload(&target.kind, &target.name);
    };
    if let Some(name) = &e.deployment {
        workload("Deployment", name)
    } else if let Some(name) = &e.stateful_set {
        workload("StatefulSet", name)
    } else if let Some(name) = &e.leader_worker_set {
        workload("LeaderWorkerSet", name)
    } else if let Some(path) = &e.helm_values {
        EditTarget::HelmValues { path: path.clone() }
    } else if let Some(name) = &e.kustomize_replicas {
        EditTarget::KustomizeReplicas { name: name.clone() }
    } else {
        workload(&target.kind, &target.name)
    }
}

/// The reasons of a look that finished (whatever it found): an unchanged proposal is not
/// looked at again before `recheck`. Any other reason is a fault, retried on its own
/// schedule.
pub const SETTLED: [&str; 7] = [
    reason::PULL_REQUEST_OPENED,
    reason::PULL_REQUEST_UPDATED,
    reason::PULL_REQUEST_CURRENT,
    reason::UP_TO_DATE,
    reason::CLOSED_BY_HUMAN,
    reason::BRANCH_EDITED_BY_HUMAN,
    reason::DRY_RUN,
];

/// The faults whose retry time the forge (or the backoff for an unavailable one) sets:
/// the plan does not call the forge again before `status.pullRequest.notBefore`.
pub const HELD: [&str; 2] = ["ForgeRateLimited", "ForgeUnavailable"];

/// A hash of what a look starts from: unchanged inputs and a recent look mean nothing to do.
pub fn inputs_hash(i: &Inputs<'_>) -> String {
    let text = format!(
        "{}|{}|{:?}|{}|{:?}|{:?}|{:?}",
        i.replicas,
        i.peak_rps,
        i.arithmetic,
        serde_json::to_string(i.gitops).unwrap_or_default(),
        i.evidence
            .map(|e| (&e.source, e.generation, e.capacity_rps)),
        i.gpus,
        i.target_ref,
    );
    format!("{:016x}", fnv1a(0, text.as_bytes()))
}

/// Whether the last look is recent enough, and started from the same inputs, to skip this
/// one.
pub fn fresh(prev: Option<&PullRequestStatus>, hash: &str, now: &Time, recheck: Duration) -> bool {
    prev.is_some_and(|p| {
        p.inputs_hash.as_deref() == Some(hash)
            && p.checked_at.as_ref().is_some_and(|t| {
                let age = now.0.as_second() - t.0.as_second();
                age >= 0 && (age as u64) < recheck.as_secs()
            })
    })
}

/// The credentials a Secret holds, under the Argo CD and Flux key names.
#[derive(Default)]
struct Credentials {
    token: Option<String>,
    username: Option<String>,
    ssh_private_key: Option<String>,
    known_hosts: Option<String>,
    app_id: Option<String>,
    app_installation_id: Option<u64>,
    app_private_key: Option<String>,
    signing_key: Option<String>,
}

fn credentials(name: &str, data: &BTreeMap<String, ByteString>) -> Result<Credentials, Failure> {
    let text = |key: &str| -> Result<Option<String>, Failure> {
        data.get(key)
            .map(|v| {
                String::from_utf8(v.0.clone()).map_err(|_| {
                    Failure::new(
                        reason::CREDENTIALS_INVALID,
                        format!("Secret {name}: key {key} is not UTF-8 text"),
                        false,
                    )
                })
            })
            .transpose()
            .map(|v| v.map(|s| s.trim_end_matches(['\n', '\r']).to_owned()))
    };
    let installation = text("githubAppInstallationID")?
        .map(|s| {
            s.trim().parse::<u64>().map_err(|_| {
                Failure::new(
                    reason::CREDENTIALS_INVALID,
                    format!("Secret {name}: githubAppInstallationID is not a number"),
                    false,
                )
            })
        })
        .transpose()?;
    let c = Credentials {
        token: text("token")?
            .or(text("bearerToken")?)
            .or(text("password")?),
        username: text("username")?,
        ssh_private_key: text("sshPrivateKey")?.or(text("identity")?),
        known_hosts: text("knownHosts")?.or(text("known_hosts")?),
        app_id: text("githubAppID")?,
        app_installation_id: installation,
        app_private_key: text("githubAppPrivateKey")?,
        signing_key: text("signingKey")?,
    };
    if c.token.is_none() && c.ssh_private_key.is_none() && c.app_id.is_none() {
        return Err(Failure::new(
            reason::CREDENTIALS_INVALID,
            format!(
                "Secret {name} has none of token, password, sshPrivateKey or githubAppID \
                 (keys present: {})",
                data.keys().cloned().collect::<Vec<_>>().join(", ")
            ),
            false,
        ));
    }
    if c.app_id.is_some() != c.app_private_key.is_some() {
        return Err(Failure::new(
            reason::CREDENTIALS_INVALID,
            format!("Secret {name}: githubAppID and githubAppPrivateKey go together"),
            false,
        ));
    }
    Ok(c)
}

async fn read_credentials(
    client: &Client,
    namespace: &str,
    gitops: &GitOps,
) -> Result<Credentials, Failure> {
    let Some(name) = &gitops.credentials_secret else {
        return Ok(Credentials::default());
    };
    let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let secret = api.get_opt(name).await.map_err(|e| {
        let (why, message) = super::benchmark::api_failure(&e);
        Failure {
            retry_after: None,
            ..Failure::new(
                if why == "Forbidden" {
                    reason::CREDENTIALS_INVALID
                } else {
                    why
                },
                format!("reading Secret {namespace}/{name}: {message}"),
                true,
            )
        }
    })?;
    let Some(secret) = secret else {
        return Err(Failure::new(
            reason::CREDENTIALS_INVALID,
            format!("spec.gitops.credentialsSecret: Secret {namespace}/{name} does not exist"),
            true,
        ));
    };
    let mut data = secret.data.unwrap_or_default();
    for (k, v) in secret.string_data.unwrap_or_default() {
        data.insert(k, ByteString(v.into_bytes()));
    }
    credentials(name, &data)
}

fn coordinates(gitops: &GitOps) -> Result<RepoCoordinates, Failure> {
    let f = gitops.forge.as_ref();
    let kind = f.map(|f| match f.kind {
        ForgeName::GitHub => ForgeKind::GitHub,
        ForgeName::GitLab => ForgeKind::GitLab,
    });
    RepoCoordinates::resolve(
        &gitops.repo,
        kind,
        f.and_then(|f| f.api_url.as_deref()),
        f.and_then(|f| f.project.as_deref()),
    )
    .map_err(Failure::from)
}

fn forge_auth(c: &Credentials) -> Result<ForgeAuth, Failure> {
    if let (Some(app_id), Some(key)) = (&c.app_id, &c.app_private_key) {
        return Ok(ForgeAuth::GitHubApp {
            app_id: app_id.clone(),
            installation_id: c.app_installation_id,
            private_key_pem: key.clone(),
        });
    }
    match &c.token {
        Some(t) => Ok(ForgeAuth::Token(t.clone())),
        None => Err(Failure::new(
            reason::CREDENTIALS_INVALID,
            "the forge API needs a token (or a GitHub App) in the credentials Secret; an SSH \
             key alone only reaches git",
            false,
        )),
    }
}

async fn git_auth(c: &Credentials, forge: Option<&AnyForge>) -> Result<GitAuth, Failure> {
    if let Some(key) = &c.ssh_private_key {
        return Ok(GitAuth::SshKey {
            private_key: key.clone(),
            known_hosts: c.known_hosts.clone().unwrap_or_default(),
        });
    }
    match forge {
        Some(f) if c.token.is_some() || c.app_id.is_some() => Ok(GitAuth::Token {
            username: c
                .username
                .clone()
                .unwrap_or_else(|| f.git_username().to_owned()),
            token: f.git_token().await?,
        }),
        _ => Ok(match (&c.token, &c.username) {
            (Some(token), username) => GitAuth::Token {
                username: username.clone().unwrap_or_else(|| "x-access-token".into()),
                token: token.clone(),
            },
            _ => GitAuth::None,
        }),
    }
}

fn state_name(s: &PrState) -> &'static str {
    match s {
        PrState::Open => PullRequestStatus::OPEN,
        PrState::Closed => PullRequestStatus::CLOSED,
        PrState::Merged => PullRequestStatus::MERGED,
    }
}

fn record(status: &mut PullRequestStatus, pr: &PullRequest) {
    status.number = Some(pr.number);
    status.url = Some(pr.url.clone());
    status.state = Some(state_name(&pr.state).to_owned());
}

/// Looks at the repository and the pull request and brings them to the proposal.
pub async fn sync(
    client: &Client,
    i: &Inputs<'_>,
    prev: Option<&PullRequestStatus>,
    now: Time,
) -> Result<Synced, Failure> {
    let g = i.gitops;
    let branch = branch(g, i.plan_name);
    let mut status = prev.cloned().unwrap_or_default();
    if status.branch != branch {
        // A renamed branch starts over: the old one is not ours to push to any more.
        status = PullRequestStatus::default();
        status.branch = branch.clone();
    }
    status.inputs_hash = Some(inputs_hash(i));
    status.checked_at = Some(now.clone());
    status.not_before = None;
    let keep = |mut f: Failure, s: &PullRequestStatus| {
        f.status = Some(Box::new(s.clone()));
        f
    };

    let creds = read_credentials(client, i.namespace, g).await?;
    let forge = if g.dry_run {
        None
    } else {
        let coords = coordinates(g)?;
        Some(forge::connect(&coords, forge_auth(&creds)?)?)
    };
    let auth = git_auth(&creds, forge.as_ref()).await?;
    let checkout = Checkout::clone(&g.repo, &g.base, &auth).await?;
    let text = checkout.read(&g.file)?;
    let target = edit_target(g, i.target_ref);
    let edit = edit::set_replicas(&text, &target, u64::from(i.replicas))?;
    let diff = edit::unified_diff(&g.file, &text, &edit.text);
    let facts = Proposal {
        plan: &i.plan,
        target: &i.target_ref.printable(),
        file: &g.file,
        field: target.to_string(),
        from: edit.from.replicas,
        to: i.replicas,
        gpus: i.gpus,
        peak_rps: i.peak_rps,
        peak_source: i.peak_source,
        arithmetic: i.arithmetic,
        evidence: i.evidence,
        sweep: i.sweep.clone(),
        gate: i.gate.clone(),
        diff: &diff,
        plan_hash: String::new(),
    };
    let plan_hash = plan_hash(&facts);
    let facts = Proposal {
        plan_hash: plan_hash.clone(),
        ..facts
    };
    status.diff = (!diff.is_empty()).then(|| diff.clone());

    if g.dry_run {
        status.replicas = Some(i.replicas);
        status.plan_hash = Some(plan_hash);
        let message = if diff.is_empty() {
            format!(
                "dry run: {} already declares {} replicas; nothing to propose",
                g.file, i.replicas
            )
        } else {
            format!(
                "dry run: would change {} in {} from {} to {} on branch {branch} \
                 (status.pullRequest.diff)",
                target, g.file, edit.from.replicas, i.replicas
            )
        };
        return Ok(Synced {
            status,
            holds: true,
            reason: reason::DRY_RUN,
            message,
            news: false,
        });
    }
    // Connected above unless this is a dry run.
    let Some(forge) = forge else {
        return Err(Failure::new(reason::CREDENTIALS_INVALID, "no forge", false));
    };

    // The pull request we know of, else the newest one from our branch.
    let known = match status.number {
        Some(n) => forge.get(n).await.map_err(|e| keep(e.into(), &status))?,
        None => None,
    };
    let pr = match known {
        Some(pr) => Some(pr),
        None => forge
            .find_by_branch(&branch, &g.base)
            .await
            .map_err(|e| keep(e.into(), &status))?,
    };
    // A pull request that left the Open state without us closing it.
    if let Some(pr) = &pr
        && pr.state != PrState::Open
        && status.state.as_deref() == Some(PullRequestStatus::OPEN)
        && status.number == Some(pr.number)
    {
        record(&mut status, pr);
        if pr.state == PrState::Closed {
            status.closed_by = Some(PullRequestStatus::BY_HUMAN.to_owned());
        }
    }

    // Nothing to propose: the base already declares the proposal.
    if edit.text == text {
        return close_unneeded(&forge, &checkout, status, pr, &g.file, i.replicas).await;
    }

    let open = pr.filter(|p| p.state == PrState::Open);
    if open.is_none()
        && status.closed_by.as_deref() == Some(PullRequestStatus::BY_HUMAN)
        && status.plan_hash.as_deref() == Some(plan_hash.as_str())
    {
        let message = format!(
            "pull request #{} was closed without merging; the same proposal is not opened \
             again (a change of proposal or evidence opens a new one)",
            status.number.unwrap_or_default()
        );
        return Ok(Synced {
            status,
            holds: false,
            reason: reason::CLOSED_BY_HUMAN,
            message,
            news: false,
        });
    }

    // The branch: ours only while its head is the commit we last pushed.
    let head = checkout
        .remote_head(&branch)
        .await
        .map_err(|e| keep(e.into(), &status))?;
    let lease = match (&head, &status.last_pushed_commit) {
        (None, _) => None,
        (Some(h), Some(ours)) if h == ours => Some(h.clone()),
        (Some(h), _) => {
            // Someone else's commit (or a branch we never pushed): never pushed over.
            let on_branch = checkout
                .read_remote(&branch, &g.file)
                .await
                .map_err(|e| keep(e.into(), &status))?;
            if status.last_pushed_commit.is_none() && on_branch.as_deref() == Some(&edit.text) {
                // Our own push whose status write was lost: the branch already holds it.
                status.last_pushed_commit = Some(h.clone());
                Some(h.clone())
            } else {
                return edited_by_human(&forge, status, open.as_ref(), &branch, h, i.said_edited)
                    .await;
            }
        }
    };
    let on_branch = match &lease {
        Some(_) => checkout
            .read_remote(&branch, &g.file)
            .await
            .map_err(|e| keep(e.into(), &status))?,
        None => None,
    };
    let mut news = false;
    if on_branch.as_deref() != Some(&edit.text) {
        let author = Author {
            name: g.commit.author_name.clone(),
            email: g.commit.author_email.clone(),
        };
        let signing = creds.signing_key.as_ref().map(|k| Signing {
            ssh_private_key: k.clone(),
        });
        let message = proposal::commit_message(&g.commit.message_prefix, &facts);
        let sha = checkout
            .commit(
                &branch,
                &g.file,
                &edit.text,
                &message,
                &author,
                signing.as_ref(),
            )
            .await
            .map_err(|e| keep(e.into(), &status))?;
        match checkout.push(&branch, lease.as_deref()).await {
            Ok(()) => status.last_pushed_commit = Some(sha),
            Err(goodput_gitops::git::GitError::LeaseRejected { .. }) => {
                let h = checkout
                    .remote_head(&branch)
                    .await
                    .map_err(|e| keep(e.into(), &status))?
                    .unwrap_or_default();
                return edited_by_human(&forge, status, open.as_ref(), &branch, &h, i.said_edited)
                    .await;
            }
            Err(e) => return Err(keep(e.into(), &status)),
        }
        status.updated_at = Some(now.clone());
        news = true;
    }

    let title = proposal::title(&facts);
    let body = proposal::body(&facts, forge.body_limit());
    let (pr, reason_now) = match open {
        Some(pr)
            if proposal::plan_hash_of(&pr.body) == Some(plan_hash.as_str())
                && pr.title == title =>
        {
            (
                pr,
                if news {
                    reason::PULL_REQUEST_UPDATED
                } else {
                    reason::PULL_REQUEST_CURRENT
                },
            )
        }
        Some(pr) => {
            let pr = forge
                .update(pr.number, &title, &body)
                .await
                .map_err(|e| keep(e.into(), &status))?;
            news = true;
            (pr, reason::PULL_REQUEST_UPDATED)
        }
        None => {
            let pr = forge
                .create(&NewPullRequest {
                    title: &title,
                    body: &body,
                    head: &branch,
                    base: &g.base,
                    labels: &g.labels,
                    reviewers: &g.reviewers,
                    assignees: &g.assignees,
                })
                .await
                .map_err(|e| keep(e.into(), &status))?;
            news = true;
            (pr, reason::PULL_REQUEST_OPENED)
        }
    };
    record(&mut status, &pr);
    status.closed_by = None;
    status.replicas = Some(i.replicas);
    status.plan_hash = Some(plan_hash);
    if news {
        status.updated_at = Some(now);
    }
    let verb = match reason_now {
        r if r == reason::PULL_REQUEST_OPENED => "opened",
        r if r == reason::PULL_REQUEST_UPDATED => "updated",
        _ => "carries",
    };
    let message = format!(
        "pull request #{} {verb}: {} from {} to {} replicas in {} ({})",
        pr.number, target, edit.from.replicas, i.replicas, g.file, pr.url
    );
    Ok(Synced {
        status,
        holds: true,
        reason: reason_now,
        message,
        news,
    })
}

/// The base already declares the proposal: an open pull request of ours is closed with a
/// comment, and its branch deleted while it still holds only our commit.
async fn close_unneeded(
    forge: &AnyForge,
    checkout: &Checkout,
    mut status: PullRequestStatus,
    pr: Option<PullRequest>,
    file: &str,
    replicas: u32,
) -> Result<Synced, Failure> {
    let mut news = false;
    let mut message = format!("{file} on the base branch already declares {replicas} replicas");
    if let Some(pr) = pr {
        match pr.state {
            PrState::Open => {
                let comment = format!(
                    "goodput: the base branch already declares {replicas} replicas, so this \
                     change is no longer needed. Closing."
                );
                let closed = forge.close(pr.number, &comment).await?;
                record(&mut status, &closed);
                status.closed_by = Some(PullRequestStatus::BY_GOODPUT.to_owned());
                if let Some(ours) = status.last_pushed_commit.clone() {
                    // Only while it still holds our commit; an error here loses nothing.
                    if let Err(e) = checkout.delete_remote_branch(&status.branch, &ours).await {
                        tracing::info!(error = %e, branch = %status.branch, "branch kept");
                    } else {
                        status.last_pushed_commit = None;
                    }
                }
                message = format!("{message}; pull request #{} closed", pr.number);
                news = true;
            }
            PrState::Merged => {
                record(&mut status, &pr);
                message = format!("{message} (pull request #{} merged)", pr.number);
            }
            PrState::Closed => record(&mut status, &pr),
        }
    }
    status.diff = None;
    Ok(Synced {
        status,
        holds: true,
        reason: reason::UP_TO_DATE,
        message,
        news,
    })
}

/// Someone else pushed to the plan's branch: stop, say so once on the pull request.
async fn edited_by_human(
    forge: &AnyForge,
    mut status: PullRequestStatus,
    open: Option<&PullRequest>,
    branch: &str,
    head: &str,
    already: bool,
) -> Result<Synced, Failure> {
    let message = format!(
        "branch {branch} has commit {} that goodput did not push; goodput stops pushing to \
         it (delete the branch to let goodput start over)",
        short(head)
    );
    if let Some(pr) = open {
        record(&mut status, pr);
        if !already {
            forge
                .comment(
                    pr.number,
                    &format!(
                        "goodput: this branch has a commit goodput did not push ({}), so \
                         goodput will not update this pull request any more. Delete the branch \
                         to let goodput propose afresh.",
                        short(head)
                    ),
                )
                .await?;
        }
    }
    Ok(Synced {
        status,
        holds: false,
        reason: reason::BRANCH_EDITED_BY_HUMAN,
        message,
        news: !already,
    })
}

fn short(sha: &str) -> &str {
    sha.get(..12).unwrap_or(sha)
}

/// A hash of what the pull request says (not when it was said).
pub fn plan_hash(p: &Proposal<'_>) -> String {
    let text = format!(
        "{}|{}|{}|{}|{}|{:?}|{}",
        p.to,
        p.from,
        p.file,
        p.field,
        rate_key(p.peak_rps),
        p.arithmetic,
        p.diff
    );
    let evidence = p
        .evidence
        .map(|e| format!("{}|{:?}|{:?}", e.source, e.generation, e.capacity_rps))
        .unwrap_or_default();
    let sweep: Vec<String> = p
        .sweep
        .iter()
        .map(|pt| {
            format!(
                "{:?}:{}:{:?}",
                pt.offered_rps, pt.verdict, pt.weakest_attainment
            )
        })
        .collect();
    let h = fnv1a(
        fnv1a(fnv1a(0, text.as_bytes()), evidence.as_bytes()),
        sweep.join(",").as_bytes(),
    );
    format!("{h:016x}")
}

fn rate_key(x: f64) -> String {
    format!("{x:.6}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secret(pairs: &[(&str, &str)]) -> BTreeMap<String, ByteString> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), ByteString(v.as_bytes().to_vec())))
            .collect()
    }

    #[test]
    fn a_secret_gives_a_token_an_ssh_key_or_an_app_and_names_what_is_missing() {
        let c = credentials("bot", &secret(&[("token", "t0k\n")])).map_err(|f| f.message);
        assert_eq!(c.ok().and_then(|c| c.token).as_deref(), Some("t0k"));
        let c = credentials("bot", &secret(&[("username", "u"), ("password", "p")]));
        assert!(
            c.is_ok_and(|c| c.token.as_deref() == Some("p") && c.username.as_deref() == Some("u"))
        );
        let c = credentials(
            "bot",
            &secret(&[("sshPrivateKey", "k"), ("knownHosts", "h")]),
        );
        assert!(c.is_ok_and(|c| c.ssh_private_key.is_some() && c.known_hosts.is_some()));
        let err = credentials("bot", &secret(&[("tokn", "x")]))
            .err()
            .map(|f| f.message);
        assert_eq!(
            err.as_deref(),
            Some(
                "Secret bot has none of token, password, sshPrivateKey or githubAppID (keys present: tokn)"
            )
        );
        let err = credentials("bot", &secret(&[("githubAppID", "12")]))
            .err()
            .map(|f| f.reason);
        assert_eq!(err, Some(reason::CREDENTIALS_INVALID));
        let err = credentials(
            "bot",
            &secret(&[
                ("githubAppID", "12"),
                ("githubAppPrivateKey", "k"),
                ("githubAppInstallationID", "x"),
            ]),
        )
        .err()
        .map(|f| f.message);
        assert!(err.is_some_and(|m| m.contains("githubAppInstallationID is not a number")));
    }

    #[test]
    fn the_edit_defaults_to_the_targets_own_replicas() {
        let target = ScaleTargetRef {
            api_version: "apps/v1".into(),
            kind: "Deployment".into(),
            name: "qwen-7b".into(),
        };
        let mut g: GitOps = serde_json::from_value(serde_json::json!({
            "repo": "https://github.com/acme/m.git", "file": "apps/qwen.yaml"
        }))
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            edit_target(&g, &target),
            EditTarget::Workload {
                kind: "Deployment".into(),
                name: "qwen-7b".into(),
                namespace: None
            }
        );
        assert_eq!(branch(&g, "qwen"), "goodput/qwen");
        g.edit = Some(goodput_api::ReplicaField {
            helm_values: Some("vllm.replicaCount".into()),
            ..Default::default()
        });
        assert_eq!(
            edit_target(&g, &target),
            EditTarget::HelmValues {
                path: "vllm.replicaCount".into()
            }
        );
    }

    #[test]
    fn a_recent_look_from_the_same_inputs_is_not_repeated() {
        let at = |s: i64| Time(k8s_openapi::jiff::Timestamp::from_second(s).unwrap_or_default());
        let prev = PullRequestStatus {
            inputs_hash: Some("h".into()),
            checked_at: Some(at(1000)),
            ..Default::default()
        };
        let recheck = Duration::from_secs(300);
        assert!(fresh(Some(&prev), "h", &at(1100), recheck));
        assert!(!fresh(Some(&prev), "other", &at(1100), recheck));
        assert!(!fresh(Some(&prev), "h", &at(1300), recheck));
        assert!(!fresh(None, "h", &at(1100), recheck));
    }
}
