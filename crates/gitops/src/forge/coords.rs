//! From a clone URL to the forge's kind, API URL and project.

use super::{ForgeError, ForgeKind, RepoCoordinates};

/// The parts of a clone URL that matter here.
#[derive(Debug, PartialEq, Eq)]
struct CloneUrl {
    /// `https` or `http` for web URLs; `https` for SSH and git URLs (their port is not the
    /// API's, so it is dropped).
    scheme: &'static str,
    /// Host, with the port for web URLs; `None` for local paths and `file://`.
    host: Option<String>,
    /// The repository path, without slashes around it or `.git`.
    path: String,
}

impl RepoCoordinates {
    /// Where a repository lives, from its clone URL (`https://github.com/acme/x.git`,
    /// `git@github.com:acme/x.git`, `ssh://git@gitlab.example.com/g/s/x.git`,
    /// `https://gitlab.com/g/x`) and optional overrides.
    ///
    /// - `kind`: github.com (and `*.ghe.com`) is GitHub, gitlab.com or any host whose name
    ///   contains "gitlab" is GitLab; any other host needs `kind` (or an `api_url` ending in
    ///   `/api/v3` or `/api/v4`).
    /// - `api_url`: `https://api.github.com` for github.com, `https://api.HOST` for GHE.com,
    ///   `https://HOST/api/v3` for GitHub Enterprise Server, `https://HOST/api/v4` for GitLab.
    /// - `project`: parsed from the URL's path unless given (a `file://` clone URL in tests).
    pub fn resolve(
        repo_url: &str,
        kind: Option<ForgeKind>,
        api_url: Option<&str>,
        project: Option<&str>,
    ) -> Result<Self, ForgeError> {
        let url = parse_clone_url(repo_url)?;
        let host = url.host.as_deref();
        let api_url = api_url.map(|a| a.trim().trim_end_matches('/').to_owned());
        let kind = kind
            .or_else(|| host.and_then(kind_from_host))
            .or_else(|| api_url.as_deref().and_then(kind_from_api_url))
            .ok_or_else(|| {
                ForgeError::Config(format!(
                    "cannot tell whether {} is GitHub or GitLab; set the forge kind",
                    host.unwrap_or("a local repository")
                ))
            })?;
        let api_url = match api_url {
            Some(api_url) if !api_url.is_empty() => api_url,
            _ => default_api_url(&kind, url.scheme, host)?,
        };
        let project = match project {
            Some(project) => clean_path(project),
            None => url.path,
        };
        check_project(&kind, &project)?;
        Ok(Self {
            kind,
            api_url,
            project,
        })
    }
}

fn parse_clone_url(repo_url: &str) -> Result<CloneUrl, ForgeError> {
    let repo_url = repo_url.trim();
    if let Some((scheme, rest)) = repo_url.split_once("://") {
        let scheme = scheme.to_ascii_lowercase();
        let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
        // Credentials in the URL are dropped here and never echoed.
        let host_port = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
        let (scheme, host) = match scheme.as_str() {
            "https" => ("https", Some(host_port.to_ascii_lowercase())),
            "http" => ("http", Some(host_port.to_ascii_lowercase())),
            "ssh" | "git" | "git+ssh" | "ssh+git" => ("https", Some(strip_port(host_port))),
            "file" => ("https", None),
            other => {
                return Err(ForgeError::Config(format!(
                    "unsupported clone URL scheme {other:?}"
                )));
            }
        };
        let host = host.filter(|h| !h.is_empty());
        return Ok(CloneUrl {
            scheme,
            host,
            path: clean_path(path),
        });
    }
    // scp-like `[user@]host:path`, where the colon comes before any slash.
    if let Some((authority, path)) = repo_url.split_once(':')
        && !authority.contains('/')
        && !authority.is_empty()
    {
        let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
        return Ok(CloneUrl {
            scheme: "https",
            host: Some(host.to_ascii_lowercase()),
            path: clean_path(path),
        });
    }
    // A local path.
    Ok(CloneUrl {
        scheme: "https",
        host: None,
        path: clean_path(repo_url),
    })
}

