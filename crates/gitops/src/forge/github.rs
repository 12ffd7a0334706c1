//! GitHub's REST API (github.com, GHES `/api/v3`, GHE.com), API version 2022-11-28.

use std::time::SystemTime;

use reqwest::{Method, Url};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use super::app::{AppAuth, InstallationToken};
use super::http::{endpoint, parse, send};
use super::{
    Forge, ForgeAuth, ForgeError, ForgeKind, NewPullRequest, PrState, PullRequest, already_exists,
    most_relevant, split_reviewers,
};

/// GitHub's limit on a pull request's body.
const BODY_LIMIT: usize = 65_536;
const API_VERSION: &str = "2022-11-28";

/// A GitHub repository's pull requests.
pub struct GitHub {
    http: reqwest::Client,
    api: Url,
    owner: String,
    repo: String,
    auth: Auth,
    /// Serialises this client's writes (GitHub's secondary limits punish bursts).
    writes: tokio::sync::Mutex<()>,
}

enum Auth {
    Token(String),
    /// Boxed: the key pair is large and most clients use a token.
    App(Box<AppAuth>),
}

#[derive(Deserialize)]
struct Pull {
    number: u64,
    html_url: String,
    state: String,
    title: String,
    body: Option<String>,
    head: Ref,
    base: Ref,
    merged_at: Option<String>,
    #[serde(default)]
    merged: Option<bool>,
    closed_at: Option<String>,
}

#[derive(Deserialize)]
struct Ref {
    #[serde(rename = "ref")]
    name: String,
    sha: Option<String>,
}

impl From<Pull> for PullRequest {
    fn from(pull: Pull) -> Self {
        let merged = pull.merged == Some(true) || pull.merged_at.is_some();
        let state = match (pull.state.as_str(), merged) {
            ("open", _) => PrState::Open,
            (_, true) => PrState::Merged,
            _ => PrState::Closed,
        };
        PullRequest {
            number: pull.number,
            url: pull.html_url,
            state,
            head_branch: pull.head.name,
            head_sha: pull.head.sha,
            title: pull.title,
            body: pull.body.unwrap_or_default(),
        }
    }
}

#[derive(Deserialize)]
struct Installation {
    id: u64,
}

#[derive(Deserialize)]
struct AccessToken {
    token: String,
    expires_at: String,
}

impl GitHub {
    pub(super) fn new(
        http: reqwest::Client,
        api: Url,
        project: &str,
        auth: ForgeAuth,
    ) -> Result<Self, ForgeError> {
        let (owner, repo) = match project.split('/').collect::<Vec<_>>()[..] {
            [owner, repo] if !owner.is_empty() && !repo.is_empty() => (owner, repo),
            _ => {
                return Err(ForgeError::Config(format!(
                    "a GitHub project is owner/name, got {project:?}"
                )));
            }
        };
        let auth = match auth {
            ForgeAuth::Token(token) if token.trim().is_empty() => {
                return Err(ForgeError::Config("the GitHub token is empty".into()));
            }
            ForgeAuth::Token(token) => Auth::Token(token.trim().to_owned()),
            ForgeAuth::GitHubApp {
                app_id,
                installation_id,
                private_key_pem,
            } => Auth::App(Box::new(AppAuth::new(
                app_id,
                installation_id,
                &private_key_pem,
            )?)),
        };
        Ok(Self {
            http,
            api,
            owner: owner.to_owned(),
            repo: repo.to_owned(),
            auth,
            writes: tokio::sync::Mutex::new(()),
        })
    }

    /// The token for the API and for git: the PAT, or a current installation token.
    pub(super) async fn token(&self) -> Result<String, ForgeError> {
        match &self.auth {
            Auth::Token(token) => Ok(token.clone()),
            Auth::App(app) => self.installation_token(app).await,
        }
    }

    /// The cached installation token, or a new one (looking the installation up first
    /// when its id was not given).
    async fn installation_token(&self, app: &AppAuth) -> Result<String, ForgeError> {
        let mut state = app.state.lock().await;
        let now = SystemTime::now();
        if let Some(token) = &state.token
            && token.fresh(now)
        {
            return Ok(token.value.clone());
        }
        let jwt = app.jwt(now)?;
        let installation_id = match state.installation_id {
            Some(id) => id,
            None => {
                let path = ["repos", &self.owner, &self.repo, "installation"];
                let found: Installation = self.app_call(Method::GET, &path, &jwt).await?;
                state.installation_id = Some(found.id);
                found.id
            }
        };
        let id = installation_id.to_string();
        let path = ["app", "installations", &id, "access_tokens"];
        let issued: AccessToken = self.app_call(Method::POST, &path, &jwt).await?;
        let token = InstallationToken::new(issued.token, &issued.expires_at, now);
        let value = token.value.clone();
        state.token = Some(token);
        Ok(value)
    }

