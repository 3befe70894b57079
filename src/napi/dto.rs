//! The plain objects that cross the boundary (`#[napi(object)]`), and their conversions to and
//! from the core types. Dynamic JSON (schemas, JSON content, metadata) crosses as JSON text, which
//! strict ArkTS can build without untyped object literals. Every string is read as [`Text`]
//! (checked: `text`); ids (session ids, tool names, call ids...) cross as [`Id`], which also
//! refuses a string that would read as another id.

use crate::agent::{AgentConfig, RunOutcome};
use crate::error::{codes, AgentError};
use crate::json::JsonLimits;
use crate::loop_detect::DiagnosisSchedule;
use crate::loop_detect::{DEFAULT_MAX_CYCLE_PERIOD, MAX_WINDOW, MIN_WINDOW};
use crate::message::{ToolCall, Usage};
use crate::provider::{ClientConfig, TimeoutLimit, TimeoutOverrides, Timeouts, ToolChoice};
use crate::tool::{ContentPart, ParametersSchema, RiskLevel, ToolDefinition, ToolResult};
use napi_derive_ohos::napi;
use napi_ohos::bindgen_prelude::{Array, FromNapiValue, Object, ToNapiValue, TypeName, ValidateNapiValue};
use napi_ohos::bindgen_prelude::{Either, Null};
use napi_ohos::sys;
use serde_json::{Map, Value};
use std::marker::PhantomData;
use std::time::Duration;

pub use super::text::{ArgName, InField, Text};

