//! Test-only (the `napi-panic-test` feature, never shipped): makes the next call reaching a chosen
//! point of the binding panic, so `tests/node/panic.test.mjs` can show that every kind of export
//! turns a real panic into an `internal_panic` error and the process and its objects go on.
//!
//! The module of a build with this feature has two more exports, `panicNext(site, detail)` and
//! `corruptTextReads` (at the end), not declared in `index.d.ts`. Without the feature this module is not compiled and the points
//! (`panic_point!`, in `src/napi/mod.rs`) expand to nothing: the shipped module has no such path.
//!
//! Sites (one planned panic at a time, process-wide, cleared when it fires):
//! - `sync`: the start of the next export body run under `guard`/`guard_napi` (every synchronous
//!   export, constructor, and the synchronous part of every async one).
//! - `promise`: the start of the next async export's `spawn_guarded`, before its Promise exists.
//! - `future`: the first poll of the next async export's future, on the runtime's worker.
//! - `convert`: the conversion of the next async export's value to JS, on the JS thread.
//! - `executor`: the start of the next ArkTS tool executor's Rust side (`JsToolExecutor::execute`).
//! - `event`: the next event handed to an Agent's listener (`RunEvents::emit`, in the run).
//! - `hook`: the Rust side of the next ArkTS `beforeToolCall` hook (`JsHook::before_tool_call`).
//! - `answer`: the next conversion of what an ArkTS function (an executor, a hook, the approval
//!   policy) answered, on the JS thread (`callback::classify`).
//! - `argument`: the next conversion of an export's argument (`Arg`, `ArgRef`), before its body.
//!
//! And on the JS thread, in the closures napi-ohos runs from `extern "C"` callbacks:
//! - `args`: the making of the next call's JS arguments (an executor's, a hook's, the policy's,
//!   the listener's, an `onCancel` callback's: `callback::call_args`).
//! - `shield`: the next call of an app function through its shield, before it is called.
//! - `reply`: the reply of the next call that waits for an answer (`callback::call_js`: an
//!   executor, a hook, the policy), before the answer is read.
//! - `then`: the `then` or `catch` callback of the next Promise an app function returned.
//! - `listener`: the reply of the next event handed to an Agent's listener.
//! - `cancel`: the reply of the next `onCancel` callback.
//!
//! And one more export, `corruptTextReads(marker, bytes)`: the module's string reads (`text`) see
//! the given bytes where the engine wrote the marker (for `tests/node/text.test.mjs`).

use napi_derive_ohos::napi;
use std::sync::Mutex;

/// A point of the binding that can be made to panic.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Site {
    Sync,
    Promise,
    Future,
    Convert,
    Executor,
    Event,
    Hook,
    Answer,
    Argument,
    Args,
    Shield,
    Reply,
    Then,
    Listener,
    Cancel,
}

/// The planned panic: where, and the text it carries.
static PLANNED: Mutex<Option<(Site, String)>> = Mutex::new(None);

/// Panics if a panic is planned at `site` (and clears the plan first).
pub(crate) fn at(site: Site) {
    let mut planned = PLANNED.lock().unwrap_or_else(|p| p.into_inner());
    if planned.as_ref().is_some_and(|(s, _)| *s == site) {
        let (_, detail) = planned.take().unwrap_or((site, String::new()));
        drop(planned);
        panic!("planned test panic at {site:?}: {detail}");
    }
}

/// Plans a panic at `site` (one of the module docs' names) whose message ends with `detail`;
/// `off` clears the plan. Returns whether a plan was pending before. (Not run under `guard`, and
/// its arguments are napi's own strings, not `Arg`s: a `sync` or `argument` plan would fire on
/// this very call.)
#[cfg_attr(test, allow(dead_code))]
#[napi]
pub fn panic_next(site: super::text::Text, detail: super::text::Text) -> napi_ohos::Result<bool> {
    let detail = detail.into_string();
    let site = match &*site {
        "sync" => Some(Site::Sync),
        "promise" => Some(Site::Promise),
        "future" => Some(Site::Future),
        "convert" => Some(Site::Convert),
        "executor" => Some(Site::Executor),
        "event" => Some(Site::Event),
        "hook" => Some(Site::Hook),
        "answer" => Some(Site::Answer),
        "argument" => Some(Site::Argument),
        "args" => Some(Site::Args),
        "shield" => Some(Site::Shield),
        "reply" => Some(Site::Reply),
        "then" => Some(Site::Then),
        "listener" => Some(Site::Listener),
        "cancel" => Some(Site::Cancel),
        "off" => None,
        other => return Err(napi_ohos::Error::from_reason(format!("unknown panic site {other}"))),
    };
    let mut planned = PLANNED.lock().unwrap_or_else(|p| p.into_inner());
    Ok(std::mem::replace(&mut *planned, site.map(|s| (s, detail))).is_some())
}

/// The planned corruption of the module's string reads (`corruptTextReads`): the marker, and the
/// bytes that replace it.
static CORRUPTION: Mutex<Option<(Vec<u8>, Vec<u8>)>> = Mutex::new(None);

/// The bytes a string read of the module sees (`text`): the engine's, with the first occurrence
/// of the planned marker replaced by the planned bytes.
pub(crate) fn corrupt_text(mut bytes: Vec<u8>) -> Vec<u8> {
    let planned = CORRUPTION.lock().unwrap_or_else(|p| p.into_inner());
    if let Some((marker, with)) = planned.as_ref() {
        if let Some(at) = bytes.windows(marker.len()).position(|w| w == marker.as_slice()) {
            bytes.splice(at..at + marker.len(), with.iter().copied());
        }
    }
    bytes
}

/// Makes every later string read of the module (an argument, a field, an app function's answer,
/// a thrown value's text) see `bytes` (each 0 to 255) where the engine wrote `marker`, as if the
/// engine had written them: the checked reading's refusal of bytes that are not UTF-8, which no
/// engine on the host writes, can be shown. An empty marker clears the plan. Returns whether a
/// plan was in place.
#[cfg_attr(test, allow(dead_code))]
#[napi]
pub fn corrupt_text_reads(
    // Read as UTF-16, around the reads it corrupts (a plan in place would corrupt this one).
    marker: napi_ohos::bindgen_prelude::Utf16String,
    bytes: Vec<u32>,
) -> napi_ohos::Result<bool> {
    let marker = String::from_utf16(&marker).map_err(|e| napi_ohos::Error::from_reason(e.to_string()))?;
    let bytes = bytes
        .into_iter()
        .map(|b| u8::try_from(b).map_err(|_| napi_ohos::Error::from_reason(format!("{b} is not a byte"))))
        .collect::<napi_ohos::Result<Vec<u8>>>()?;
    let plan = (!marker.is_empty()).then(|| (marker.into_bytes(), bytes));
    let mut planned = CORRUPTION.lock().unwrap_or_else(|p| p.into_inner());
    Ok(std::mem::replace(&mut *planned, plan).is_some())
}
