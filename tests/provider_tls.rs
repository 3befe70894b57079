//! TLS: a local rustls server whose certificate is signed by a self-signed CA made here (rcgen).
//! The client accepts it when the CA PEM is given as an extra root and refuses it without
//! (`provider_tls`, not retried). Over TLS the client offers HTTP/1.1 by ALPN, and HTTP/2 first
//! when built with the cargo feature `http2` (`cargo test --features http2 --test provider_tls`).

#[path = "support/mock_server.rs"]
mod mock_server;
#[path = "support/recordings.rs"]
mod recordings;
#[path = "support/request.rs"]
mod request;

use arkagent::provider::{ChatModel, ClientConfig, OpenAiCompatibleClient, RetryPolicy};
use arkagent::{codes, ErrorLayer};
use mock_server::{MockServer, Reply};
use request::request;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::time::Duration;

struct TestPki {
    ca_pem: String,
    server_config: rustls::ServerConfig,
}

fn pki(alpn: &[&[u8]]) -> TestPki {
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca.distinguished_name.push(rcgen::DnType::CommonName, "arkagent test CA");
    ca.key_usages = vec![rcgen::KeyUsagePurpose::KeyCertSign, rcgen::KeyUsagePurpose::CrlSign];
    let ca_cert = ca.self_signed(&ca_key).unwrap();
    let leaf_key = rcgen::KeyPair::generate().unwrap();
    let mut leaf = rcgen::CertificateParams::new(vec!["localhost".to_string()]).unwrap();
    leaf.subject_alt_names.push(rcgen::SanType::IpAddress(IpAddr::V4(Ipv4Addr::LOCALHOST)));
    let leaf_cert = leaf.signed_by(&leaf_key, &ca_cert, &ca_key).unwrap();
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(leaf_key.serialize_der()));
    let chain: Vec<CertificateDer<'static>> = vec![leaf_cert.der().clone()];
    let mut server_config =
        rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .unwrap();
    server_config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    TestPki { ca_pem: ca_cert.pem(), server_config }
}

fn ok_body() -> serde_json::Value {
    serde_json::json!({"choices":[{"message":{"content":"over tls"},"finish_reason":"stop"}]})
}

fn retry() -> RetryPolicy {
    RetryPolicy { max_retries: 2, initial_backoff: Duration::from_millis(10), ..RetryPolicy::default() }
}

#[tokio::test]
async fn an_extra_root_is_trusted_and_nothing_else() {
    let pki = pki(&[b"http/1.1"]);
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(pki.server_config));
    let server = MockServer::start_tls(acceptor, [Reply::json(200, &ok_body())]).await;
    let base = format!("https://127.0.0.1:{}/v1", server.addr().port());

    // Without the CA: the handshake fails, as a TLS error, and it is not retried.
    let c = OpenAiCompatibleClient::new(ClientConfig::custom(&base, "m", "k").with_retry(retry())).unwrap();
    let e = c.complete(&request()).await.unwrap_err();
    assert_eq!((e.layer, e.code.as_ref()), (ErrorLayer::Provider, codes::PROVIDER_TLS), "{e}");
    assert!(e.message.to_lowercase().contains("certificate") || e.message.contains("UnknownIssuer"), "{e}");
    assert_eq!(server.connections(), 1, "a certificate failure is not retried");
    assert!(server.requests().is_empty());

    // With the CA PEM as an extra root: accepted.
    let c = OpenAiCompatibleClient::new(
        ClientConfig::custom(&base, "m", "k").with_retry(retry()).with_extra_root_pem(pki.ca_pem),
    )
    .unwrap();
    let r = c.complete(&request()).await.unwrap();
    assert_eq!(r.content.as_deref(), Some("over tls"));
    assert_eq!(server.requests().len(), 1);
}

#[cfg(not(feature = "http2"))]
#[tokio::test]
async fn http1_is_negotiated_with_a_server_that_prefers_h2() {
    // The server picks the first of its protocols the client offers: a client offering h2 without
    // speaking it would get an h2 connection, which the HTTP/1.1 mock cannot answer.
    let pki = pki(&[b"h2", b"http/1.1"]);
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(pki.server_config));
    let server = MockServer::start_tls(acceptor, [Reply::json(200, &ok_body())]).await;
    let base = format!("https://127.0.0.1:{}/v1", server.addr().port());
    let c = OpenAiCompatibleClient::new(
        ClientConfig::custom(&base, "m", "k").with_retry(RetryPolicy::none()).with_extra_root_pem(pki.ca_pem),
    )
    .unwrap();
    let r = c.complete(&request()).await.unwrap();
    assert_eq!(r.content.as_deref(), Some("over tls"));
    assert_eq!(server.requests().len(), 1);
}

#[cfg(feature = "http2")]
#[tokio::test]
async fn http2_is_negotiated_when_offered() {
    use arkagent::provider::{decode_sse_body, ModelEvent};
    use futures_util::StreamExt;
    let pki = pki(&[b"h2", b"http/1.1"]);
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(pki.server_config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let body = recordings::sse_body("openai-gpt4o-parallel-two-tools.sse");
    let served = body.clone();
    let (seen_tx, seen_rx) = tokio::sync::oneshot::channel();
    tokio::spawn(async move {
        let (tcp, _) = listener.accept().await.unwrap();
        let tls = acceptor.accept(tcp).await.unwrap();
        assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
        let mut conn = h2::server::handshake(tls).await.unwrap();
        let (req, mut respond) = conn.accept().await.unwrap().unwrap();
        let version = req.version();
        let auth = req.headers().get("authorization").map(|v| v.to_str().unwrap().to_string());
        let response = http::Response::builder()
            .status(200)
            .header("content-type", "text/event-stream")
            .body(())
            .unwrap();
        let mut send = respond.send_response(response, false).unwrap();
        for piece in served.chunks(500) {
            send.send_data(bytes::Bytes::copy_from_slice(piece), false).unwrap();
        }
        send.send_data(bytes::Bytes::new(), true).unwrap();
        let _ = seen_tx.send((version, auth));
        // Drive the connection until the client is done with it.
        while let Some(Ok(_)) = conn.accept().await {}
    });
    let config = ClientConfig::custom(format!("https://127.0.0.1:{port}/v1"), "m", "sk-h2-key-123")
        .with_retry(RetryPolicy::none())
        .with_extra_root_pem(pki.ca_pem);
    let c = OpenAiCompatibleClient::new(config).unwrap();
    let mut stream = c.stream(&request()).await.unwrap();
    let mut events: Vec<ModelEvent> = Vec::new();
    while let Some(ev) = stream.next().await {
        events.push(ev.unwrap());
    }
    assert_eq!(events, decode_sse_body(&body).unwrap());
    let (version, auth) = seen_rx.await.unwrap();
    assert_eq!(version, http::Version::HTTP_2);
    assert_eq!(auth.as_deref(), Some("Bearer sk-h2-key-123"));
}
