//! Reading JS strings: every string the module takes from JS (an export's argument, a field of an
//! object argument, what an executor, a hook or the approval policy answers, a thrown value's
//! text) is read here and checked, never with napi-ohos' `String` conversion, which builds the
//! `String` with `from_utf8_unchecked` from whatever bytes the engine wrote.
//!
//! # What the engines write
//! `napi_get_value_string_utf8` writes a JS string (UTF-16, possibly ill-formed) as UTF-8:
//! - Node (V8's `WriteUtf8` with `REPLACE_INVALID_UTF8`) writes a lone surrogate as U+FFFD, and
//!   U+0000 as a 0x00 byte: always valid UTF-8.
//! - ArkVM (OpenHarmony's ArkTS runtime) writes a lone surrogate as its own three-byte sequence
//!   (`ED A0 80`..`ED BF BF`, the generalized UTF-8 of WTF-8 and CESU-8), which is not UTF-8:
//!   napi-ohos made an invalid `String` of it, undefined behaviour for every string argument. Read
//!   in openharmony/arkui_napi `native_engine/native_api.cpp` at d23b64fdabbda94dbbf6cd39ad1e5f4e903f535d
//!   (`napi_get_value_string_utf8` -> `StringRef::Utf8Length(vm, true)` and
//!   `StringRef::WriteUtf8(vm, buf, bufsize - 1, true)`), and in
//!   openharmony/arkcompiler_ets_runtime at 0507952a47cc9ee63bc55c999832d1f75ad34aa9:
//!   `ecmascript/napi/jsnapi_expo.cpp` (`WriteToFlatUtf8`), `ecmascript/string/base_string-inl.h`
//!   (`WriteUtf8` -> `CopyDataRegionUtf8`: a compressed string, ASCII 0x01-0x7F only, is copied
//!   as is; a UTF-16 one goes through `ConvertRegionUtf16ToUtf8`), and
//!   `common_components/base/utf_helper.cpp`: `DecodeUTF16` returns an unpaired surrogate as the
//!   code point itself and `EncodeUTF8` writes it in three bytes (the `ENABLE_NEXT_OPTIMIZATION`
//!   variant of `ConvertRegionUtf16ToUtf8` does the same). U+0000 is one 0x00 byte there, as
//!   napi passes `isWriteBuffer = true` (with `false`, `modify` would make it `C0 80`, the
//!   "modified UTF-8" of Java). A surrogate pair is one four-byte sequence in both. Older ArkVM
//!   (`ecmascript/base/utf_helper.cpp` at 9dbc0d6b9, 2023) decodes and encodes the same way. A
//!   build with `ENABLE_HISPEED_PLUGIN` converts through a closed library (`dlsym` of
//!   `HSD_Str_ConvertRegionUtf16ToUtf8`) whose output nothing documents: one more reason to check.
//!
//! # What the module reads
//! [`decode_engine_utf8`]: valid UTF-8 as it is; a
//! surrogate's three-byte sequence as U+FFFD, so that a string reads the same on ArkVM as on
//! Node; any other byte that is not UTF-8 (no engine writes one, but nothing else vouches for the
//! bytes) is refused. A refused string is a structured error where it was read: an export's
//! argument `argument_invalid` naming it (through [`Arg`](super::error::Arg)), an answer of an
//! app function that call's usual failure (`tool_result_invalid`, a hook's `hook_failed`, the
//! policy's fail-closed confirmation).
//!
//! Ids, whose identity matters, are read here too and then refuse a lone surrogate outright
//! ([`Id`](super::dto::Id)): on both engines a lone surrogate reads as U+FFFD, so the check is
//! the same.

use super::engine_utf8::decode_engine_utf8;
use napi_ohos::bindgen_prelude::FromNapiValue;
use napi_ohos::{sys, Status};
use std::marker::PhantomData;

/// What an argument read by the module ([`Text`], [`Id`](super::dto::Id), an array of them) is
/// called in the error that refuses it.
pub trait ArgName {
    /// The argument's JS name; empty for a field of an object argument (napi's glue names the
    /// field) or an element of an array (the array names the element).
    const NAME: &'static str;
}

