//! The `git` command line as a subprocess, for one-commit proposal branches.
//!
//! A [`Checkout`] is a shallow clone of the base branch in a fresh temporary directory. A
//! proposal is one commit on top of the base head that changes exactly one file, pushed to a
//! plan-named branch with `--force-with-lease` set to the commit goodput pushed last: a branch
//! that someone else pushed to is never overwritten ([`GitError::LeaseRejected`]).
//!
//! Every `git` run is isolated from the host: no system or user configuration, no credential
//! helpers, no hooks, no terminal prompts, English messages, a timeout, and the whole process
//! group killed when it expires. Credentials travel only through the environment of the `git`
//! process (never argv, URLs or `.git/config`), and every message taken from git's stderr is
//! redacted before it reaches an error.

use std::ffi::OsString;
use std::fmt;
use std::io::Write as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use base64::Engine as _;
use tokio::process::Command;

/// How long one `git` command may run before it is killed, unless set otherwise.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(120);

/// Longest message (in bytes) taken from git's output into an error.
const MESSAGE_CAP: usize = 500;

/// Protocols git may use; `ext::` and friends (arbitrary commands) stay off.
const ALLOWED_PROTOCOLS: &str = "https:http:ssh:git:file";

/// Configuration given to every command: bytes kept as they are, no hooks, no signing unless
/// asked, no credential helpers, no background maintenance.
const SAFE_CONFIG: &[&str] = &[
    "core.autocrlf=false",
    "core.safecrlf=false",
    "core.symlinks=true",
    "core.hooksPath=/dev/null",
    "core.fsmonitor=false",
    "commit.gpgsign=false",
    "credential.helper=",
    "gc.auto=0",
    "maintenance.auto=false",
    "advice.detachedHead=false",
];

/// Written to `.git/info/attributes` (the highest precedence): the work tree holds each blob
/// byte for byte, whatever the repository's own `.gitattributes` says about line endings,
/// filters or encodings.
const RAW_ATTRIBUTES: &str = "* -text -eol -filter -ident -working-tree-encoding\n";

/// How to authenticate to the remote; never placed in argv, URLs, `.git/config` or logs.
#[derive(Clone)]
pub enum GitAuth {
    /// No credentials (public repositories, or a `file://` URL).
    None,
    /// HTTPS: sent as `http.extraHeader: Authorization: Basic base64(username:token)` through
    /// `GIT_CONFIG_COUNT`/`GIT_CONFIG_KEY_n`/`GIT_CONFIG_VALUE_n` in git's environment.
    /// GitHub wants the username `x-access-token`; GitLab accepts `oauth2`.
    Token {
        /// The Basic-auth user name.
        username: String,
        /// The access token (the Basic-auth password).
        token: String,
    },
    /// SSH: the key is written to a 0600 file in the checkout's temporary directory and used
    /// through `GIT_SSH_COMMAND` with `-o IdentitiesOnly=yes -o StrictHostKeyChecking=yes
    /// -o UserKnownHostsFile=<file> -F /dev/null`; `known_hosts` must list the server's key.
    SshKey {
        /// The OpenSSH private key, without a passphrase.
        private_key: String,
        /// `known_hosts` lines for the server.
        known_hosts: String,
    },
}

impl fmt::Debug for GitAuth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GitAuth::None => f.write_str("None"),
            GitAuth::Token { username, .. } => f
                .debug_struct("Token")
                .field("username", username)
                .field("token", &"<redacted>")
                .finish(),
            GitAuth::SshKey { known_hosts, .. } => f
                .debug_struct("SshKey")
                .field("private_key", &"<redacted>")
                .field("known_hosts", known_hosts)
                .finish(),
        }
    }
}

/// Author and committer of the proposal commits.
#[derive(Clone, Debug)]
pub struct Author {
    /// `user.name`.
    pub name: String,
    /// `user.email`.
    pub email: String,
}

/// Optional SSH commit signing (`-c gpg.format=ssh -c user.signingkey=<0600 file>`, `-S`).
/// Needs `ssh-keygen` in the image.
#[derive(Clone)]
pub struct Signing {
    /// An OpenSSH private key without a passphrase.
    pub ssh_private_key: String,
}

impl fmt::Debug for Signing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Signing")
            .field("ssh_private_key", &"<redacted>")
            .finish()
    }
}

