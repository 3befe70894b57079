//! JSON text with escaped lone UTF-16 surrogates. `JSON.stringify` writes a lone surrogate as a
//! `\uD83C` escape (well-formed `JSON.stringify`, ES2019), so a JS string cut in the middle of an
//! emoji becomes such an escape in the text an app passes; serde_json refuses it ("lone leading
//! surrogate in hex escape"). Where JSON text comes from the app, each such escape reads as
//! U+FFFD, as a lone surrogate in a plain string does (see `napi/engine_utf8.rs`).

use std::borrow::Cow;

/// `text` with every `\u` escape of a lone surrogate (a high one not followed by an escaped low
/// one, or a low one not after a high one) replaced by `\uFFFD`; borrowed when there is none.
/// Other escapes, pairs and everything outside escapes are kept byte for byte.
pub fn lone_surrogate_escapes_replaced(text: &str) -> Cow<'_, str> {
    lone_surrogate_escapes_mapped(text, |_, out| out.push_str("\\uFFFD"))
}

/// `text` with every `\u` escape of a lone surrogate replaced by what `replace` writes for its
/// code unit (JSON text: an escape, say); borrowed when there is none. See
/// [`lone_surrogate_escapes_replaced`].
pub(crate) fn lone_surrogate_escapes_mapped(
    text: &str,
    mut replace: impl FnMut(u32, &mut String),
) -> Cow<'_, str> {
    let bytes = text.as_bytes();
    if memchr::memmem::find(bytes, b"\\u").is_none() {
        return Cow::Borrowed(text);
    }
    let mut out: Option<String> = None;
    let (mut i, mut copied) = (0, 0);
    // `i` may pass the end by one: a text cut after a backslash (malformed, but the text may be
    // anybody's: the app's, a model's) skips "both" bytes of its last escape.
    while let Some(offset) = bytes.get(i..).and_then(|rest| memchr::memchr(b'\\', rest)) {
        let at = i + offset;
        let Some(unit) = escaped_unit(bytes, at) else {
            // Another escape (`\\` included): the next byte is its own, skip both.
            i = at + 2;
            continue;
        };
        i = at + 6;
        match unit {
            0xD800..=0xDBFF
                if escaped_unit(bytes, at + 6).is_some_and(|u| (0xDC00..=0xDFFF).contains(&u)) =>
            {
                i = at + 12; // a pair
                continue;
            }
            0xD800..=0xDFFF => {}
            _ => continue,
        }
        let out = out.get_or_insert_with(|| String::with_capacity(text.len()));
        out.push_str(&text[copied..at]);
        replace(unit, out);
        copied = at + 6;
    }
    match out {
        None => Cow::Borrowed(text),
        Some(mut out) => {
            out.push_str(&text[copied..]);
            Cow::Owned(out)
        }
    }
}

/// The code unit of a `\uXXXX` escape starting at `at`, if there is one.
fn escaped_unit(bytes: &[u8], at: usize) -> Option<u32> {
    let escape = bytes.get(at..at + 6)?;
    if escape[0] != b'\\' || escape[1] != b'u' {
        return None;
    }
    let hex = std::str::from_utf8(&escape[2..]).ok()?;
    u32::from_str_radix(hex, 16).ok().filter(|_| hex.bytes().all(|b| b.is_ascii_hexdigit()))
}

#[cfg(test)]
mod tests {
    use super::lone_surrogate_escapes_replaced as fix;

    #[test]
    fn a_text_cut_after_a_backslash_is_kept_as_it_is() {
        // Found by tests/fuzz.rs: the skip past the last escape's two bytes went beyond the end.
        let cases = [
            (r#"\u0041 \"#, r#"\u0041 \"#),
            (r#""\ud800\"#, r#""\uFFFD\"#),
            (r#"\u0041\\\"#, r#"\u0041\\\"#),
        ];
        for (text, expected) in cases {
            assert_eq!(fix(text), expected, "{text:?}");
        }
    }

    #[test]
    fn lone_surrogates_become_the_replacement_character() {
        let cases = [
            (r#""a\ud800b""#, r#""a\uFFFDb""#),
            (r#""\uDC00""#, r#""\uFFFD""#),
            (r#""\ud83c""#, r#""\uFFFD""#),
            (r#""\ud83c\ud83c\udf82""#, r#""\uFFFD\ud83c\udf82""#),
            (r#"{"k\udfff":"\ud800\u0041"}"#, r#"{"k\uFFFD":"\uFFFD\u0041"}"#),
        ];
        for (text, want) in cases {
            assert_eq!(fix(text), want, "{text}");
            let value: serde_json::Value = serde_json::from_str(&fix(text)).unwrap();
            assert!(value.to_string().contains('\u{FFFD}'), "{value}");
        }
    }

    #[test]
    fn everything_else_is_kept_as_it_is() {
        for text in [
            r#""plain""#,
            r#""\ud83c\udf82 cake""#,
            r#""\\ud800 is text, its backslash escaped""#,
            r#""\u00e9\n\"\\""#,
            r#""\uD8"#,
            "\"蛋糕 🎂\"",
        ] {
            assert!(matches!(fix(text), std::borrow::Cow::Borrowed(_)), "{text}");
        }
    }

    #[test]
    fn json_stringify_output_with_a_cut_emoji_parses() {
        // What JSON.stringify('Cake 🎂'.substring(0, 6)) gives.
        let text = r#"{"note":"Cake \ud83c"}"#;
        assert!(serde_json::from_str::<serde_json::Value>(text).is_err());
        let value: serde_json::Value = serde_json::from_str(&fix(text)).unwrap();
        assert_eq!(value["note"], "Cake \u{FFFD}");
    }
}
