//! Locations in a JSON value, as `$.items[0].name`. A path is a chain of frames on the stack while
//! validating; it is only turned into text when a violation is reported.

use std::fmt::Write as _;

#[derive(Clone, Copy)]
pub(crate) enum Seg<'a> {
    Root,
    Key(&'a str),
    Index(usize),
}

#[derive(Clone, Copy)]
pub(crate) struct Path<'a> {
    pub(crate) seg: Seg<'a>,
    pub(crate) parent: Option<&'a Path<'a>>,
}

impl<'a> Path<'a> {
    pub(crate) const ROOT: Path<'static> = Path { seg: Seg::Root, parent: None };

    #[inline]
    pub(crate) fn key(&'a self, key: &'a str) -> Path<'a> {
        Path { seg: Seg::Key(key), parent: Some(self) }
    }

    #[inline]
    pub(crate) fn index(&'a self, index: usize) -> Path<'a> {
        Path { seg: Seg::Index(index), parent: Some(self) }
    }

    /// The text form, `$` for the root.
    pub(crate) fn render(&self) -> String {
        let mut segs = Vec::new();
        let mut cur = Some(self);
        while let Some(p) = cur {
            segs.push(p.seg);
            cur = p.parent;
        }
        let mut out = String::from("$");
        for seg in segs.iter().rev() {
            match seg {
                Seg::Root => {}
                Seg::Key(k) => out.push_str(&key_segment(k)),
                Seg::Index(i) => {
                    let _ = write!(out, "[{i}]");
                }
            }
        }
        out
    }
}

/// The most characters of a key a path shows: the path goes back to the model in the call's
/// error, and a key of the model's own making can be as long as the arguments (a megabyte, sent
/// again with every later request).
pub(crate) const KEY_SHOWN_CHARS: usize = 64;

/// `.name` for a plain name, `["odd key"]` (JSON-quoted) otherwise; a key longer than
/// [`KEY_SHOWN_CHARS`] characters is shown by its start, `["start…" (N characters)]`.
pub(crate) fn key_segment(key: &str) -> String {
    if let Some((cut, _)) = key.char_indices().nth(KEY_SHOWN_CHARS) {
        let shown = format!("{}…", &key[..cut]);
        return format!("[{} ({} characters)]", serde_json::Value::String(shown), key.chars().count());
    }
    let mut chars = key.chars();
    let plain = match chars.next() {
        Some(c) if c.is_alphabetic() || c == '_' || c == '$' => {
            chars.all(|c| c.is_alphanumeric() || c == '_' || c == '$')
        }
        _ => false,
    };
    if plain {
        format!(".{key}")
    } else {
        format!("[{}]", serde_json::Value::String(key.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_dots_indexes_and_quoted_keys() {
        let root = Path::ROOT;
        let items = root.key("items");
        let first = items.index(0);
        let name = first.key("name");
        assert_eq!(name.render(), "$.items[0].name");
        let odd = root.key("a b\n");
        assert_eq!(odd.render(), "$[\"a b\\n\"]");
        assert_eq!(root.key("订单号").render(), "$.订单号");
        assert_eq!(root.key("").render(), "$[\"\"]");
        assert_eq!(Path::ROOT.render(), "$");
        // A key of the model's making as long as its arguments is shown by its start.
        let long = "k".repeat(1 << 20);
        let shown = root.key(&long).render();
        assert_eq!(shown, format!("$[\"{}…\" (1048576 characters)]", "k".repeat(64)));
        let exactly = "é".repeat(64);
        assert_eq!(root.key(&exactly).render(), format!("$.{exactly}"));
    }
}
