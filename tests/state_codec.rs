//! The byte formats under hostile input: arbitrary bytes never panic the decoders, and any single
//! corrupted byte of a journal yields a prefix of its events (never a wrong event).

mod state_support;

use arkagent::codes;
use arkagent::state::codec::{
    decode_journal, decode_snapshot, encode_records, encode_snapshot, journal_header, JournalTail,
};
use arkagent::state::StateEvent;
use proptest::prelude::*;
use state_support::{state_after, turn};

fn journal_of(turns: u64) -> (Vec<u8>, Vec<StateEvent>) {
    let events: Vec<StateEvent> = (1..=turns).flat_map(turn).collect();
    let mut bytes = journal_header().to_vec();
    bytes.extend(encode_records(&events).unwrap());
    (bytes, events)
}

proptest! {
    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..512), as_journal in any::<bool>()) {
        if as_journal {
            let mut b = journal_header().to_vec();
            b.extend(&bytes);
            if let Ok(scan) = decode_journal(&b) {
                prop_assert!(scan.valid_len <= b.len());
            }
            let _ = decode_journal(&bytes);
        } else {
            let _ = decode_snapshot(&bytes);
            let mut b = b"ARKS".to_vec();
            b.extend(&bytes);
            let _ = decode_snapshot(&b);
        }
    }

    #[test]
    fn a_corrupted_byte_yields_a_prefix_of_the_events(pos in any::<prop::sample::Index>(), xor in 1u8..=255) {
        let (bytes, events) = journal_of(6);
        let mut bad = bytes.clone();
        let i = pos.index(bad.len());
        bad[i] ^= xor;
        match decode_journal(&bad) {
            Ok(scan) => {
                prop_assert!(scan.events.len() <= events.len());
                prop_assert_eq!(&scan.events[..], &events[..scan.events.len()]);
                if i >= 8 {
                    prop_assert!(scan.tail != JournalTail::Clean, "a flip at {} went unnoticed", i);
                    prop_assert!(scan.events.len() < events.len());
                }
            }
            Err(e) => {
                // Only the header's version can make it refuse: a newer version.
                prop_assert!((4..8).contains(&i));
                prop_assert_eq!(e.code, codes::STATE_VERSION_UNSUPPORTED);
            }
        }
    }

    #[test]
    fn a_corrupted_snapshot_byte_is_always_caught(pos in any::<prop::sample::Index>(), xor in 1u8..=255) {
        let bytes = encode_snapshot(&state_after("s1", 9)).unwrap();
        let mut bad = bytes.clone();
        let i = pos.index(bad.len());
        bad[i] ^= xor;
        let e = decode_snapshot(&bad).unwrap_err();
        prop_assert_eq!(e.code, codes::STATE_CORRUPT);
    }
}