/// Why a git operation failed. Messages that quote git have the credentials removed.
#[derive(Debug, thiserror::Error)]
pub enum GitError {
    /// The remote refused the credentials (or none were given and it needs some).
    #[error("git authentication failed: {message}")]
    Auth {
        /// What git said, without credentials.
        message: String,
    },
    /// No repository at that URL (or the credentials may not see it).
    #[error("git repository not found: {message}")]
    RepoNotFound {
        /// What git said, without credentials.
        message: String,
    },
    /// The repository has no branch by that name.
    #[error("base branch {base:?} not found in the repository")]
    BaseNotFound {
        /// The branch asked for.
        base: String,
    },
    /// The file is not in the commit that was read.
    #[error("file {path:?} not found in the repository")]
    FileNotFound {
        /// The path in the repository.
        path: String,
    },
    /// The branch no longer points at the commit we expected: someone else pushed to it
    /// (or deleted it, then `remote_sha` is `None`). Nothing was overwritten.
    #[error(
        "branch {branch:?} was changed by someone else (it is at {}); not overwriting it",
        remote_sha.as_deref().unwrap_or("nothing: deleted")
    )]
    LeaseRejected {
        /// The branch.
        branch: String,
        /// Where it points now (`None`: deleted).
        remote_sha: Option<String>,
    },
    /// The remote refused the update: a protected branch or a hook that declined it.
    #[error("push rejected by the remote: {message}")]
    PushRejected {
        /// What git said, without credentials.
        message: String,
    },
    /// The remote could not be reached, or the command timed out; worth retrying.
    #[error("git remote unavailable: {message}")]
    Unavailable {
        /// What git said, without credentials.
        message: String,
    },
    /// A program git needs is not on `PATH`.
    #[error(
        "`{program}` was not found on PATH: the operator image needs the git command line \
         (and ssh/ssh-keygen for SSH remotes or signing)"
    )]
    NotInstalled {
        /// The program's name.
        program: &'static str,
    },
    /// A branch name, path or sha that goodput refuses to hand to git.
    #[error("invalid git input: {message}")]
    InvalidInput {
        /// What is wrong with it.
        message: String,
    },
    /// Any other failure of a git command (`args` holds no secrets).
    #[error("`git {args}` failed: {message}")]
    Command {
        /// The command's arguments.
        args: String,
        /// What git said, without credentials.
        message: String,
    },
    /// Local files of the checkout.
    #[error("git checkout I/O: {0}")]
    Io(#[from] std::io::Error),
}

impl GitError {
    /// The reason to put on a status condition, in CamelCase.
    pub fn reason(&self) -> &'static str {
        match self {
            GitError::Auth { .. } => "GitAuthFailed",
            GitError::RepoNotFound { .. } => "GitRepoNotFound",
            GitError::BaseNotFound { .. } => "GitBaseNotFound",
            GitError::FileNotFound { .. } => "GitFileNotFound",
            GitError::LeaseRejected { .. } => "BranchEditedByHuman",
            GitError::PushRejected { .. } => "PushRejected",
            GitError::Unavailable { .. } => "GitUnavailable",
            GitError::NotInstalled { .. } => "GitNotInstalled",
            GitError::InvalidInput { .. } | GitError::Command { .. } | GitError::Io(_) => {
                "GitFailed"
            }
        }
    }

    /// Whether trying again later may succeed without anyone changing anything.
    pub fn retryable(&self) -> bool {
        matches!(self, GitError::Unavailable { .. } | GitError::Io(_))
    }
}

/// A shallow clone of the base branch in a temporary directory, removed on drop.
pub struct Checkout {
    git: Git,
    base: String,
    base_sha: String,
    // Declared last so it is dropped last: removing it deletes the clone and the key files.
    _dir: tempfile::TempDir,
}

impl Checkout {
    /// `git clone --depth 1 --single-branch --branch BASE URL` into a fresh temporary
    /// directory, with each command limited to [`DEFAULT_TIMEOUT`].
    pub async fn clone(url: &str, base: &str, auth: &GitAuth) -> Result<Checkout, GitError> {
        Self::clone_with_timeout(url, base, auth, DEFAULT_TIMEOUT).await
    }

    /// [`Checkout::clone`] with a different limit for each git command of this checkout.
    pub async fn clone_with_timeout(
        url: &str,
        base: &str,
        auth: &GitAuth,
        timeout: Duration,
    ) -> Result<Checkout, GitError> {
        check_branch(base)?;
        // 0700, under TMPDIR: point TMPDIR at a memory-backed volume to keep keys off disk.
        let dir = tempfile::Builder::new().prefix("goodput-git-").tempdir()?;
        let git = Git::new(dir.path(), auth, timeout)?;
        git.clone_base(url, base).await?;
        let base_sha = git.rev_parse("HEAD^{commit}").await?;
        Ok(Checkout {
            git,
            base: base.to_owned(),
            base_sha,
            _dir: dir,
        })
    }

    /// The base branch this checkout was cloned from.
    pub fn base(&self) -> &str {
        &self.base
    }

    /// The commit at the head of the base branch when it was cloned.
    pub fn base_sha(&self) -> &str {
        &self.base_sha
    }

    /// The clone's work tree (at the base head; commits never change it).
    pub fn work_tree(&self) -> &Path {
        &self.git.repo
    }

    /// The file at the base branch's head, read from the work tree (which holds it byte for
    /// byte). [`GitError::FileNotFound`] when absent; symbolic links are refused so that a
    /// repository cannot point goodput at a file outside it.
    pub fn read(&self, path: &str) -> Result<String, GitError> {
        check_path(path)?;
        let full = self.git.repo.join(path);
        refuse_symlinks(&self.git.repo, path)?;
        let bytes = match std::fs::read(&full) {
            Ok(bytes) => bytes,
            Err(e) if is_missing(&e) => return Err(not_found(path)),
            Err(e) if e.kind() == std::io::ErrorKind::IsADirectory => {
                return Err(not_a_file(path));
            }
            Err(e) => return Err(e.into()),
        };
        utf8(path, bytes)
    }

