//! Arbitrary bytes, arbitrarily chunked -> `StreamDecoder`; and `decode_sse_body` on the whole.
//! Never a panic, and the split never changes the outcome: the events and the verdict of the
//! chunked feed equal those of the whole body.
//!
//! Input: the first byte seeds the chunk sizes, the rest is the body.
use arkagent::provider::{decode_sse_body, ModelEvent, StreamDecoder};

fn chunked(body: &[u8], mut seed: u32) -> Result<Vec<ModelEvent>, arkagent::AgentError> {
    let mut decoder = StreamDecoder::new();
    let mut out = Vec::new();
    let mut rest = body;
    while !rest.is_empty() {
        // xorshift: sizes 1..=16, sometimes bigger.
        seed ^= seed << 13;
        seed ^= seed >> 17;
        seed ^= seed << 5;
        let size = if seed.is_multiple_of(7) { (seed % 257) as usize + 1 } else { (seed % 16) as usize + 1 };
        let (head, tail) = rest.split_at(size.min(rest.len()));
        if decoder.feed(head, &mut out)? {
            break;
        }
        rest = tail;
    }
    decoder.finish(&mut out)?;
    Ok(out)
}

/// Checks one input; panics on a finding.
pub fn run(data: &[u8]) {
    let Some((&seed, body)) = data.split_first() else { return };
    let whole = decode_sse_body(body);
    let split = chunked(body, u32::from(seed).wrapping_mul(2_654_435_761) | 1);
    match (&whole, &split) {
        (Ok(a), Ok(b)) => assert_eq!(a, b),
        (Err(a), Err(b)) => assert_eq!(a.code, b.code, "{a} vs {b}"),
        _ => panic!("whole {whole:?} vs chunked {split:?}"),
    }
    if let Ok(events) = &whole {
        // A successful decode ends with exactly one Finished, last.
        let n = events.iter().filter(|e| matches!(e, ModelEvent::Finished(_))).count();
        assert_eq!(n, 1);
        assert!(matches!(events.last(), Some(ModelEvent::Finished(_))));
    }
}