/// The names of the module's named arguments ([`ArgName`]).
macro_rules! arg_names {
    ($($(#[$doc:meta])* $kind:ident => $name:literal,)*) => {$(
        $(#[$doc])*
        pub enum $kind {}
        impl ArgName for $kind {
            const NAME: &'static str = $name;
        }
    )*};
}

arg_names! {
    /// The `sessionId` argument.
    SessionIdArg => "sessionId",
    /// The `approvalId` argument.
    ApprovalIdArg => "approvalId",
    /// The `name` argument (a tool name).
    ToolNameArg => "name",
    /// The `key` argument (a metadata key).
    MetadataKeyArg => "key",
    /// The `excludedNames` argument (an array of tool names).
    ExcludedNamesArg => "excludedNames",
    /// The `input` argument (a user message).
    InputArg => "input",
    /// The `reason` argument.
    ReasonArg => "reason",
    /// The `valueJson` argument.
    ValueJsonArg => "valueJson",
    /// The `text` argument (JSON text).
    TextArg => "text",
}

/// A string whose identity matters (a session id, a tool name, a call id, an approval id, a
/// metadata key), read as any string is ([`Text`]), but refused (`argument_invalid` through
/// [`Arg`](super::error::Arg), naming the argument or the field) when the JS string holds a lone
/// UTF-16 surrogate. It reads as U+FFFD (on Node and on ArkVM: `text`), so two different JS ids
/// (`"a\uD800"` and `"a\uDC00"`) would name the same session, tool or call.
///
/// Only a text with a U+FFFD can have had a lone surrogate: the JS string is read again, as
/// UTF-16, only then (a text without one costs a scan for it).
pub struct Id<K: ArgName = InField>(pub String, pub PhantomData<K>);

impl<K: ArgName> Id<K> {
    /// The text (for the binding's own values, which have no surrogate to refuse).
    pub fn new(text: String) -> Self {
        Id(text, PhantomData)
    }
}

/// The index and value of the first UTF-16 unit of `units` that is a surrogate without its pair.
fn lone_surrogate(units: &[u16]) -> Option<(usize, u16)> {
    let mut index = 0;
    for decoded in char::decode_utf16(units.iter().copied()) {
        match decoded {
            Ok(c) => index += c.len_utf16(),
            Err(e) => return Some((index, e.unpaired_surrogate())),
        }
    }
    None
}

/// The JS string `value` as UTF-16 units (a string of this env, on the JS thread).
unsafe fn utf16_units(env: sys::napi_env, value: sys::napi_value) -> napi_ohos::Result<Vec<u16>> {
    let mut len = 0;
    // SAFETY: the caller's env and string value; the first call only measures.
    napi_ohos::check_status!(unsafe {
        sys::napi_get_value_string_utf16(env, value, std::ptr::null_mut(), 0, &mut len)
    })?;
    let mut units = vec![0u16; len + 1];
    let mut written = 0;
    // SAFETY: as above; the buffer holds `len` units and the terminating NUL.
    napi_ohos::check_status!(unsafe {
        sys::napi_get_value_string_utf16(env, value, units.as_mut_ptr(), units.len(), &mut written)
    })?;
    units.truncate(written);
    Ok(units)
}

impl<K: ArgName> FromNapiValue for Id<K> {
    unsafe fn from_napi_value(env: sys::napi_env, value: sys::napi_value) -> napi_ohos::Result<Self> {
        // SAFETY: the caller's, passed on.
        unsafe { read_id(env, value, K::NAME) }.map(|text| Id(text, PhantomData))
    }
}

/// [`Id`]'s reading, once for every kind (`name` as [`ArgName::NAME`]). Call with an env and a
/// value of the call being converted, on the JS thread.
unsafe fn read_id(env: sys::napi_env, value: sys::napi_value, name: &str) -> napi_ohos::Result<String> {
    // SAFETY: called by napi's glue on the JS thread with this call's env and value.
    let text = unsafe { super::text::read_text(env, value) }
        .map_err(|e| napi_ohos::Error::new(e.status, super::text::named(name, &e.reason)))?;
    if text.contains('\u{FFFD}') {
        // SAFETY: as above; the value is a string (it was just read as one).
        if let Some((index, unit)) = lone_surrogate(&unsafe { utf16_units(env, value)? }) {
            let why = format!(
                "holds a lone UTF-16 surrogate (\\u{unit:X} at index {index}), which would be read as U+FFFD \
                 and name what another text names"
            );
            return Err(napi_ohos::Error::new(napi_ohos::Status::InvalidArg, super::text::named(name, &why)));
        }
    }
    Ok(text)
}

super::text::napi_as_string!(Id);

/// An object an export takes whose keys are all known: [`Checked`] refuses any other.
pub trait KnownKeys {
    /// What the object is, for a refusal (`the Agent config`).
    const WHAT: &'static str;
    /// Its keys, as JS spells them.
    const KEYS: &'static [&'static str];
}

/// An options object an export takes, read as `T`, with the first key it has that `T` does not
/// read: napi's conversion skips such a key without a word, so a misspelt option (`maxRound`,
/// `statedir`) left its default in place (for `statedir`, a memory-only agent). [`known`](Self::known)
/// refuses it as `config_invalid`. A key whose value is `undefined` counts as absent, as the
/// fields' own do.
pub struct Checked<T> {
    value: T,
    unknown: Option<String>,
}

impl<T: KnownKeys> Checked<T> {
    /// The object, when it has no unknown key.
    ///
    /// # Errors
    /// `config_invalid` naming the key, and the known key it is nearest to (else all of them).
    pub fn known(self) -> Result<T, AgentError> {
        let Some(key) = self.unknown else { return Ok(self.value) };
        Err(AgentError::of(codes::CONFIG_INVALID, unknown_key_refusal::<T>(&key)))
    }
}

/// The refusal of the unknown key `key` (as [`unknown_key`] shows it) in a `T`: `unknown key
/// "maxRound" in the Agent config (did you mean maxRounds?)`, or listing `T`'s keys when none is
/// near.
pub(crate) fn unknown_key_refusal<T: KnownKeys>(key: &str) -> String {
    let hint = match nearest_key(key, T::KEYS) {
        Some(near) => format!("did you mean {near}?"),
        None => format!("it has {}", T::KEYS.join(", ")),
    };
    format!("unknown key {key:?} in {} ({hint})", T::WHAT)
}

/// The known key `key` is likely a misspelling of: the nearest by edit distance, ignoring case,
/// when at most two edits (or a third of the key) away.
pub(crate) fn nearest_key(key: &str, known: &[&'static str]) -> Option<&'static str> {
    fn distance(a: &[char], b: &[char]) -> usize {
        let mut row: Vec<usize> = (0..=b.len()).collect();
        for (i, ca) in a.iter().enumerate() {
            let mut diagonal = row[0];
            row[0] = i + 1;
            for (j, cb) in b.iter().enumerate() {
                let substituted = diagonal + usize::from(ca != cb);
                diagonal = row[j + 1];
                row[j + 1] = substituted.min(row[j] + 1).min(row[j + 1] + 1);
            }
        }
        row[b.len()]
    }
    let lower = |s: &str| s.to_lowercase().chars().collect::<Vec<char>>();
    let key = lower(key);
    let (d, near) = known.iter().map(|k| (distance(&key, &lower(k)), *k)).min_by_key(|(d, _)| *d)?;
    (d <= 2.max(key.len() / 3)).then_some(near)
}

/// The first key of `object` that is not one of `known` and has a value (`undefined` counts as
/// absent), shown by its start and without the API key: the text reaches errors, events and the
/// state.
pub(crate) fn unknown_key(object: &Object<'_>, known: &[&str]) -> napi_ohos::Result<Option<String>> {
    use napi_ohos::bindgen_prelude::{JsObjectValue, Unknown};
    let names = object.get_property_names()?;
    for i in 0..names.get_array_length()? {
        let key: String = names.get_element(i)?;
        if !known.contains(&key.as_str())
            && object.get_named_property::<Unknown>(&key)?.get_type()? != napi_ohos::ValueType::Undefined
        {
            return Ok(Some(shown_key(&key)));
        }
    }
    Ok(None)
}

/// A key of the app's as a refusal shows it: by its start, as a path shows a long key, and
/// without the API key (the text reaches errors, events and the state).
pub(crate) fn shown_key(key: &str) -> String {
    let mut shown: String = key.chars().take(crate::schema::KEY_SHOWN_CHARS).collect();
    super::executor::redact_text(&mut shown);
    shown
}

impl<T: FromNapiValue + KnownKeys> FromNapiValue for Checked<T> {
    unsafe fn from_napi_value(env: sys::napi_env, value: sys::napi_value) -> napi_ohos::Result<Self> {
        // SAFETY (all): the caller's, passed on; read as `T` first, the value is an object.
        let value_read = match unsafe { T::from_napi_value(env, value) } {
            Ok(value_read) => value_read,
            Err(mut e) => {
                // A key `T` does not read is likely why a field it needs is missing (the spec's
                // `parameters` for `parametersJson`): the refusal names it too. Only for a missing
                // field (no read threw then, and the reason ends with the field's name, which the
                // refusal's wording of the reason keeps); an exception the look itself raises (a
                // throwing getter on another key) is cleared, not reported as the field's.
                if e.reason.starts_with("Missing field ") {
                    let object = unsafe { Object::from_napi_value(env, value) };
                    match object.and_then(|object| unknown_key(&object, T::KEYS)) {
                        Ok(Some(key)) => {
                            e.reason = format!("{}; {}", e.reason, unknown_key_refusal::<T>(&key))
                        }
                        Ok(None) => {}
                        Err(_) => {
                            drop(super::callback::take_pending_exception(&napi_ohos::Env::from_raw(env)))
                        }
                    }
                }
                return Err(e);
            }
        };
        let object = unsafe { Object::from_napi_value(env, value) }?;
        let unknown = unknown_key(&object, T::KEYS)?;
        Ok(Checked { value: value_read, unknown })
    }
}

impl<T: ValidateNapiValue + FromNapiValue + KnownKeys> ValidateNapiValue for Checked<T> {
    unsafe fn validate(env: sys::napi_env, value: sys::napi_value) -> napi_ohos::Result<sys::napi_value> {
        // SAFETY: the caller's, passed on.
        unsafe { T::validate(env, value) }
    }
}

impl<T: TypeName> TypeName for Checked<T> {
    fn type_name() -> &'static str {
        T::type_name()
    }

    fn value_type() -> napi_ohos::ValueType {
        T::value_type()
    }
}

impl<T: ToNapiValue> ToNapiValue for Checked<T> {
    unsafe fn to_napi_value(env: sys::napi_env, value: Self) -> napi_ohos::Result<sys::napi_value> {
        // SAFETY: the caller's, passed on.
        unsafe { T::to_napi_value(env, value.value) }
    }
}

/// Implements [`KnownKeys`] for objects napi reads.
macro_rules! known_keys {
    ($($ty:ty => $what:literal [$($key:literal),* $(,)?];)*) => {$(
        impl KnownKeys for $ty {
            const WHAT: &'static str = $what;
            const KEYS: &'static [&'static str] = &[$($key),*];
        }
    )*};
}

known_keys! {
    ToolDefinitionObject => "a tool definition"
        ["name", "description", "parametersJson", "riskLevel", "idempotent", "timeoutMs"];
    ToolRegistryOptions => "the ToolRegistry options" ["defaultTimeoutMs", "maxArgumentBytes", "maxArgumentDepth"];
    ExecuteOptions => "the execute options" ["sessionId", "batchCallId", "metadataJson"];
    LoopDiagnosisObject => "loopDiagnosis" ["firstRound", "every", "minConfidence"];
    ToolCallObject => "the tool call" ["id", "name", "arguments"];
    ToolResultObject => "a ToolResult" ["contents", "isError", "stop", "metadataJson"];
    ContentPartObject => "a content part" ["type", "text", "json"];
    HookDecisionObject => "the decision" ["action", "argumentsJson", "name", "resultJson", "reason", "injectJson"];
    AgentConfigObject => "the Agent config" [
        "provider", "baseUrl", "model", "apiKey", "scriptJson", "stateDir", "systemPrompt", "maxRounds",
        "maxParallelTools", "toolTimeoutMs", "streaming", "temperature", "maxTokens", "allowInsecureHttp",
        "extraRootsPem", "loopWindow", "loopMaxCyclePeriod", "enableDelegation", "maxResultBytes",
        "contextBudgetTokens", "streamUsage", "sendReasoningContent", "toolChoice", "parallelToolCalls",
        "loopDiagnosis", "connectTimeoutMs", "firstByteTimeoutMs", "idleTimeoutMs", "totalTimeoutMs",
        "afterFinishTimeoutMs",
    ];
}

/// A tool definition as ArkTS gives it.
#[napi(object)]
pub struct ToolDefinitionObject {
    /// The name the model calls.
    pub name: Id,
    /// What the tool does.
    pub description: Text,
    /// The JSON Schema of the arguments, as JSON text.
    pub parameters_json: Text,
    /// `safe` (default), `sensitive` or `dangerous`.
    pub risk_level: Option<Text>,
    /// Whether running the call twice has the effect of once.
    pub idempotent: Option<bool>,
    /// The executor's timeout in milliseconds (the registry's default when absent).
    pub timeout_ms: Option<f64>,
}

impl ToolDefinitionObject {
    /// The core definition.
    ///
    /// # Errors
    /// `schema_invalid_root` when `parametersJson` is not JSON or names a key twice in one object,
    /// `schema_too_deep` when it nests deeper than 128 levels, `config_invalid` for an unknown risk
    /// level or a zero timeout. The schema is kept as that text too, which the model is sent (see
    /// [`ParametersSchema`]).
    pub fn into_core(self) -> Result<ToolDefinition, AgentError> {
        let parameters =
            ParametersSchema::parse(&self.parameters_json, &format!("parametersJson of {}", self.name.0))?;
        let risk_level = match self.risk_level.as_deref() {
            None | Some("safe") => RiskLevel::Safe,
            Some("sensitive") => RiskLevel::Sensitive,
            Some("dangerous") => RiskLevel::Dangerous,
            Some(other) => {
                return Err(AgentError::of(
                    codes::CONFIG_INVALID,
                    format!("riskLevel must be safe, sensitive or dangerous, not {other:?}"),
                ))
            }
        };
        let timeout = self.timeout_ms.map(|ms| millis("timeoutMs", ms)).transpose()?;
        Ok(ToolDefinition {
            name: self.name.0,
            description: self.description.into(),
            parameters,
            risk_level,
            idempotent: self.idempotent.unwrap_or(false),
            timeout,
        })
    }
}

/// The longest timeout accepted (one day), so that a typo cannot mean "never".
const MAX_TIMEOUT_MS: f64 = 86_400_000.0;

/// A timeout given in milliseconds: a whole number from 1 to one day.
///
/// # Errors
/// `config_invalid` naming the field.
pub fn millis(field: &str, ms: f64) -> Result<Duration, AgentError> {
    if ms.fract() != 0.0 || !(1.0..=MAX_TIMEOUT_MS).contains(&ms) {
        return Err(AgentError::of(
            codes::CONFIG_INVALID,
            format!("{field} must be a whole number of milliseconds from 1 to {MAX_TIMEOUT_MS}, not {ms}"),
        ));
    }
    Ok(Duration::from_millis(ms as u64))
}

/// A positive whole number (a limit).
///
/// # Errors
/// `config_invalid` naming the field.
pub(crate) fn positive(field: &str, value: f64) -> Result<usize, AgentError> {
    if value.fract() != 0.0 || !(1.0..=f64::from(u32::MAX)).contains(&value) {
        return Err(AgentError::of(
            codes::CONFIG_INVALID,
            format!("{field} must be a whole number from 1 to {}, not {value}", u32::MAX),
        ));
    }
    Ok(value as usize)
}

/// One part of a tool's output: `{type: "text", text}` or `{type: "json", json: "<JSON text>"}`.
#[napi(object)]
pub struct ContentPartObject {
    /// `text` or `json`.
    #[napi(js_name = "type")]
    pub kind: Text,
    /// The text of a `text` part.
    pub text: Option<Text>,
    /// The JSON text of a `json` part.
    pub json: Option<Text>,
}

/// A JS array as a `Vec`, read one element at a time; `K` names the array in a refusal.
///
/// napi-ohos' `Vec<T>` reserves the array's `length` before it reads an element: a sparse array
/// (`a.length = 2 ** 32 - 1`, one line of JS) asked for hundreds of GB, and the failed allocation
/// aborted the process (an allocation failure is no panic: nothing catches it). Read one by one, a
/// hole is refused at once (it is `undefined`), and a dense array costs what the app allocated.
///
/// A refused element is named by its index, after the array's name: `excludedNames[2]: ...` for
/// an argument, `contents[0].text: ...` for a field of an element of a field (the object's glue
/// adds the field's name, which [`Arg`](super::error::Arg) puts in front).
pub struct JsArray<T, K: ArgName = InField>(pub Vec<T>, pub PhantomData<K>);

impl<T, K: ArgName> JsArray<T, K> {
    /// The array of these items.
    pub fn new(items: Vec<T>) -> Self {
        JsArray(items, PhantomData)
    }
}

impl<T: FromNapiValue, K: ArgName> FromNapiValue for JsArray<T, K> {
    unsafe fn from_napi_value(env: sys::napi_env, value: sys::napi_value) -> napi_ohos::Result<Self> {
        // SAFETY: called by napi's glue on the JS thread with this call's env and value.
        let array = unsafe { Array::from_napi_value(env, value)? };
        let mut items = Vec::new();
        for index in 0..array.len() {
            let mut element = std::ptr::null_mut();
            let mut kind = 0;
            // SAFETY: on the JS thread, with this env and an array of it.
            unsafe {
                napi_ohos::check_status!(sys::napi_get_element(env, value, index, &mut element))
                    .map_err(|e| element_refused(K::NAME, index, e))?;
                napi_ohos::check_status!(sys::napi_typeof(env, element, &mut kind))?;
            }
            if kind == sys::ValueType::napi_undefined {
                return Err(napi_ohos::Error::new(
                    napi_ohos::Status::InvalidArg,
                    format!("{}[{index}]: undefined, a hole in the array", K::NAME),
                ));
            }
            // SAFETY: as above.
            items.push(
                unsafe { T::from_napi_value(env, element) }
                    .map_err(|e| element_refused(K::NAME, index, e))?,
            );
        }
        Ok(JsArray(items, PhantomData))
    }
}

/// The refusal of element `index` of the array `name` (empty for a field, which the object's glue
/// names): `name[index]: why`, or `name[index].field: why` for a field of the element. Not
/// generic: one instance for every element type.
fn element_refused(name: &str, index: u32, e: napi_ohos::Error) -> napi_ohos::Error {
    let why = match e.reason.as_str() {
        // napi's failed read of the element (a getter or a Proxy trap threw): `Arg` adds what.
        "" => "could not be read".to_string(),
        reason => super::error::js_terms(reason),
    };
    let is_field = |f: &str| {
        f.starts_with(|c: char| c.is_ascii_alphabetic())
            && f.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.' || c == '[' || c == ']')
    };
    let reason = match why.split_once(": ") {
        Some((field, rest)) if is_field(field) => format!("{name}[{index}].{field}: {rest}"),
        _ if why.starts_with('[') => format!("{name}[{index}]{why}"),
        _ => format!("{name}[{index}]: {why}"),
    };
    napi_ohos::Error::new(e.status, reason)
}

impl<T: FromNapiValue, K: ArgName> ValidateNapiValue for JsArray<T, K> {
    unsafe fn validate(env: sys::napi_env, value: sys::napi_value) -> napi_ohos::Result<sys::napi_value> {
        // SAFETY: as `from_napi_value`.
        unsafe { <Vec<T> as ValidateNapiValue>::validate(env, value) }
    }
}

impl<T: ToNapiValue, K: ArgName> ToNapiValue for JsArray<T, K> {
    unsafe fn to_napi_value(env: sys::napi_env, value: Self) -> napi_ohos::Result<sys::napi_value> {
        // SAFETY: called by napi's glue on the JS thread with this env.
        unsafe { Vec::to_napi_value(env, value.0) }
    }
}

impl<T, K: ArgName> TypeName for JsArray<T, K> {
    fn type_name() -> &'static str {
        <Vec<T> as TypeName>::type_name()
    }

    fn value_type() -> napi_ohos::ValueType {
        <Vec<T> as TypeName>::value_type()
    }
}

