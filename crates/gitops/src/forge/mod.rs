//! Pull requests on GitHub and merge requests on GitLab behind one small trait.
//!
//! [`RepoCoordinates::resolve`] turns a clone URL into the forge's kind, API URL and project;
//! [`connect`] builds an [`AnyForge`] from them and a credential. Every call is one or a few
//! REST requests with a 30 s timeout; nothing sleeps or retries inside the client. A rate
//! limit comes back as [`ForgeError::RateLimited`] with the wait the forge asked for, so the
//! reconciler can requeue instead of blocking a worker.
//!
//! Both forges call a change request a "pull request" here; on GitLab `number` is the merge
//! request's `iid` (the `!N` users see).

mod app;
mod coords;
mod github;
mod gitlab;
mod http;

use std::future::Future;
use std::time::Duration;

pub use github::GitHub;
pub use gitlab::GitLab;

/// Which REST API a repository's forge speaks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ForgeKind {
    /// github.com, GitHub Enterprise Server (`/api/v3`) or GHE.com.
    GitHub,
    /// gitlab.com or a self-managed GitLab (`/api/v4`).
    GitLab,
}

/// Where the repository lives on its forge.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RepoCoordinates {
    /// Which forge's API it speaks.
    pub kind: ForgeKind,
    /// The REST API root, without a trailing slash: `https://api.github.com`,
    /// `https://ghe.example.com/api/v3`, `https://gitlab.example.com/api/v4`.
    pub api_url: String,
    /// `owner/name` on GitHub, `group/sub/name` on GitLab.
    pub project: String,
}

/// The credential for the forge's API (and for git over HTTPS, see [`AnyForge::git_token`]).
#[derive(Clone)]
pub enum ForgeAuth {
    /// A GitHub personal access token (classic or fine-grained) or a GitLab personal,
    /// project or group access token.
    Token(String),
    /// A GitHub App: a JWT signed with the App's key buys an installation token (1 h),
    /// cached and refreshed 5 minutes before it expires.
    GitHubApp {
        /// The App's numeric id (or its client id, `Iv1.…`): the JWT's `iss`.
        app_id: String,
        /// Looked up from the repository (`GET /repos/{o}/{r}/installation`) when absent.
        installation_id: Option<u64>,
        /// The App's private key as GitHub hands it out (PKCS#1, `BEGIN RSA PRIVATE KEY`)
        /// or PKCS#8 (`BEGIN PRIVATE KEY`).
        private_key_pem: String,
    },
}

impl std::fmt::Debug for ForgeAuth {
    // Secrets stay out of logs and panics.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Token(_) => f.write_str("Token(<redacted>)"),
            Self::GitHubApp {
                app_id,
                installation_id,
                ..
            } => f
                .debug_struct("GitHubApp")
                .field("app_id", app_id)
                .field("installation_id", installation_id)
                .field("private_key_pem", &"<redacted>")
                .finish(),
        }
    }
}

/// Where a pull request stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PrState {
    /// Open (GitLab `opened`, or `locked` while a merge is in progress).
    Open,
    /// Closed without merging.
    Closed,
    /// Merged into its base.
    Merged,
}

/// A pull request (GitHub) or merge request (GitLab) as goodput needs it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PullRequest {
    /// GitHub's number, GitLab's `iid`.
    pub number: u64,
    /// The page a human opens.
    pub url: String,
    /// Open, closed or merged.
    pub state: PrState,
    /// The branch with the change.
    pub head_branch: String,
    /// The commit the head branch points at, when the forge reports it.
    pub head_sha: Option<String>,
    /// The title.
    pub title: String,
    /// The description (empty when the forge has none).
    pub body: String,
}

/// What [`Forge::create`] opens.
#[derive(Clone, Debug)]
pub struct NewPullRequest<'a> {
    /// The title.
    pub title: &'a str,
    /// The description (Markdown).
    pub body: &'a str,
    /// The branch with the change.
    pub head: &'a str,
    /// The branch to merge into.
    pub base: &'a str,
    /// Labels to set (created by the forge where it does that).
    pub labels: &'a [String],
    /// User logins. On GitHub, `team:slug` or `org/slug` requests a team review; GitLab has
    /// no team reviewers, so those are skipped with a warning there.
    pub reviewers: &'a [String],
    /// User logins to assign.
    pub assignees: &'a [String],
}

