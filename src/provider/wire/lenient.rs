//! Lenient readers for the parts of an answer that name calls, shared by whole answers
//! ([`response`](super::response)) and streamed chunks ([`chunk`](super::chunk)): `tool_calls` and
//! each entry's `function` are read as the seed's `ResponseParser` reads them (tool-calling-loop.md,
//! 4). `tool_calls` that is not an array is no calls; an entry that is not an object is left out; a
//! `function` that is not an object is no function. The JSON must still be valid, and an object
//! whose fields have the wrong types is still an error (as everywhere).

use serde::de::{self, Deserialize, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use std::fmt;
use std::marker::PhantomData;

/// `T` read from a JSON object; `None` for any other value (`null`, a string, a number, a
/// boolean, an array).
pub(crate) fn object_or_none<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    d.deserialize_any(Lenient::<Option<T>>(PhantomData))
}

/// Whether the value is a JSON object (its fields are not read).
pub(crate) fn is_object<'de, D: Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
    Ok(object_or_none::<D, IgnoredAny>(d)?.is_some())
}

/// The object entries of a JSON array, each read as `T` (other entries are left out); empty for
/// any other value.
pub(crate) fn objects_or_none<'de, D, T>(d: D) -> Result<Vec<T>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    d.deserialize_any(Lenient::<Vec<T>>(PhantomData))
}

/// One entry of an array read by [`objects_or_none`].
struct Entry<T>(Option<T>);

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Entry<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        object_or_none(d).map(Entry)
    }
}

/// A choice's `index` read leniently: an unsigned integer that fits in `u32`, a number that is a
/// whole one (`0.0`), or a string of one (`"1"`: a gateway that writes its indexes as text still
/// names its choices apart); anything else (`-1`, `1.5`, `null`, an object...) is none, as a
/// missing index is. A gateway's odd index never fails the whole answer.
pub(crate) fn index_or_none<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u32>, D::Error> {
    d.deserialize_any(LenientIndex)
}

/// The visitor of [`index_or_none`].
struct LenientIndex;

impl<'de> Visitor<'de> for LenientIndex {
    type Value = Option<u32>;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_u64<E: de::Error>(self, n: u64) -> Result<Self::Value, E> {
        Ok(u32::try_from(n).ok())
    }
    fn visit_i64<E: de::Error>(self, n: i64) -> Result<Self::Value, E> {
        Ok(u32::try_from(n).ok())
    }
    fn visit_f64<E: de::Error>(self, n: f64) -> Result<Self::Value, E> {
        let whole = n.fract() == 0.0 && (0.0..=f64::from(u32::MAX)).contains(&n);
        // Used only when in range and whole: then the cast is exact.
        Ok(whole.then_some(n as u32))
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
        IgnoredAny::deserialize(de::value::MapAccessDeserializer::new(map))?;
        Ok(None)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
        IgnoredAny::deserialize(de::value::SeqAccessDeserializer::new(seq))?;
        Ok(None)
    }
    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_str<E: de::Error>(self, text: &str) -> Result<Self::Value, E> {
        Ok(text.trim().parse::<u32>().ok())
    }
}

/// What [`Lenient`] builds from a map, from a sequence, and from anything else.
trait LenientTarget<'de>: Sized {
    fn from_map<A: MapAccess<'de>>(map: A) -> Result<Self, A::Error>;
    fn from_seq<A: SeqAccess<'de>>(seq: A) -> Result<Self, A::Error>;
    fn other() -> Self;
}

impl<'de, T: Deserialize<'de>> LenientTarget<'de> for Option<T> {
    fn from_map<A: MapAccess<'de>>(map: A) -> Result<Self, A::Error> {
        T::deserialize(de::value::MapAccessDeserializer::new(map)).map(Some)
    }
    fn from_seq<A: SeqAccess<'de>>(seq: A) -> Result<Self, A::Error> {
        IgnoredAny::deserialize(de::value::SeqAccessDeserializer::new(seq))?;
        Ok(None)
    }
    fn other() -> Self {
        None
    }
}

impl<'de, T: Deserialize<'de>> LenientTarget<'de> for Vec<T> {
    fn from_map<A: MapAccess<'de>>(map: A) -> Result<Self, A::Error> {
        IgnoredAny::deserialize(de::value::MapAccessDeserializer::new(map))?;
        Ok(Vec::new())
    }
    fn from_seq<A: SeqAccess<'de>>(mut seq: A) -> Result<Self, A::Error> {
        let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0));
        while let Some(Entry(entry)) = seq.next_element::<Entry<T>>()? {
            items.extend(entry);
        }
        Ok(items)
    }
    fn other() -> Self {
        Vec::new()
    }
}

