//! GitLab's REST API v4 (gitlab.com or self-managed): merge requests.

use reqwest::header::HeaderValue;
use reqwest::{Method, Url};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value, json};

use super::http::{endpoint, parse, send};
use super::{
    Forge, ForgeError, ForgeKind, NewPullRequest, PrState, PullRequest, already_exists,
    most_relevant,
};

/// GitLab's limit on a merge request's description.
const BODY_LIMIT: usize = 1_048_576;

/// A GitLab project's merge requests.
pub struct GitLab {
    http: reqwest::Client,
    api: Url,
    /// `group/sub/name`; encoded as one path segment in URLs.
    project: String,
    token: String,
    /// Serialises this client's writes.
    writes: tokio::sync::Mutex<()>,
}

#[derive(Deserialize)]
struct MergeRequest {
    iid: u64,
    web_url: String,
    state: String,
    title: String,
    description: Option<String>,
    source_branch: String,
    target_branch: String,
    sha: Option<String>,
    merged_at: Option<String>,
    closed_at: Option<String>,
}

impl From<MergeRequest> for PullRequest {
    fn from(mr: MergeRequest) -> Self {
        let state = match mr.state.as_str() {
            "merged" => PrState::Merged,
            "closed" => PrState::Closed,
            // `opened`, and `locked`: a merge in progress, not merged yet and not closed.
            _ => PrState::Open,
        };
        PullRequest {
            number: mr.iid,
            url: mr.web_url,
            state,
            head_branch: mr.source_branch,
            head_sha: mr.sha,
            title: mr.title,
            body: mr.description.unwrap_or_default(),
        }
    }
}

#[derive(Deserialize)]
struct User {
    id: u64,
}

impl GitLab {
    pub(super) fn new(
        http: reqwest::Client,
        api: Url,
        project: &str,
        token: String,
    ) -> Result<Self, ForgeError> {
        let project = project.trim_matches('/');
        if project.split('/').count() < 2 || project.split('/').any(str::is_empty) {
            return Err(ForgeError::Config(format!(
                "a GitLab project is group/name (or group/sub/name), got {project:?}"
            )));
        }
        if token.trim().is_empty() {
            return Err(ForgeError::Config("the GitLab token is empty".into()));
        }
        Ok(Self {
            http,
            api,
            project: project.to_owned(),
            token: token.trim().to_owned(),
            writes: tokio::sync::Mutex::new(()),
        })
    }

    pub(super) fn token(&self) -> &str {
        &self.token
    }

    /// A call on `segments` under the API root; returns the body of a 2xx answer.
    async fn call<T: DeserializeOwned>(
        &self,
        method: Method,
        segments: &[&str],
        query: &[(&str, &str)],
        body: Option<&Value>,
    ) -> Result<T, ForgeError> {
        let url = endpoint(&self.api, segments, query);
        let what = format!("{method} {}", url.path());
        let mut token = HeaderValue::from_str(&self.token)
            .map_err(|_| ForgeError::Config("the GitLab token is not a valid header".into()))?;
        token.set_sensitive(true);
        let mut request = self
            .http
            .request(method, url)
            .header("PRIVATE-TOKEN", token);
        if let Some(body) = body {
            request = request.json(body);
        }
        let text = send(request, &ForgeKind::GitLab, &what, &self.token).await?;
        parse(&text, &what)
    }

    /// A call on `/projects/{id}/merge_requests/…`.
    async fn mr_call<T: DeserializeOwned>(
        &self,
        method: Method,
        tail: &[&str],
        query: &[(&str, &str)],
        body: Option<&Value>,
    ) -> Result<T, ForgeError> {
        let mut segments = vec!["projects", self.project.as_str(), "merge_requests"];
        segments.extend_from_slice(tail);
        self.call(method, &segments, query, body).await
    }