    /// The commit that `branch` points at on the remote (`git ls-remote`), `None` when there
    /// is no such branch.
    pub async fn remote_head(&self, branch: &str) -> Result<Option<String>, GitError> {
        check_branch(branch)?;
        let refname = format!("refs/heads/{branch}");
        let out = self.git.run(&["ls-remote", "origin", &refname]).await?;
        Ok(out.lines().find_map(|line| {
            let (sha, name) = line.split_once('\t')?;
            (name == refname).then(|| sha.to_owned())
        }))
    }

    /// The content of `path` at the remote `branch`, `None` when the branch does not exist.
    /// Used to see whether our branch already holds the desired change.
    /// [`GitError::FileNotFound`] when the branch exists without that file.
    pub async fn read_remote(&self, branch: &str, path: &str) -> Result<Option<String>, GitError> {
        check_branch(branch)?;
        check_path(path)?;
        let refname = format!("refs/heads/{branch}");
        let fetch = [
            "fetch",
            "--depth",
            "1",
            "--no-tags",
            "origin",
            refname.as_str(),
        ];
        let out = self.git.output(&self.git.repo, &os(&fetch), &[]).await?;
        if !out.status.success() {
            if stderr(&out).contains("couldn't find remote ref") {
                return Ok(None);
            }
            return Err(self.git.failure(&fetch, &out));
        }
        let head = self.git.rev_parse("FETCH_HEAD^{commit}").await?;
        match self.git.entry(&head, path).await? {
            Some(entry) if entry.kind == "blob" && entry.mode != "120000" => {
                let bytes = self
                    .git
                    .run_bytes(&["cat-file", "blob", &entry.sha])
                    .await?;
                utf8(path, bytes).map(Some)
            }
            Some(_) => Err(not_a_file(path)),
            None => Err(not_found(path)),
        }
    }

    /// Create or reset the local `branch` at the base head plus one commit that writes
    /// `content` to `path` byte for byte (CRLF and all) and changes nothing else. Author and
    /// committer are `author`; the commit is signed when `signing` is given. The work tree
    /// stays at the base head. Returns the new commit's sha.
    pub async fn commit(
        &self,
        branch: &str,
        path: &str,
        content: &str,
        message: &str,
        author: &Author,
        signing: Option<&Signing>,
    ) -> Result<String, GitError> {
        check_branch(branch)?;
        check_path(path)?;
        let mode = match self.git.entry(&self.base_sha, path).await? {
            None => "100644".to_owned(),
            Some(entry) if entry.kind == "blob" && entry.mode != "120000" => entry.mode,
            Some(_) => return Err(not_a_file(path)),
        };
        let blob = self.git.write_blob(content).await?;
        let tree = self
            .git
            .tree_with(&self.base_sha, path, &mode, &blob)
            .await?;
        let commit = self
            .git
            .commit_tree(&tree, &self.base_sha, message, author, signing)
            .await?;
        let refname = format!("refs/heads/{branch}");
        self.git.run(&["update-ref", &refname, &commit]).await?;
        Ok(commit)
    }

    /// Push the local `branch` with a lease: the remote branch must still be at `expected`
    /// (the sha we pushed last), or must not exist when `expected` is `None`.
    ///
    /// Someone else's push in between ⇒ [`GitError::LeaseRejected`] (a human edited the
    /// branch; it is left alone). A protected branch or a declining hook ⇒
    /// [`GitError::PushRejected`]. Pushing a commit the branch already has succeeds.
    pub async fn push(&self, branch: &str, expected: Option<&str>) -> Result<(), GitError> {
        check_branch(branch)?;
        let expected = expected.map(check_sha).transpose()?.unwrap_or("");
        let refspec = format!("refs/heads/{branch}:refs/heads/{branch}");
        match self.push_with_lease(branch, expected, &refspec).await? {
            PushOutcome::Done => Ok(()),
            PushOutcome::Stale => Err(self.lease_rejected(branch).await),
        }
    }

    /// Delete the remote `branch` only if it still points at `expected`. A branch that is
    /// already gone counts as deleted; one that moved ⇒ [`GitError::LeaseRejected`].
    pub async fn delete_remote_branch(&self, branch: &str, expected: &str) -> Result<(), GitError> {
        check_branch(branch)?;
        let expected = check_sha(expected)?;
        let refspec = format!(":refs/heads/{branch}");
        match self.push_with_lease(branch, expected, &refspec).await? {
            PushOutcome::Done => Ok(()),
            PushOutcome::Stale => match self.remote_head(branch).await? {
                None => Ok(()),
                remote_sha => Err(GitError::LeaseRejected {
                    branch: branch.to_owned(),
                    remote_sha,
                }),
            },
        }
    }

