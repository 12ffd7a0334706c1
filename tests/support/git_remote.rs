//! Git remotes for tests: a bare repository on disk ([`BareRemote`], reached by a `file://`
//! URL) and the same repository served over smart HTTP behind token auth ([`HttpRemote`],
//! `git http-backend` run as a CGI).
//!
//! The helpers call `git` synchronously and panic on failure: they set the scene and inspect
//! the result; the code under test is what runs asynchronously.

#![allow(dead_code)] // each test binary uses its own part of the support

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use tokio::io::AsyncWriteExt as _;

/// A bare repository in a temporary directory, removed on drop.
pub struct BareRemote {
    dir: tempfile::TempDir,
    path: PathBuf,
    base: String,
    clones: AtomicUsize,
}

impl BareRemote {
    /// A bare repository whose branch `base` has one commit (by "Base Author") holding
    /// `files`, byte for byte (CRLF kept).
    pub fn new(files: &[(&str, &str)], base: &str) -> BareRemote {
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::create_dir(dir.path().join("home")).expect("home dir");
        let path = dir.path().join("remote.git");
        let remote = BareRemote {
            path: path.clone(),
            dir,
            base: base.to_owned(),
            clones: AtomicUsize::new(0),
        };
        let root = remote.dir.path();
        remote.git_in(
            root,
            &["init", "--quiet", "--bare", "-b", base, "remote.git"],
        );
        remote.git(&["config", "http.receivepack", "true"]);
        remote.git_in(root, &["init", "--quiet", "-b", base, "seed"]);
        let seed = root.join("seed");
        for (file, content) in files {
            write_file(&seed.join(file), content);
        }
        remote.git_in(&seed, &["add", "--all"]);
        remote.git_in(
            &seed,
            &[
                "-c",
                "user.name=Base Author",
                "-c",
                "user.email=base@example.com",
                "commit",
                "--quiet",
                "-m",
                "initial",
            ],
        );
        let target = path.to_string_lossy().into_owned();
        remote.git_in(&seed, &["push", "--quiet", &target, base]);
        std::fs::remove_dir_all(&seed).expect("remove seed");
        remote
    }

    /// `file:///…/remote.git`.
    pub fn file_url(&self) -> String {
        format!("file://{}", self.path.display())
    }

    /// The bare repository's directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The commit `branch` points at, `None` if there is no such branch.
    pub fn head(&self, branch: &str) -> Option<String> {
        let refname = format!("refs/heads/{branch}");
        let out = self.run_git(&["rev-parse", "--verify", "--quiet", &refname]);
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
    }

    /// The bytes of `path` at `branch`, `None` if either is missing.
    pub fn show(&self, branch: &str, path: &str) -> Option<String> {
        let object = format!("refs/heads/{branch}:{path}");
        let out = self.run_git(&["cat-file", "blob", &object]);
        out.status
            .success()
            .then(|| String::from_utf8(out.stdout).expect("UTF-8 file"))
    }

    /// Pushes a commit by "A Human" that writes `content` to `path` on `branch` (created from
    /// the base if missing), from a separate clone. Returns the new head.
    pub fn commit_as_human(
        &self,
        branch: &str,
        path: &str,
        content: &str,
        message: &str,
    ) -> String {
        let n = self.clones.fetch_add(1, Ordering::Relaxed);
        let name = format!("human-{n}");
        let url = self.file_url();
        self.git_in(self.dir.path(), &["clone", "--quiet", &url, &name]);
        let work = self.dir.path().join(&name);
        let start = if self.head(branch).is_some() {
            format!("origin/{branch}")
        } else {
            format!("origin/{}", self.base)
        };
        self.git_in(&work, &["checkout", "--quiet", "-B", branch, &start]);
        write_file(&work.join(path), content);
        self.git_in(&work, &["add", "--", path]);
        self.git_in(
            &work,
            &[
                "-c",
                "user.name=A Human",
                "-c",
                "user.email=human@example.com",
                "commit",
                "--quiet",
                "-m",
                message,
            ],
        );
        self.git_in(&work, &["push", "--quiet", "origin", branch]);
        std::fs::remove_dir_all(&work).expect("remove human clone");
        self.head(branch).expect("pushed branch")
    }