/// A visitor taking any JSON value: maps and sequences go to `T`, every other value is `T::other()`.
struct Lenient<T>(PhantomData<T>);

impl<'de, T: LenientTarget<'de>> Visitor<'de> for Lenient<T> {
    type Value = T;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<T, A::Error> {
        T::from_map(map)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<T, A::Error> {
        T::from_seq(seq)
    }
    fn visit_unit<E: de::Error>(self) -> Result<T, E> {
        Ok(T::other())
    }
    fn visit_none<E: de::Error>(self) -> Result<T, E> {
        Ok(T::other())
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<T, D::Error> {
        d.deserialize_any(self)
    }
    fn visit_bool<E: de::Error>(self, _: bool) -> Result<T, E> {
        Ok(T::other())
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<T, E> {
        Ok(T::other())
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<T, E> {
        Ok(T::other())
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<T, E> {
        Ok(T::other())
    }
    fn visit_str<E: de::Error>(self, _: &str) -> Result<T, E> {
        Ok(T::other())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, PartialEq, serde::Deserialize)]
    struct Item {
        n: u32,
    }

    #[derive(Debug, serde::Deserialize)]
    struct Holder {
        #[serde(default, deserialize_with = "objects_or_none")]
        items: Vec<Item>,
        #[serde(default, deserialize_with = "object_or_none")]
        one: Option<Item>,
    }

    fn read(json: &str) -> Result<Holder, serde_json::Error> {
        serde_json::from_str(json)
    }

    #[test]
    fn objects_are_read_and_everything_else_is_nothing() {
        let h = read(r#"{"items":[{"n":1},null,"x",2,[{"n":9}],true,{"n":3}],"one":{"n":4}}"#).unwrap();
        assert_eq!((h.items, h.one), (vec![Item { n: 1 }, Item { n: 3 }], Some(Item { n: 4 })));
        for other in ["null", "{}", r#"{"n":1}"#, r#""[{\"n\":1}]""#, "0", "-1.5", "false"] {
            let h = read(&format!(r#"{{"items":{other}}}"#)).unwrap();
            assert!(h.items.is_empty(), "{other}");
        }
        for other in ["null", "[]", r#"[{"n":1}]"#, r#""n""#, "7", "true"] {
            assert!(read(&format!(r#"{{"one":{other}}}"#)).unwrap().one.is_none(), "{other}");
        }
        let h = read("{}").unwrap();
        assert!(h.items.is_empty() && h.one.is_none());
    }

    #[test]
    fn an_index_is_an_unsigned_integer_a_whole_number_or_its_text_else_none() {
        #[derive(serde::Deserialize)]
        struct Choice {
            #[serde(default, deserialize_with = "index_or_none")]
            index: Option<u32>,
        }
        let index = |v: &str| serde_json::from_str::<Choice>(&format!(r#"{{"index":{v}}}"#)).unwrap().index;
        for (v, want) in [
            ("0", Some(0)),
            ("3", Some(3)),
            ("0.0", Some(0)),
            ("2e0", Some(2)),
            ("4294967295", Some(u32::MAX)),
            (r#""0""#, Some(0)),
            (r#"" 1 ""#, Some(1)),
        ] {
            assert_eq!(index(v), want, "{v}");
        }
        for v in [
            r#""x""#,
            r#""-1""#,
            "-1",
            "1.5",
            "-0.5",
            "4294967296",
            "1e300",
            "null",
            "true",
            "[0]",
            r#"{"i":0}"#,
        ] {
            assert_eq!(index(v), None, "{v}");
        }
        assert_eq!(serde_json::from_str::<Choice>("{}").unwrap().index, None);
        assert!(serde_json::from_str::<Choice>(r#"{"index":[0,}"#).is_err());
    }

    #[test]
    fn a_bad_object_or_bad_json_is_still_an_error() {
        for bad in [
            r#"{"items":[{"n":"one"}]}"#,
            r#"{"one":{"n":-1}}"#,
            r#"{"items":[{"n":1},]}"#,
            r#"{"items":{"n":}}"#,
            r#"{"one":[1,}"#,
        ] {
            assert!(read(bad).is_err(), "{bad}");
        }
    }
}
