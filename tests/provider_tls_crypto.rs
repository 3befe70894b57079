//! The client's TLS algorithms (its narrowed ring provider, `src/provider/tls.rs`): against a local
//! rustls server restricted to one protocol version, one key exchange group, one certificate key
//! type or one cipher suite, the client completes the handshake with everything an HTTPS endpoint
//! uses (TLS 1.2 and 1.3, X25519, P-256, P-384, ECDSA P-256 and P-384 and RSA certificates) and
//! refuses, as `provider_tls`, what it no longer offers (ChaCha20-Poly1305 only, Ed25519
//! certificates).

#[path = "support/mock_server.rs"]
mod mock_server;

use arkagent::provider::{ChatModel, ChatRequest, ClientConfig, OpenAiCompatibleClient, RetryPolicy};
use arkagent::{codes, AgentError, ChatMessage};
use mock_server::{MockServer, Reply};
use rustls::crypto::ring as ring_provider;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::{CipherSuite, NamedGroup, SupportedProtocolVersion};
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;

/// What the test server is limited to (`None`: ring's defaults).
#[derive(Default)]
struct Server {
    version: Option<&'static SupportedProtocolVersion>,
    group: Option<NamedGroup>,
    suite: Option<CipherSuite>,
    key: Key,
}

#[derive(Default, Clone, Copy)]
enum Key {
    #[default]
    P256,
    P384,
    Rsa,
    Ed25519,
}

/// A CA and a leaf certificate for 127.0.0.1, both with keys of `key`'s type, and the server
/// config; returns it with the CA's PEM.
fn server(s: &Server) -> (rustls::ServerConfig, String) {
    let key_pair = || match s.key {
        Key::P256 => rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap(),
        Key::P384 => rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P384_SHA384).unwrap(),
        Key::Ed25519 => rcgen::KeyPair::generate_for(&rcgen::PKCS_ED25519).unwrap(),
        Key::Rsa => {
            let pem = std::fs::read_to_string(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/tests/fixtures/tls/rsa-2048.key.pem"
            ))
            .unwrap();
            rcgen::KeyPair::from_pem_and_sign_algo(&pem, &rcgen::PKCS_RSA_SHA256).unwrap()
        }
    };
    let ca_key = key_pair();
    let mut ca = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca.distinguished_name.push(rcgen::DnType::CommonName, "arkagent crypto test CA");
    ca.key_usages = vec![rcgen::KeyUsagePurpose::KeyCertSign];
    let ca_cert = ca.self_signed(&ca_key).unwrap();
    let leaf_key = key_pair();
    let mut leaf = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    leaf.subject_alt_names.push(rcgen::SanType::IpAddress(IpAddr::V4(Ipv4Addr::LOCALHOST)));
    let leaf_cert = leaf.signed_by(&leaf_key, &ca_cert, &ca_key).unwrap();
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(leaf_key.serialize_der()));
    let chain: Vec<CertificateDer<'static>> = vec![leaf_cert.der().clone()];

    let mut provider = ring_provider::default_provider();
    if let Some(group) = s.group {
        provider.kx_groups.retain(|g| g.name() == group);
    }
    if let Some(suite) = s.suite {
        provider.cipher_suites.retain(|c| c.suite() == suite);
    }
    let versions: Vec<&'static SupportedProtocolVersion> = match s.version {
        Some(v) => vec![v],
        None => rustls::DEFAULT_VERSIONS.to_vec(),
    };
    let mut config = rustls::ServerConfig::builder_with_provider(Arc::new(provider))
        .with_protocol_versions(&versions)
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .unwrap();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    (config, ca_cert.pem())
}

/// One request through a server limited as `s`, trusting its CA.
async fn call(s: Server) -> Result<Option<String>, AgentError> {
    let (config, ca_pem) = server(&s);
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let body = serde_json::json!({"choices":[{"message":{"content":"over tls"},"finish_reason":"stop"}]});
    let mock = MockServer::start_tls(acceptor, [Reply::json(200, &body)]).await;
    let base = format!("https://127.0.0.1:{}/v1", mock.addr().port());
    let c = OpenAiCompatibleClient::new(
        ClientConfig::custom(&base, "m", "k").with_retry(RetryPolicy::none()).with_extra_root_pem(ca_pem),
    )
    .unwrap();
    let request = ChatRequest::new(Arc::from(vec![ChatMessage::user("hi")]), Arc::from(Vec::new()));
    c.complete(&request).await.map(|r| r.content)
}

async fn accepted(s: Server) {
    assert_eq!(call(s).await.unwrap().as_deref(), Some("over tls"));
}

async fn refused(s: Server) {
    let e = call(s).await.unwrap_err();
    assert_eq!(e.code, codes::PROVIDER_TLS, "{e}");
}

#[tokio::test]
async fn both_versions_with_ecdsa_p256_and_p384_certificates() {
    for key in [Key::P256, Key::P384] {
        accepted(Server { version: Some(&rustls::version::TLS13), key, ..Server::default() }).await;
        accepted(Server { version: Some(&rustls::version::TLS12), key, ..Server::default() }).await;
    }
}

#[tokio::test]
async fn both_versions_with_rsa_certificates() {
    // TLS 1.3 signs the handshake with RSA-PSS, TLS 1.2 (ECDHE_RSA) with PSS or PKCS#1; the
    // certificates themselves are signed with PKCS#1 SHA-256.
    accepted(Server { version: Some(&rustls::version::TLS13), key: Key::Rsa, ..Server::default() }).await;
    accepted(Server { version: Some(&rustls::version::TLS12), key: Key::Rsa, ..Server::default() }).await;
}

#[tokio::test]
async fn every_key_exchange_group_an_endpoint_uses() {
    for group in [NamedGroup::X25519, NamedGroup::secp256r1, NamedGroup::secp384r1] {
        for version in [&rustls::version::TLS13, &rustls::version::TLS12] {
            accepted(Server { version: Some(version), group: Some(group), ..Server::default() }).await;
        }
    }
}

#[tokio::test]
async fn every_aes_gcm_suite() {
    let ecdsa = [
        CipherSuite::TLS13_AES_128_GCM_SHA256,
        CipherSuite::TLS13_AES_256_GCM_SHA384,
        CipherSuite::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
        CipherSuite::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
    ];
    for suite in ecdsa {
        accepted(Server { suite: Some(suite), ..Server::default() }).await;
    }
    for suite in [
        CipherSuite::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
        CipherSuite::TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
    ] {
        accepted(Server { suite: Some(suite), key: Key::Rsa, ..Server::default() }).await;
    }
}

#[tokio::test]
async fn chacha20_only_and_ed25519_servers_are_refused() {
    refused(Server { suite: Some(CipherSuite::TLS13_CHACHA20_POLY1305_SHA256), ..Server::default() }).await;
    refused(Server {
        suite: Some(CipherSuite::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256),
        ..Server::default()
    })
    .await;
    refused(Server { key: Key::Ed25519, ..Server::default() }).await;
}
