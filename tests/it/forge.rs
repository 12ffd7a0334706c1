//! The forge client against the in-memory GitHub and GitLab stubs over loopback: the
//! pull-request life cycle, "already exists", human closes and merges, rate limits, errors,
//! labels/reviewers/assignees, and GitHub App tokens.

use crate::forge_stub;

use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use forge_stub::{ForgeStub, STUB_AUTHOR, StubRateLimit};
use goodput::gitops::forge::{
    AnyForge, Forge, ForgeAuth, ForgeError, ForgeKind, NewPullRequest, PrState, RepoCoordinates,
    connect,
};

const TOKEN: &str = "tok-s3cret-9f8e7d";
const HEAD: &str = "goodput/prod/llama";

fn project(kind: &ForgeKind) -> &'static str {
    match kind {
        ForgeKind::GitHub => "acme/widgets",
        ForgeKind::GitLab => "acme/platform/widgets",
    }
}

fn coordinates(kind: &ForgeKind, api_url: &str) -> RepoCoordinates {
    RepoCoordinates::resolve(
        "file:///tmp/remote.git",
        Some(kind.clone()),
        Some(api_url),
        Some(project(kind)),
    )
    .unwrap()
}

fn client(stub: &ForgeStub, kind: &ForgeKind, token: &str) -> AnyForge {
    connect(
        &coordinates(kind, &stub.url()),
        ForgeAuth::Token(token.into()),
    )
    .unwrap()
}

fn setup(kind: &ForgeKind) -> (ForgeStub, AnyForge) {
    let stub = ForgeStub::start(kind.clone(), TOKEN);
    let forge = client(&stub, kind, TOKEN);
    (stub, forge)
}

fn proposal<'a>(head: &'a str, title: &'a str, body: &'a str) -> NewPullRequest<'a> {
    NewPullRequest {
        title,
        body,
        head,
        base: "main",
        labels: &[],
        reviewers: &[],
        assignees: &[],
    }
}

fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| s.to_string()).collect()
}

fn rate_limited_for(error: &ForgeError) -> Duration {
    match error {
        ForgeError::RateLimited { retry_after } => *retry_after,
        other => panic!("expected RateLimited, got {other:?}"),
    }
}

/// Each scenario runs against both forges: `github::name` and `gitlab::name`.
macro_rules! on_both_forges {
    ($($name:ident),* $(,)?) => {
        mod github {
            $(#[tokio::test]
            async fn $name() {
                super::$name(goodput::gitops::forge::ForgeKind::GitHub).await
            })*
        }
        mod gitlab {
            $(#[tokio::test]
            async fn $name() {
                super::$name(goodput::gitops::forge::ForgeKind::GitLab).await
            })*
        }
    };
}

on_both_forges!(
    create_then_get_and_find,
    create_when_one_is_open_returns_it,
    update_sets_title_and_body,
    close_comments_then_closes_once,
    human_closes_and_merges_are_seen,
    rate_limit_with_retry_after,
    rate_limit_until_reset,
    rate_limit_without_headers,
    forbidden_is_not_a_rate_limit,
    server_errors_retry_later,
    wrong_token_is_unauthorized_and_not_echoed,
    connection_refused_is_transport,
    rejected_create_is_validation,
    body_limits_and_git_credentials,
);

async fn create_then_get_and_find(kind: ForgeKind) {
    let (stub, forge) = setup(&kind);
    let created = forge
        .create(&proposal(HEAD, "Scale llama to 4", "Evidence."))
        .await
        .unwrap();
    assert_eq!(created.number, 1);
    assert_eq!(created.state, PrState::Open);
    assert_eq!(created.head_branch, HEAD);
    assert_eq!(
        (created.title.as_str(), created.body.as_str()),
        ("Scale llama to 4", "Evidence.")
    );
    assert!(created.url.ends_with("/1"), "{}", created.url);

    let held = stub.prs();
    assert_eq!(held.len(), 1);
    assert_eq!(
        (held[0].head.as_str(), held[0].base.as_str()),
        (HEAD, "main")
    );
    assert_eq!(held[0].project, project(&kind));

    assert_eq!(forge.get(1).await.unwrap(), Some(created.clone()));
    assert_eq!(forge.get(99).await.unwrap(), None);
    assert_eq!(
        forge.find_by_branch(HEAD, "main").await.unwrap(),
        Some(created)
    );
    assert_eq!(
        forge.find_by_branch("goodput/other", "main").await.unwrap(),
        None
    );
    assert_eq!(forge.find_by_branch(HEAD, "develop").await.unwrap(), None);

    stub.set_head_sha(1, "0123abcd");
    let found = forge.get(1).await.unwrap().unwrap();
    assert_eq!(found.head_sha.as_deref(), Some("0123abcd"));
}