/// A tool result: content parts, and the error and stop flags.
#[napi(object)]
pub struct ToolResultObject {
    /// The output parts.
    pub contents: JsArray<ContentPartObject>,
    /// True when the call failed.
    pub is_error: Option<bool>,
    /// True when the run should end after this batch.
    pub stop: Option<bool>,
    /// Free-form data for the app (a JSON object as text); not shown to the model.
    pub metadata_json: Option<Text>,
}

impl From<ToolResult> for ToolResultObject {
    fn from(result: ToolResult) -> Self {
        let contents = result
            .contents
            .into_iter()
            .map(|part| match part {
                ContentPart::Text { text } => {
                    ContentPartObject { kind: "text".into(), text: Some(text.into()), json: None }
                }
                ContentPart::Json { value } => ContentPartObject {
                    kind: "json".into(),
                    text: None,
                    json: Some(value.to_string().into()),
                },
            })
            .collect();
        ToolResultObject {
            contents: JsArray::new(contents),
            is_error: Some(result.is_error),
            stop: Some(result.stop),
            metadata_json: result.metadata.map(|m| Value::Object(m).to_string().into()),
        }
    }
}

impl ToolResultObject {
    /// The core result; the error text says what is wrong with the shape.
    ///
    /// # Errors
    /// A description of the first problem (an unknown part type, a missing field, bad JSON).
    pub fn into_core(self) -> Result<ToolResult, String> {
        let mut contents = Vec::with_capacity(self.contents.0.len());
        for (i, part) in self.contents.0.into_iter().enumerate() {
            contents.push(match (&*part.kind, part.text, part.json) {
                ("text", Some(text), _) => ContentPart::Text { text: text.into() },
                ("json", _, Some(json)) => json_part(i, &json)?,
                ("text", None, _) => return Err(text_missing(i)),
                ("json", _, None) => return Err(format!("contents[{i}] of type json has no string `json`")),
                (other, _, _) => return Err(part_type_refused(i, other)),
            });
        }
        let metadata = self.metadata_json.as_deref().map(metadata_of_json).transpose()?;
        Ok(ToolResult {
            contents,
            is_error: self.is_error.unwrap_or(false),
            stop: self.stop.unwrap_or(false),
            metadata,
        })
    }
}