    /// `git push --porcelain --force-with-lease=refs/heads/B:<expected> origin <refspec>`,
    /// with git's per-ref verdict read from the porcelain output.
    async fn push_with_lease(
        &self,
        branch: &str,
        expected: &str,
        refspec: &str,
    ) -> Result<PushOutcome, GitError> {
        let lease = format!("--force-with-lease=refs/heads/{branch}:{expected}");
        let args = ["push", "--porcelain", &lease, "origin", refspec];
        let out = self.git.output(&self.git.repo, &os(&args), &[]).await?;
        let refname = format!("refs/heads/{branch}");
        match porcelain_verdict(&String::from_utf8_lossy(&out.stdout), &refname) {
            Some(Verdict::Updated) => Ok(PushOutcome::Done),
            Some(Verdict::Stale) => Ok(PushOutcome::Stale),
            Some(Verdict::Rejected(summary)) => Err(GitError::PushRejected {
                message: self.git.redactor.redact(&rejection_message(&out, &summary)),
            }),
            None if out.status.success() => Ok(PushOutcome::Done),
            None => Err(self.git.failure(&args, &out)),
        }
    }

    /// The lease error, with where the branch is now (best effort).
    async fn lease_rejected(&self, branch: &str) -> GitError {
        GitError::LeaseRejected {
            branch: branch.to_owned(),
            remote_sha: self.remote_head(branch).await.ok().flatten(),
        }
    }
}

impl fmt::Debug for Checkout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Checkout")
            .field("base", &self.base)
            .field("base_sha", &self.base_sha)
            .field("dir", &self._dir.path())
            .finish()
    }
}

enum PushOutcome {
    Done,
    Stale,
}

/// What `git push --porcelain` said about one ref.
#[derive(Debug, PartialEq)]
enum Verdict {
    /// Created, updated, deleted or already up to date.
    Updated,
    /// The lease did not hold.
    Stale,
    /// Refused for another reason; the summary text.
    Rejected(String),
}

/// The verdict on `refname` in porcelain output (`<flag>\t<from>:<to>\t<summary>`).
fn porcelain_verdict(stdout: &str, refname: &str) -> Option<Verdict> {
    stdout.lines().find_map(|line| {
        let mut fields = line.splitn(3, '\t');
        let flag = fields.next()?;
        let (_, to) = fields.next()?.rsplit_once(':')?;
        let summary = fields.next().unwrap_or("").trim();
        if to != refname {
            return None;
        }
        Some(match flag {
            "!" if summary.contains("stale info") => Verdict::Stale,
            "!" => Verdict::Rejected(summary.to_owned()),
            _ => Verdict::Updated,
        })
    })
}

/// The remote's own explanation (its `remote:` lines) followed by git's summary.
fn rejection_message(out: &Output, summary: &str) -> String {
    let text = stderr(out);
    let remote: Vec<&str> = text
        .lines()
        .filter_map(|line| line.strip_prefix("remote:"))
        .map(str::trim)
        .filter(|line| !line.is_empty())
        .collect();
    if remote.is_empty() {
        summary.to_owned()
    } else {
        format!("{}; {summary}", remote.join(" "))
    }
}

/// One entry of a tree, as `git ls-tree` prints it.
struct Entry {
    mode: String,
    kind: String,
    sha: String,
}

/// Runs git for one checkout: its directories, environment, redaction and timeout.
struct Git {
    /// The temporary directory: key files, scratch blobs and indexes live here.
    scratch: PathBuf,
    /// The clone's work tree.
    repo: PathBuf,
    /// `HOME` for git and ssh: empty, so no user configuration applies.
    home: PathBuf,
    /// Credentials and the ssh command, for every git process.
    auth_env: Vec<(&'static str, OsString)>,
    /// Takes credentials out of git's messages.
    redactor: Redactor,
    timeout: Duration,
    /// Names scratch files uniquely.
    counter: AtomicU64,
}

impl Git {
    /// Lays out `dir` (home, key files) and derives the environment for `auth`.
    fn new(dir: &Path, auth: &GitAuth, timeout: Duration) -> Result<Git, GitError> {
        let home = dir.join("home");
        std::fs::create_dir(&home)?;
        let mut auth_env = Vec::new();
        let mut ssh = String::from("ssh -o BatchMode=yes");
        match auth {
            GitAuth::None => {}
            GitAuth::Token { username, token } => {
                auth_env.push(("GIT_CONFIG_COUNT", "1".into()));
                auth_env.push(("GIT_CONFIG_KEY_0", "http.extraHeader".into()));
                auth_env.push(("GIT_CONFIG_VALUE_0", basic_header(username, token).into()));
            }
            GitAuth::SshKey {
                private_key,
                known_hosts,
            } => {
                let key = write_private(&dir.join("ssh_key"), private_key)?;
                let hosts = write_private(&dir.join("known_hosts"), known_hosts)?;
                ssh = format!(
                    "ssh -i {} -o IdentitiesOnly=yes -o StrictHostKeyChecking=yes \
                     -o UserKnownHostsFile={} -o BatchMode=yes -F /dev/null",
                    shell_quote(&key)?,
                    shell_quote(&hosts)?
                );
            }
        }
        auth_env.push(("GIT_SSH_COMMAND", ssh.into()));
        Ok(Git {
            scratch: dir.to_owned(),
            repo: dir.join("repo"),
            home,
            auth_env,
            redactor: Redactor::for_auth(auth),
            timeout,
            counter: AtomicU64::new(0),
        })
    }

