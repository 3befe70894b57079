//! The TLS configuration of the client: rustls with the ring provider, the bundled webpki roots
//! (HarmonyOS has no standard CA path) plus any extra PEM roots the app gives, ALPN for HTTP/1.1
//! (and HTTP/2 first with the cargo feature `http2`).

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
    let provider = Arc::new(rustls::crypto::ring::default_provider());
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
}