/// The few pull-request operations goodput's Propose mode needs, on either forge.
///
/// Mutating calls on one client are serialised (GitHub's secondary limits punish bursts of
/// writes); reads run concurrently.
pub trait Forge: Send + Sync {
    /// The pull request with this number; `None` when the forge answers 404.
    fn get(
        &self,
        number: u64,
    ) -> impl Future<Output = Result<Option<PullRequest>, ForgeError>> + Send;

    /// The most recent pull request from `head` into `base`: the open one first, else the
    /// most recently closed or merged one.
    fn find_by_branch(
        &self,
        head: &str,
        base: &str,
    ) -> impl Future<Output = Result<Option<PullRequest>, ForgeError>> + Send;

    /// Opens a pull request, then adds labels, reviewers and assignees (best effort: the
    /// pull request exists by then, so a failure there is logged, not returned).
    ///
    /// When one is already open for (`head`, `base`) (GitHub 422, GitLab 409) that one is
    /// returned, with its title and body set to ours; labels, reviewers and assignees are
    /// then left as they are.
    fn create(
        &self,
        pr: &NewPullRequest<'_>,
    ) -> impl Future<Output = Result<PullRequest, ForgeError>> + Send;

    /// Sets the title and body.
    fn update(
        &self,
        number: u64,
        title: &str,
        body: &str,
    ) -> impl Future<Output = Result<PullRequest, ForgeError>> + Send;

    /// Comments (unless `comment` is blank), then closes. A pull request that is already
    /// closed or merged is returned as it is, without a comment.
    fn close(
        &self,
        number: u64,
        comment: &str,
    ) -> impl Future<Output = Result<PullRequest, ForgeError>> + Send;

    /// Adds a comment (GitLab: a note).
    fn comment(
        &self,
        number: u64,
        body: &str,
    ) -> impl Future<Output = Result<(), ForgeError>> + Send;

    /// The forge's limit on a pull request's body, in characters.
    fn body_limit(&self) -> usize;
}

/// Either forge, so callers can hold one type.
pub enum AnyForge {
    /// GitHub (github.com, Enterprise Server or GHE.com).
    GitHub(GitHub),
    /// GitLab (gitlab.com or self-managed).
    GitLab(GitLab),
}

impl AnyForge {
    /// Which forge this is.
    pub fn kind(&self) -> ForgeKind {
        match self {
            Self::GitHub(_) => ForgeKind::GitHub,
            Self::GitLab(_) => ForgeKind::GitLab,
        }
    }

    /// The password for git over HTTPS: the token itself, or a current GitHub App
    /// installation token (fetched or refreshed as needed).
    pub async fn git_token(&self) -> Result<String, ForgeError> {
        match self {
            Self::GitHub(f) => f.token().await,
            Self::GitLab(f) => Ok(f.token().to_owned()),
        }
    }

    /// The user name that goes with [`Self::git_token`]: GitHub App tokens need
    /// `x-access-token` (PATs accept any), GitLab tokens `oauth2`.
    pub fn git_username(&self) -> &'static str {
        match self {
            Self::GitHub(_) => "x-access-token",
            Self::GitLab(_) => "oauth2",
        }
    }
}

impl Forge for AnyForge {
    async fn get(&self, number: u64) -> Result<Option<PullRequest>, ForgeError> {
        match self {
            Self::GitHub(f) => f.get(number).await,
            Self::GitLab(f) => f.get(number).await,
        }
    }

    async fn find_by_branch(
        &self,
        head: &str,
        base: &str,
    ) -> Result<Option<PullRequest>, ForgeError> {
        match self {
            Self::GitHub(f) => f.find_by_branch(head, base).await,
            Self::GitLab(f) => f.find_by_branch(head, base).await,
        }
    }

    async fn create(&self, pr: &NewPullRequest<'_>) -> Result<PullRequest, ForgeError> {
        match self {
            Self::GitHub(f) => f.create(pr).await,
            Self::GitLab(f) => f.create(pr).await,
        }
    }

    async fn update(
        &self,
        number: u64,
        title: &str,
        body: &str,
    ) -> Result<PullRequest, ForgeError> {
        match self {
            Self::GitHub(f) => f.update(number, title, body).await,
            Self::GitLab(f) => f.update(number, title, body).await,
        }
    }