async fn create_when_one_is_open_returns_it(kind: ForgeKind) {
    let (stub, forge) = setup(&kind);
    let first = forge
        .create(&proposal(HEAD, "Scale to 4", "old"))
        .await
        .unwrap();
    let again = forge
        .create(&proposal(HEAD, "Scale to 5", "new"))
        .await
        .unwrap();
    assert_eq!(again.number, first.number);
    assert_eq!(
        (again.title.as_str(), again.body.as_str()),
        ("Scale to 5", "new")
    );
    let held = stub.prs();
    assert_eq!(held.len(), 1, "no second pull request");
    assert_eq!(held[0].title, "Scale to 5");

    // The same text again: found, and nothing written.
    stub.clear_request_log();
    let same = forge
        .create(&proposal(HEAD, "Scale to 5", "new"))
        .await
        .unwrap();
    assert_eq!(same.number, first.number);
    let writes: Vec<String> = stub
        .request_log()
        .into_iter()
        .filter(|r| r.starts_with("PATCH") || r.starts_with("PUT"))
        .collect();
    assert!(writes.is_empty(), "{writes:?}");
}

async fn update_sets_title_and_body(kind: ForgeKind) {
    let (stub, forge) = setup(&kind);
    let created = forge.create(&proposal(HEAD, "t1", "b1")).await.unwrap();
    let updated = forge.update(created.number, "t2", "b2").await.unwrap();
    assert_eq!(
        (updated.title.as_str(), updated.body.as_str()),
        ("t2", "b2")
    );
    assert_eq!(updated.state, PrState::Open);
    let held = stub.pr(created.number).unwrap();
    assert_eq!((held.title.as_str(), held.body.as_str()), ("t2", "b2"));
    let missing = forge.update(42, "t", "b").await.unwrap_err();
    assert!(
        matches!(missing, ForgeError::NotFound { .. }),
        "{missing:?}"
    );
    assert_eq!(missing.reason(), "ForgeNotFound");
}

async fn close_comments_then_closes_once(kind: ForgeKind) {
    let (stub, forge) = setup(&kind);
    let created = forge.create(&proposal(HEAD, "t", "b")).await.unwrap();
    forge
        .comment(created.number, "Plan revised.")
        .await
        .unwrap();
    let closed = forge
        .close(created.number, "The plan no longer applies.")
        .await
        .unwrap();
    assert_eq!(closed.state, PrState::Closed);
    let held = stub.pr(created.number).unwrap();
    assert_eq!(held.state, PrState::Closed);
    assert_eq!(
        held.comments,
        strings(&["Plan revised.", "The plan no longer applies."])
    );

    // Closing again neither comments nor fails.
    let again = forge
        .close(created.number, "The plan no longer applies.")
        .await
        .unwrap();
    assert_eq!(again.state, PrState::Closed);
    assert_eq!(stub.pr(created.number).unwrap().comments.len(), 2);

    let missing = forge.close(77, "x").await.unwrap_err();
    assert!(
        matches!(missing, ForgeError::NotFound { .. }),
        "{missing:?}"
    );
}

