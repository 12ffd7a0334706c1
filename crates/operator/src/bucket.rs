//! The bucket sink of a shard's raw results (`goodput loadgen --results-url
//! s3://<bucket>/<prefix>`): once the shard has written its files to `--out`, each file
//! there is uploaded to `<prefix>/<file>` of an S3-compatible bucket.
//!
//! The client is configured before any load is sent (a malformed URL or endpoint fails the
//! pod at once); the uploads happen after the run. Credentials come from the environment as
//! the AWS tools read them (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`,
//! `AWS_SESSION_TOKEN`, else web identity or instance metadata); the operator sets the
//! first three from the benchmark's `credentialsSecret`. A failed upload is an error naming
//! the object and the server's answer on one line (the last line of a pod's log is the
//! reason its point shows).

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use object_store::aws::AmazonS3Builder;
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload, RetryConfig};

use goodput_api::split_s3_url;

/// Longest a single upload keeps retrying transient failures (connection errors, 5xx).
const RETRY_TIMEOUT: Duration = Duration::from_secs(60);

/// Why a shard's files could not be put in the bucket.
#[derive(Debug, thiserror::Error)]
pub enum BucketError {
    /// `--results-url` is not an S3 URL.
    #[error("`{0}` is not s3://<bucket> or s3://<bucket>/<prefix>")]
    Url(String),
    /// The client could not be configured (an endpoint that is not a URL, say).
    // `error`, not `source`: the message holds it on one line, and a source would be
    // printed again, whole, after it.
    #[error("cannot configure the S3 client for {url}: {}", one_line(error))]
    Configure {
        /// The bucket URL.
        url: String,
        /// object_store's error.
        error: object_store::Error,
    },
    /// A file of the shard could not be read back.
    #[error("cannot read {path} to upload it")]
    Read {
        /// The file.
        path: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The server refused an object, or could not be reached.
    #[error("cannot upload {object}: {}", one_line(error))]
    Upload {
        /// The object's URL (`s3://bucket/key`).
        object: String,
        /// object_store's error.
        error: object_store::Error,
    },
}

/// Where one shard's files go in a bucket.
pub struct ShardBucket {
    store: Arc<dyn ObjectStore>,
    bucket: String,
    prefix: ObjectPath,
}

impl ShardBucket {
    /// A client for `url` (`s3://<bucket>/<prefix>`), at `endpoint` when given (an
    /// S3-compatible server, path-style requests), signing for `region` when given, over
    /// plain HTTP only with `allow_http`.
    pub fn new(
        url: &str,
        endpoint: Option<&str>,
        region: Option<&str>,
        allow_http: bool,
    ) -> Result<Self, BucketError> {
        let (bucket, prefix) = split_s3_url(url).ok_or_else(|| BucketError::Url(url.into()))?;
        // object_store's reqwest client uses the process's rustls provider: ring, the one
        // this crate builds. `install_default` fails only when one is installed already.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let mut builder = AmazonS3Builder::from_env()
            .with_bucket_name(bucket)
            .with_allow_http(allow_http)
            .with_retry(RetryConfig {
                retry_timeout: RETRY_TIMEOUT,
                ..RetryConfig::default()
            });
        if let Some(endpoint) = endpoint {
            builder = builder
                .with_endpoint(endpoint)
                .with_virtual_hosted_style_request(false);
        }
        if let Some(region) = region {
            builder = builder.with_region(region);
        }
        let store = builder.build().map_err(|error| BucketError::Configure {
            url: url.into(),
            error,
        })?;
        Ok(ShardBucket {
            store: Arc::new(store),
            bucket: bucket.to_owned(),
            prefix: ObjectPath::from(prefix),
        })
    }

    /// The object URL of file `name`.
    fn object_url(&self, key: &ObjectPath) -> String {
        format!("s3://{}/{key}", self.bucket)
    }

    /// Uploads every file directly in `dir` (in name order) to `<prefix>/<file name>`;
    /// returns the objects' URLs.
    pub async fn upload_dir(&self, dir: &Path) -> Result<Vec<String>, BucketError> {
        let read = |source| BucketError::Read {
            path: dir.display().to_string(),
            source,
        };
        let mut files = Vec::new();
        for entry in std::fs::read_dir(dir).map_err(read)? {
            let entry = entry.map_err(read)?;
            if entry.file_type().map_err(read)?.is_file() {
                files.push(entry.path());
            }
        }
        files.sort();
        let mut uploaded = Vec::with_capacity(files.len());
        for path in files {
            let name = path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            let bytes = std::fs::read(&path).map_err(|source| BucketError::Read {
                path: path.display().to_string(),
                source,
            })?;
            let key = self.prefix.clone().join(name.as_str());
            let object = self.object_url(&key);
            self.store
                .put(&key, PutPayload::from(bytes))
                .await
                .map_err(|error| BucketError::Upload {
                    object: object.clone(),
                    error,
                })?;
            uploaded.push(object);
        }
        Ok(uploaded)
    }
}

/// An object_store error on one line. An S3 error document becomes the HTTP status and
/// its `Code: Message` (`404 Not Found, NoSuchBucket: The specified bucket does not
/// exist`): the request's URL is in the error already said, and the document's request ids
/// would only push the cause off the end of a pod's status line. Any other text keeps
/// everything, its whitespace runs (newlines too) made single spaces.
fn one_line(error: &object_store::Error) -> String {
    let text = error.to_string();
    let tag = |name: &str| {
        let open = format!("<{name}>");
        let start = text.find(&open)? + open.len();
        let len = text[start..].find(&format!("</{name}>"))?;
        Some(text[start..start + len].trim().to_owned())
    };
    match tag("Code") {
        Some(code) => {
            let status = text
                .split_once("status code: ")
                .and_then(|(_, rest)| rest.split(':').next())
                .map(|s| format!("{}, ", s.trim()))
                .unwrap_or_default();
            let message = tag("Message").map(|m| format!(": {m}")).unwrap_or_default();
            format!("{status}{code}{message}")
        }
        None => text.split_whitespace().collect::<Vec<_>>().join(" "),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_s3_error_document_reads_as_its_code_and_message_on_one_line() {
        let error = object_store::Error::Generic {
            store: "S3",
            source: "Error performing PUT http://127.0.0.1:9/missing/a/requests.csv in 2ms - \
                     Server returned non-2XX status code: 404 Not Found: <?xml version=\"1.0\" \
                     encoding=\"UTF-8\"?>\n<Error>\n  <Code>NoSuchBucket</Code>\n  <Message>The \
                     specified bucket does not exist</Message>\n</Error>"
                .into(),
        };
        assert_eq!(
            one_line(&error),
            "404 Not Found, NoSuchBucket: The specified bucket does not exist"
        );
        let other = object_store::Error::Generic {
            store: "S3",
            source: "error sending request\n  connection refused".into(),
        };
        assert_eq!(
            one_line(&other),
            "Generic S3 error: error sending request connection refused"
        );
    }

    #[test]
    fn a_bucket_url_needs_a_bucket() {
        for url in ["s3://", "results/runs", "gs://results/runs"] {
            assert!(
                matches!(
                    ShardBucket::new(url, None, None, false),
                    Err(BucketError::Url(_))
                ),
                "{url}"
            );
        }
        let b = ShardBucket::new("s3://results/runs/x/", None, Some("eu-west-1"), false)
            .expect("a well-formed URL configures");
        assert_eq!(
            b.object_url(
                &b.prefix
                    .clone()
                    .join(goodput_core::pack_files::SUMMARY_JSON)
            ),
            "s3://results/runs/x/summary.json"
        );
    }
}
