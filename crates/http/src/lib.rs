//! The HTTP client every shell uses (load generator, router, scrapers): reqwest with rustls
//! on the `ring` provider, the one kube uses, so no second crypto library is built.

use std::time::Duration;

/// A client for OpenAI-compatible and Prometheus endpoints. Installs the `ring` rustls
/// provider for the process first (a no-op when one is already installed).
pub fn http_client(builder: reqwest::ClientBuilder) -> Result<reqwest::Client, reqwest::Error> {
    // `install_default` fails only when a provider is already installed, which is fine.
    let _ = rustls::crypto::ring::default_provider().install_default();
    builder.build()
}

/// A pooled client with the given connect timeout and TCP_NODELAY, for short loopback calls
/// and long streams alike (no overall timeout: streams may run for minutes).
pub fn default_http_client(connect_timeout: Duration) -> Result<reqwest::Client, reqwest::Error> {
    http_client(
        reqwest::Client::builder()
            .connect_timeout(connect_timeout)
            .tcp_nodelay(true)
            .pool_idle_timeout(Duration::from_secs(30)),
    )
}

/// The load generator's client: TCP_NODELAY, every idle connection kept (an open loop at
/// hundreds of requests per second reuses them), optionally HTTP/2 without negotiation.
pub fn load_client(http2: bool) -> Result<reqwest::Client, reqwest::Error> {
    let mut builder = reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(10))
        .tcp_nodelay(true)
        .pool_max_idle_per_host(usize::MAX);
    if http2 {
        builder = builder.http2_prior_knowledge();
    }
    http_client(builder)
}