/// The JSON part `i` of a result whose `json` field is the JSON text `json`.
///
/// # Errors
/// When `json` is not JSON.
fn json_part(i: usize, json: &str) -> Result<ContentPart, String> {
    let value = from_app_json(json).map_err(|e| format!("contents[{i}].json is not JSON: {e}"))?;
    Ok(ContentPart::Json { value })
}

/// The refusal of text part `i` without its `text`.
fn text_missing(i: usize) -> String {
    format!("contents[{i}] of type text has no string `text`")
}

/// The refusal of part `i`'s type `kind`.
fn part_type_refused(i: usize, kind: &str) -> String {
    format!("contents[{i}].type must be text or json, not {kind:?}")
}

/// A result's metadata from its `metadataJson` text.
///
/// # Errors
/// When the text is not JSON, or not of an object.
fn metadata_of_json(text: &str) -> Result<Map<String, Value>, String> {
    match from_app_json::<Value>(text) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(_) => Err("metadataJson must be a JSON object".to_string()),
        Err(e) => Err(format!("metadataJson is not JSON: {e}")),
    }
}

/// A hook's `resultJson` (a `deny` of `beforeToolCall`, a `proceed` of `afterToolCall`): a tool
/// result in either of the two spellings an app meets, with every key read.
///
/// - The state's: the core [`ToolResult`]'s serde form, which the hooks are handed (`resultJson`
///   of `afterToolCall`) and the ArkTS `ToolResult.toJson()` writes: `is_error`, `stop`,
///   `metadata` (an object), JSON parts `{"type": "json", "value": <JSON>}`.
/// - An executor's ([`ToolResultObject`], as `JSON.stringify` writes it): `isError`, `stop`,
///   `metadataJson` (JSON object text), JSON parts `{"type": "json", "json": "<JSON text>"}`.
///
/// Any other key, at the top or in a part, is refused naming it (`unknown field `isErr``), as is
/// a field given in both spellings or a part with another type's field: before, the core type
/// read the state's spelling and dropped the rest, so an executor-spelled failure (`isError:
/// true`) reached the model as a success. The persisted [`ToolResult`] stays lenient: states
/// saved by any version still load.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct HookResultJson {
    contents: Vec<HookContentPartJson>,
    #[serde(default, alias = "isError")]
    is_error: Option<bool>,
    #[serde(default)]
    stop: Option<bool>,
    #[serde(default)]
    metadata: Option<Map<String, Value>>,
    #[serde(default, rename = "metadataJson")]
    metadata_json: Option<String>,
}