    /// Clones `base` of `url` into `repo` without a checkout, then checks the tree out with
    /// every conversion turned off.
    async fn clone_base(&self, url: &str, base: &str) -> Result<(), GitError> {
        let repo = self.repo.as_os_str();
        let args: Vec<OsString> = os(&[
            "clone",
            "--no-checkout",
            "--depth",
            "1",
            "--single-branch",
            "--no-tags",
            "--branch",
            base,
            "--",
            url,
        ])
        .into_iter()
        .chain([repo.to_owned()])
        .collect();
        let out = self.output(&self.scratch, &args, &[]).await?;
        if !out.status.success() {
            if stderr(&out).contains("not found in upstream") {
                return Err(GitError::BaseNotFound {
                    base: base.to_owned(),
                });
            }
            return Err(self.classify(&args, &out));
        }
        std::fs::write(self.repo.join(".git/info/attributes"), RAW_ATTRIBUTES)?;
        self.run(&["reset", "--quiet", "--hard", "HEAD"]).await?;
        Ok(())
    }

    /// The full sha `rev` names.
    async fn rev_parse(&self, rev: &str) -> Result<String, GitError> {
        let out = self
            .run(&["rev-parse", "--verify", "--end-of-options", rev])
            .await?;
        Ok(out.trim().to_owned())
    }

    /// The tree entry at `path` in `commit`, `None` when there is none.
    async fn entry(&self, commit: &str, path: &str) -> Result<Option<Entry>, GitError> {
        let out = self
            .run(&["ls-tree", "--full-tree", "-z", commit, "--", path])
            .await?;
        Ok(out.split('\0').find_map(|record| {
            let (meta, name) = record.split_once('\t')?;
            let mut meta = meta.split(' ');
            let entry = Entry {
                mode: meta.next()?.to_owned(),
                kind: meta.next()?.to_owned(),
                sha: meta.next()?.to_owned(),
            };
            (name == path).then_some(entry)
        }))
    }

    /// Stores `content` as a blob, exactly these bytes (no filters), and returns its sha.
    async fn write_blob(&self, content: &str) -> Result<String, GitError> {
        let file = self.scratch_file("blob");
        std::fs::write(&file, content)?;
        let args = [
            OsString::from("hash-object"),
            "-w".into(),
            "--no-filters".into(),
            "--".into(),
            file.clone().into(),
        ];
        let out = self.run_os(&args, &[]).await;
        std::fs::remove_file(&file)?;
        Ok(out?.trim().to_owned())
    }

    /// The tree of `base` with `path` set to `blob`, built in a private index so that the
    /// work tree and the checkout's own index are not touched.
    async fn tree_with(
        &self,
        base: &str,
        path: &str,
        mode: &str,
        blob: &str,
    ) -> Result<String, GitError> {
        let index = self.scratch_file("index");
        let env = [("GIT_INDEX_FILE", index.clone().into_os_string())];
        let cacheinfo = format!("{mode},{blob},{path}");
        let steps: [&[&str]; 3] = [
            &["read-tree", base],
            &["update-index", "--add", "--cacheinfo", &cacheinfo],
            &["write-tree"],
        ];
        let mut tree = String::new();
        for step in steps {
            match self.run_os(&os(step), &env).await {
                Ok(out) => tree = out,
                Err(e) => {
                    let _ = std::fs::remove_file(&index);
                    return Err(e);
                }
            }
        }
        std::fs::remove_file(&index)?;
        Ok(tree.trim().to_owned())
    }

    /// A commit of `tree` on `parent` by `author`, signed with `signing` if given.
    async fn commit_tree(
        &self,
        tree: &str,
        parent: &str,
        message: &str,
        author: &Author,
        signing: Option<&Signing>,
    ) -> Result<String, GitError> {
        let env = [
            ("GIT_AUTHOR_NAME", OsString::from(&author.name)),
            ("GIT_AUTHOR_EMAIL", OsString::from(&author.email)),
            ("GIT_COMMITTER_NAME", OsString::from(&author.name)),
            ("GIT_COMMITTER_EMAIL", OsString::from(&author.email)),
        ];
        let mut args: Vec<OsString> = Vec::new();
        let mut key_file = None;
        if let Some(signing) = signing {
            let key = write_private(&self.scratch_file("signing_key"), &signing.ssh_private_key)?;
            args.extend(os(&["-c", "gpg.format=ssh", "-c"]));
            let mut setting = OsString::from("user.signingKey=");
            setting.push(&key);
            args.push(setting);
            key_file = Some(key);
        }
        args.extend(os(&["commit-tree", tree, "-p", parent, "-m", message]));
        if signing.is_some() {
            args.push("-S".into());
        }
        let out = self.run_os(&args, &env).await;
        if let Some(key) = key_file {
            std::fs::remove_file(key)?;
        }
        Ok(out?.trim().to_owned())
    }

    /// A fresh path in the scratch directory.
    fn scratch_file(&self, stem: &str) -> PathBuf {
        let n = self.counter.fetch_add(1, Ordering::Relaxed);
        self.scratch.join(format!("{stem}.{n}"))
    }

