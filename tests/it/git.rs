//! `gitops::git` against real repositories: `file://` bare remotes for the proposal flow
//! (clone, one-commit branch, lease pushes, human edits, protected branches), smart HTTP
//! behind token auth for credentials, and `ssh-keygen` for signed commits.
//!
//! SSH transport is covered only up to the connection (no sshd here): the key and
//! known_hosts files are written and ssh is started with them.

use crate::git_remote;

use std::path::Path;
use std::time::{Duration, Instant};

use base64::Engine as _;
use git_remote::{BareRemote, HttpRemote};
use goodput::gitops::git::{Author, Checkout, GitAuth, GitError, Signing};

const DEPLOY: &str = "apiVersion: apps/v1\nkind: Deployment\nspec:\n  replicas: 4 # goodput\n";
const CRLF: &str = "a: 1\r\nreplicas: 2\r\n# tail without newline";
const BRANCH: &str = "goodput/default/vllm";
const TOKEN: &str = "ghp_TestToken0123456789";

fn remote() -> BareRemote {
    BareRemote::new(
        &[
            ("deploy/vllm.yaml", DEPLOY),
            ("crlf.yaml", CRLF),
            ("README.md", "hello\n"),
        ],
        "main",
    )
}

fn bot() -> Author {
    Author {
        name: "goodput-bot".into(),
        email: "bot@goodput.dev".into(),
    }
}

async fn clone(remote: &BareRemote) -> Checkout {
    Checkout::clone(&remote.file_url(), "main", &GitAuth::None)
        .await
        .expect("clone")
}

/// A clone of `remote` with `content` committed to `path` on [`BRANCH`]; the commit sha.
async fn propose(remote: &BareRemote, path: &str, content: &str) -> (Checkout, String) {
    let checkout = clone(remote).await;
    let sha = checkout
        .commit(BRANCH, path, content, "goodput: scale vllm", &bot(), None)
        .await
        .expect("commit");
    (checkout, sha)
}

#[tokio::test]
async fn clone_reads_the_base_files_byte_for_byte() {
    let remote = remote();
    let checkout = clone(&remote).await;
    assert_eq!(Some(checkout.base_sha()), remote.head("main").as_deref());
    assert_eq!(checkout.read("deploy/vllm.yaml").expect("read"), DEPLOY);
    assert_eq!(checkout.read("crlf.yaml").expect("read"), CRLF);
    let missing = checkout.read("deploy/other.yaml").expect_err("missing");
    assert!(
        matches!(missing, GitError::FileNotFound { .. }),
        "{missing}"
    );
    assert_eq!(missing.reason(), "GitFileNotFound");
    for outside in ["../x", "/etc/passwd", ".git/config", "deploy/../crlf.yaml"] {
        assert!(checkout.read(outside).is_err(), "{outside} was readable");
    }
}

#[tokio::test]
async fn a_commit_changes_exactly_that_file_and_keeps_crlf() {
    let remote = remote();
    let edited = CRLF.replace("replicas: 2", "replicas: 3");
    let checkout = clone(&remote).await;
    let sha = checkout
        .commit(
            BRANCH,
            "crlf.yaml",
            &edited,
            "goodput: scale vllm to 3",
            &bot(),
            None,
        )
        .await
        .expect("commit");
    checkout
        .push(BRANCH, None)
        .await
        .expect("first push creates the branch");

    assert_eq!(remote.head(BRANCH).as_deref(), Some(sha.as_str()));
    assert_eq!(
        remote.show(BRANCH, "crlf.yaml").as_deref(),
        Some(edited.as_str())
    );
    assert_eq!(remote.changed_files(BRANCH), ["crlf.yaml"]);
    let log = remote.log(BRANCH);
    assert_eq!(log.len(), 2, "{log:?}");
    assert_eq!(
        log[0],
        (
            sha.clone(),
            "goodput-bot".into(),
            "goodput: scale vllm to 3".into()
        )
    );
    assert_eq!(log[1].0, checkout.base_sha());
    let raw = remote.raw_commit(&sha);
    assert!(
        raw.contains("\nauthor goodput-bot <bot@goodput.dev> "),
        "{raw}"
    );
    assert!(
        raw.contains("\ncommitter goodput-bot <bot@goodput.dev> "),
        "{raw}"
    );
    assert!(!raw.contains("gpgsig"), "{raw}");
    // The work tree stays at the base head.
    assert_eq!(checkout.read("crlf.yaml").expect("read"), CRLF);
    assert_eq!(remote.head("main").as_deref(), Some(checkout.base_sha()));
}