/// One part of a [`HookResultJson`].
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct HookContentPartJson {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    text: Option<String>,
    /// `Some(Value::Null)` for `"value": null` (a JSON part may hold `null`), `None` when absent.
    #[serde(default, deserialize_with = "present_value")]
    value: Option<Value>,
    #[serde(default)]
    json: Option<String>,
}

/// A field that is present, whatever its value (`null` included).
fn present_value<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<Option<Value>, D::Error> {
    <Value as serde::Deserialize>::deserialize(deserializer).map(Some)
}

impl HookResultJson {
    /// The core result.
    ///
    /// # Errors
    /// A description of the first problem (a part's type, a missing or misplaced field, bad JSON
    /// text, both spellings of the metadata).
    pub(crate) fn into_core(self) -> Result<ToolResult, String> {
        let mut contents = Vec::with_capacity(self.contents.len());
        for (i, part) in self.contents.into_iter().enumerate() {
            contents.push(match (part.kind.as_str(), part.text, part.value, part.json) {
                ("text", Some(text), None, None) => ContentPart::Text { text },
                ("json", None, Some(value), None) => ContentPart::Json { value },
                ("json", None, None, Some(json)) => json_part(i, &json)?,
                ("text", None, ..) => return Err(text_missing(i)),
                ("text", Some(_), ..) => {
                    return Err(format!("contents[{i}] of type text has a json part's `value` or `json`"))
                }
                ("json", Some(_), ..) => {
                    return Err(format!("contents[{i}] of type json has a text part's `text`"))
                }
                ("json", None, Some(_), Some(_)) => {
                    return Err(format!("contents[{i}] of type json has both `value` and `json`"))
                }
                ("json", None, None, None) => {
                    return Err(format!(
                        "contents[{i}] of type json has neither `value` (JSON) nor `json` (JSON text)"
                    ))
                }
                (other, ..) => return Err(part_type_refused(i, other)),
            });
        }
        let metadata = match (self.metadata, self.metadata_json) {
            (Some(_), Some(_)) => return Err("both `metadata` and `metadataJson` are given".to_string()),
            (Some(map), None) => Some(map),
            (None, text) => text.as_deref().map(metadata_of_json).transpose()?,
        };
        Ok(ToolResult {
            contents,
            is_error: self.is_error.unwrap_or(false),
            stop: self.stop.unwrap_or(false),
            metadata,
        })
    }
}

/// JSON text the app passed, decoded: JSON.stringify's `\u` escape of a lone surrogate reads as
/// U+FFFD ([`lone_surrogate_escapes_replaced`](crate::json::lone_surrogate_escapes_replaced)),
/// which serde_json alone refuses.
///
/// # Errors
/// serde_json's, for text that is not JSON or not of the shape `T`.
pub(crate) fn from_app_json<T: serde::de::DeserializeOwned>(text: &str) -> serde_json::Result<T> {
    serde_json::from_str(&crate::json::lone_surrogate_escapes_replaced(text))
}

/// A tool call as the model produced it.
#[napi(object)]
pub struct ToolCallObject {
    /// The provider's call id.
    pub id: Id,
    /// The tool name.
    pub name: Id,
    /// The raw arguments text.
    pub arguments: Text,
}

impl From<ToolCallObject> for ToolCall {
    fn from(call: ToolCallObject) -> Self {
        ToolCall::new(call.id.0, call.name.0, String::from(call.arguments))
    }
}

impl From<&ToolCall> for ToolCallObject {
    fn from(call: &ToolCall) -> Self {
        ToolCallObject {
            id: Id::new(call.id.clone()),
            name: Id::new(call.name.clone()),
            arguments: call.arguments.clone().into(),
        }
    }
}

/// Options of `new ToolRegistry(options)`.
#[napi(object)]
pub struct ToolRegistryOptions {
    /// The timeout of executors whose definition has none (default 60000 ms).
    pub default_timeout_ms: Option<f64>,
    /// The size limit of a call's arguments text in bytes (default 1 MiB).
    pub max_argument_bytes: Option<f64>,
    /// The nesting limit of a call's arguments (default 64).
    pub max_argument_depth: Option<f64>,
}

impl ToolRegistryOptions {
    /// The argument limits.
    ///
    /// # Errors
    /// `config_invalid` for a limit that is not a positive whole number.
    pub fn limits(&self) -> Result<JsonLimits, AgentError> {
        let default = JsonLimits::default();
        Ok(JsonLimits {
            max_bytes: self
                .max_argument_bytes
                .map(|b| positive("maxArgumentBytes", b))
                .transpose()?
                .unwrap_or(default.max_bytes),
            max_depth: self
                .max_argument_depth
                .map(|d| positive("maxArgumentDepth", d))
                .transpose()?
                .unwrap_or(default.max_depth),
        })
    }

    /// The default executor timeout, when given.
    ///
    /// # Errors
    /// `config_invalid` for a timeout that is not a whole number from 1 ms to one day.
    pub fn default_timeout(&self) -> Result<Option<Duration>, AgentError> {
        self.default_timeout_ms.map(|ms| millis("defaultTimeoutMs", ms)).transpose()
    }
}

/// Options of `ToolRegistry.execute`: the context the executor sees.
#[napi(object)]
pub struct ExecuteOptions {
    /// The session id (default empty).
    pub session_id: Option<Id>,
    /// The batch id shared by the calls of one model turn (default empty).
    pub batch_call_id: Option<Id>,
    /// The session metadata the executor may read (a JSON object as text).
    pub metadata_json: Option<Text>,
}