async fn human_closes_and_merges_are_seen(kind: ForgeKind) {
    let (stub, forge) = setup(&kind);
    let first = forge.create(&proposal(HEAD, "t", "b")).await.unwrap();
    stub.close_as_human(first.number);
    let found = forge.find_by_branch(HEAD, "main").await.unwrap().unwrap();
    assert_eq!((found.number, found.state), (first.number, PrState::Closed));

    // A new one on the same branch is preferred while open…
    let second = forge.create(&proposal(HEAD, "t2", "b2")).await.unwrap();
    assert_ne!(second.number, first.number);
    let found = forge.find_by_branch(HEAD, "main").await.unwrap().unwrap();
    assert_eq!((found.number, found.state), (second.number, PrState::Open));

    // …and once merged, it is the most recently finished one.
    stub.merge_as_human(second.number);
    let found = forge.find_by_branch(HEAD, "main").await.unwrap().unwrap();
    assert_eq!(
        (found.number, found.state),
        (second.number, PrState::Merged)
    );
    assert_eq!(
        forge.get(first.number).await.unwrap().unwrap().state,
        PrState::Closed
    );
    assert_eq!(
        forge.get(second.number).await.unwrap().unwrap().state,
        PrState::Merged
    );

    // Closing a merged one is a no-op, not a comment.
    let still = forge.close(second.number, "bye").await.unwrap();
    assert_eq!(still.state, PrState::Merged);
    assert!(stub.pr(second.number).unwrap().comments.is_empty());
}

async fn rate_limit_with_retry_after(kind: ForgeKind) {
    let (stub, forge) = setup(&kind);
    stub.rate_limit_next(1, 7);
    let error = forge.find_by_branch(HEAD, "main").await.unwrap_err();
    assert_eq!(rate_limited_for(&error), Duration::from_secs(7));
    assert_eq!(error.reason(), "ForgeRateLimited");
    assert_eq!(error.retry_after(), Some(Duration::from_secs(7)));
    // The limit has passed: the next call goes through (no retry happened inside).
    assert_eq!(forge.find_by_branch(HEAD, "main").await.unwrap(), None);
    assert_eq!(stub.request_log().len(), 2);

    // A write hit by the limit creates nothing, and the retry creates one.
    stub.rate_limit_next(1, 3);
    let error = forge.create(&proposal(HEAD, "t", "b")).await.unwrap_err();
    assert_eq!(rate_limited_for(&error), Duration::from_secs(3));
    assert!(stub.prs().is_empty());
    forge.create(&proposal(HEAD, "t", "b")).await.unwrap();
    assert_eq!(stub.prs().len(), 1);

    if kind == ForgeKind::GitHub {
        stub.rate_limit_next_with(
            1,
            StubRateLimit::RetryAfter {
                status: 429,
                secs: 11,
            },
        );
        let error = forge.get(1).await.unwrap_err();
        assert_eq!(rate_limited_for(&error), Duration::from_secs(11));
    }
}

async fn rate_limit_until_reset(kind: ForgeKind) {
    let (stub, forge) = setup(&kind);
    let status = match kind {
        ForgeKind::GitHub => 403,
        ForgeKind::GitLab => 429,
    };
    stub.rate_limit_next_with(
        1,
        StubRateLimit::Reset {
            status,
            in_secs: 120,
        },
    );
    let wait = rate_limited_for(&forge.get(1).await.unwrap_err());
    assert!(
        (Duration::from_secs(117)..=Duration::from_secs(121)).contains(&wait),
        "{wait:?}"
    );
    assert_eq!(forge.get(1).await.unwrap(), None);
}

async fn rate_limit_without_headers(kind: ForgeKind) {
    let (stub, forge) = setup(&kind);
    stub.rate_limit_next_with(1, StubRateLimit::Bare { status: 429 });
    let error = forge.get(1).await.unwrap_err();
    assert_eq!(rate_limited_for(&error), Duration::from_secs(60));
    if kind == ForgeKind::GitHub {
        // A secondary limit's 403 without headers, recognised by its message.
        stub.rate_limit_next_with(1, StubRateLimit::Bare { status: 403 });
        let error = forge.get(1).await.unwrap_err();
        assert_eq!(rate_limited_for(&error), Duration::from_secs(60));
    }
}

async fn forbidden_is_not_a_rate_limit(kind: ForgeKind) {
    let (stub, forge) = setup(&kind);
    stub.fail_next(1, 403);
    let error = forge.get(1).await.unwrap_err();
    assert!(matches!(error, ForgeError::Forbidden { .. }), "{error:?}");
    assert_eq!(error.reason(), "ForgeForbidden");
    assert_eq!(error.retry_after(), None);
}