    async fn close(&self, number: u64, comment: &str) -> Result<PullRequest, ForgeError> {
        match self {
            Self::GitHub(f) => f.close(number, comment).await,
            Self::GitLab(f) => f.close(number, comment).await,
        }
    }

    async fn comment(&self, number: u64, body: &str) -> Result<(), ForgeError> {
        match self {
            Self::GitHub(f) => f.comment(number, body).await,
            Self::GitLab(f) => f.comment(number, body).await,
        }
    }

    fn body_limit(&self) -> usize {
        match self {
            Self::GitHub(f) => f.body_limit(),
            Self::GitLab(f) => f.body_limit(),
        }
    }
}

/// A client for the repository's forge. Builds the HTTP client only (no request is made);
/// a GitHub App key is parsed here, so a bad key fails now rather than at the first call.
pub fn connect(coords: &RepoCoordinates, auth: ForgeAuth) -> Result<AnyForge, ForgeError> {
    let api = http::api_base(&coords.api_url)?;
    let client = http::client()?;
    match (&coords.kind, auth) {
        (ForgeKind::GitHub, auth) => Ok(AnyForge::GitHub(GitHub::new(
            client,
            api,
            &coords.project,
            auth,
        )?)),
        (ForgeKind::GitLab, ForgeAuth::Token(token)) => Ok(AnyForge::GitLab(GitLab::new(
            client,
            api,
            &coords.project,
            token,
        )?)),
        (ForgeKind::GitLab, ForgeAuth::GitHubApp { .. }) => Err(ForgeError::Config(
            "a GitHub App credential cannot authenticate to GitLab; use an access token".into(),
        )),
    }
}

/// Why a forge call failed. The text never holds the credential; it may hold the forge's
/// own `message`, cut to about 300 characters.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ForgeError {
    /// 401: the credential is wrong or expired.
    #[error("the forge rejected the credentials (401 Unauthorized)")]
    Unauthorized,
    /// 403 (not a rate limit): the credential may not do this.
    #[error("the forge refused the request (403 Forbidden): {message}")]
    Forbidden {
        /// The forge's message.
        message: String,
    },
    /// 404: the repository, branch or pull request does not exist (or is hidden from the
    /// credential).
    #[error("not found on the forge: {what}")]
    NotFound {
        /// What was looked for.
        what: String,
    },
    /// The forge's rate limit: a 429, or on GitHub a 403 whose headers or message say
    /// so (a 403 without them is [`ForgeError::Forbidden`]).
    #[error("the forge's rate limit was hit; retry in {}s", retry_after.as_secs())]
    RateLimited {
        /// When the forge allows the next call.
        retry_after: Duration,
    },
    /// 422, or any other 4xx not named above: the request is invalid, e.g. a pull request
    /// for that branch exists already.
    #[error("the forge rejected the request: {message}")]
    Validation {
        /// The forge's message.
        message: String,
    },
    /// 5xx: the forge failed; retried after a while.
    #[error("the forge failed ({status}): {message}")]
    Server {
        /// The HTTP status.
        status: u16,
        /// The forge's message.
        message: String,
    },
    /// No usable answer: the connection failed or timed out, or a success's body did not
    /// parse (a proxy's page, say).
    #[error("cannot reach the forge: {0}")]
    Transport(String),
    /// The settings cannot work (a repository URL it cannot read, a GitHub App key that
    /// does not load).
    #[error("forge configuration: {0}")]
    Config(String),
}

/// How long to wait after a server error or an unreachable forge.
const UNAVAILABLE_RETRY: Duration = Duration::from_secs(30);

impl ForgeError {
    /// The reason for a status condition (CamelCase).
    pub fn reason(&self) -> &'static str {
        match self {
            Self::Unauthorized => "ForgeUnauthorized",
            Self::Forbidden { .. } => "ForgeForbidden",
            Self::NotFound { .. } => "ForgeNotFound",
            Self::RateLimited { .. } => "ForgeRateLimited",
            Self::Validation { .. } => "ForgeRejected",
            Self::Server { .. } | Self::Transport(_) => "ForgeUnavailable",
            Self::Config(_) => "ForgeConfig",
        }
    }

    /// When to try again: the forge's wait for a rate limit, 30 s for a server error or an
    /// unreachable forge, `None` where retrying the same call cannot help.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            Self::RateLimited { retry_after } => Some(*retry_after),
            Self::Server { .. } | Self::Transport(_) => Some(UNAVAILABLE_RETRY),
            _ => None,
        }
    }
}