impl ExecuteOptions {
    /// The metadata map.
    ///
    /// # Errors
    /// `config_invalid` when `metadataJson` is not JSON (also: nested deeper than serde_json's
    /// 128 levels), or not an object.
    pub fn metadata(&self) -> Result<Map<String, Value>, AgentError> {
        match self.metadata_json.as_deref().map(from_app_json::<Value>) {
            None => Ok(Map::new()),
            Some(Ok(Value::Object(map))) => Ok(map),
            Some(Ok(_)) => Err(AgentError::of(codes::CONFIG_INVALID, "metadataJson must be a JSON object")),
            Some(Err(e)) => {
                Err(AgentError::of(codes::CONFIG_INVALID, format!("metadataJson is not JSON: {e}")))
            }
        }
    }
}

/// What an ArkTS hook method answers (or `undefined` for "no change"). Which fields count depends
/// on the method and the action (see `hook`).
#[napi(object)]
pub struct HookDecisionObject {
    /// beforeToolCall: `proceed`, `deny`, `defer` or `abort`; afterToolCall: `proceed`, `stop` or
    /// `abort`.
    pub action: Text,
    /// beforeToolCall `proceed`: the call's new arguments text (same id and tool).
    pub arguments_json: Option<Text>,
    /// beforeToolCall `proceed`: the tool name of the rewritten call, when the hook's rewrite
    /// names one. A name other than the call's is refused (`hook_call_name_changed`), as in Rust.
    pub name: Option<Text>,
    /// beforeToolCall `deny`: the result the model gets instead; afterToolCall `proceed`: the
    /// rewritten result (a ToolResult as JSON, snake_case).
    pub result_json: Option<Text>,
    /// `defer` and `abort` (and `deny` without a result): why.
    pub reason: Option<Text>,
    /// afterToolCall: messages appended after the batch, a JSON array of chat messages.
    pub inject_json: Option<Text>,
}

/// Options of `new Agent(config)` (see the `.d.ts` for each field).
#[napi(object)]
pub struct AgentConfigObject {
    /// A provider preset name, `custom`, or `scripted`.
    pub provider: Text,
    /// Overrides the preset's base URL.
    pub base_url: Option<Text>,
    /// The model name.
    pub model: Option<Text>,
    /// The API key (moved into the provider at once).
    pub api_key: Option<Text>,
    /// For `scripted`: a JSON array of model answers.
    pub script_json: Option<Text>,
    /// The directory of the session states (an [`Id`]: two spellings must not name one directory).
    pub state_dir: Option<Id>,
    /// A system message put first in a new session.
    pub system_prompt: Option<Text>,
    /// Model rounds per run.
    pub max_rounds: Option<f64>,
    /// Calls of an all-safe batch run at once.
    pub max_parallel_tools: Option<f64>,
    /// Per-call timeout in ms.
    pub tool_timeout_ms: Option<f64>,
    /// Stream the model's answer.
    pub streaming: Option<bool>,
    /// Sampling temperature: a number from 0 to 2; `null` sends none at all; absent takes the
    /// preset's default (0.2 with tools, none for Moonshot and OpenAI's reasoning models).
    pub temperature: Option<Either<f64, Null>>,
    /// Completion token limit.
    pub max_tokens: Option<f64>,
    /// Allow plain http:// to hosts other than loopback.
    pub allow_insecure_http: Option<bool>,
    /// Extra trusted root certificates (PEM).
    pub extra_roots_pem: Option<Text>,
    /// Loop detector window (2 to 1000).
    pub loop_window: Option<f64>,
    /// The longest short cycle looked for (1 = cycles off, at most 3).
    pub loop_max_cycle_period: Option<f64>,
    /// Register `delegate_task`.
    pub enable_delegation: Option<bool>,
    /// The largest tool result recorded, bytes (default 1 MiB; a larger one is
    /// `tool_result_too_large`, a larger error result is cut to fit).
    pub max_result_bytes: Option<f64>,

    // Provider options and history trimming (see `provider_options`).
    /// Approximate token budget of the history sent with each request (trimming).
    pub context_budget_tokens: Option<f64>,
    /// Send `stream_options: {include_usage: true}` on streamed requests (default true).
    pub stream_usage: Option<bool>,
    /// Send assistant `reasoning_content` back (default: the preset's; on for DeepSeek, Moonshot, Zhipu).
    pub send_reasoning_content: Option<bool>,
    /// `auto`, `none`, `required`, or the name of a tool the model must call.
    pub tool_choice: Option<Text>,
    /// `parallel_tool_calls` with every request that has tools (absent: not sent).
    pub parallel_tool_calls: Option<bool>,
    /// Ask the agent's own model whether the session is looping, on a schedule.
    pub loop_diagnosis: Option<Checked<LoopDiagnosisObject>>,

    // Provider timeouts, on top of the model's defaults (see `provider_timeouts`).
    /// TCP + TLS set-up of each attempt, ms (default 10000).
    pub connect_timeout_ms: Option<f64>,
    /// From sending a request to the response head, connecting included, ms (default 60000; the
    /// total for OpenAI's reasoning models).
    pub first_byte_timeout_ms: Option<f64>,
    /// Longest silence between two body chunks, ms (default 60000; the total for OpenAI's
    /// reasoning models).
    pub idle_timeout_ms: Option<f64>,
    /// The whole model call: attempts, backoff and the whole answer, ms (default 600000).
    pub total_timeout_ms: Option<f64>,
    /// Once the finish reason has arrived, the longest silence before the answer is kept without
    /// the rest of the stream (usage, `[DONE]`), ms (default 5000; the idle limit if lower).
    pub after_finish_timeout_ms: Option<f64>,
}

/// `loopDiagnosis` of the config: when the LLM loop diagnosis is asked and when it counts
/// ([`DiagnosisSchedule`]); every field has the core default. Read by hand (below), as napi reads
/// a nested object without checking that it is one.
#[napi(object, object_from_js = false)]
pub struct LoopDiagnosisObject {
    /// The first model round (counted over the session) asked about (default 30).
    pub first_round: Option<f64>,
    /// Then every this many rounds; 0: only `firstRound` (default 10).
    pub every: Option<f64>,
    /// A loop counts only with a confidence strictly above this, from 0 to below 1 (default 0.8).
    pub min_confidence: Option<f64>,
}