/// `host[:port]` or `[v6]:port` without the port, lower-cased.
fn strip_port(host_port: &str) -> String {
    let host = match host_port.strip_prefix('[') {
        Some(v6) => v6.split(']').next().map(|h| format!("[{h}]")),
        None => host_port.split(':').next().map(str::to_owned),
    };
    host.unwrap_or_default().to_ascii_lowercase()
}

fn clean_path(path: &str) -> String {
    let path = path.trim().trim_matches('/');
    path.strip_suffix(".git").unwrap_or(path).to_owned()
}

fn bare_host(host: &str) -> &str {
    host.split(':').next().unwrap_or(host)
}

fn kind_from_host(host: &str) -> Option<ForgeKind> {
    let name = bare_host(host);
    if is_github_com(name) || name.ends_with(".ghe.com") {
        Some(ForgeKind::GitHub)
    } else if name.contains("gitlab") {
        Some(ForgeKind::GitLab)
    } else {
        None
    }
}

fn kind_from_api_url(api_url: &str) -> Option<ForgeKind> {
    if api_url.ends_with("/api/v4") {
        Some(ForgeKind::GitLab)
    } else if api_url.ends_with("/api/v3") || api_url.contains("://api.github.com") {
        Some(ForgeKind::GitHub)
    } else {
        None
    }
}

fn is_github_com(name: &str) -> bool {
    matches!(name, "github.com" | "www.github.com" | "ssh.github.com")
}

fn default_api_url(
    kind: &ForgeKind,
    scheme: &str,
    host: Option<&str>,
) -> Result<String, ForgeError> {
    let host = host
        .ok_or_else(|| ForgeError::Config("a local clone URL needs the forge's API URL".into()))?;
    Ok(match kind {
        ForgeKind::GitHub if is_github_com(bare_host(host)) => "https://api.github.com".into(),
        ForgeKind::GitHub if bare_host(host).ends_with(".ghe.com") => {
            format!("https://api.{}", bare_host(host))
        }
        ForgeKind::GitHub => format!("{scheme}://{host}/api/v3"),
        ForgeKind::GitLab => format!("{scheme}://{host}/api/v4"),
    })
}