    /// A call authenticated as the App itself (its JWT), for the installation endpoints.
    async fn app_call<T: DeserializeOwned>(
        &self,
        method: Method,
        segments: &[&str],
        jwt: &str,
    ) -> Result<T, ForgeError> {
        let url = endpoint(&self.api, segments, &[]);
        let what = format!("{method} {}", url.path());
        let request = self.headers(self.http.request(method, url), jwt);
        match send(request, &ForgeKind::GitHub, &what, jwt).await {
            Ok(body) => parse(&body, &what),
            Err(ForgeError::NotFound { .. }) => Err(ForgeError::NotFound {
                what: format!(
                    "a GitHub App installation with access to {}/{} ({what})",
                    self.owner, self.repo
                ),
            }),
            Err(e) => Err(e),
        }
    }

    fn headers(&self, request: reqwest::RequestBuilder, token: &str) -> reqwest::RequestBuilder {
        request
            .bearer_auth(token)
            .header(reqwest::header::ACCEPT, "application/vnd.github+json")
            .header("X-GitHub-Api-Version", API_VERSION)
    }

    /// A call on `/repos/{owner}/{repo}/…`; returns the body of a 2xx answer.
    async fn call(
        &self,
        method: Method,
        tail: &[&str],
        query: &[(&str, &str)],
        body: Option<&Value>,
    ) -> Result<(String, String), ForgeError> {
        let token = self.token().await?;
        let mut segments = vec!["repos", self.owner.as_str(), self.repo.as_str()];
        segments.extend_from_slice(tail);
        let url = endpoint(&self.api, &segments, query);
        let what = format!("{method} {}", url.path());
        let mut request = self.headers(self.http.request(method, url), &token);
        if let Some(body) = body {
            request = request.json(body);
        }
        let result = send(request, &ForgeKind::GitHub, &what, &token).await;
        if matches!(result, Err(ForgeError::Unauthorized)) {
            self.forget_installation_token().await;
        }
        result.map(|text| (text, what))
    }

    async fn call_json<T: DeserializeOwned>(
        &self,
        method: Method,
        tail: &[&str],
        query: &[(&str, &str)],
        body: Option<&Value>,
    ) -> Result<T, ForgeError> {
        let (text, what) = self.call(method, tail, query, body).await?;
        parse(&text, &what)
    }

    /// A revoked or expired installation token is fetched anew on the next call.
    async fn forget_installation_token(&self) {
        if let Auth::App(app) = &self.auth {
            app.state.lock().await.token = None;
        }
    }