impl FromNapiValue for LoopDiagnosisObject {
    unsafe fn from_napi_value(env: sys::napi_env, value: sys::napi_value) -> napi_ohos::Result<Self> {
        // napi reads a string or a number given here as an object without the fields (all the
        // defaults): refuse anything but a plain object (the caller names the field).
        // SAFETY: called by the config's glue on the JS thread with this call's env and value.
        unsafe { <Object<'_> as ValidateNapiValue>::validate(env, value)? };
        let mut is_array = false;
        // SAFETY: as above.
        napi_ohos::check_status!(unsafe { sys::napi_is_array(env, value, &mut is_array) })?;
        if is_array {
            return Err(napi_ohos::Error::new(
                napi_ohos::Status::InvalidArg,
                "expected an object, got an array",
            ));
        }
        // SAFETY: as above; the value is an object.
        let object = unsafe { Object::from_napi_value(env, value)? };
        let field = |name: &str| object.get(name).map_err(|e| field_refused(name, e));
        Ok(LoopDiagnosisObject {
            first_round: field("firstRound")?,
            every: field("every")?,
            min_confidence: field("minConfidence")?,
        })
    }
}

/// The refusal of field `name` of an object read by hand: `.name: why`, which the glue of the
/// object holding it names (`loopDiagnosis.firstRound: expected a number, got a string`, see
/// [`js_terms`](super::error::js_terms)), as napi's own glue names the fields of the objects it
/// reads.
fn field_refused(name: &str, e: napi_ohos::Error) -> napi_ohos::Error {
    napi_ohos::Error::new(e.status, format!(".{name}: {}", super::error::js_terms(&e.reason)))
}

impl ValidateNapiValue for LoopDiagnosisObject {}

impl LoopDiagnosisObject {
    /// The core schedule.
    ///
    /// # Errors
    /// `config_invalid` naming the field (`loopDiagnosis.firstRound`...).
    pub fn schedule(&self) -> Result<DiagnosisSchedule, AgentError> {
        let mut schedule = DiagnosisSchedule::default();
        if let Some(v) = self.first_round {
            schedule.first_round = whole_u32("loopDiagnosis.firstRound", v)?;
        }
        if let Some(v) = self.every {
            // 0 is allowed here (only firstRound), unlike the other counts.
            schedule.every = match v {
                0.0 => 0,
                v => whole_u32("loopDiagnosis.every", v).map_err(|_| {
                    AgentError::of(
                        codes::CONFIG_INVALID,
                        format!(
                            "loopDiagnosis.every must be 0 (no repeat) or a whole number from 1 to {}, not {v}",
                            u32::MAX
                        ),
                    )
                })?,
            };
        }
        if let Some(c) = self.min_confidence {
            // Strictly below 1: a confidence is at most 1, so 1 would never count.
            if !(0.0..1.0).contains(&c) {
                return Err(AgentError::of(
                    codes::CONFIG_INVALID,
                    format!("loopDiagnosis.minConfidence must be a number from 0 to below 1, not {c}"),
                ));
            }
            schedule.min_confidence = c;
        }
        Ok(schedule)
    }
}

// By hand: the API key must never be printed.
impl std::fmt::Debug for AgentConfigObject {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentConfigObject")
            .field("provider", &self.provider)
            .field("base_url", &self.base_url.as_deref().map(crate::provider::config::shown))
            .field("model", &self.model)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("state_dir", &self.state_dir.as_ref().map(|d| &d.0))
            .finish_non_exhaustive()
    }
}

impl AgentConfigObject {
    /// The run limits and model options.
    ///
    /// # Errors
    /// `config_invalid` naming the first field that is not a positive whole number (or, for
    /// `temperature`, not a number from 0 to 2 or null; for `loopWindow`, not from 2 to 1000; for
    /// `loopMaxCyclePeriod`, not from 1 to 3; for `toolChoice`, blank).
    pub fn agent_config(&self) -> Result<AgentConfig, AgentError> {
        let mut config = AgentConfig::default();
        if let Some(v) = self.max_rounds {
            config.max_rounds = whole_u32("maxRounds", v)?;
        }
        if let Some(v) = self.max_parallel_tools {
            config.max_parallel_tools = positive("maxParallelTools", v)?;
        }
        if let Some(v) = self.tool_timeout_ms {
            config.tool_timeout = millis("toolTimeoutMs", v)?;
        }
        if let Some(v) = self.streaming {
            config.streaming = v;
        }
        if let Some(Either::A(t)) = self.temperature {
            if !(0.0..=2.0).contains(&t) {
                return Err(AgentError::of(
                    codes::CONFIG_INVALID,
                    format!("temperature must be a number from 0 to 2 (or null: none sent), not {t}"),
                ));
            }
            config.temperature = Some(t as f32);
        }
        if let Some(v) = self.max_tokens {
            config.max_tokens = Some(whole_u32("maxTokens", v)?);
        }
        if let Some(v) = self.loop_window {
            config.loop_window = whole_in("loopWindow", v, MIN_WINDOW, MAX_WINDOW)?;
        }
        if let Some(v) = self.loop_max_cycle_period {
            config.loop_max_cycle_period = whole_in("loopMaxCyclePeriod", v, 1, DEFAULT_MAX_CYCLE_PERIOD)?;
        }
        config.system_prompt = self.system_prompt.clone().map(String::from);
        if let Some(v) = self.context_budget_tokens {
            config.context_budget_tokens = Some(positive("contextBudgetTokens", v)?);
        }
        if let Some(v) = self.max_result_bytes {
            config.max_result_bytes = positive("maxResultBytes", v)?;
        }
        if let Some(choice) = self.tool_choice.as_deref() {
            config.tool_choice = Some(tool_choice(choice)?);
        }
        config.parallel_tool_calls = self.parallel_tool_calls;
        // Everything above is checked with the ArkTS names; this keeps any check of the core's
        // that has no field here yet (a run would refuse the config anyway, later).
        config.validate()?;
        Ok(config)
    }

    /// Applies the provider options to a client config: `streamUsage`, `sendReasoningContent`,
    /// and `temperature: null` (no default temperature either). Absent options keep the preset's
    /// quirks.
    pub fn provider_options(&self, client: &mut ClientConfig) {
        if let Some(v) = self.stream_usage {
            client.quirks.stream_usage = v;
        }
        if let Some(v) = self.send_reasoning_content {
            client.quirks.send_reasoning_content = v;
        }
        if let Some(Either::B(Null)) = self.temperature {
            client.quirks.default_tool_temperature = None;
        }
    }