    /// Runs git in the work tree; its stdout on success.
    async fn run(&self, args: &[&str]) -> Result<String, GitError> {
        self.run_os(&os(args), &[]).await
    }

    /// [`Git::run`] with raw bytes out (file contents).
    async fn run_bytes(&self, args: &[&str]) -> Result<Vec<u8>, GitError> {
        let args = os(args);
        let out = self.output(&self.repo, &args, &[]).await?;
        if out.status.success() {
            Ok(out.stdout)
        } else {
            Err(self.classify(&args, &out))
        }
    }

    /// [`Git::run`] with any arguments and extra environment.
    async fn run_os(
        &self,
        args: &[OsString],
        env: &[(&'static str, OsString)],
    ) -> Result<String, GitError> {
        let out = self.output(&self.repo, args, env).await?;
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        } else {
            Err(self.classify(args, &out))
        }
    }

    /// The error for a failed command given as `&str`s.
    fn failure(&self, args: &[&str], out: &Output) -> GitError {
        self.classify(&os(args), out)
    }

    /// Runs `git <SAFE_CONFIG> <args>` in `cwd` under the timeout and returns its output,
    /// whatever its exit status. Only spawning and the timeout are errors here.
    async fn output(
        &self,
        cwd: &Path,
        args: &[OsString],
        env: &[(&'static str, OsString)],
    ) -> Result<Output, GitError> {
        tracing::debug!(args = %self.redactor.redact(&show_args(args)), "git");
        let mut command = self.command(cwd);
        command.args(args).envs(env.iter().map(|(k, v)| (k, v)));
        let child = command.spawn().map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => GitError::NotInstalled { program: "git" },
            _ => GitError::Io(e),
        })?;
        let mut group = GroupKiller(child.id());
        match tokio::time::timeout(self.timeout, child.wait_with_output()).await {
            Ok(out) => {
                group.0 = None; // finished: nothing left to kill
                Ok(out?)
            }
            // `group` is dropped here and kills git's helpers (ssh, git-remote-https) too.
            Err(_) => Err(GitError::Unavailable {
                message: format!(
                    "`git {}` did not finish within {} s",
                    self.redactor.redact(&show_args(args)),
                    self.timeout.as_secs()
                ),
            }),
        }
    }

    /// `git` with the safe configuration and a clean, isolated environment.
    fn command(&self, cwd: &Path) -> Command {
        let mut command = Command::new("git");
        command
            .current_dir(cwd)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            // Its own process group, so a timeout can stop git's helpers as well.
            .process_group(0);
        for (key, _) in std::env::vars_os() {
            let inherited = key.to_string_lossy();
            if inherited.starts_with("GIT_") || inherited.starts_with("SSH_") {
                command.env_remove(&key);
            }
        }
        command
            .env("HOME", &self.home)
            .env("XDG_CONFIG_HOME", self.home.join(".config"))
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_TERMINAL_PROMPT", "0")
            .env("GIT_ASKPASS", "true")
            .env("GIT_ALLOW_PROTOCOL", ALLOWED_PROTOCOLS)
            .env("GIT_LITERAL_PATHSPECS", "1")
            .env("LC_ALL", "C")
            .envs(self.auth_env.iter().map(|(k, v)| (k, v)));
        for setting in SAFE_CONFIG {
            command.arg("-c").arg(setting);
        }
        command
    }

    /// Maps a failed command to the error its (redacted) stderr describes.
    fn classify(&self, args: &[OsString], out: &Output) -> GitError {
        let text = stderr(out);
        let message = self.redactor.redact(&text);
        classify(&text, message, || self.redactor.redact(&show_args(args)))
    }
}

/// Kills a process group when dropped, unless disarmed (`.0 = None`) once git is done.
/// Dropping covers both the timeout and a caller that abandons the future.
struct GroupKiller(Option<u32>);

impl Drop for GroupKiller {
    fn drop(&mut self) {
        if let Some(pgid) = self.0.and_then(|pid| i32::try_from(pid).ok()) {
            // SAFETY: kill(2) takes plain integers and touches no memory of ours. The group
            // was created for this child (`process_group(0)`), so -pgid names only git and
            // the helpers it started.
            #[allow(unsafe_code)]
            unsafe {
                libc::kill(-pgid, libc::SIGKILL);
            }
        }
    }
}

/// The error that git's stderr `text` describes; `message` is its redacted form and
/// `args` renders the command for the catch-all.
fn classify(text: &str, message: String, args: impl FnOnce() -> String) -> GitError {
    let lower = text.to_ascii_lowercase();
    let has = |needles: &[&str]| needles.iter().any(|n| lower.contains(n));
    if has(&["cannot run ssh-keygen"]) {
        return GitError::NotInstalled {
            program: "ssh-keygen",
        };
    }
    if has(&["cannot run ssh", "ssh: not found", "ssh: command not found"]) {
        return GitError::NotInstalled { program: "ssh" };
    }
    if has(&[
        "authentication failed",
        "terminal prompts disabled",
        "could not read username",
        "could not read password",
        "permission denied (publickey",
        "host key verification failed",
        "returned error: 401",
        "returned error: 403",
        "http basic: access denied",
        "invalid username or password",
        "load key",
    ]) {
        return GitError::Auth { message };
    }
    let http_not_found = has(&["repository '"]) && has(&["' not found"]);
    if http_not_found
        || has(&[
            "does not appear to be a git repository",
            "repository not found",
            "returned error: 404",
            "could not be found",
        ])
    {
        return GitError::RepoNotFound { message };
    }
    if has(&[
        "could not resolve host",
        "temporary failure in name resolution",
        "connection refused",
        "connection timed out",
        "operation timed out",
        "failed to connect",
        "network is unreachable",
        "no route to host",
        "connection reset",
        "connection closed by",
        "returned error: 429",
        "returned error: 500",
        "returned error: 502",
        "returned error: 503",
        "returned error: 504",
        "the remote end hung up unexpectedly",
        "early eof",
        "rpc failed",
    ]) {
        return GitError::Unavailable { message };
    }
    GitError::Command {
        args: args(),
        message,
    }
}

/// Removes credentials from text taken from git before it goes into an error.
#[derive(Clone)]
struct Redactor {
    secrets: Vec<String>,
}

impl Redactor {
    fn for_auth(auth: &GitAuth) -> Redactor {
        let mut secrets = Vec::new();
        if let GitAuth::Token { username, token } = auth {
            let encoded =
                base64::engine::general_purpose::STANDARD.encode(format!("{username}:{token}"));
            secrets.push(token.clone());
            secrets.push(base64::engine::general_purpose::STANDARD.encode(token));
            secrets.push(encoded);
        }
        secrets.retain(|s| !s.is_empty());
        // Longest first, so a secret containing another is replaced whole.
        secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
        Redactor { secrets }
    }

