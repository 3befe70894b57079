//! The `ToolRegistry` class: registration of ArkTS tools (a definition plus an executor function),
//! copying tools between registries (`copyInto`, `copyIntoExcluding`, as the core's), and
//! `execute`, which runs one call through the core's four gates and the executor. (The Agent class
//! registers its own tools with `registerTool`, through the same `JsToolExecutor`.)

use super::dto::{
    Checked, ExcludedNamesArg, ExecuteOptions, Id, JsArray, ToolCallObject, ToolDefinitionObject,
    ToolNameArg, ToolRegistryOptions, ToolResultObject,
};
use super::error::{check_new, check_this, guard, guard_napi, spawn_guarded, Arg, ArgRef, ClassTag};
use super::signal::CancellationHandle;
use crate::error::{codes, AgentError};
use crate::message::ToolCall;
use crate::state::SCHEMA_VERSION;
use crate::tool::{
    CallStart, CancellationSignal, ReadonlyAgentState, ToolContext, ToolRegistry, ToolServiceRegistry,
};
use napi_derive_ohos::napi;
use napi_ohos::bindgen_prelude::{Function, PromiseRaw, This, Unknown};
use napi_ohos::Env;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

/// The timeout of executors whose definition has none.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

/// The context of one call made from JS (`execute`, and the bench's round trip): the session's
/// read-only state holds only its id and metadata.
fn call_context(
    call_id: &str,
    session_id: String,
    batch_call_id: String,
    metadata: BTreeMap<String, serde_json::Value>,
    signal: CancellationSignal,
) -> ToolContext {
    ToolContext {
        state: Arc::new(ReadonlyAgentState {
            schema_version: SCHEMA_VERSION,
            session_id: session_id.clone(),
            metadata,
        }),
        session_id,
        batch_call_id,
        call_id: call_id.to_string(),
        signal,
        services: Arc::new(ToolServiceRegistry::new()),
        started: CallStart::new(),
    }
}

/// The tools of an app, shared with the agents built from it.
#[napi(js_name = "ToolRegistry")]
#[repr(C)]
pub struct JsToolRegistry {
    // First: which class this is (see `ClassTag`).
    tag: ClassTag,
    // A std Mutex: held only for a registration or to take a snapshot, never across an await.
    inner: Arc<Mutex<ToolRegistry>>,
    default_timeout: Duration,
}

// SAFETY: `#[repr(C)]`, its tag first.
unsafe impl super::error::JsClass for JsToolRegistry {
    const JS_NAME: &'static str = "ToolRegistry\0";
    const TAG: ClassTag = ClassTag::TOOL_REGISTRY;
}

impl JsToolRegistry {
    fn lock(&self) -> MutexGuard<'_, ToolRegistry> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The core `copy_into_excluding`, with the chosen tools staged in a registry of their own
    /// first: one lock at a time, so `target` may be this very registry.
    fn copy_to(&self, target: &JsToolRegistry, excluded: &[&str]) -> Result<(), AgentError> {
        let staged = {
            let source = self.lock();
            let mut staged =
                ToolRegistry::with_limits(source.limits()).with_validation_mode(source.validation_mode());
            source.copy_into_excluding(&mut staged, excluded)?;
            staged
        };
        staged.copy_into(&mut target.lock())
    }

    /// The shared core registry (for the Agent class).
    #[allow(dead_code)]
    pub(crate) fn core(&self) -> Arc<Mutex<ToolRegistry>> {
        Arc::clone(&self.inner)
    }
}

#[napi]
impl JsToolRegistry {
    /// An empty registry.
    ///
    /// # Errors
    /// `config_invalid` for an option out of range or a key the options do not have.
    #[napi(constructor)]
    pub fn new(
        env: Env,
        this: This<Unknown>,
        options: Arg<Option<Checked<ToolRegistryOptions>>>,
    ) -> napi_ohos::Result<Self> {
        check_new::<Self>(&env, &this)?;
        let Arg(options) = options;
        guard(&env, || {
            let (limits, default_timeout) = match options.map(Checked::known).transpose()? {
                Some(o) => (o.limits()?, o.default_timeout()?),
                None => (Default::default(), None),
            };
            Ok(JsToolRegistry {
                tag: ClassTag::TOOL_REGISTRY,
                inner: Arc::new(Mutex::new(ToolRegistry::with_limits(limits))),
                default_timeout: default_timeout.unwrap_or(DEFAULT_TIMEOUT),
            })
        })
    }

