//! A stream's payloads decoded twice, for the provider tests: through the client's decoder (the
//! fast path where it applies) and through the derived parse alone (its reference), which must
//! agree event for event.

use arkagent::provider::{decode_sse_body, ModelEvent, StreamAssembler};

/// `payloads` as an SSE body: one `data:` event each.
pub fn sse(payloads: &[&str]) -> Vec<u8> {
    payloads.iter().map(|p| format!("data: {p}\n\n")).collect::<String>().into_bytes()
}

/// The events of a stream of `payloads`, checked against the derived parse of the same payloads.
pub fn events_both_ways(payloads: &[&str]) -> Vec<ModelEvent> {
    let events = decode_sse_body(&sse(payloads)).unwrap_or_else(|e| panic!("{payloads:?}: {e}"));
    let mut derived = StreamAssembler::new();
    let mut out = Vec::new();
    for p in payloads {
        derived.push_payload_derived(None, p, &mut out).unwrap_or_else(|e| panic!("{p}: {e}"));
    }
    derived.finish(&mut out);
    assert_eq!(events, out, "{payloads:?}");
    events
}