    async fn get_pull(&self, number: u64) -> Result<Option<PullRequest>, ForgeError> {
        let n = number.to_string();
        match self
            .call_json::<Pull>(Method::GET, &["pulls", &n], &[], None)
            .await
        {
            Ok(pull) => Ok(Some(pull.into())),
            Err(ForgeError::NotFound { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    async fn find(&self, head: &str, base: &str) -> Result<Option<PullRequest>, ForgeError> {
        // Without `owner:` GitHub ignores the head filter and lists every pull request, so
        // the branches are checked again below.
        let head_filter = format!("{}:{head}", self.owner);
        let query = [
            ("state", "all"),
            ("head", head_filter.as_str()),
            ("base", base),
            ("sort", "created"),
            ("direction", "desc"),
            ("per_page", "100"),
        ];
        let pulls: Vec<Pull> = self
            .call_json(Method::GET, &["pulls"], &query, None)
            .await?;
        let candidates = pulls
            .into_iter()
            .filter(|p| p.head.name == head && p.base.name == base)
            .map(|p| {
                let closed_at = p.merged_at.clone().or_else(|| p.closed_at.clone());
                (PullRequest::from(p), closed_at)
            })
            .collect();
        Ok(most_relevant(candidates))
    }

    async fn patch(&self, number: u64, fields: &Value) -> Result<PullRequest, ForgeError> {
        let n = number.to_string();
        let pull: Pull = self
            .call_json(Method::PATCH, &["pulls", &n], &[], Some(fields))
            .await?;
        Ok(pull.into())
    }

    async fn set_text(
        &self,
        number: u64,
        title: &str,
        body: &str,
    ) -> Result<PullRequest, ForgeError> {
        self.patch(number, &json!({ "title": title, "body": body }))
            .await
    }

    async fn add_comment(&self, number: u64, body: &str) -> Result<(), ForgeError> {
        let n = number.to_string();
        let comment = json!({ "body": body });
        self.call(
            Method::POST,
            &["issues", &n, "comments"],
            &[],
            Some(&comment),
        )
        .await
        .map(|_| ())
    }

    /// After a 422 "already exists": the open pull request for the branches, with our text.
    async fn adopt_existing(
        &self,
        pr: &NewPullRequest<'_>,
        conflict: ForgeError,
    ) -> Result<PullRequest, ForgeError> {
        match self.find(pr.head, pr.base).await? {
            Some(existing) if existing.state == PrState::Open => {
                if existing.title == pr.title && existing.body == pr.body {
                    Ok(existing)
                } else {
                    self.set_text(existing.number, pr.title, pr.body).await
                }
            }
            _ => Err(conflict),
        }
    }

    /// Labels, reviewers and assignees on a new pull request; failures are logged only.
    async fn decorate(&self, number: u64, pr: &NewPullRequest<'_>) {
        let n = number.to_string();
        if !pr.labels.is_empty() {
            let labels = json!({ "labels": pr.labels });
            let result = self
                .call(Method::POST, &["issues", &n, "labels"], &[], Some(&labels))
                .await;
            warn_on_error(number, "labels", result);
        }
        let (users, teams) = split_reviewers(pr.reviewers);
        if !users.is_empty() || !teams.is_empty() {
            // A 422 here is typical (the author cannot review their own pull request, a
            // reviewer without access) and must not undo the pull request.
            let reviewers = json!({ "reviewers": users, "team_reviewers": teams });
            let path = ["pulls", &n, "requested_reviewers"];
            let result = self.call(Method::POST, &path, &[], Some(&reviewers)).await;
            warn_on_error(number, "reviewers", result);
        }
        if !pr.assignees.is_empty() {
            let assignees = json!({ "assignees": pr.assignees });
            let path = ["issues", &n, "assignees"];
            let result = self.call(Method::POST, &path, &[], Some(&assignees)).await;
            warn_on_error(number, "assignees", result);
        }
    }
}

fn warn_on_error<T>(number: u64, what: &str, result: Result<T, ForgeError>) {
    if let Err(error) = result {
        tracing::warn!(pull_request = number, %error, "could not add {what}; carrying on");
    }
}

impl Forge for GitHub {
    async fn get(&self, number: u64) -> Result<Option<PullRequest>, ForgeError> {
        self.get_pull(number).await
    }

    async fn find_by_branch(
        &self,
        head: &str,
        base: &str,
    ) -> Result<Option<PullRequest>, ForgeError> {
        self.find(head, base).await
    }

    async fn create(&self, pr: &NewPullRequest<'_>) -> Result<PullRequest, ForgeError> {
        let _writing = self.writes.lock().await;
        let fields =
            json!({ "title": pr.title, "body": pr.body, "head": pr.head, "base": pr.base });
        match self
            .call_json::<Pull>(Method::POST, &["pulls"], &[], Some(&fields))
            .await
        {
            Ok(pull) => {
                let created = PullRequest::from(pull);
                self.decorate(created.number, pr).await;
                Ok(created)
            }
            Err(conflict) if already_exists(&conflict) => self.adopt_existing(pr, conflict).await,
            Err(e) => Err(e),
        }
    }

    async fn update(
        &self,
        number: u64,
        title: &str,
        body: &str,
    ) -> Result<PullRequest, ForgeError> {
        let _writing = self.writes.lock().await;
        self.set_text(number, title, body).await
    }

    async fn close(&self, number: u64, comment: &str) -> Result<PullRequest, ForgeError> {
        let _writing = self.writes.lock().await;
        let current = self
            .get_pull(number)
            .await?
            .ok_or_else(|| ForgeError::NotFound {
                what: format!("pull request #{number} in {}/{}", self.owner, self.repo),
            })?;
        if current.state != PrState::Open {
            return Ok(current);
        }
        if !comment.trim().is_empty() {
            self.add_comment(number, comment).await?;
        }
        self.patch(number, &json!({ "state": "closed" })).await
    }

    async fn comment(&self, number: u64, body: &str) -> Result<(), ForgeError> {
        let _writing = self.writes.lock().await;
        self.add_comment(number, body).await
    }

    fn body_limit(&self) -> usize {
        BODY_LIMIT
    }
}