#[tokio::test]
async fn a_new_file_can_be_proposed() {
    let remote = remote();
    let (checkout, _) = propose(&remote, "deploy/new.yaml", "replicas: 1\n").await;
    checkout.push(BRANCH, None).await.expect("push");
    assert_eq!(remote.changed_files(BRANCH), ["deploy/new.yaml"]);
}

#[tokio::test]
async fn the_next_proposal_replaces_the_branch_on_the_fresh_base() {
    let remote = remote();
    let first = DEPLOY.replace("replicas: 4", "replicas: 6");
    let (checkout, sha1) = propose(&remote, "deploy/vllm.yaml", &first).await;
    checkout.push(BRANCH, None).await.expect("first push");
    drop(checkout);

    // The base moves on meanwhile.
    let main = remote.commit_as_human("main", "README.md", "hello again\n", "docs");

    let second = DEPLOY.replace("replicas: 4", "replicas: 8");
    let checkout = clone(&remote).await;
    assert_eq!(checkout.base_sha(), main);
    assert_eq!(
        checkout.remote_head(BRANCH).await.expect("ls-remote"),
        Some(sha1.clone())
    );
    let held = checkout
        .read_remote(BRANCH, "deploy/vllm.yaml")
        .await
        .expect("read remote");
    assert_eq!(held.as_deref(), Some(first.as_str()));
    let sha2 = checkout
        .commit(
            BRANCH,
            "deploy/vllm.yaml",
            &second,
            "goodput: scale vllm to 8",
            &bot(),
            None,
        )
        .await
        .expect("commit");
    checkout
        .push(BRANCH, Some(&sha1))
        .await
        .expect("lease push");

    assert_eq!(remote.head(BRANCH), Some(sha2.clone()));
    assert_eq!(
        remote.show(BRANCH, "deploy/vllm.yaml").as_deref(),
        Some(second.as_str())
    );
    let log = remote.log(BRANCH);
    assert_eq!(
        log.len(),
        3,
        "base, the README change, one proposal: {log:?}"
    );
    assert_eq!(log[0].0, sha2);
    assert_eq!(log[1].0, main);
    assert_eq!(remote.changed_files(BRANCH), ["deploy/vllm.yaml"]);

    // Pushing what the branch already holds is fine.
    checkout
        .push(BRANCH, Some(&sha2))
        .await
        .expect("idempotent push");
}

#[tokio::test]
async fn a_human_commit_on_the_branch_is_never_overwritten() {
    let remote = remote();
    let (checkout, sha1) = propose(&remote, "deploy/vllm.yaml", "replicas: 6\n").await;
    checkout.push(BRANCH, None).await.expect("first push");
    let human = remote.commit_as_human(BRANCH, "deploy/vllm.yaml", "replicas: 5\n", "tweak");

    let (checkout, _) = propose(&remote, "deploy/vllm.yaml", "replicas: 8\n").await;
    let err = checkout
        .push(BRANCH, Some(&sha1))
        .await
        .expect_err("stale lease");
    match &err {
        GitError::LeaseRejected { branch, remote_sha } => {
            assert_eq!(branch, BRANCH);
            assert_eq!(remote_sha.as_deref(), Some(human.as_str()));
        }
        other => panic!("expected LeaseRejected, got {other:?}"),
    }
    assert_eq!(err.reason(), "BranchEditedByHuman");
    assert!(!err.retryable());
    assert_eq!(remote.head(BRANCH), Some(human.clone()));
    assert_eq!(remote.log(BRANCH)[0].1, "A Human");

    // A first push (`expected = None`) onto an existing branch is refused the same way.
    let err = checkout
        .push(BRANCH, None)
        .await
        .expect_err("branch exists");
    assert!(matches!(err, GitError::LeaseRejected { .. }), "{err:?}");
    assert_eq!(remote.head(BRANCH), Some(human));
}

#[tokio::test]
async fn a_protected_branch_rejects_the_push() {
    let remote = remote();
    remote.protect(BRANCH);
    let (checkout, _) = propose(&remote, "deploy/vllm.yaml", "replicas: 6\n").await;
    let err = checkout.push(BRANCH, None).await.expect_err("protected");
    let GitError::PushRejected { message } = &err else {
        panic!("expected PushRejected, got {err:?}");
    };
    assert!(
        message.contains("protected branch hook declined"),
        "{message}"
    );
    assert_eq!(err.reason(), "PushRejected");
    assert_eq!(remote.head(BRANCH), None);
}