    /// `text` without the secrets, `Authorization:` header values or URL passwords, without
    /// git's progress chatter, and capped at [`MESSAGE_CAP`] bytes.
    fn redact(&self, text: &str) -> String {
        let mut out = text.to_owned();
        for secret in &self.secrets {
            out = out.replace(secret.as_str(), "<redacted>");
        }
        let out: Vec<String> = out
            .lines()
            .filter(|line| !is_chatter(line))
            .map(redact_authorization)
            .map(|line| redact_userinfo(&line))
            .collect();
        // One line: these messages end up in status conditions.
        cap(out.join("; ").trim())
    }
}

/// Lines of git's stderr that explain nothing: progress and generic advice.
fn is_chatter(line: &str) -> bool {
    let line = line.trim();
    line.is_empty()
        || line.starts_with("Cloning into")
        || line == "Please make sure you have the correct access rights"
        || line == "and the repository exists."
}

/// A line with anything after `Authorization:` (any case) replaced.
fn redact_authorization(line: &str) -> String {
    const HEADER: &str = "authorization:";
    match line.to_ascii_lowercase().find(HEADER) {
        // ASCII lowercasing keeps byte offsets, so `at` indexes `line` too.
        Some(at) => format!("{} <redacted>", &line[..at + HEADER.len()]),
        None => line.to_owned(),
    }
}

/// A line with the `user:password@` part of any URL replaced.
fn redact_userinfo(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut rest = line;
    while let Some(at) = rest.find("://") {
        let (head, tail) = rest.split_at(at + 3);
        out.push_str(head);
        let end = tail
            .find(|c: char| c == '/' || c == '\'' || c == '"' || c.is_whitespace())
            .unwrap_or(tail.len());
        match tail[..end].rfind('@') {
            Some(user_end) => {
                out.push_str("<redacted>");
                out.push_str(&tail[user_end..end]);
            }
            None => out.push_str(&tail[..end]),
        }
        rest = &tail[end..];
    }
    out.push_str(rest);
    out
}

/// `text` cut to at most [`MESSAGE_CAP`] bytes, on a character boundary.
fn cap(text: &str) -> String {
    if text.len() <= MESSAGE_CAP {
        return text.to_owned();
    }
    let mut end = MESSAGE_CAP;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

/// `Authorization: Basic base64(username:token)`.
fn basic_header(username: &str, token: &str) -> String {
    let encoded = base64::engine::general_purpose::STANDARD.encode(format!("{username}:{token}"));
    format!("Authorization: Basic {encoded}")
}

/// Writes a key to a new 0600 file (ssh refuses keys others can read) and returns its path.
fn write_private(path: &Path, content: &str) -> Result<PathBuf, GitError> {
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)?;
    file.write_all(content.as_bytes())?;
    // OpenSSH rejects a key file whose last line has no newline; Secrets often lose it.
    if !content.ends_with('\n') {
        file.write_all(b"\n")?;
    }
    Ok(path.to_owned())
}

/// `path` single-quoted for the shell that runs `GIT_SSH_COMMAND`.
fn shell_quote(path: &Path) -> Result<String, GitError> {
    let text = path.to_str().ok_or_else(|| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("temporary path {} is not UTF-8", path.display()),
        )
    })?;
    Ok(format!("'{}'", text.replace('\'', r"'\''")))
}

