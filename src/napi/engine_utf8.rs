//! The pure half of reading a JS string (`text`): the text of the bytes a JS engine's
//! `napi_get_value_string_utf8` wrote, checked. No napi here, so that plain `cargo test` runs its
//! unit tests (`lib.rs` includes this file alone under `cfg(test)`); `text` has the engines' sources.
//!
//! Valid UTF-8 is kept as it is (one validation pass, SIMD, no copy). ArkVM writes a lone UTF-16
//! surrogate as its own three-byte sequence (`ED A0 80` to `ED BF BF`), which is not UTF-8: it
//! reads as U+FFFD, what Node writes for one, so a string reads the same on both engines (a high
//! and a low one in a row, as CESU-8 writes a pair, read as the pair's character). Any other byte
//! that is not UTF-8 is refused ([`InvalidText`]).

/// Bytes the engine wrote for a JS string that are not UTF-8 (nor its surrogate form).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidText {
    /// The offset of the first byte that is not UTF-8.
    pub at: usize,
    /// Whether the bytes end inside a sequence (cut off) rather than holding a wrong byte.
    pub truncated: bool,
}

impl std::fmt::Display for InvalidText {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let what = if self.truncated { "a UTF-8 sequence cut off" } else { "a byte that is not UTF-8" };
        write!(f, "the JS engine gave this string as bytes that are not UTF-8 ({what} at byte {})", self.at)
    }
}

/// U+FFFD, what a lone surrogate reads as (as Node's napi writes it).
const REPLACEMENT: char = char::REPLACEMENT_CHARACTER;

/// The UTF-16 code unit of the three-byte surrogate sequence at the start of `bytes`, if it is
/// one (`ED A0..BF 80..BF`: U+D800 to U+DFFF).
fn surrogate_at(bytes: &[u8]) -> Option<u16> {
    match *bytes {
        [0xED, b1 @ 0xA0..=0xBF, b2 @ 0x80..=0xBF, ..] => {
            Some(0xD000 | (u16::from(b1 & 0x3F) << 6) | u16::from(b2 & 0x3F))
        }
        _ => None,
    }
}

/// The text of the bytes the engine wrote for a JS string (see the module docs): valid UTF-8 is
/// kept as it is (no copy); a surrogate's three-byte sequence becomes U+FFFD (a high one followed
/// by a low one, their character).
///
/// # Errors
/// [`InvalidText`] at the first byte that is neither.
pub fn decode_engine_utf8(bytes: Vec<u8>) -> Result<String, InvalidText> {
    // The fast check first (SIMD: std's is about three times slower on CJK text, BENCHMARKS.md
    // "NAPI strings (session 10)"); std's finds where bytes that are not UTF-8 start.
    if simdutf8::basic::from_utf8(&bytes).is_ok() {
        // SAFETY: validated as UTF-8 just above (simdutf8 accepts exactly what std accepts; the
        // unit tests compare the two on every kind of byte sequence).
        return Ok(unsafe { String::from_utf8_unchecked(bytes) });
    }
    match String::from_utf8(bytes) {
        Ok(text) => Ok(text),
        Err(e) => {
            let at = e.utf8_error().valid_up_to();
            decode_from(&e.into_bytes(), at)
        }
    }
}

