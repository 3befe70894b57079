//! Randomized loop-detector checks against a plain reference written from the rules, over random
//! call sequences drawn from a small alphabet (so repeats and cycles happen often):
//! the detector agrees with the reference after every call, a window exported and imported at any
//! point continues identically, and streamed updates (interleaved across calls) count exactly as
//! recording each call's final signature at its commit; and a batch is a loop when a repeat ends
//! at any of its calls or a cycle ends at its last.
//!
//! `PROPTEST_CASES` raises the number of cases (default 256 here).

use arkagent::loop_detect::{LoopDetector, LoopDetectorConfig};
use proptest::prelude::*;

/// The rules, on the whole history: the last `window` identical, or for p in 2..=3 the last
/// max(window, 3p) periodic with period p and not all identical.
fn reference(history: &[String], window: usize) -> bool {
    repeat(history, window) || cycle(history, window)
}

fn repeat(history: &[String], window: usize) -> bool {
    let n = history.len();
    n >= window && history[n - window..].iter().all(|s| *s == history[n - 1])
}

fn cycle(history: &[String], window: usize) -> bool {
    let n = history.len();
    (2..=3).any(|p| {
        let span = window.max(3 * p);
        n >= span && {
            let tail = &history[n - span..];
            (p..span).all(|i| tail[i] == tail[i - p]) && tail[..p].iter().any(|s| *s != tail[0])
        }
    })
}

fn cases() -> ProptestConfig {
    ProptestConfig::with_cases(
        std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(256),
    )
}

proptest! {
    #![proptest_config(cases())]

    #[test]
    fn detector_agrees_with_the_reference(
        window in 2usize..9,
        calls in prop::collection::vec(0u8..3, 0..40),
        cut in 0usize..40,
    ) {
        let config = LoopDetectorConfig { window };
        let mut detector = LoopDetector::new(&config).unwrap();
        let mut history = Vec::new();
        for (i, c) in calls.iter().enumerate() {
            if i == cut {
                // Persist and resume: the continuation must not notice.
                detector = LoopDetector::from_window(&config, detector.window()).unwrap();
            }
            let sig = format!("tool:{{\"v\":{c}}}");
            history.push(sig.clone());
            let got = detector.record(&format!("id{i}"), sig).is_loop();
            prop_assert_eq!(got, reference(&history, window), "after {:?}", history);
        }
    }

    #[test]
    fn batches_agree_with_the_reference(
        window in 2usize..9,
        batches in prop::collection::vec(prop::collection::vec(0u8..3, 1..5), 0..12),
        cut in 0usize..12,
    ) {
        let config = LoopDetectorConfig { window };
        let mut detector = LoopDetector::new(&config).unwrap();
        let mut history = Vec::new();
        for (i, batch) in batches.iter().enumerate() {
            if i == cut {
                detector = LoopDetector::from_window(&config, detector.window()).unwrap();
            }
            let mut repeated = false;
            for c in batch {
                history.push(format!("tool:{{\"v\":{c}}}"));
                repeated |= repeat(&history, window);
            }
            let got = detector.record_batch(batch.iter().map(|c| format!("tool:{{\"v\":{c}}}"))).is_loop();
            prop_assert_eq!(got, repeated || cycle(&history, window), "after {:?}", history);
        }
    }

    #[test]
    fn streamed_updates_count_as_their_final_signature(
        // Each call: its final signature and how many partial updates precede it.
        calls in prop::collection::vec((0u8..3, 0usize..4), 1..12),
        interleave in any::<u64>(),
    ) {
        let config = LoopDetectorConfig::default();
        let mut streamed = LoopDetector::new(&config).unwrap();
        let mut recorded = LoopDetector::new(&config).unwrap();
        // Two calls in flight at a time: updates of call i and i+1 interleave, then i commits.
        for (i, (sig, partials)) in calls.iter().enumerate() {
            let id = format!("call_{i}");
            for k in 0..*partials {
                streamed.update(&id, format!("tool:{{\"v\":{sig}")[..6 + k.min(2)].to_string());
                if interleave >> (i % 64) & 1 == 1 {
                    if let Some((next_sig, _)) = calls.get(i + 1) {
                        streamed.update(&format!("call_{}", i + 1), format!("tool:partial{next_sig}"));
                    }
                }
            }
            streamed.update(&id, format!("tool:{{\"v\":{sig}}}"));
            let a = streamed.commit(&id).is_loop();
            let b = recorded.record(&id, format!("tool:{{\"v\":{sig}}}")).is_loop();
            prop_assert_eq!(a, b);
            prop_assert_eq!(streamed.window(), recorded.window());
        }
    }
}
