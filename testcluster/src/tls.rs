//! The API server speaks HTTPS, as every real one does: `kubectl` and `helm` (client-go)
//! send credentials and impersonation headers only over TLS. Each cluster makes its own CA
//! and a serving certificate for 127.0.0.1 and localhost; kubeconfigs carry the CA.

use std::sync::Arc;

use anyhow::Context;
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair, KeyUsagePurpose, SanType};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use tokio_rustls::TlsAcceptor;

/// A cluster's certificate authority and the acceptor of its serving certificate.
#[derive(Clone)]
pub struct Tls {
    /// The CA certificate (PEM): what a kubeconfig's `certificate-authority-data` holds.
    pub ca_pem: String,
    pub acceptor: TlsAcceptor,
}

impl Tls {
    /// A fresh CA and a serving certificate signed by it.
    pub fn generate() -> anyhow::Result<Self> {
        let ca_key = KeyPair::generate().context("generating the CA key")?;
        let mut ca_params =
            CertificateParams::new(Vec::<String>::new()).context("CA parameters")?;
        ca_params
            .distinguished_name
            .push(DnType::CommonName, "testcluster-ca");
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let ca_cert = ca_params.self_signed(&ca_key).context("signing the CA")?;
        let issuer = rcgen::Issuer::new(ca_params, ca_key);

        let key = KeyPair::generate().context("generating the serving key")?;
        let mut params = CertificateParams::new(vec![
            "localhost".to_owned(),
            "kubernetes.default.svc".to_owned(),
        ])
        .context("serving certificate parameters")?;
        params
            .distinguished_name
            .push(DnType::CommonName, "testcluster-apiserver");
        params
            .subject_alt_names
            .push(SanType::IpAddress(std::net::IpAddr::from([127, 0, 0, 1])));
        let cert = params
            .signed_by(&key, &issuer)
            .context("signing the serving certificate")?;

        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .context("TLS versions")?
            .with_no_client_auth()
            .with_single_cert(
                vec![
                    CertificateDer::from(cert.der().to_vec()),
                    CertificateDer::from(ca_cert.der().to_vec()),
                ],
                PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
            )
            .context("TLS server configuration")?;
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Ok(Self {
            ca_pem: ca_cert.pem(),
            acceptor: TlsAcceptor::from(Arc::new(config)),
        })
    }
}