#[tokio::test]
async fn a_missing_base_branch_is_reported() {
    let remote = remote();
    let err = Checkout::clone(&remote.file_url(), "release", &GitAuth::None)
        .await
        .expect_err("no such base");
    assert!(
        matches!(&err, GitError::BaseNotFound { base } if base == "release"),
        "{err:?}"
    );
    assert_eq!(err.reason(), "GitBaseNotFound");
}

#[tokio::test]
async fn bad_urls_are_not_found_or_unavailable() {
    let err = Checkout::clone("file:///nonexistent/remote.git", "main", &GitAuth::None)
        .await
        .expect_err("no repository");
    assert!(matches!(err, GitError::RepoNotFound { .. }), "{err:?}");
    assert_eq!(err.reason(), "GitRepoNotFound");

    let port = closed_port();
    let url = format!("http://127.0.0.1:{port}/remote.git");
    let err = Checkout::clone(&url, "main", &GitAuth::None)
        .await
        .expect_err("connection refused");
    assert!(matches!(err, GitError::Unavailable { .. }), "{err:?}");
    assert_eq!(err.reason(), "GitUnavailable");
    assert!(err.retryable());
}

#[tokio::test]
async fn a_hanging_remote_times_out() {
    // Connections land in the backlog and are never answered.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let url = format!("http://{}/remote.git", listener.local_addr().expect("addr"));
    let started = Instant::now();
    let err = Checkout::clone_with_timeout(&url, "main", &GitAuth::None, Duration::from_secs(2))
        .await
        .expect_err("timeout");
    assert!(started.elapsed() < Duration::from_secs(20));
    assert!(
        matches!(&err, GitError::Unavailable { message } if message.contains("did not finish")),
        "{err:?}"
    );
}