    async fn get_mr(&self, iid: u64) -> Result<Option<PullRequest>, ForgeError> {
        let n = iid.to_string();
        match self
            .mr_call::<MergeRequest>(Method::GET, &[&n], &[], None)
            .await
        {
            Ok(mr) => Ok(Some(mr.into())),
            Err(ForgeError::NotFound { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    async fn find(&self, head: &str, base: &str) -> Result<Option<PullRequest>, ForgeError> {
        let query = [
            ("state", "all"),
            ("source_branch", head),
            ("target_branch", base),
            ("order_by", "created_at"),
            ("sort", "desc"),
            ("per_page", "100"),
        ];
        let mrs: Vec<MergeRequest> = self.mr_call(Method::GET, &[], &query, None).await?;
        let candidates = mrs
            .into_iter()
            .filter(|mr| mr.source_branch == head && mr.target_branch == base)
            .map(|mr| {
                let closed_at = mr.merged_at.clone().or_else(|| mr.closed_at.clone());
                (PullRequest::from(mr), closed_at)
            })
            .collect();
        Ok(most_relevant(candidates))
    }

    async fn put(&self, iid: u64, fields: &Value) -> Result<PullRequest, ForgeError> {
        let n = iid.to_string();
        let mr: MergeRequest = self.mr_call(Method::PUT, &[&n], &[], Some(fields)).await?;
        Ok(mr.into())
    }

    async fn set_text(&self, iid: u64, title: &str, body: &str) -> Result<PullRequest, ForgeError> {
        self.put(iid, &json!({ "title": title, "description": body }))
            .await
    }

    async fn add_note(&self, iid: u64, body: &str) -> Result<(), ForgeError> {
        let n = iid.to_string();
        let note = json!({ "body": body });
        self.mr_call::<Value>(Method::POST, &[&n, "notes"], &[], Some(&note))
            .await
            .map(|_| ())
    }

    /// User ids for usernames; a name GitLab does not know, a `team:`/`group/` name (GitLab
    /// has no team reviewers) or a failed look-up is skipped with a warning.
    async fn user_ids(&self, names: &[String], role: &str) -> Vec<u64> {
        let mut ids = Vec::new();
        for name in names {
            let name = name.trim().trim_start_matches('@');
            if name.is_empty() {
                continue;
            }
            if name.starts_with("team:") || name.contains('/') {
                tracing::warn!(name, role, "GitLab has no team {role}s; skipping");
                continue;
            }
            let query = [("username", name)];
            match self
                .call::<Vec<User>>(Method::GET, &["users"], &query, None)
                .await
            {
                Ok(users) => match users.first() {
                    Some(user) => ids.push(user.id),
                    None => tracing::warn!(name, role, "no such GitLab user; skipping"),
                },
                Err(error) => {
                    tracing::warn!(name, role, %error, "GitLab user look-up failed; skipping")
                }
            }
        }
        ids
    }

    /// The create request: labels as GitLab's comma string, people as user ids.
    async fn create_fields(&self, pr: &NewPullRequest<'_>) -> Value {
        let mut fields = Map::new();
        fields.insert("source_branch".into(), pr.head.into());
        fields.insert("target_branch".into(), pr.base.into());
        fields.insert("title".into(), pr.title.into());
        fields.insert("description".into(), pr.body.into());
        if !pr.labels.is_empty() {
            fields.insert("labels".into(), pr.labels.join(",").into());
        }
        let assignees = self.user_ids(pr.assignees, "assignee").await;
        if !assignees.is_empty() {
            fields.insert("assignee_ids".into(), assignees.into());
        }
        let reviewers = self.user_ids(pr.reviewers, "reviewer").await;
        if !reviewers.is_empty() {
            fields.insert("reviewer_ids".into(), reviewers.into());
        }
        Value::Object(fields)
    }

    /// After a 409 "already exists": the open merge request for the branches, with our text.
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
}

impl Forge for GitLab {
    async fn get(&self, number: u64) -> Result<Option<PullRequest>, ForgeError> {
        self.get_mr(number).await
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
        let fields = self.create_fields(pr).await;
        match self
            .mr_call::<MergeRequest>(Method::POST, &[], &[], Some(&fields))
            .await
        {
            Ok(mr) => Ok(mr.into()),
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
            .get_mr(number)
            .await?
            .ok_or_else(|| ForgeError::NotFound {
                what: format!("merge request !{number} in {}", self.project),
            })?;
        if current.state != PrState::Open {
            return Ok(current);
        }
        if !comment.trim().is_empty() {
            self.add_note(number, comment).await?;
        }
        self.put(number, &json!({ "state_event": "close" })).await
    }

    async fn comment(&self, number: u64, body: &str) -> Result<(), ForgeError> {
        let _writing = self.writes.lock().await;
        self.add_note(number, body).await
    }

    fn body_limit(&self) -> usize {
        BODY_LIMIT
    }
}