/// Refuses branch names that git would read as options; git checks the rest.
fn check_branch(branch: &str) -> Result<(), GitError> {
    if branch.is_empty() || branch.starts_with('-') || branch.contains(':') {
        return Err(invalid("branch name", branch));
    }
    Ok(())
}

/// Accepts only a full hexadecimal object id (SHA-1 or SHA-256).
fn check_sha(sha: &str) -> Result<&str, GitError> {
    let hex = sha.bytes().all(|b| b.is_ascii_hexdigit());
    if hex && (sha.len() == 40 || sha.len() == 64) {
        Ok(sha)
    } else {
        Err(invalid("commit sha", sha))
    }
}

/// Accepts a plain relative path inside the repository (`a/b.yaml`), nothing that climbs out
/// of it or into `.git`.
fn check_path(path: &str) -> Result<(), GitError> {
    let fine = !path.is_empty()
        && !path.contains('\0')
        && path.split('/').all(|part| {
            !part.is_empty() && part != "." && part != ".." && !part.eq_ignore_ascii_case(".git")
        });
    if fine {
        Ok(())
    } else {
        Err(invalid("path", path))
    }
}

fn invalid(what: &str, value: &str) -> GitError {
    GitError::InvalidInput {
        message: format!("{what} {value:?}"),
    }
}

/// Fails if `path` or any directory on the way to it is a symbolic link.
fn refuse_symlinks(repo: &Path, path: &str) -> Result<(), GitError> {
    let mut at = repo.to_owned();
    for part in path.split('/') {
        at.push(part);
        match std::fs::symlink_metadata(&at) {
            Ok(meta) if meta.file_type().is_symlink() => return Err(not_a_file(path)),
            Ok(_) => {}
            Err(e) if is_missing(&e) => return Err(not_found(path)),
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

fn is_missing(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory
    )
}

fn not_found(path: &str) -> GitError {
    GitError::FileNotFound {
        path: path.to_owned(),
    }
}

fn not_a_file(path: &str) -> GitError {
    GitError::InvalidInput {
        message: format!(
            "{path:?} is not a regular file (a symbolic link, directory or submodule)"
        ),
    }
}

fn utf8(path: &str, bytes: Vec<u8>) -> Result<String, GitError> {
    String::from_utf8(bytes).map_err(|_| {
        GitError::Io(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("{path:?} is not UTF-8 text"),
        ))
    })
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn os(args: &[&str]) -> Vec<OsString> {
    args.iter().map(OsString::from).collect()
}

/// The arguments as one line (for messages; they never hold credentials).
fn show_args(args: &[OsString]) -> String {
    args.iter()
        .map(|a| a.to_string_lossy())
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redacts_token_header_and_userinfo() {
        let auth = GitAuth::Token {
            username: "x-access-token".into(),
            token: "s3cr3t-tok".into(),
        };
        let r = Redactor::for_auth(&auth);
        let header = basic_header("x-access-token", "s3cr3t-tok");
        let text = format!(
            "fatal: s3cr3t-tok\n> {header}\nfatal: unable to access 'https://u:pw@host/r.git/'"
        );
        let out = r.redact(&text);
        assert!(!out.contains("s3cr3t-tok"), "{out}");
        assert!(!out.contains("pw@"), "{out}");
        assert!(!out.contains(&header[21..]), "{out}");
        assert!(out.contains("https://<redacted>@host/r.git/"), "{out}");
        assert!(r.redact(&"é".repeat(600)).len() <= MESSAGE_CAP + "…".len());
    }

    #[test]
    fn classifies_git_messages() {
        let c = |t: &str| classify(t, t.to_owned(), String::new).reason();
        assert_eq!(
            c("fatal: could not read Username for 'http://h': terminal prompts disabled"),
            "GitAuthFailed"
        );
        assert_eq!(
            c("fatal: '/x' does not appear to be a git repository"),
            "GitRepoNotFound"
        );
        assert_eq!(
            c("fatal: repository 'http://h/r.git/' not found\n"),
            "GitRepoNotFound"
        );
        assert_eq!(
            c("ssh: connect to host h port 22: Connection refused"),
            "GitUnavailable"
        );
        assert_eq!(c("error: cannot run ssh: No such file"), "GitNotInstalled");
        assert_eq!(c("fatal: something else"), "GitFailed");
    }

    #[test]
    fn reads_porcelain() {
        let out = "To x\n!\trefs/heads/p:refs/heads/p\t[rejected] (stale info)\nDone\n";
        assert_eq!(porcelain_verdict(out, "refs/heads/p"), Some(Verdict::Stale));
        let out = "!\t(delete):refs/heads/p\t[remote rejected] (pre-receive hook declined)\n";
        assert!(matches!(
            porcelain_verdict(out, "refs/heads/p"),
            Some(Verdict::Rejected(_))
        ));
        let out = "=\trefs/heads/p:refs/heads/p\t[up to date]\n";
        assert_eq!(
            porcelain_verdict(out, "refs/heads/p"),
            Some(Verdict::Updated)
        );
        assert_eq!(porcelain_verdict(out, "refs/heads/q"), None);
    }
}