/// [`decode_engine_utf8`]'s slow path: `bytes` are valid UTF-8 up to `at`.
fn decode_from(bytes: &[u8], mut at: usize) -> Result<String, InvalidText> {
    let mut text = String::with_capacity(bytes.len());
    let mut start = 0;
    loop {
        // Valid from `start` to `at` (what `from_utf8` said).
        text.push_str(
            std::str::from_utf8(&bytes[start..at]).map_err(|_| InvalidText { at, truncated: false })?,
        );
        let rest = &bytes[at..];
        if rest.is_empty() {
            return Ok(text);
        }
        let Some(unit) = surrogate_at(rest) else {
            // Cut off: `from_utf8` finds the end inside a sequence (no error length), or the
            // bytes end inside a surrogate's sequence (which `from_utf8` takes for a wrong byte).
            let truncated = std::str::from_utf8(rest).err().is_some_and(|e| e.error_len().is_none())
                || matches!(*rest, [0xED] | [0xED, 0xA0..=0xBF]);
            return Err(InvalidText { at, truncated });
        };
        let low = rest.get(3..).and_then(surrogate_at).filter(|low| (0xDC00..=0xDFFF).contains(low));
        match (unit, low) {
            (0xD800..=0xDBFF, Some(low)) => {
                let pair = [unit, low];
                text.extend(char::decode_utf16(pair).map(|c| c.unwrap_or(REPLACEMENT)));
                at += 6;
            }
            _ => {
                text.push(REPLACEMENT);
                at += 3;
            }
        }
        start = at;
        at += match std::str::from_utf8(&bytes[at..]) {
            Ok(_) => bytes.len() - at,
            Err(e) => e.valid_up_to(),
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode(bytes: &[u8]) -> Result<String, InvalidText> {
        decode_engine_utf8(bytes.to_vec())
    }

    #[test]
    fn valid_utf8_is_kept_as_it_is() {
        let long = "a".repeat(1 << 20);
        assert_eq!(decode(long.as_bytes()).as_deref(), Ok(long.as_str()));
        for text in ["", "é", "中文", "😀", "a\u{FFFD}b", "mixed é 中 😀 text"] {
            assert_eq!(decode(text.as_bytes()).as_deref(), Ok(text));
        }
    }

    #[test]
    fn u0000_is_a_character_like_any_other() {
        // What both engines write for U+0000 (ArkVM with isWriteBuffer).
        assert_eq!(decode(b"a\0b").as_deref(), Ok("a\0b"));
        assert_eq!(decode(b"\0").as_deref(), Ok("\0"));
        // "Modified UTF-8" (C0 80, what ArkVM writes without isWriteBuffer) is not UTF-8.
        assert_eq!(decode(b"a\xC0\x80"), Err(InvalidText { at: 1, truncated: false }));
    }

    #[test]
    fn a_lone_surrogate_written_raw_reads_as_u_fffd() {
        // ArkVM's bytes for "a\uD800", "a\uDC00b", "\uDBFF" (a high one at the end).
        assert_eq!(decode(b"a\xED\xA0\x80").as_deref(), Ok("a\u{FFFD}"));
        assert_eq!(decode(b"a\xED\xB0\x80b").as_deref(), Ok("a\u{FFFD}b"));
        assert_eq!(decode(b"\xED\xAF\xBF").as_deref(), Ok("\u{FFFD}"));
        // A low one before a high one (the wrong order) is two lone ones.
        assert_eq!(decode(b"\xED\xB8\x80\xED\xA0\xBD").as_deref(), Ok("\u{FFFD}\u{FFFD}"));
        // Several, between multi-byte characters, after a valid prefix.
        assert_eq!(
            decode(
                "é\u{1F600}"
                    .as_bytes()
                    .iter()
                    .chain(b"\xED\xA0\x80x\xED\xBF\xBF\xC3\xA9")
                    .copied()
                    .collect::<Vec<_>>()
                    .as_slice()
            )
            .as_deref(),
            Ok("é\u{1F600}\u{FFFD}x\u{FFFD}é")
        );
        // A high surrogate followed by a low one, each written alone (CESU-8): their character.
        assert_eq!(decode(b"a\xED\xA0\xBD\xED\xB8\x80b").as_deref(), Ok("a\u{1F600}b"));
    }

    #[test]
    fn bytes_that_are_not_utf8_are_refused_where_they_start() {
        // Cut off: a multi-byte sequence without its end.
        assert_eq!(decode(b"ab\xE4\xB8"), Err(InvalidText { at: 2, truncated: true }));
        assert_eq!(decode(b"\xF0\x9F\x98"), Err(InvalidText { at: 0, truncated: true }));
        assert_eq!(decode(b"a\xED\xA0"), Err(InvalidText { at: 1, truncated: true }));
        // A stray continuation byte, a byte never in UTF-8, an overlong form, beyond U+10FFFF.
        assert_eq!(decode(b"a\x80"), Err(InvalidText { at: 1, truncated: false }));
        assert_eq!(decode(b"ab\xFF"), Err(InvalidText { at: 2, truncated: false }));
        assert_eq!(decode(b"\xE0\x80\x80"), Err(InvalidText { at: 0, truncated: false }));
        assert_eq!(decode(b"\xF4\x90\x80\x80"), Err(InvalidText { at: 0, truncated: false }));
        // After a surrogate that was read, the offset is still the byte's.
        assert_eq!(decode(b"\xED\xA0\x80a\xC3"), Err(InvalidText { at: 4, truncated: true }));
        assert_eq!(decode(b"\xED\xA0\x80\xED\xA0"), Err(InvalidText { at: 3, truncated: true }));
        // A long valid prefix before the bad byte.
        let mut long = "é".repeat(10_000).into_bytes();
        long.push(0x80);
        assert_eq!(decode(&long), Err(InvalidText { at: 20_000, truncated: false }));
    }

    #[test]
    fn the_fast_check_accepts_exactly_what_std_accepts() {
        let mut cases: Vec<Vec<u8>> = vec![
            b"".to_vec(),
            b"a\0b".to_vec(),
            "é中😀".repeat(100).into_bytes(),
            b"a\xED\xA0\x80".to_vec(),
            b"ab\xE4\xB8".to_vec(),
            b"\xE0\x80\x80".to_vec(),
            b"\xF4\x90\x80\x80".to_vec(),
            b"\xC0\x80".to_vec(),
            b"a\x80".to_vec(),
            b"\xFF".to_vec(),
        ];
        // Every one- and two-byte sequence, and every three-byte one from E0 to EF with its
        // second byte around the boundaries, at every offset of a 64-byte SIMD block.
        for a in 0..=255u8 {
            cases.push(vec![a]);
            for b in 0..=255u8 {
                cases.push(vec![a, b]);
            }
        }
        for a in 0xE0..=0xEFu8 {
            for b in [0x7F, 0x80, 0x9F, 0xA0, 0xBF, 0xC0] {
                cases.push(vec![a, b, 0x80]);
            }
        }
        for case in cases.clone() {
            for offset in [1, 15, 31, 62, 63] {
                let mut shifted = vec![b'x'; offset];
                shifted.extend(&case);
                cases.push(shifted);
            }
        }
        for case in &cases {
            assert_eq!(
                simdutf8::basic::from_utf8(case).is_ok(),
                std::str::from_utf8(case).is_ok(),
                "{case:02X?}"
            );
        }
    }

    #[test]
    fn the_refusal_says_what_and_where() {
        let e = InvalidText { at: 4, truncated: true };
        assert_eq!(
            e.to_string(),
            "the JS engine gave this string as bytes that are not UTF-8 (a UTF-8 sequence cut off at byte 4)"
        );
    }
}