fn check_project(kind: &ForgeKind, project: &str) -> Result<(), ForgeError> {
    let parts: Vec<&str> = project.split('/').collect();
    let well_formed = !parts.iter().any(|p| p.is_empty())
        && match kind {
            ForgeKind::GitHub => parts.len() == 2,
            ForgeKind::GitLab => parts.len() >= 2,
        };
    if well_formed {
        Ok(())
    } else {
        let shape = match kind {
            ForgeKind::GitHub => "owner/name",
            ForgeKind::GitLab => "group/name or group/sub/name",
        };
        Err(ForgeError::Config(format!(
            "the project must be {shape}, got {project:?}"
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ForgeKind::{GitHub, GitLab};

    fn resolved(url: &str) -> (ForgeKind, String, String) {
        let c = RepoCoordinates::resolve(url, None, None, None)
            .unwrap_or_else(|e| panic!("{url}: {e}"));
        (c.kind, c.api_url, c.project)
    }

    #[test]
    fn clone_urls_resolve() {
        let table = [
            (
                "https://github.com/acme/x.git",
                GitHub,
                "https://api.github.com",
                "acme/x",
            ),
            (
                "https://github.com/acme/x",
                GitHub,
                "https://api.github.com",
                "acme/x",
            ),
            (
                "https://github.com/acme/x/",
                GitHub,
                "https://api.github.com",
                "acme/x",
            ),
            (
                "git@github.com:acme/x.git",
                GitHub,
                "https://api.github.com",
                "acme/x",
            ),
            (
                "ssh://git@github.com/acme/x.git",
                GitHub,
                "https://api.github.com",
                "acme/x",
            ),
            (
                "ssh://git@ssh.github.com:443/acme/x.git",
                GitHub,
                "https://api.github.com",
                "acme/x",
            ),
            (
                "https://x-access-token:ghp_s3cret@github.com/acme/x.git",
                GitHub,
                "https://api.github.com",
                "acme/x",
            ),
            (
                "https://acme.ghe.com/team/x.git",
                GitHub,
                "https://api.acme.ghe.com",
                "team/x",
            ),
            (
                "https://gitlab.com/g/x",
                GitLab,
                "https://gitlab.com/api/v4",
                "g/x",
            ),
            (
                "git@gitlab.com:g/s/x.git",
                GitLab,
                "https://gitlab.com/api/v4",
                "g/s/x",
            ),
            (
                "ssh://git@gitlab.example.com/g/s/x.git",
                GitLab,
                "https://gitlab.example.com/api/v4",
                "g/s/x",
            ),
            (
                "ssh://git@gitlab.example.com:2222/g/x.git",
                GitLab,
                "https://gitlab.example.com/api/v4",
                "g/x",
            ),
            (
                "https://gitlab.example.com:8443/g/x.git",
                GitLab,
                "https://gitlab.example.com:8443/api/v4",
                "g/x",
            ),
            (
                "http://gitlab.internal/g/x.git",
                GitLab,
                "http://gitlab.internal/api/v4",
                "g/x",
            ),
            (
                "https://GitLab.Example.com/G/X.git",
                GitLab,
                "https://gitlab.example.com/api/v4",
                "G/X",
            ),
        ];
        for (url, kind, api, project) in table {
            assert_eq!(resolved(url), (kind, api.into(), project.into()), "{url}");
        }
    }

    #[test]
    fn other_hosts_need_a_kind() {
        let err = RepoCoordinates::resolve("https://git.acme.io/a/b.git", None, None, None);
        assert!(matches!(err, Err(ForgeError::Config(_))));
        let ghes =
            RepoCoordinates::resolve("git@git.acme.io:a/b.git", Some(GitHub), None, None).unwrap();
        assert_eq!(ghes.api_url, "https://git.acme.io/api/v3");
        let gitlab =
            RepoCoordinates::resolve("https://git.acme.io/a/b/c", Some(GitLab), None, None)
                .unwrap();
        assert_eq!(gitlab.api_url, "https://git.acme.io/api/v4");
        // The API URL can tell the kind.
        let by_api = RepoCoordinates::resolve(
            "https://git.acme.io/a/b",
            None,
            Some("https://git.acme.io/api/v4/"),
            None,
        )
        .unwrap();
        assert_eq!(
            (by_api.kind, by_api.api_url.as_str()),
            (GitLab, "https://git.acme.io/api/v4")
        );
    }

    #[test]
    fn overrides_win() {
        let c = RepoCoordinates::resolve(
            "file:///tmp/remote.git",
            Some(GitHub),
            Some("http://127.0.0.1:4000"),
            Some("acme/widgets"),
        )
        .unwrap();
        assert_eq!(
            c,
            RepoCoordinates {
                kind: GitHub,
                api_url: "http://127.0.0.1:4000".into(),
                project: "acme/widgets".into(),
            }
        );
        let local = RepoCoordinates::resolve("/tmp/remote.git", Some(GitLab), None, Some("g/x"));
        assert!(matches!(local, Err(ForgeError::Config(_))), "no API URL");
        let explicit = RepoCoordinates::resolve(
            "https://github.com/acme/x.git",
            None,
            Some("https://proxy.acme.io/github"),
            None,
        )
        .unwrap();
        assert_eq!(explicit.api_url, "https://proxy.acme.io/github");
    }

    #[test]
    fn projects_must_have_the_forges_shape() {
        let bad = [
            "https://github.com/acme.git",
            "https://github.com/a/b/c.git",
            "https://gitlab.com/x",
            "https://gitlab.com/a//b",
            "ftp://github.com/a/b",
        ];
        for url in bad {
            let result = RepoCoordinates::resolve(url, None, None, None);
            assert!(
                matches!(result, Err(ForgeError::Config(_))),
                "{url}: {result:?}"
            );
        }
    }

    #[test]
    fn errors_do_not_echo_credentials() {
        let error = RepoCoordinates::resolve("https://u:s3cret@git.acme.io/a/b", None, None, None)
            .unwrap_err();
        assert!(!error.to_string().contains("s3cret"), "{error}");
    }
}
