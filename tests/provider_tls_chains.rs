//! The client's narrowed ring provider (`src/provider/tls.rs`) verifies the certificate chains
//! public CAs issue, where the root, the intermediate and the leaf have keys of different types
//! and each certificate is signed with its issuer's key and hash: an RSA root over an ECDSA P-384
//! intermediate whose SHA-384 signature covers a P-256 leaf (Let's Encrypt's ISRG Root X1 → E5),
//! a P-384 root signing a P-256 intermediate with SHA-384 (Google Trust Services' GTS Root R4 →
//! WE1, api.openai.com's chain), an RSA root signing with SHA-384 (DigiCert's G5 roots), and RSA
//! all the way (GlobalSign, DigiCert G2, the chains of the Chinese cloud endpoints). The server
//! sends leaf and intermediate; the client trusts only the root. Both TLS versions.

#[path = "support/mock_server.rs"]
mod mock_server;

use arkagent::provider::{ChatModel, ChatRequest, ClientConfig, OpenAiCompatibleClient, RetryPolicy};
use arkagent::ChatMessage;
use mock_server::{MockServer, Reply};
use rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::SupportedProtocolVersion;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;

#[derive(Clone, Copy, Debug)]
enum Key {
    P256,
    P384,
    /// RSA 2048 signing with PKCS#1 SHA-256.
    Rsa,
    /// RSA 2048 signing with PKCS#1 SHA-384.
    RsaSha384,
}

fn key_pair(key: Key) -> rcgen::KeyPair {
    let rsa = |alg| {
        let pem = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/tls/rsa-2048.key.pem"
        ))
        .unwrap();
        rcgen::KeyPair::from_pem_and_sign_algo(&pem, alg).unwrap()
    };
    match key {
        Key::P256 => rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap(),
        Key::P384 => rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P384_SHA384).unwrap(),
        Key::Rsa => rsa(&rcgen::PKCS_RSA_SHA256),
        Key::RsaSha384 => rsa(&rcgen::PKCS_RSA_SHA384),
    }
}

fn ca_params(name: &str) -> rcgen::CertificateParams {
    let mut ca = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca.distinguished_name.push(rcgen::DnType::CommonName, name);
    ca.key_usages = vec![rcgen::KeyUsagePurpose::KeyCertSign];
    ca
}

/// One request over `version` to a server whose chain is root → intermediate → leaf with keys of
/// `keys`; the client trusts the root.
async fn call(keys: [Key; 3], version: &'static SupportedProtocolVersion) -> Option<String> {
    let root_key = key_pair(keys[0]);
    let root = ca_params("arkagent chain test root").self_signed(&root_key).unwrap();
    let mid_key = key_pair(keys[1]);
    let mid = ca_params("arkagent chain test intermediate").signed_by(&mid_key, &root, &root_key).unwrap();
    let leaf_key = key_pair(keys[2]);
    let mut leaf = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    leaf.subject_alt_names.push(rcgen::SanType::IpAddress(IpAddr::V4(Ipv4Addr::LOCALHOST)));
    let leaf = leaf.signed_by(&leaf_key, &mid, &mid_key).unwrap();
    let mut config =
        rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_protocol_versions(&[version])
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(
                vec![leaf.der().clone(), mid.der().clone()],
                PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(leaf_key.serialize_der())),
            )
            .unwrap();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    let body = serde_json::json!({"choices":[{"message":{"content":"chain ok"},"finish_reason":"stop"}]});
    let mock =
        MockServer::start_tls(tokio_rustls::TlsAcceptor::from(Arc::new(config)), [Reply::json(200, &body)])
            .await;
    let base = format!("https://127.0.0.1:{}/v1", mock.addr().port());
    let client = OpenAiCompatibleClient::new(
        ClientConfig::custom(&base, "m", "k").with_retry(RetryPolicy::none()).with_extra_root_pem(root.pem()),
    )
    .unwrap();
    let request = ChatRequest::new(Arc::from(vec![ChatMessage::user("hi")]), Arc::from(Vec::new()));
    match client.complete(&request).await {
        Ok(r) => r.content,
        Err(e) => panic!("{keys:?} over {version:?}: {e}"),
    }
}

#[tokio::test]
async fn chains_of_mixed_key_types_as_public_cas_issue_them_verify() {
    for keys in [
        [Key::Rsa, Key::P384, Key::P256],
        [Key::P384, Key::P256, Key::P256],
        [Key::P384, Key::P384, Key::P384],
        [Key::RsaSha384, Key::Rsa, Key::Rsa],
        [Key::Rsa, Key::Rsa, Key::P256],
    ] {
        for version in [&rustls::version::TLS13, &rustls::version::TLS12] {
            assert_eq!(call(keys, version).await.as_deref(), Some("chain ok"), "{keys:?}");
        }
    }
}
