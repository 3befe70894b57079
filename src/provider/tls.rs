//! The TLS configuration of the client: rustls with the ring provider, the bundled webpki roots
//! (HarmonyOS has no standard CA path) plus any extra PEM roots the app gives, ALPN for HTTP/1.1
//! (and HTTP/2 first with the cargo feature `http2`).
//!
//! The provider is ring's, narrowed to what an HTTPS API endpoint needs (BENCHMARKS.md, "Size of
//! the stripped release `.so`"): AES-GCM suites only (TLS 1.3 and TLS 1.2 ECDHE), X25519, P-256 and
//! P-384 key exchange, ECDSA (P-256, P-384) and RSA (PKCS#1, PSS) signatures, and no private keys
//! (the client never authenticates itself with a certificate).

use crate::error::{codes, AgentError};
use std::sync::Arc;

/// Builds the rustls client config.
///
/// # Errors
/// `provider_tls` when an extra PEM holds no certificate, cannot be parsed, or a certificate is
/// rejected as a root.
pub fn client_tls_config(extra_root_pems: &[String]) -> Result<rustls::ClientConfig, AgentError> {
    let mut roots = rustls::RootCertStore::empty();
    roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    for (n, pem) in extra_root_pems.iter().enumerate() {
        let mut reader = std::io::BufReader::new(pem.as_bytes());
        let mut count = 0;
        for cert in rustls_pemfile::certs(&mut reader) {
            let cert = cert.map_err(|e| {
                AgentError::of(codes::PROVIDER_TLS, format!("extra root #{n}: unreadable PEM: {e}"))
            })?;
            roots.add(cert).map_err(|e| {
                AgentError::of(codes::PROVIDER_TLS, format!("extra root #{n}: rejected certificate: {e}"))
            })?;
            count += 1;
        }
        if count == 0 {
            return Err(AgentError::of(
                codes::PROVIDER_TLS,
                format!("extra root #{n}: no certificate in the PEM"),
            ));
        }
    }
    let provider = Arc::new(crypto_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| AgentError::of(codes::PROVIDER_TLS, format!("TLS protocol versions: {e}")))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    // Only what the HTTP client speaks: a server that picked h2 for a client without HTTP/2 would
    // get HTTP/1.1 on an h2 connection.
    config.alpn_protocols = Vec::new();
    if cfg!(feature = "http2") {
        config.alpn_protocols.push(b"h2".to_vec());
    }
    config.alpn_protocols.push(b"http/1.1".to_vec());
    Ok(config)
}

/// ring's rustls provider without what an HTTPS endpoint does not need: the ChaCha20-Poly1305
/// suites (every TLS server offers AES-GCM: TLS 1.3 mandates TLS_AES_128_GCM_SHA256; ARMv8
/// devices have AES instructions), Ed25519 signatures (no public CA issues Ed25519 certificates),
/// and the private key loader (used only for client certificates, which this client never sends).
/// Together 100-odd KB of ring's code and tables in the release `.so`.
fn crypto_provider() -> rustls::crypto::CryptoProvider {
    use rustls::crypto::ring::{cipher_suite as cs, kx_group};
    use rustls::crypto::WebPkiSupportedAlgorithms;
    use rustls::SignatureScheme as S;
    use webpki::ring as alg;
    static SIGNATURES: WebPkiSupportedAlgorithms = WebPkiSupportedAlgorithms {
        all: &[
            alg::ECDSA_P256_SHA256,
            alg::ECDSA_P256_SHA384,
            alg::ECDSA_P384_SHA256,
            alg::ECDSA_P384_SHA384,
            alg::RSA_PSS_2048_8192_SHA256_LEGACY_KEY,
            alg::RSA_PSS_2048_8192_SHA384_LEGACY_KEY,
            alg::RSA_PSS_2048_8192_SHA512_LEGACY_KEY,
            alg::RSA_PKCS1_2048_8192_SHA256,
            alg::RSA_PKCS1_2048_8192_SHA384,
            alg::RSA_PKCS1_2048_8192_SHA512,
            alg::RSA_PKCS1_2048_8192_SHA256_ABSENT_PARAMS,
            alg::RSA_PKCS1_2048_8192_SHA384_ABSENT_PARAMS,
            alg::RSA_PKCS1_2048_8192_SHA512_ABSENT_PARAMS,
        ],
        // As ring's provider maps them (for TLS 1.2 the curve is not fixed by the scheme).
        mapping: &[
            (S::ECDSA_NISTP384_SHA384, &[alg::ECDSA_P384_SHA384, alg::ECDSA_P256_SHA384]),
            (S::ECDSA_NISTP256_SHA256, &[alg::ECDSA_P256_SHA256, alg::ECDSA_P384_SHA256]),
            (S::RSA_PSS_SHA512, &[alg::RSA_PSS_2048_8192_SHA512_LEGACY_KEY]),
            (S::RSA_PSS_SHA384, &[alg::RSA_PSS_2048_8192_SHA384_LEGACY_KEY]),
            (S::RSA_PSS_SHA256, &[alg::RSA_PSS_2048_8192_SHA256_LEGACY_KEY]),
            (S::RSA_PKCS1_SHA512, &[alg::RSA_PKCS1_2048_8192_SHA512]),
            (S::RSA_PKCS1_SHA384, &[alg::RSA_PKCS1_2048_8192_SHA384]),
            (S::RSA_PKCS1_SHA256, &[alg::RSA_PKCS1_2048_8192_SHA256]),
        ],
    };
    rustls::crypto::CryptoProvider {
        cipher_suites: vec![
            cs::TLS13_AES_256_GCM_SHA384,
            cs::TLS13_AES_128_GCM_SHA256,
            cs::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
            cs::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
            cs::TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
            cs::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
        ],
        kx_groups: vec![kx_group::X25519, kx_group::SECP256R1, kx_group::SECP384R1],
        signature_verification_algorithms: SIGNATURES,
        secure_random: &NoKeys,
        key_provider: &NoKeys,
    }
}

/// The provider's randomness (ring's system random, as ring's provider) and its key loader, which
/// refuses every key: this client sends no certificate, and ring's loader would link RSA, ECDSA
/// and Ed25519 signing.
#[derive(Debug)]
struct NoKeys;

impl rustls::crypto::SecureRandom for NoKeys {
    fn fill(&self, buf: &mut [u8]) -> Result<(), rustls::crypto::GetRandomFailed> {
        use ring::rand::SecureRandom;
        ring::rand::SystemRandom::new().fill(buf).map_err(|_| rustls::crypto::GetRandomFailed)
    }
}

impl rustls::crypto::KeyProvider for NoKeys {
    fn load_private_key(
        &self,
        _key: rustls::pki_types::PrivateKeyDer<'static>,
    ) -> Result<Arc<dyn rustls::sign::SigningKey>, rustls::Error> {
        Err(rustls::Error::General("no client keys: the client sends no certificate".into()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_pems_are_provider_tls_errors() {
        assert!(client_tls_config(&[]).is_ok());
        let e = client_tls_config(&["not a pem".into()]).unwrap_err();
        assert_eq!(e.code, codes::PROVIDER_TLS);
        let e = client_tls_config(&["-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n".into()])
            .unwrap_err();
        assert_eq!(e.code, codes::PROVIDER_TLS);
    }

    #[test]
    fn the_provider_loads_no_private_key() {
        let key = rustls::pki_types::PrivateKeyDer::Pkcs8(
            rcgen::KeyPair::generate().unwrap().serialize_der().into(),
        );
        assert!(crypto_provider().key_provider.load_private_key(key).is_err());
    }
}