#[tokio::test]
async fn a_branch_is_deleted_only_where_we_left_it() {
    let remote = remote();
    let (checkout, sha) = propose(&remote, "deploy/vllm.yaml", "replicas: 6\n").await;
    assert_eq!(checkout.remote_head(BRANCH).await.expect("ls-remote"), None);
    assert_eq!(
        checkout
            .read_remote(BRANCH, "deploy/vllm.yaml")
            .await
            .expect("fetch"),
        None
    );
    checkout.push(BRANCH, None).await.expect("push");

    let err = checkout
        .delete_remote_branch(BRANCH, checkout.base_sha())
        .await
        .expect_err("not where we left it");
    assert!(matches!(err, GitError::LeaseRejected { .. }), "{err:?}");
    assert_eq!(remote.head(BRANCH), Some(sha.clone()));

    checkout
        .delete_remote_branch(BRANCH, &sha)
        .await
        .expect("delete");
    assert_eq!(remote.head(BRANCH), None);
    checkout
        .delete_remote_branch(BRANCH, &sha)
        .await
        .expect("already gone");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_token_auth_works_and_leaves_no_trace() {
    let remote = remote();
    let http = HttpRemote::start(&remote, "x-access-token", TOKEN).await;
    let auth = GitAuth::Token {
        username: "x-access-token".into(),
        token: TOKEN.into(),
    };
    assert!(!format!("{auth:?}").contains(TOKEN));
    let checkout = Checkout::clone(&http.url(), "main", &auth)
        .await
        .expect("clone");
    let sha = checkout
        .commit(
            BRANCH,
            "deploy/vllm.yaml",
            "replicas: 6\n",
            "goodput: scale",
            &bot(),
            None,
        )
        .await
        .expect("commit");
    checkout.push(BRANCH, None).await.expect("push");
    assert_eq!(remote.head(BRANCH), Some(sha.clone()));
    assert_eq!(
        checkout.remote_head(BRANCH).await.expect("ls-remote"),
        Some(sha.clone())
    );
    let held = checkout
        .read_remote(BRANCH, "deploy/vllm.yaml")
        .await
        .expect("fetch");
    assert_eq!(held.as_deref(), Some("replicas: 6\n"));

    let encoded =
        base64::engine::general_purpose::STANDARD.encode(format!("x-access-token:{TOKEN}"));
    for secret in [TOKEN, encoded.as_str()] {
        let found = files_containing(checkout.work_tree(), secret);
        assert!(found.is_empty(), "secret found in {found:?}");
    }
    let config = std::fs::read_to_string(checkout.work_tree().join(".git/config")).expect("config");
    assert!(config.contains(&http.url()), "{config}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_token_fails_fast_without_leaking_it() {
    let remote = remote();
    let http = HttpRemote::start(&remote, "x-access-token", TOKEN).await;
    let wrong = "ghp_WrongToken9876543210";
    let auth = GitAuth::Token {
        username: "x-access-token".into(),
        token: wrong.into(),
    };
    let started = Instant::now();
    let err = Checkout::clone(&http.url(), "main", &auth)
        .await
        .expect_err("401");
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "took {:?}",
        started.elapsed()
    );
    assert!(matches!(err, GitError::Auth { .. }), "{err:?}");
    assert_eq!(err.reason(), "GitAuthFailed");
    assert!(!err.retryable());
    let encoded =
        base64::engine::general_purpose::STANDARD.encode(format!("x-access-token:{wrong}"));
    for text in [err.to_string(), format!("{err:?}")] {
        assert!(!text.contains(wrong) && !text.contains(&encoded), "{text}");
    }
    assert!(http.unauthorized() > 0);

    let err = Checkout::clone(&http.url(), "main", &GitAuth::None)
        .await
        .expect_err("no credentials");
    assert!(matches!(err, GitError::Auth { .. }), "{err:?}");
}

#[tokio::test]
async fn a_signed_commit_carries_an_ssh_signature() {
    let Some(key_dir) = ssh_key() else {
        println!("SKIPPED: ssh-keygen is not installed");
        return;
    };
    let private_key = std::fs::read_to_string(key_dir.path().join("key")).expect("key");
    let public_key = std::fs::read_to_string(key_dir.path().join("key.pub")).expect("pub");
    let remote = remote();
    let checkout = clone(&remote).await;
    let signing = Signing {
        // Secrets often lose the final newline; the key must still work.
        ssh_private_key: private_key.trim_end().to_owned(),
    };
    assert!(!format!("{signing:?}").contains("PRIVATE KEY"));
    let sha = checkout
        .commit(
            BRANCH,
            "deploy/vllm.yaml",
            "replicas: 6\n",
            "signed",
            &bot(),
            Some(&signing),
        )
        .await
        .expect("signed commit");
    checkout.push(BRANCH, None).await.expect("push");

    let raw = remote.raw_commit(&sha);
    assert!(
        raw.contains("\ngpgsig -----BEGIN SSH SIGNATURE-----"),
        "{raw}"
    );
    let signers = key_dir.path().join("allowed_signers");
    std::fs::write(&signers, format!("bot@goodput.dev {public_key}")).expect("signers");
    let setting = format!("gpg.ssh.allowedSignersFile={}", signers.display());
    let verify = remote.run_git(&["-c", &setting, "verify-commit", &sha]);
    assert!(
        verify.status.success(),
        "{}",
        String::from_utf8_lossy(&verify.stderr)
    );
}

#[tokio::test]
async fn ssh_auth_starts_ssh_with_the_given_key() {
    let Some(key_dir) = ssh_key() else {
        println!("SKIPPED: ssh-keygen is not installed");
        return;
    };
    let auth = GitAuth::SshKey {
        private_key: std::fs::read_to_string(key_dir.path().join("key")).expect("key"),
        known_hosts: String::new(),
    };
    assert!(!format!("{auth:?}").contains("PRIVATE KEY"));
    let url = format!("ssh://git@127.0.0.1:{}/remote.git", closed_port());
    let err = Checkout::clone(&url, "main", &auth)
        .await
        .expect_err("no sshd");
    // Connection refused when ssh ran; a missing ssh binary says so instead.
    assert!(
        matches!(
            err,
            GitError::Unavailable { .. } | GitError::NotInstalled { program: "ssh" }
        ),
        "{err:?}"
    );
}

/// A port on 127.0.0.1 that nothing listens on.
fn closed_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.local_addr().expect("addr").port()
}

/// A fresh ed25519 key pair (`key`, `key.pub`), or `None` without ssh-keygen.
fn ssh_key() -> Option<tempfile::TempDir> {
    let dir = tempfile::tempdir().expect("temp dir");
    let key = dir.path().join("key");
    let status = std::process::Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-C", "goodput-test", "-f"])
        .arg(&key)
        .status();
    match status {
        Ok(status) if status.success() => Some(dir),
        _ => None,
    }
}

/// Files under `dir` whose bytes contain `needle`.
fn files_containing(dir: &Path, needle: &str) -> Vec<std::path::PathBuf> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(at) = stack.pop() {
        for entry in std::fs::read_dir(&at).expect("read dir").flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if let Ok(bytes) = std::fs::read(&path)
                && bytes.windows(needle.len()).any(|w| w == needle.as_bytes())
            {
                found.push(path);
            }
        }
    }
    found
}