    /// Registers a tool: its definition and its executor
    /// `(argumentsJson, context) => ToolResultObject | Promise<ToolResultObject>`.
    ///
    /// # Errors
    /// `tool_name_empty`, `tool_name_invalid`, `tool_name_duplicate`, a `schema_*` error, or
    /// `config_invalid`; `tool_name_reserved` for `delegate_task`, the delegation's own tool, as
    /// the Agent's `registerTool` refuses it (so no registry holds one to copy).
    #[napi]
    pub fn register(
        &self,
        env: Env,
        definition: Arg<Checked<ToolDefinitionObject>>,
        executor: Arg<Function<'_, Unknown<'static>, Unknown<'static>>>,
    ) -> napi_ohos::Result<()> {
        check_this(&env, self)?;
        let (Arg(definition), Arg(executor)) = (definition, executor);
        guard_napi(&env, || {
            let tool = super::executor::js_tool(&env, definition, executor, self.default_timeout)?;
            guard(&env, || {
                let (definition, executor) = tool?;
                if definition.name == crate::agent::DELEGATE_TASK {
                    return Err(crate::agent::reserved_tool_name(false));
                }
                self.lock().register(definition, executor)
            })
        })
    }

    /// Removes a tool; returns whether it was there.
    #[napi]
    pub fn unregister(&self, env: Env, name: Arg<Id<ToolNameArg>>) -> napi_ohos::Result<bool> {
        check_this(&env, self)?;
        let Arg(Id(name, _)) = name;
        guard(&env, || Ok(self.lock().unregister(&name)))
    }

    /// Copies every tool into `target` (the executors are shared, not cloned), in registration
    /// order, after `target`'s own tools.
    ///
    /// # Errors
    /// `tool_name_duplicate` when `target` already has one of the names (`target` is then
    /// unchanged); copying a registry with tools into itself is such a clash.
    #[napi]
    pub fn copy_into(&self, env: Env, target: ArgRef<JsToolRegistry>) -> napi_ohos::Result<()> {
        check_this(&env, self)?;
        let ArgRef(target) = target;
        guard(&env, || self.copy_to(target, &[]))
    }

    /// Copies every tool except the named ones into `target` (e.g. a worker's registry without
    /// the tools it must not have); names that are not registered are ignored.
    ///
    /// # Errors
    /// As [`copy_into`](Self::copy_into).
    #[napi]
    pub fn copy_into_excluding(
        &self,
        env: Env,
        target: ArgRef<JsToolRegistry>,
        excluded_names: Arg<JsArray<Id, ExcludedNamesArg>>,
    ) -> napi_ohos::Result<()> {
        check_this(&env, self)?;
        let (ArgRef(target), Arg(JsArray(excluded_names, _))) = (target, excluded_names);
        guard(&env, || {
            let excluded: Vec<&str> = excluded_names.iter().map(|name| name.0.as_str()).collect();
            self.copy_to(target, &excluded)
        })
    }

    /// The registered names, in registration order.
    #[napi]
    pub fn names(&self, env: Env) -> napi_ohos::Result<Vec<String>> {
        check_this(&env, self)?;
        guard(&env, || Ok(self.lock().names()))
    }

    /// The definitions as a JSON array, in registration order, in the core's serialised shape
    /// (`name`, `description`, `parameters`, `risk_level`, `idempotent`, `timeout` in ms), the
    /// parameters as `parametersJson` was written (keys in their order, compacted).
    #[napi]
    pub fn definitions_json(&self, env: Env) -> napi_ohos::Result<String> {
        check_this(&env, self)?;
        guard(&env, || {
            let snapshot = self.lock().snapshot();
            serde_json::to_string(&snapshot.definitions()[..]).map_err(|e| {
                AgentError::of(codes::INTERNAL_PANIC, format!("definitions did not serialise: {e}"))
            })
        })
    }