    /// `(sha, author name, subject)` of every commit on `branch`, newest first.
    pub fn log(&self, branch: &str) -> Vec<(String, String, String)> {
        let refname = format!("refs/heads/{branch}");
        let out = self.git(&["log", "--format=%H%x1f%an%x1f%s", &refname]);
        out.lines()
            .map(|line| {
                let mut f = line.split('\x1f').map(str::to_owned);
                let mut next = || f.next().unwrap_or_default();
                (next(), next(), next())
            })
            .collect()
    }

    /// The files `branch` changes relative to the base branch.
    pub fn changed_files(&self, branch: &str) -> Vec<String> {
        let range = format!("refs/heads/{}...refs/heads/{branch}", self.base);
        let out = self.git(&["diff", "--name-only", &range]);
        out.lines().map(str::to_owned).collect()
    }

    /// The raw commit object (headers, signature, message).
    pub fn raw_commit(&self, sha: &str) -> String {
        self.git(&["cat-file", "commit", sha])
    }

    /// Installs a pre-receive hook that rejects every update of `branch`, the way a
    /// GitHub protected branch does.
    pub fn protect(&self, branch: &str) {
        let hook = self.path.join("hooks/pre-receive");
        let script = format!(
            "#!/bin/sh\n\
             while read old new ref; do\n\
               if [ \"$ref\" = \"refs/heads/{branch}\" ]; then\n\
                 echo \"error: GH006: Protected branch update failed for $ref.\" >&2\n\
                 echo \"protected branch hook declined\" >&2\n\
                 exit 1\n\
               fi\n\
             done\n"
        );
        std::fs::write(&hook, script).expect("write hook");
        make_executable(&hook);
    }

    /// Runs git in the bare repository and returns its output, whatever the status.
    pub fn run_git(&self, args: &[&str]) -> Output {
        self.command(&self.path, args).output().expect("run git")
    }

    /// Runs git in the bare repository; its stdout, panicking on failure.
    fn git(&self, args: &[&str]) -> String {
        self.git_in(&self.path, args)
    }

    fn git_in(&self, cwd: &Path, args: &[&str]) -> String {
        let out = self.command(cwd, args).output().expect("run git");
        assert!(
            out.status.success(),
            "git {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// `git` free of the host's configuration, keeping bytes as they are.
    fn command(&self, cwd: &Path, args: &[&str]) -> Command {
        let mut command = Command::new("git");
        command
            .current_dir(cwd)
            .stdin(Stdio::null())
            .env("HOME", self.dir.path().join("home"))
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("LC_ALL", "C")
            .args(["-c", "core.autocrlf=false", "-c", "core.safecrlf=false"])
            .args(args);
        command
    }
}

fn write_file(path: &Path, content: &str) {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).expect("create dirs");
    }
    std::fs::write(path, content).expect("write file");
}

fn make_executable(path: &Path) {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
}

/// A [`BareRemote`] served over smart HTTP on 127.0.0.1 that requires
/// `Authorization: Basic base64(username:token)`; stops on drop.
pub struct HttpRemote {
    addr: SocketAddr,
    server: tokio::task::JoinHandle<()>,
    served: Arc<Served>,
}

struct Served {
    /// The directory holding `remote.git` (`GIT_PROJECT_ROOT`).
    root: PathBuf,
    home: PathBuf,
    username: String,
    expected: String,
    /// Requests turned away with 401.
    unauthorized: AtomicUsize,
}