/// A field of an object argument, or an element of an array argument.
pub enum InField {}

impl ArgName for InField {
    const NAME: &'static str = "";
}

/// The message of a value given where a string is expected, in napi's words (which
/// [`Arg`](super::error::Arg) turns into JavaScript terms): the type, and for a number or a
/// boolean its text. (napi-ohos' own message reads a function's name or an object's JSON, as
/// unchecked text.)
unsafe fn not_a_string(env: sys::napi_env, value: sys::napi_value, kind: sys::napi_valuetype) -> String {
    let ty = napi_ohos::ValueType::from(kind);
    let shown = match kind {
        sys::ValueType::napi_number | sys::ValueType::napi_boolean => {
            let mut text = std::ptr::null_mut();
            // SAFETY: the caller's env and value; String(number) is ASCII, read checked anyway.
            let read = unsafe {
                if sys::napi_coerce_to_string(env, value, &mut text) == sys::Status::napi_ok {
                    read_utf8(env, text).ok()
                } else {
                    None
                }
            };
            read.map(|t| format!("{ty} {t} "))
        }
        _ => None,
    };
    format!(
        "Failed to convert JavaScript value `{}` into rust type `String`",
        shown.unwrap_or_else(|| format!("{ty} "))
    )
}

/// Test-only: what the next reads see instead of the engine's bytes (`panic_test`).
#[cfg(feature = "napi-panic-test")]
fn injected(bytes: Vec<u8>) -> Vec<u8> {
    super::panic_test::corrupt_text(bytes)
}

/// The bytes of a JS string value (known to be a string), as the engine writes them.
unsafe fn read_utf8(env: sys::napi_env, value: sys::napi_value) -> napi_ohos::Result<String> {
    let mut len = 0;
    // SAFETY: the caller's env and string value; the first call only measures.
    napi_ohos::check_status!(unsafe {
        sys::napi_get_value_string_utf8(env, value, std::ptr::null_mut(), 0, &mut len)
    })?;
    // Not zeroed: the engine writes the bytes, and only those it says it wrote are kept.
    let mut bytes = Vec::<u8>::with_capacity(len + 1);
    let mut written = 0;
    // SAFETY: as above; the buffer holds `len` bytes and the terminating NUL.
    napi_ohos::check_status!(unsafe {
        sys::napi_get_value_string_utf8(env, value, bytes.as_mut_ptr().cast(), len + 1, &mut written)
    })?;
    // SAFETY: the engine wrote `written` bytes (at most `len`: it keeps one for the NUL).
    unsafe { bytes.set_len(written.min(len)) };
    #[cfg(feature = "napi-panic-test")]
    let bytes = injected(bytes);
    decode_engine_utf8(bytes).map_err(|e| napi_ohos::Error::new(Status::InvalidArg, e.to_string()))
}

/// The text of a JS string, checked (see the module docs). Call on the JS thread with an env
/// and a value of it.
///
/// # Errors
/// `InvalidArg` for a value that is not a string (in napi's words) or whose bytes are not UTF-8.
pub(crate) unsafe fn read_text(env: sys::napi_env, value: sys::napi_value) -> napi_ohos::Result<String> {
    let mut kind = 0;
    // SAFETY: the caller's env and value.
    napi_ohos::check_status!(unsafe { sys::napi_typeof(env, value, &mut kind) })?;
    if kind != sys::ValueType::napi_string {
        // SAFETY: as above.
        return Err(napi_ohos::Error::new(Status::InvalidArg, unsafe { not_a_string(env, value, kind) }));
    }
    // SAFETY: as above; a string.
    unsafe { read_utf8(env, value) }
}

/// `reason` with the argument's name in front (none for a field or an element, which the object
/// or the array names).
pub(crate) fn named(name: &str, reason: &str) -> String {
    if name.is_empty() {
        reason.to_string()
    } else {
        format!("{name}: {reason}")
    }
}