    /// The provider timeouts: the model's defaults ([`Timeouts::for_model`] of `model`, empty for
    /// none) with the `*TimeoutMs` fields that are set, as [`Timeouts::with_overrides`] applies
    /// them (an unset limit above its bound is lowered to it; a reasoning model's first byte and
    /// idle limits follow a `totalTimeoutMs` that is set).
    ///
    /// # Errors
    /// `config_invalid` naming the field for a value that is not a whole number of ms from 1 to
    /// 86400000, or naming both fields for a limit above the one that bounds it
    /// (`firstByteTimeoutMs` or `idleTimeoutMs` above the total, `connectTimeoutMs` above the first
    /// byte limit), set or default: it could never be reached.
    pub fn provider_timeouts(&self) -> Result<Timeouts, AgentError> {
        let field = |ms: Option<f64>, limit| ms.map(|v| millis(timeout_field(limit), v)).transpose();
        let overrides = TimeoutOverrides {
            connect: field(self.connect_timeout_ms, TimeoutLimit::Connect)?,
            first_byte: field(self.first_byte_timeout_ms, TimeoutLimit::FirstByte)?,
            idle: field(self.idle_timeout_ms, TimeoutLimit::Idle)?,
            total: field(self.total_timeout_ms, TimeoutLimit::Total)?,
            // Bounds nothing and is bounded by nothing: the smaller of it and the idle limit applies.
            after_finish: self
                .after_finish_timeout_ms
                .map(|v| millis("afterFinishTimeoutMs", v))
                .transpose()?,
        };
        let model = self.model.as_deref().unwrap_or_default();
        Timeouts::for_model(model).with_overrides(overrides).map_err(|c| {
            let (limit, bound) = (timeout_field(c.limit), timeout_field(c.bound));
            let (value, bound_ms) = (c.value.as_millis(), c.bound_value.as_millis());
            let why = match c.bound {
                TimeoutLimit::Total => "the total timeout ends the whole call first",
                _ => "the first byte timeout includes connecting",
            };
            let message = if c.bound_set {
                format!(
                    "{limit} ({value}) is above {bound} ({bound_ms}): {why}, so it could never be reached"
                )
            } else {
                format!(
                    "{limit} ({value}) is above {bound} ({bound_ms}, not set: the default in effect for \
                     model {model:?}): {why}, so it could never be reached; set {bound} too"
                )
            };
            AgentError::of(codes::CONFIG_INVALID, message)
        })
    }
}

/// The config field of a provider timeout.
fn timeout_field(limit: TimeoutLimit) -> &'static str {
    match limit {
        TimeoutLimit::Connect => "connectTimeoutMs",
        TimeoutLimit::FirstByte => "firstByteTimeoutMs",
        TimeoutLimit::Idle => "idleTimeoutMs",
        TimeoutLimit::Total => "totalTimeoutMs",
    }
}

/// A `toolChoice`: `auto`, `none`, `required`, or any other non-blank text as a tool name.
///
/// # Errors
/// `config_invalid` naming the field for blank text.
fn tool_choice(choice: &str) -> Result<ToolChoice, AgentError> {
    Ok(match choice {
        "auto" => ToolChoice::Auto,
        "none" => ToolChoice::None,
        "required" => ToolChoice::Required,
        name if name.trim().is_empty() => {
            return Err(AgentError::of(
                codes::CONFIG_INVALID,
                format!("toolChoice must be 'auto', 'none', 'required' or a tool name, not {choice:?}"),
            ))
        }
        name => ToolChoice::Function(name.to_string()),
    })
}

/// A whole number from `min` to `max`.
fn whole_in(field: &str, value: f64, min: usize, max: usize) -> Result<usize, AgentError> {
    if value.fract() != 0.0 || !(min as f64..=max as f64).contains(&value) {
        return Err(AgentError::of(
            codes::CONFIG_INVALID,
            format!("{field} must be a whole number from {min} to {max}, not {value}"),
        ));
    }
    Ok(value as usize)
}

fn whole_u32(field: &str, value: f64) -> Result<u32, AgentError> {
    // positive() caps at u32::MAX.
    positive(field, value).map(|v| v as u32)
}

/// How `run()` or `resume()` ended (only ever made by the module: never read from JS).
#[napi(object, object_from_js = false)]
pub struct RunOutcomeObject {
    /// The session's run status, snake_case (`awaiting_approval` when suspended).
    pub status: String,
    /// The final answer, if any.
    pub final_text: Option<String>,
    /// The code of the error that ended the run.
    pub error_code: Option<String>,
    /// Its layer.
    pub error_layer: Option<String>,
    /// Its message.
    pub error_message: Option<String>,
    /// The frozen batch (JSON) when suspended.
    pub batch_json: Option<String>,
    /// The session's token usage so far (JSON).
    pub usage_json: String,
    /// Why the model's last answer ended (`stop`, `length`, `content_filter`...), when it said.
    pub finish_reason: Option<String>,
}

impl RunOutcomeObject {
    /// The object for a core outcome; `usage` is the session's usage (a suspended outcome does
    /// not carry it).
    pub fn new(outcome: RunOutcome, usage: Usage) -> Self {
        let status = outcome.status();
        let (final_text, error, batch, finish_reason) = match outcome {
            RunOutcome::Finished { final_text, error, finish_reason, .. } => {
                (final_text, error, None, finish_reason)
            }
            RunOutcome::Suspended { batch } => (None, None, Some(batch), None),
        };
        RunOutcomeObject {
            status: status_name(status),
            final_text,
            error_code: error.as_ref().map(|e| e.code.to_string()),
            error_layer: error.as_ref().map(|e| e.layer.as_str().to_string()),
            error_message: error.map(|e| e.message),
            batch_json: batch.map(|b| to_json(&b)),
            usage_json: to_json(&usage),
            finish_reason,
        }
    }
}

/// The snake_case name of a run status (as in the state JSON).
pub(crate) fn status_name(status: crate::state::RunStatus) -> String {
    status.as_str().to_string()
}

/// A hook's context as it crosses (`contextJson`).
#[derive(serde::Serialize)]
pub(crate) struct HookContextView<'a> {
    pub session_id: &'a str,
    pub run_id: &'a str,
    pub round: u32,
}

/// A model request as `beforeModelCall` sees it (`requestJson`): what the runtime hands the
/// client, never the endpoint or the key; options left to the client are left out.
#[derive(serde::Serialize)]
pub(crate) struct ChatRequestView<'a> {
    pub messages: &'a [crate::message::ChatMessage],
    pub tools: &'a [ToolDefinition],
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_choice: Option<&'a crate::provider::ToolChoice>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parallel_tool_calls: Option<bool>,
}

/// JSON text of a core value (plain serde data: serialising it cannot fail).
pub(crate) fn to_json<T: serde::Serialize>(value: &T) -> String {
    serde_json::to_string(value)
        .unwrap_or_else(|e| serde_json::json!({ "error": format!("not serialisable: {e}") }).to_string())
}