async fn server_errors_retry_later(kind: ForgeKind) {
    let (stub, forge) = setup(&kind);
    stub.fail_next(2, 502);
    let error = forge.create(&proposal(HEAD, "t", "b")).await.unwrap_err();
    assert!(
        matches!(error, ForgeError::Server { status: 502, .. }),
        "{error:?}"
    );
    assert_eq!(error.reason(), "ForgeUnavailable");
    assert!(error.retry_after().is_some());
    assert!(forge.get(1).await.is_err());
    assert_eq!(forge.get(1).await.unwrap(), None);
}

async fn wrong_token_is_unauthorized_and_not_echoed(kind: ForgeKind) {
    let stub = ForgeStub::start(kind.clone(), TOKEN);
    let wrong = "wrong-tok-0xDEADBEEF";
    let forge = client(&stub, &kind, wrong);
    for error in [
        forge.get(1).await.unwrap_err(),
        forge.create(&proposal(HEAD, "t", "b")).await.unwrap_err(),
    ] {
        assert_eq!(error, ForgeError::Unauthorized);
        assert_eq!(error.reason(), "ForgeUnauthorized");
        assert_eq!(error.retry_after(), None);
        let text = format!("{error} {error:?}");
        assert!(!text.contains(wrong) && !text.contains(TOKEN), "{text}");
    }
    assert!(stub.prs().is_empty());
}

async fn connection_refused_is_transport(kind: ForgeKind) {
    // A port that was just free: nothing listens there now.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let api = match kind {
        ForgeKind::GitHub => format!("http://127.0.0.1:{port}"),
        ForgeKind::GitLab => format!("http://127.0.0.1:{port}/api/v4"),
    };
    let forge = connect(&coordinates(&kind, &api), ForgeAuth::Token(TOKEN.into())).unwrap();
    let error = forge.find_by_branch(HEAD, "main").await.unwrap_err();
    let ForgeError::Transport(message) = &error else {
        panic!("expected Transport, got {error:?}");
    };
    assert!(message.to_lowercase().contains("refused"), "{message}");
    assert!(!message.contains(TOKEN));
    assert_eq!(error.reason(), "ForgeUnavailable");
    assert_eq!(error.retry_after(), Some(Duration::from_secs(30)));
}

async fn rejected_create_is_validation(kind: ForgeKind) {
    let (stub, forge) = setup(&kind);
    let error = forge.create(&proposal("main", "t", "b")).await.unwrap_err();
    assert!(matches!(error, ForgeError::Validation { .. }), "{error:?}");
    assert_eq!(error.reason(), "ForgeRejected");
    assert_eq!(error.retry_after(), None);
    assert!(stub.prs().is_empty());
}

async fn body_limits_and_git_credentials(kind: ForgeKind) {
    let (_stub, forge) = setup(&kind);
    let (limit, user) = match kind {
        ForgeKind::GitHub => (65_536, "x-access-token"),
        ForgeKind::GitLab => (1_048_576, "oauth2"),
    };
    assert_eq!(forge.body_limit(), limit);
    assert_eq!(forge.git_username(), user);
    assert_eq!(forge.git_token().await.unwrap(), TOKEN);
    assert_eq!(forge.kind(), kind);
}

#[tokio::test]
async fn github_labels_reviewers_and_assignees() {
    let (stub, forge) = setup(&ForgeKind::GitHub);
    let labels = strings(&["goodput", "capacity"]);
    let reviewers = strings(&["alice", "team:sre", "acme/platform"]);
    let assignees = strings(&["bob"]);
    let created = forge
        .create(&NewPullRequest {
            labels: &labels,
            reviewers: &reviewers,
            assignees: &assignees,
            ..proposal(HEAD, "t", "b")
        })
        .await
        .unwrap();
    let held = stub.pr(created.number).unwrap();
    assert_eq!(held.labels, labels);
    assert_eq!(held.reviewers, strings(&["alice"]));
    assert_eq!(held.team_reviewers, strings(&["sre", "platform"]));
    assert_eq!(held.assignees, assignees);
    let log = stub.request_log();
    for call in [
        "POST /repos/acme/widgets/issues/1/labels",
        "POST /repos/acme/widgets/pulls/1/requested_reviewers",
        "POST /repos/acme/widgets/issues/1/assignees",
    ] {
        assert!(log.iter().any(|l| l == call), "{call} missing from {log:?}");
    }
}

