//! The NAPI binding (`libarkagent.so`): adapters only. Each class holds an `Arc` of a core type and
//! each method is one core call plus one error conversion; ArkTS callbacks become core
//! [`ToolExecutor`](crate::tool::ToolExecutor)s and [`AgentHook`](crate::hook::AgentHook)s through
//! weak thread-safe functions.
//!
//! Compiled only with the `napi` feature. The module owns the one tokio runtime of the process
//! (two worker threads, a blocking pool of at most 16 for file work), built when the module first
//! loads and kept for the life of the process, whichever environments come and go (`runtime`).
//!
//! # Layout
//! - `error`: [`AgentError`](crate::AgentError) -> JS `Error` with `code` and `layer`, and the
//!   panic guards every export runs in.
//! - `text`: every JS string the module reads (`Text`), checked: napi-ohos' own `String` builds
//!   it unchecked from the engine's bytes, which on ArkVM are not UTF-8 for a lone surrogate.
//!   `engine_utf8`: the pure decoding of those bytes.
//! - `dto`: the `#[napi(object)]` shapes that cross the boundary, with conversions both ways, and
//!   `Id`, the string argument whose identity matters (a lone UTF-16 surrogate is refused).
//! - `env_life`: the life of each JS environment the module was loaded in (a worker's may be torn
//!   down with work in flight): its `gone` signal ends what was started in it.
//! - `callback`: calling an ArkTS/JS function from Rust and getting a value or a Promise back, with
//!   the panic guards of the closures napi-ohos runs on the JS thread.
//! - `signal`: the `CancellationHandle` class over [`CancellationSignal`](crate::CancellationSignal).
//! - `executor`: `JsToolExecutor`, an ArkTS function as a tool executor.
//! - `hook`: `JsHook`, an ArkTS `AgentHookObject` as an agent hook.
//! - `policy`: the app's approval policy function as the agent's `ApprovalPolicy` (fail closed).
//! - `events`: the Agent's event listener as an `EventSink` (FIFO, non-blocking).
//! - `registry`: the `ToolRegistry` class.
//! - `agent`: the `Agent` class (config -> core agent; run, resume, approvals, state).
//! - `logging`: installs the crate's process logger (hilog on OHOS, stderr elsewhere; secrets
//!   redacted), and a panic hook that keeps secrets out of panic reports.
//! - `host_shims` (Linux hosts only): the link shims that let Node load the module.
//! - `panic_test` (only with the test-only `napi-panic-test` feature): planned panics at the
//!   [`panic_point!`]s, for `tests/node/panic.test.mjs`.

/// A point where a build with the test-only `napi-panic-test` feature can be made to panic
/// (`panic_test`); expands to nothing without it, so the shipped module has no such path.
macro_rules! panic_point {
    ($site:ident) => {
        #[cfg(feature = "napi-panic-test")]
        $crate::napi::panic_test::at($crate::napi::panic_test::Site::$site);
    };
}
pub(crate) use panic_point;

mod agent;
mod callback;
mod dto;
mod engine_utf8;
mod env_life;
mod error;
mod events;
mod executor;
mod hook;
#[cfg(all(target_os = "linux", not(target_env = "ohos")))]
mod host_shims;
mod logging;
#[cfg(feature = "napi-panic-test")]
mod panic_test;
mod policy;
mod registry;
mod signal;
mod text;

use napi_derive_ohos::napi;
use napi_ohos::Env;

/// Worker threads of the module's tokio runtime.
const WORKER_THREADS: usize = 2;

/// Most threads of the runtime's blocking pool (tokio's default: 512). Only a `stateDir`'s file
/// work runs there (`FileStore`, each step short and bounded, none waiting on another), so more
/// jobs at once queue instead of each getting an OS thread: 1000 runs at once with a `stateDir`
/// peak at 29 threads instead of 525, in the same time (BENCHMARKS.md, "Blocking pool"). Runs
/// waiting on the app (its policy, hooks, executors) hold no thread at all.
const MAX_BLOCKING_THREADS: usize = 16;

/// The module's tokio runtime: built once, at the first module load (or first use), and never shut
/// down nor handed to napi-ohos. napi-ohos' own runtime (its `async` feature, left off) is shut
/// down when the first environment that loaded the module is torn down (its cleanup hook goes on
/// the first environment only), and then rebuilt with its defaults (a worker per CPU, 512 blocking
/// threads): an ArkTS Worker that loaded the module first took the runtime with it.
static RUNTIME: std::sync::OnceLock<Result<tokio::runtime::Runtime, String>> = std::sync::OnceLock::new();

/// The module's runtime (call from any thread).
///
/// # Errors
/// When it could not be built (no thread could be started): napi's error, saying why.
pub(crate) fn runtime() -> napi_ohos::Result<&'static tokio::runtime::Runtime> {
    RUNTIME
        .get_or_init(|| {
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(WORKER_THREADS)
                .max_blocking_threads(MAX_BLOCKING_THREADS)
                .thread_name("arkagent-rt")
                .enable_all()
                .build()
                .map_err(|e| e.to_string())
        })
        .as_ref()
        .map_err(|e| napi_ohos::Error::from_reason(format!("arkagent: no tokio runtime: {e}")))
}

#[napi_derive_ohos::module_init]
fn init() {
    logging::init();
    logging::install_panic_hook();
    if let Err(e) = runtime() {
        log::error!("{}", e.reason);
    }
}

/// The crate version (`CARGO_PKG_VERSION`).
// napi-derive registers exports only outside `cfg(test)`: the lib test target sees them unused.
#[cfg_attr(test, allow(dead_code))]
#[napi]
pub fn version(env: Env) -> napi_ohos::Result<String> {
    error::guard(&env, || Ok(env!("CARGO_PKG_VERSION").to_string()))
}

/// The RFC 8785 canonical form of a JSON text (what loop signatures are computed from).
///
/// # Errors
/// `json_invalid` (layer `decode`) when the text is not JSON or an object has a name twice
/// (RFC 8785 takes I-JSON); `json_too_deep` past 128 levels (as the arguments of a registry whose
/// `maxArgumentDepth` is 128 or more).
#[cfg_attr(test, allow(dead_code))]
#[napi]
pub fn canonical_json(env: Env, text: error::Arg<text::Text<dto::TextArg>>) -> napi_ohos::Result<String> {
    let error::Arg(text) = text;
    error::guard(&env, || {
        let limits = crate::json::JsonLimits { max_depth: crate::json::DEPTH_CAP, max_bytes: usize::MAX };
        crate::json::canonicalize_str(&text, &limits)
    })
}