    /// Runs one call through the four gates (registered, arguments parse as a JSON object, schema,
    /// not cancelled) and the executor. Resolves with the executor's result.
    ///
    /// # Errors
    /// Rejects with the gate's or the executor's coded error (`tool_not_found`, `json_*`,
    /// `tool_argument_*`, `tool_cancelled`, `tool_execution_failed`, `tool_result_invalid`,
    /// `tool_timeout`, or the executor's own code), or `config_invalid` for a key the call or the
    /// options do not have, or a `metadataJson` that is not a JSON object.
    #[napi(ts_return_type = "Promise<ToolResultObject>")]
    pub fn execute<'env>(
        &self,
        env: &'env Env,
        call: Arg<Checked<ToolCallObject>>,
        signal: Option<ArgRef<CancellationHandle>>,
        options: Arg<Option<Checked<ExecuteOptions>>>,
    ) -> napi_ohos::Result<PromiseRaw<'env, ToolResultObject>> {
        check_this(env, self)?;
        let (Arg(call), signal, Arg(options)) = (call, signal.map(|s| s.0), options);
        // A bad option rejects the Promise (as the gates do), rather than throwing.
        let prepared = guard(env, || Ok(self.prepare(call, signal, options)))?;
        let default_timeout = self.default_timeout;
        guard_napi(env, || {
            spawn_guarded(
                env,
                async move {
                    let (snapshot, call, context) = prepared?;
                    // The gates get the executor's time too (its definition's, else the
                    // registry's default), apart from the executor's own.
                    let timeout =
                        snapshot.definition(&call.name).and_then(|d| d.timeout).unwrap_or(default_timeout);
                    snapshot.execute_within(&call, context, Some(timeout)).await
                },
                ToolResultObject::from,
            )
        })
    }
}

impl JsToolRegistry {
    /// What `execute` runs: the registry's snapshot, the call and its context.
    ///
    /// # Errors
    /// `config_invalid` for a key the call or the options do not have, or a `metadataJson` that
    /// is not a JSON object.
    fn prepare(
        &self,
        call: Checked<ToolCallObject>,
        signal: Option<&CancellationHandle>,
        options: Option<Checked<ExecuteOptions>>,
    ) -> Result<(crate::tool::ToolSnapshot, ToolCall, ToolContext), AgentError> {
        let call = call.known()?;
        let options = options.map(Checked::known).transpose()?.unwrap_or(ExecuteOptions {
            session_id: None,
            batch_call_id: None,
            metadata_json: None,
        });
        let session_id = options.session_id.as_ref().map(|id| id.0.clone()).unwrap_or_default();
        // Inserted one by one: `collect` into a BTreeMap sorts first, with a sort instantiated
        // for this one iterator (BENCHMARKS.md, "Size of the stripped release `.so`").
        let mut metadata = BTreeMap::new();
        for (key, mut value) in options.metadata()? {
            // The executor's context shows no API key (as the agent's setMetadata stores none).
            super::executor::redact_value(&mut value);
            metadata.insert(key, value);
        }
        let context = call_context(
            &call.id.0,
            session_id,
            options.batch_call_id.map(|id| id.0).unwrap_or_default(),
            metadata,
            signal.map_or_else(CancellationSignal::new, |h| h.signal().clone()),
        );
        Ok((self.lock().snapshot(), ToolCall::from(call), context))
    }
}

/// The round trip of an executor as the runtime makes it, timed in Rust: only in a module built
/// with the `napi-bench` feature (never shipped; `tests/node/bench_roundtrip.mjs` uses it).
#[cfg(feature = "napi-bench")]
#[napi]
impl JsToolRegistry {
    /// Runs `call` `calls` times through the gates and the executor (`inFlight` calls at a time,
    /// at least one), as the runtime does for a model's call, and resolves with each call's time
    /// in microseconds, from the gates to the executor's settled Promise back in Rust.
    ///
    /// # Errors
    /// Rejects with the first call's coded error if a call fails.
    #[napi(ts_return_type = "Promise<Array<number>>")]
    pub fn bench_round_trip<'env>(
        &self,
        env: &'env Env,
        call: ToolCallObject,
        calls: u32,
        in_flight: u32,
    ) -> napi_ohos::Result<PromiseRaw<'env, Vec<f64>>> {
        check_this(env, self)?;
        let snapshot = self.lock().snapshot();
        let call = ToolCall::from(call);
        let lanes = in_flight.clamp(1, calls.max(1));
        let timed = async move {
            let next = std::sync::atomic::AtomicU32::new(0);
            let lane = || async {
                let mut times = Vec::new();
                while next.fetch_add(1, std::sync::atomic::Ordering::Relaxed) < calls {
                    let context = call_context(
                        &call.id,
                        String::new(),
                        String::new(),
                        BTreeMap::new(),
                        CancellationSignal::new(),
                    );
                    let start = std::time::Instant::now();
                    snapshot.execute(&call, context).await?;
                    times.push(start.elapsed().as_secs_f64() * 1e6);
                }
                Ok::<_, AgentError>(times)
            };
            let all = futures_util::future::try_join_all((0..lanes).map(|_| lane())).await?;
            Ok(all.into_iter().flatten().collect())
        };
        guard_napi(env, || spawn_guarded(env, timed, |times: Vec<f64>| times))
    }
}