#[tokio::test]
async fn github_refused_review_request_does_not_fail_create() {
    let (stub, forge) = setup(&ForgeKind::GitHub);
    let reviewers = strings(&[STUB_AUTHOR]);
    let assignees = strings(&["bob"]);
    let created = forge
        .create(&NewPullRequest {
            reviewers: &reviewers,
            assignees: &assignees,
            ..proposal(HEAD, "t", "b")
        })
        .await
        .unwrap();
    let held = stub.pr(created.number).unwrap();
    assert!(held.reviewers.is_empty());
    assert_eq!(held.assignees, assignees, "later steps still ran");
}

#[tokio::test]
async fn gitlab_labels_reviewers_and_assignees() {
    let (stub, forge) = setup(&ForgeKind::GitLab);
    let labels = strings(&["goodput", "capacity"]);
    let reviewers = strings(&["alice", "@carol", "ghost", "team:sre"]);
    let assignees = strings(&["bob"]);
    let created = forge
        .create(&NewPullRequest {
            labels: &labels,
            reviewers: &reviewers,
            assignees: &assignees,
            ..proposal(HEAD, "t", "b")
        })
        .await
        .unwrap();
    let held = stub.pr(created.number).unwrap();
    assert_eq!(held.labels, labels);
    assert_eq!(
        held.reviewers,
        strings(&["alice", "carol"]),
        "unknown users skipped"
    );
    assert_eq!(held.assignees, assignees);
    // One create, with the project id encoded as one segment.
    let creates: Vec<String> = stub
        .request_log()
        .into_iter()
        .filter(|l| l.starts_with("POST"))
        .collect();
    assert_eq!(
        creates,
        ["POST /api/v4/projects/acme%2Fplatform%2Fwidgets/merge_requests"]
    );
}

#[tokio::test]
async fn head_sha_follows_a_resolver() {
    let stub = ForgeStub::with_head_resolver(ForgeKind::GitHub, TOKEN, |branch| {
        Some(format!("sha-of-{branch}"))
    });
    let forge = client(&stub, &ForgeKind::GitHub, TOKEN);
    let created = forge.create(&proposal(HEAD, "t", "b")).await.unwrap();
    assert_eq!(created.head_sha, Some(format!("sha-of-{HEAD}")));
    stub.set_head_sha(created.number, "pinned");
    let found = forge.find_by_branch(HEAD, "main").await.unwrap().unwrap();
    assert_eq!(found.head_sha.as_deref(), Some("pinned"));
}

#[test]
fn a_github_app_cannot_sign_in_to_gitlab() {
    let coords = RepoCoordinates::resolve("https://gitlab.com/g/x.git", None, None, None).unwrap();
    let auth = ForgeAuth::GitHubApp {
        app_id: "1".into(),
        installation_id: None,
        private_key_pem: String::new(),
    };
    assert!(matches!(connect(&coords, auth), Err(ForgeError::Config(_))));
}

/// An RSA key for the App tests, from `openssl` (ring cannot generate RSA keys).
struct AppKey {
    pkcs1_pem: String,
    pkcs8_pem: String,
    public_der: Vec<u8>,
}

fn app_key() -> Option<&'static AppKey> {
    static KEY: OnceLock<Option<AppKey>> = OnceLock::new();
    KEY.get_or_init(make_key).as_ref()
}

fn make_key() -> Option<AppKey> {
    let dir = tempfile::tempdir().ok()?;
    let run = |args: &[&str]| {
        Command::new("openssl")
            .args(args)
            .current_dir(dir.path())
            .output()
            .ok()
            .filter(|out| out.status.success())
    };
    let keygen = ["-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048"];
    run(&[&["genpkey"][..], &keygen, &["-out", "k8.pem"]].concat())?;
    // OpenSSL 3 needs -traditional for PKCS#1; 1.1 writes it by default.
    run(&["rsa", "-in", "k8.pem", "-traditional", "-out", "k1.pem"])
        .or_else(|| run(&["rsa", "-in", "k8.pem", "-out", "k1.pem"]))?;
    let public = ["-RSAPublicKey_out", "-outform", "DER", "-out", "pub.der"];
    run(&[&["rsa", "-in", "k8.pem"][..], &public].concat())?;
    let read = |name: &str| std::fs::read(dir.path().join(name)).ok();
    Some(AppKey {
        pkcs1_pem: String::from_utf8(read("k1.pem")?).ok()?,
        pkcs8_pem: String::from_utf8(read("k8.pem")?).ok()?,
        public_der: read("pub.der")?,
    })
}

