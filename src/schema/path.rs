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

/// `.name` for a plain name, `["odd key"]` (JSON-quoted) otherwise.
pub(crate) fn key_segment(key: &str) -> String {
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
    }
}
