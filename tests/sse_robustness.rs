//! Bad input never panics: arbitrary bytes, and recordings with bytes flipped, cut or repeated,
//! end in events or a structured provider-layer error. Multi-byte UTF-8 split anywhere decodes
//! the same.

#[path = "support/recordings.rs"]
mod recordings;

use arkagent::provider::{decode_sse_body, ModelEvent, StreamDecoder};
use arkagent::ErrorLayer;
use proptest::prelude::*;

fn decode_pieces(body: &[u8], cuts: &[usize]) -> Result<Vec<ModelEvent>, arkagent::AgentError> {
    let mut d = StreamDecoder::new();
    let mut out = Vec::new();
    let mut start = 0;
    for &c in cuts.iter().chain(std::iter::once(&body.len())) {
        let c = c.clamp(start, body.len());
        d.feed(&body[start..c], &mut out)?;
        start = c;
    }
    d.finish(&mut out)?;
    Ok(out)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..2048), cuts in proptest::collection::vec(0usize..2048, 0..8)) {
        let mut cuts = cuts;
        cuts.sort_unstable();
        if let Err(e) = decode_pieces(&bytes, &cuts) {
            prop_assert_eq!(e.layer, ErrorLayer::Provider);
        }
    }

    #[test]
    fn damaged_recordings_never_panic(which in 0usize..21, flips in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..6), cut in any::<prop::sample::Index>()) {
        let entries = recordings::streaming_entries();
        let mut body = recordings::sse_body(entries[which]["file"].as_str().unwrap());
        for (at, byte) in flips {
            let i = at.index(body.len());
            body[i] = byte;
        }
        let end = cut.index(body.len() + 1);
        match decode_sse_body(&body[..end]) {
            Ok(events) => prop_assert!(matches!(events.last(), Some(ModelEvent::Finished(_)))),
            Err(e) => prop_assert_eq!(e.layer, ErrorLayer::Provider),
        }
    }
}

#[test]
fn multibyte_text_and_arguments_split_anywhere() {
    let payloads = [
        r#"{"choices":[{"delta":{"reasoning_content":"用户想查订单"}}]}"#,
        r#"{"choices":[{"delta":{"content":"我来查一下 😀 订单"}}]}"#,
        r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"id":"c1","function":{"name":"query_order","arguments":"{\"备注\": \"尽快"}}]}}]}"#,
        r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":"发货🚚\"}"}}]},"finish_reason":"tool_calls"}]}"#,
    ];
    let body: Vec<u8> =
        payloads.iter().map(|p| format!("data: {p}\r\n\r\n")).collect::<String>().into_bytes();
    let whole = decode_sse_body(&body).unwrap();
    match whole.last() {
        Some(ModelEvent::Finished(r)) => {
            assert_eq!(r.content.as_deref(), Some("我来查一下 😀 订单"));
            assert_eq!(r.reasoning_content.as_deref(), Some("用户想查订单"));
            assert_eq!(r.tool_calls[0].arguments, "{\"备注\": \"尽快发货🚚\"}");
        }
        other => panic!("{other:?}"),
    }
    for cut in 0..=body.len() {
        assert_eq!(decode_pieces(&body, &[cut]).unwrap(), whole, "split at {cut}");
    }
    let bytewise: Vec<usize> = (1..body.len()).collect();
    assert_eq!(decode_pieces(&body, &bytewise).unwrap(), whole);
}

#[test]
fn a_payload_cut_after_a_backslash_behind_an_escape_is_a_provider_error() {
    // The scan for lone surrogates' escapes (run on a payload serde_json refused) stepped past the
    // end of such a payload and panicked.
    let payload = r#"{"choices":[{"index":0,"delta":{"content":"\u0041 \"#;
    let body = format!("data: {payload}\n\ndata: [DONE]\n\n");
    let e = decode_pieces(body.as_bytes(), &[]).unwrap_err();
    assert_eq!(e.layer, ErrorLayer::Provider, "{e}");
    let e = arkagent::provider::convert::parse_response(payload.as_bytes()).unwrap_err();
    assert_eq!(e.layer, ErrorLayer::Provider, "{e}");
}