fn app_stub(key: &AppKey) -> ForgeStub {
    let stub = ForgeStub::start(ForgeKind::GitHub, TOKEN);
    stub.enable_github_app("12345", key.public_der.clone(), 77);
    stub
}

fn app_client(stub: &ForgeStub, app_id: &str, installation_id: Option<u64>, pem: &str) -> AnyForge {
    let auth = ForgeAuth::GitHubApp {
        app_id: app_id.into(),
        installation_id,
        private_key_pem: pem.into(),
    };
    connect(&coordinates(&ForgeKind::GitHub, &stub.url()), auth).unwrap()
}

fn count(stub: &ForgeStub, call: &str) -> usize {
    stub.request_log().iter().filter(|l| *l == call).count()
}

const INSTALLATION: &str = "GET /repos/acme/widgets/installation";
const ACCESS_TOKEN: &str = "POST /app/installations/77/access_tokens";

#[tokio::test]
async fn github_app_with_either_key_format() {
    let Some(key) = app_key() else {
        println!("SKIPPED: openssl is not available to make an RSA key");
        return;
    };
    assert!(key.pkcs1_pem.contains("BEGIN RSA PRIVATE KEY"));
    assert!(key.pkcs8_pem.contains("BEGIN PRIVATE KEY"));
    for pem in [&key.pkcs1_pem, &key.pkcs8_pem] {
        let stub = app_stub(key);
        let forge = app_client(&stub, "12345", None, pem);
        let created = forge.create(&proposal(HEAD, "t", "b")).await.unwrap();
        assert_eq!(
            forge.get(created.number).await.unwrap(),
            Some(created.clone())
        );
        forge.close(created.number, "done").await.unwrap();
        assert_eq!(forge.git_token().await.unwrap(), TOKEN);
        assert_eq!(forge.git_username(), "x-access-token");
        // One look-up and one token for all of that: the token is cached.
        assert_eq!(count(&stub, INSTALLATION), 1);
        assert_eq!(count(&stub, ACCESS_TOKEN), 1);
    }
}

#[tokio::test]
async fn github_app_with_a_known_installation_and_short_lived_tokens() {
    let Some(key) = app_key() else {
        println!("SKIPPED: openssl is not available to make an RSA key");
        return;
    };
    let stub = app_stub(key);
    // Tokens that expire within the 5-minute margin are renewed on every call.
    stub.set_app_token_ttl(Duration::from_secs(200));
    let forge = app_client(&stub, "12345", Some(77), &key.pkcs1_pem);
    assert_eq!(forge.get(1).await.unwrap(), None);
    assert_eq!(forge.get(1).await.unwrap(), None);
    assert_eq!(count(&stub, INSTALLATION), 0);
    assert_eq!(count(&stub, ACCESS_TOKEN), 2);
}

#[tokio::test]
async fn github_app_with_the_wrong_id_or_key_is_unauthorized() {
    let Some(key) = app_key() else {
        println!("SKIPPED: openssl is not available to make an RSA key");
        return;
    };
    let stub = app_stub(key);
    let forge = app_client(&stub, "999", None, &key.pkcs1_pem);
    let error = forge.get(1).await.unwrap_err();
    assert_eq!(error, ForgeError::Unauthorized);
    assert_eq!(count(&stub, ACCESS_TOKEN), 0);
    // The right id with another key: the stub checks the signature.
    let other = make_key().expect("openssl made one key already");
    let forge = app_client(&stub, "12345", None, &other.pkcs8_pem);
    assert_eq!(forge.get(1).await.unwrap_err(), ForgeError::Unauthorized);
    assert_eq!(count(&stub, ACCESS_TOKEN), 0);
    // A bad key is caught at connect time.
    let auth = ForgeAuth::GitHubApp {
        app_id: "12345".into(),
        installation_id: None,
        private_key_pem: "-----BEGIN RSA PRIVATE KEY-----\nAAAA\n-----END RSA PRIVATE KEY-----"
            .into(),
    };
    let coords = coordinates(&ForgeKind::GitHub, &stub.url());
    assert!(matches!(connect(&coords, auth), Err(ForgeError::Config(_))));
}