/// GitHub's "A pull request already exists" (422) and GitLab's "Another open merge request
/// already exists" (409) both say this.
fn already_exists(error: &ForgeError) -> bool {
    matches!(error, ForgeError::Validation { message } if message.contains("already exists"))
}

/// The pull request [`Forge::find_by_branch`] returns from those with the right branches:
/// the open one (the newest, should there be several), else the one closed or merged last.
/// `closed_at` is the forge's timestamp, which within one forge sorts as text.
fn most_relevant(candidates: Vec<(PullRequest, Option<String>)>) -> Option<PullRequest> {
    let newest_open = candidates
        .iter()
        .filter(|(pr, _)| pr.state == PrState::Open)
        .max_by_key(|(pr, _)| pr.number)
        .map(|(pr, _)| pr.clone());
    newest_open.or_else(|| {
        candidates
            .into_iter()
            .max_by(|(a, a_closed), (b, b_closed)| (a_closed, a.number).cmp(&(b_closed, b.number)))
            .map(|(pr, _)| pr)
    })
}

/// GitHub: `team:slug` and `org/slug` are teams, the rest users. The org part is dropped:
/// the API takes team slugs of the repository's own organisation.
fn split_reviewers(reviewers: &[String]) -> (Vec<String>, Vec<String>) {
    let mut users = Vec::new();
    let mut teams = Vec::new();
    for reviewer in reviewers {
        let reviewer = reviewer.trim().trim_start_matches('@');
        if let Some(team) = reviewer.strip_prefix("team:") {
            teams.push(team.to_owned());
        } else if let Some((_, team)) = reviewer.split_once('/') {
            teams.push(team.to_owned());
        } else if !reviewer.is_empty() {
            users.push(reviewer.to_owned());
        }
    }
    (users, teams)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pr(number: u64, state: PrState) -> PullRequest {
        PullRequest {
            number,
            url: String::new(),
            state,
            head_branch: "b".into(),
            head_sha: None,
            title: String::new(),
            body: String::new(),
        }
    }

    #[test]
    fn the_open_pull_request_wins_else_the_last_closed() {
        let closed_late = (pr(1, PrState::Merged), Some("2026-02-01T00:00:00Z".into()));
        let closed_early = (pr(3, PrState::Closed), Some("2026-01-01T00:00:00Z".into()));
        let open = (pr(2, PrState::Open), None);
        let all = vec![closed_late.clone(), open, closed_early.clone()];
        assert_eq!(most_relevant(all).map(|p| p.number), Some(2));
        let closed = vec![closed_early, closed_late];
        assert_eq!(most_relevant(closed).map(|p| p.number), Some(1));
        assert_eq!(most_relevant(Vec::new()), None);
    }

    #[test]
    fn reviewers_split_into_users_and_teams() {
        let given = ["alice", "team:sre", "acme/platform", "@bob", " "].map(String::from);
        let (users, teams) = split_reviewers(&given);
        assert_eq!(users, ["alice", "bob"]);
        assert_eq!(teams, ["sre", "platform"]);
    }

    #[test]
    fn reasons_and_retries() {
        let limited = ForgeError::RateLimited {
            retry_after: Duration::from_secs(7),
        };
        assert_eq!(limited.reason(), "ForgeRateLimited");
        assert_eq!(limited.retry_after(), Some(Duration::from_secs(7)));
        let down = ForgeError::Transport("refused".into());
        assert_eq!(down.reason(), "ForgeUnavailable");
        assert!(down.retry_after().is_some());
        assert_eq!(ForgeError::Unauthorized.retry_after(), None);
        assert_eq!(ForgeError::Config("x".into()).reason(), "ForgeConfig");
    }

    #[test]
    fn auth_debug_hides_secrets() {
        let token = format!("{:?}", ForgeAuth::Token("ghp_secret".into()));
        assert!(!token.contains("ghp_secret"));
        let app = ForgeAuth::GitHubApp {
            app_id: "1".into(),
            installation_id: None,
            private_key_pem: "PEM-SECRET".into(),
        };
        assert!(!format!("{app:?}").contains("PEM-SECRET"));
    }
}