/// A JS string read as text, checked ([`read_text`]): what every string argument, string field
/// and string answer of the module is read as. `K` names the argument in a refusal.
pub struct Text<K: ArgName = InField>(pub String, PhantomData<K>);

impl<K: ArgName> Text<K> {
    /// The text (for the binding's own values).
    pub fn new(text: String) -> Self {
        Text(text, PhantomData)
    }

    /// The text.
    pub fn into_string(self) -> String {
        self.0
    }
}

impl<K: ArgName> std::ops::Deref for Text<K> {
    type Target = str;

    fn deref(&self) -> &str {
        &self.0
    }
}

impl<K: ArgName> From<String> for Text<K> {
    fn from(text: String) -> Self {
        Text::new(text)
    }
}

impl<K: ArgName> From<&str> for Text<K> {
    fn from(text: &str) -> Self {
        Text::new(text.to_string())
    }
}

impl<K: ArgName> Clone for Text<K> {
    fn clone(&self) -> Self {
        Text::new(self.0.clone())
    }
}

impl<K: ArgName> Default for Text<K> {
    fn default() -> Self {
        Text::new(String::new())
    }
}

impl<K: ArgName> std::fmt::Debug for Text<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl<K: ArgName> From<Text<K>> for String {
    fn from(text: Text<K>) -> String {
        text.0
    }
}

impl<K: ArgName> FromNapiValue for Text<K> {
    unsafe fn from_napi_value(env: sys::napi_env, value: sys::napi_value) -> napi_ohos::Result<Self> {
        // SAFETY: called by napi's glue (or the binding) on the JS thread with this env and value.
        match unsafe { read_text(env, value) } {
            Ok(text) => Ok(Text(text, PhantomData)),
            Err(e) => Err(napi_ohos::Error::new(e.status, named(K::NAME, &e.reason))),
        }
    }
}

/// The napi traits a string newtype over [`String`] (`$ty<K>(pub String, ..)`: [`Text`],
/// [`Id`](super::dto::Id)) shares with `String`: validated, written and named as a string. Its
/// reading ([`FromNapiValue`]) is its own.
macro_rules! napi_as_string {
    ($ty:ident) => {
        impl<K: $crate::napi::text::ArgName> napi_ohos::bindgen_prelude::ValidateNapiValue for $ty<K> {
            unsafe fn validate(
                env: napi_ohos::sys::napi_env,
                value: napi_ohos::sys::napi_value,
            ) -> napi_ohos::Result<napi_ohos::sys::napi_value> {
                // SAFETY: called by napi's glue (or the binding) on the JS thread with this env and value.
                let checked = unsafe {
                    <String as napi_ohos::bindgen_prelude::ValidateNapiValue>::validate(env, value)
                };
                // A named argument says which one was wrong (`input: expected a string, got null`);
                // a field's name is added by the object's glue.
                checked.map_err(|e| match K::NAME {
                    "" => e,
                    name => napi_ohos::Error::new(
                        e.status,
                        format!("{name}: {}", $crate::napi::error::js_terms(&e.reason)),
                    ),
                })
            }
        }

        impl<K: $crate::napi::text::ArgName> napi_ohos::bindgen_prelude::ToNapiValue for $ty<K> {
            unsafe fn to_napi_value(
                env: napi_ohos::sys::napi_env,
                value: Self,
            ) -> napi_ohos::Result<napi_ohos::sys::napi_value> {
                // SAFETY: called by napi's glue on the JS thread with this env.
                unsafe { <String as napi_ohos::bindgen_prelude::ToNapiValue>::to_napi_value(env, value.0) }
            }
        }

        impl<K: $crate::napi::text::ArgName> napi_ohos::bindgen_prelude::TypeName for $ty<K> {
            fn type_name() -> &'static str {
                <String as napi_ohos::bindgen_prelude::TypeName>::type_name()
            }

            fn value_type() -> napi_ohos::ValueType {
                <String as napi_ohos::bindgen_prelude::TypeName>::value_type()
            }
        }
    };
}
pub(crate) use napi_as_string;

napi_as_string!(Text);