impl HttpRemote {
    /// Serves `bare` until dropped. Call from within a Tokio runtime.
    pub async fn start(bare: &BareRemote, username: &str, token: &str) -> HttpRemote {
        let encoded =
            base64::engine::general_purpose::STANDARD.encode(format!("{username}:{token}"));
        let root = bare.path.parent().expect("parent dir").to_owned();
        let served = Arc::new(Served {
            root,
            home: bare.dir.path().join("home"),
            username: username.to_owned(),
            expected: format!("Basic {encoded}"),
            unauthorized: AtomicUsize::new(0),
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("local addr");
        let app = Router::new().fallback(cgi).with_state(served.clone());
        let server = tokio::spawn(async move {
            axum::serve(listener, app).await.expect("serve");
        });
        HttpRemote {
            addr,
            server,
            served,
        }
    }

    /// `http://127.0.0.1:PORT/remote.git`.
    pub fn url(&self) -> String {
        format!("http://{}/remote.git", self.addr)
    }

    /// How many requests were answered 401 so far.
    pub fn unauthorized(&self) -> usize {
        self.served.unauthorized.load(Ordering::Relaxed)
    }
}

impl Drop for HttpRemote {
    fn drop(&mut self) {
        self.server.abort();
    }
}

/// Checks the credentials, then runs `git http-backend` for the request.
async fn cgi(State(served): State<Arc<Served>>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let authorized = parts
        .headers
        .get(header::AUTHORIZATION)
        .is_some_and(|v| v.as_bytes() == served.expected.as_bytes());
    if !authorized {
        served.unauthorized.fetch_add(1, Ordering::Relaxed);
        return (
            StatusCode::UNAUTHORIZED,
            [(header::WWW_AUTHENTICATE, "Basic realm=\"x\"")],
            "unauthorized\n",
        )
            .into_response();
    }
    let body = match axum::body::to_bytes(body, usize::MAX).await {
        Ok(body) => body,
        Err(e) => return (StatusCode::BAD_REQUEST, e.to_string()).into_response(),
    };
    match run_backend(&served, &parts.method, &parts.uri, &parts.headers, &body).await {
        Ok(out) => parse_cgi(&out),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    }
}

/// `git http-backend` with the CGI environment for one request; its stdout.
async fn run_backend(
    served: &Served,
    method: &axum::http::Method,
    uri: &axum::http::Uri,
    headers: &HeaderMap,
    body: &[u8],
) -> std::io::Result<Vec<u8>> {
    let header_env = |name: &HeaderName| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned()
    };
    let mut command = tokio::process::Command::new("git");
    command
        .arg("http-backend")
        .env("HOME", &served.home)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_PROJECT_ROOT", &served.root)
        .env("GIT_HTTP_EXPORT_ALL", "1")
        .env("PATH_INFO", uri.path())
        .env("QUERY_STRING", uri.query().unwrap_or(""))
        .env("REQUEST_METHOD", method.as_str())
        .env("CONTENT_TYPE", header_env(&header::CONTENT_TYPE))
        .env("CONTENT_LENGTH", body.len().to_string())
        .env(
            "HTTP_CONTENT_ENCODING",
            header_env(&header::CONTENT_ENCODING),
        )
        .env(
            "HTTP_GIT_PROTOCOL",
            header_env(&HeaderName::from_static("git-protocol")),
        )
        .env("REMOTE_USER", &served.username)
        .env("REMOTE_ADDR", "127.0.0.1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true);
    let mut child = command.spawn()?;
    let mut stdin = child.stdin.take().expect("piped stdin");
    let body = body.to_vec();
    // Written concurrently: the backend may answer before it has read everything.
    let writer = tokio::spawn(async move {
        let _ = stdin.write_all(&body).await;
    });
    let out = child.wait_with_output().await?;
    let _ = writer.await;
    Ok(out.stdout)
}

/// A CGI response (`Status:` and other headers, a blank line, the body) as HTTP.
fn parse_cgi(out: &[u8]) -> Response {
    let (head, body) = split_head(out);
    let mut status = StatusCode::OK;
    let mut headers = HeaderMap::new();
    for line in String::from_utf8_lossy(head).lines() {
        let Some((name, value)) = line.split_once(':') else {
            continue;
        };
        let value = value.trim();
        if name.eq_ignore_ascii_case("status") {
            let code = value.split(' ').next().unwrap_or("500");
            status = code
                .parse::<u16>()
                .ok()
                .and_then(|c| StatusCode::from_u16(c).ok())
                .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        } else if let (Ok(name), Ok(value)) = (
            HeaderName::try_from(name.trim()),
            HeaderValue::try_from(value),
        ) {
            headers.append(name, value);
        }
    }
    let mut response = Response::new(Body::from(body.to_vec()));
    *response.status_mut() = status;
    *response.headers_mut() = headers;
    response
}

/// Splits CGI output at the first blank line (CRLF or LF).
fn split_head(out: &[u8]) -> (&[u8], &[u8]) {
    for (sep, len) in [(&b"\r\n\r\n"[..], 4), (&b"\n\n"[..], 2)] {
        if let Some(at) = out.windows(len).position(|w| w == sep) {
            return (&out[..at], &out[at + len..]);
        }
    }
    (&[], out)
}
