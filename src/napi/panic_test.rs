//! Test-only (the `napi-panic-test` feature, never shipped): makes the next call reaching a chosen
//! point of the binding panic, so `tests/node/panic.test.mjs` can show that every kind of export
//! turns a real panic into an `internal_panic` error and the process and its objects go on.
//!
//! The module of a build with this feature has one more export, `panicNext(site, detail)`, not
//! declared in `index.d.ts`. Without the feature this module is not compiled and the points
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

use super::error::Arg;
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

/// Plans a panic at `site` (`sync`, `promise`, `future`, `convert`, `executor`, `event`, `hook`,
/// `answer`) whose message ends with `detail`; `off` clears the plan. Returns whether a plan was
/// pending before. (Not run under `guard`: a `sync` plan made here would fire on this very call.)
#[cfg_attr(test, allow(dead_code))]
#[napi]
pub fn panic_next(site: Arg<String>, detail: Arg<String>) -> napi_ohos::Result<bool> {
    let (Arg(site), Arg(detail)) = (site, detail);
    let site = match site.as_str() {
        "sync" => Some(Site::Sync),
        "promise" => Some(Site::Promise),
        "future" => Some(Site::Future),
        "convert" => Some(Site::Convert),
        "executor" => Some(Site::Executor),
        "event" => Some(Site::Event),
        "hook" => Some(Site::Hook),
        "answer" => Some(Site::Answer),
        "off" => None,
        other => return Err(napi_ohos::Error::from_reason(format!("unknown panic site {other}"))),
    };
    let mut planned = PLANNED.lock().unwrap_or_else(|p| p.into_inner());
    Ok(std::mem::replace(&mut *planned, site.map(|s| (s, detail))).is_some())
}
