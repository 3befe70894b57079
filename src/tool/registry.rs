//! The registry: three checks at registration (name not empty, name unique, schema compiles) and
//! four gates before an executor runs (registered, arguments parse as a JSON object, schema,
//! not cancelled). A [`ToolSnapshot`] is the registry as it was when taken: the runtime takes one
//! per batch, and runs a call of it only while the call's tool is still that registration.

use super::{CallStart, CancellationSignal, ToolContext, ToolDefinition, ToolExecutor, ToolResult};
use crate::error::{codes, AgentError};
use crate::json::JsonLimits;
use crate::message::ToolCall;
use crate::schema::{CompiledSchema, SchemaOptions, ValidationMode};
use futures_util::FutureExt;
use serde_json::{Map, Value};
use std::borrow::Cow;
use std::collections::HashMap;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex};

/// A registered tool: its definition, its compiled schema and its executor.
pub struct RegisteredTool {
    /// The definition the model sees.
    pub definition: ToolDefinition,
    /// The parameters schema, compiled once at registration.
    pub schema: CompiledSchema,
    /// The executor.
    pub executor: Arc<dyn ToolExecutor>,
}

impl std::fmt::Debug for RegisteredTool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RegisteredTool").field("definition", &self.definition).finish_non_exhaustive()
    }
}

/// The tools of an agent, in registration order.
#[derive(Default)]
pub struct ToolRegistry {
    tools: Vec<Arc<RegisteredTool>>,
    limits: JsonLimits,
    mode: ValidationMode,
    // A std Mutex: only guards a cached Arc, never held across an await.
    snapshot: Mutex<Option<ToolSnapshot>>,
}

impl std::fmt::Debug for ToolRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToolRegistry").field("names", &self.names()).finish()
    }
}

impl ToolRegistry {
    /// An empty registry with the default input limits.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty registry with the given limits for tool-call arguments.
    ///
    /// A call whose arguments these refuse for their size or depth is recorded by the agent with
    /// `{}` for them; the agent's requests carry these limits, and the history sent to the
    /// provider replaces arguments over them with `{}`, sending back what these take (see
    /// [`crate::provider::convert::wire_arguments`]).
    pub fn with_limits(limits: JsonLimits) -> Self {
        ToolRegistry { limits, ..Self::default() }
    }

    /// The argument limits.
    pub fn limits(&self) -> JsonLimits {
        self.limits
    }

    /// The same registry reporting every schema violation of a call at once
    /// ([`ValidationMode::AllErrors`]: a model repairs its call better when it sees them all) or
    /// only the first (the default).
    pub fn with_validation_mode(mut self, mode: ValidationMode) -> Self {
        self.set_validation_mode(mode);
        self
    }

    /// Sets the validation mode for the tools registered so far and later.
    pub fn set_validation_mode(&mut self, mode: ValidationMode) {
        if self.mode == mode {
            return;
        }
        self.mode = mode;
        self.tools = self.tools.iter().map(|t| with_mode(t, mode)).collect();
        self.invalidate();
    }

    /// The validation mode.
    pub fn validation_mode(&self) -> ValidationMode {
        self.mode
    }

    /// Runs one call through a fresh [`snapshot`](Self::snapshot): the four gates, then the
    /// executor. The runtime uses one snapshot per batch instead.
    ///
    /// # Errors
    /// As [`ToolSnapshot::execute`].
    pub async fn execute(&self, call: &ToolCall, context: ToolContext) -> Result<ToolResult, AgentError> {
        self.snapshot().execute(call, context).await
    }

    /// Registers a tool after the checks, in order: the name is not blank, the name is one
    /// OpenAI-compatible APIs accept (`^[A-Za-z0-9_-]{1,64}$`), the name is not taken, the schema
    /// compiles.
    ///
    /// # Errors
    /// `tool_name_empty`, `tool_name_invalid`, `tool_name_duplicate`, or the `schema_*` error of
    /// the schema.
    pub fn register(
        &mut self,
        definition: ToolDefinition,
        executor: Arc<dyn ToolExecutor>,
    ) -> Result<(), AgentError> {
        // Blank as JavaScript's `trim` sees it (which also removes U+FEFF).
        if definition.name.chars().all(|c| c.is_whitespace() || c == '\u{feff}') {
            return Err(AgentError::of(codes::TOOL_NAME_EMPTY, "Tool name must not be empty"));
        }
        check_name(&definition.name)?;
        if self.position(&definition.name).is_some() {
            return Err(AgentError::of(
                codes::TOOL_NAME_DUPLICATE,
                format!("Tool already registered: {}", definition.name),
            ));
        }
        let options = SchemaOptions { mode: self.mode, ..SchemaOptions::default() };
        let schema = CompiledSchema::compile_with(definition.parameters.value(), &options)?;
        self.insert(Arc::new(RegisteredTool { definition, schema, executor }));
        Ok(())
    }

    fn insert(&mut self, tool: Arc<RegisteredTool>) {
        self.tools.push(tool);
        self.invalidate();
    }

    fn invalidate(&mut self) {
        *self.snapshot.get_mut().unwrap_or_else(|p| p.into_inner()) = None;
    }

    fn position(&self, name: &str) -> Option<usize> {
        self.tools.iter().position(|t| t.definition.name == name)
    }

    /// Removes a tool; returns whether it was there.
    pub fn unregister(&mut self, name: &str) -> bool {
        match self.position(name) {
            Some(i) => {
                self.tools.remove(i);
                self.invalidate();
                true
            }
            None => false,
        }
    }

    /// Copies every tool into `target` (the executors are shared, not cloned).
    ///
    /// # Errors
    /// `tool_name_duplicate` when `target` already has one of the names; `target` is then unchanged.
    pub fn copy_into(&self, target: &mut ToolRegistry) -> Result<(), AgentError> {
        self.copy_into_excluding(target, &[])
    }

    /// Copies every tool except the named ones into `target` (used to build a worker agent's
    /// registry without `delegate_task`).
    ///
    /// # Errors
    /// `tool_name_duplicate` when `target` already has one of the names; `target` is then unchanged.
    pub fn copy_into_excluding(
        &self,
        target: &mut ToolRegistry,
        excluded: &[&str],
    ) -> Result<(), AgentError> {
        let chosen: Vec<&Arc<RegisteredTool>> =
            self.tools.iter().filter(|t| !excluded.contains(&t.definition.name.as_str())).collect();
        if let Some(dup) = chosen.iter().find(|t| target.position(&t.definition.name).is_some()) {
            return Err(AgentError::of(
                codes::TOOL_NAME_DUPLICATE,
                format!("Tool already registered: {}", dup.definition.name),
            ));
        }
        for t in chosen {
            target.insert(with_mode(t, target.mode));
        }
        Ok(())
    }

    /// The registered names, in registration order.
    pub fn names(&self) -> Vec<String> {
        self.tools.iter().map(|t| t.definition.name.clone()).collect()
    }

    /// The number of tools.
    pub fn len(&self) -> usize {
        self.tools.len()
    }

    /// True when no tool is registered.
    pub fn is_empty(&self) -> bool {
        self.tools.is_empty()
    }

    /// The definition of a tool.
    pub fn definition(&self, name: &str) -> Option<&ToolDefinition> {
        self.position(name).map(|i| &self.tools[i].definition)
    }

    /// An immutable view of the tools as they are now. Cheap: cached until the registry changes.
    pub fn snapshot(&self) -> ToolSnapshot {
        let mut cached = self.snapshot.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(s) = cached.as_ref() {
            return s.clone();
        }
        let s = ToolSnapshot::new(self.tools.clone(), self.limits);
        *cached = Some(s.clone());
        s
    }
}

/// The tool with its schema in `mode` (shared as is when the mode already matches).
fn with_mode(tool: &Arc<RegisteredTool>, mode: ValidationMode) -> Arc<RegisteredTool> {
    if tool.schema.mode() == mode {
        return Arc::clone(tool);
    }
    Arc::new(RegisteredTool {
        definition: tool.definition.clone(),
        schema: tool.schema.with_mode(mode),
        executor: Arc::clone(&tool.executor),
    })
}

struct SnapshotInner {
    tools: Vec<Arc<RegisteredTool>>,
    index: HashMap<String, usize>,
    definitions: Arc<[ToolDefinition]>,
    limits: JsonLimits,
}

/// The tools as they were when taken: what a request sends the model, and what a batch plans and
/// runs its calls with (each call only while its tool is still the same registration, an
/// `Arc<RegisteredTool>` of the registry).
#[derive(Clone)]
pub struct ToolSnapshot {
    inner: Arc<SnapshotInner>,
}

impl std::fmt::Debug for ToolSnapshot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToolSnapshot").field("tools", &self.inner.tools.len()).finish()
    }
}

impl ToolSnapshot {
    fn new(tools: Vec<Arc<RegisteredTool>>, limits: JsonLimits) -> Self {
        let index = tools.iter().enumerate().map(|(i, t)| (t.definition.name.clone(), i)).collect();
        let definitions: Arc<[ToolDefinition]> = tools.iter().map(|t| t.definition.clone()).collect();
        ToolSnapshot { inner: Arc::new(SnapshotInner { tools, index, definitions, limits }) }
    }

    /// The definitions, in registration order (what the model is sent).
    pub fn definitions(&self) -> &Arc<[ToolDefinition]> {
        &self.inner.definitions
    }

    /// A registered tool.
    pub fn get(&self, name: &str) -> Option<&Arc<RegisteredTool>> {
        self.inner.index.get(name).map(|&i| &self.inner.tools[i])
    }

    /// The definition of a tool.
    pub fn definition(&self, name: &str) -> Option<&ToolDefinition> {
        self.get(name).map(|t| &t.definition)
    }

    /// The argument limits of the registry this snapshot was taken of.
    pub fn limits(&self) -> JsonLimits {
        self.inner.limits
    }

    /// Gates one to three: the tool is registered, its arguments parse as a JSON object within the
    /// limits, and they satisfy the schema.
    ///
    /// # Errors
    /// `tool_not_found`, a `json_*` decode error, or a `tool_argument_*` error.
    pub fn prepare(&self, call: &ToolCall) -> Result<PreparedCall, AgentError> {
        let tool = self
            .get(&call.name)
            .ok_or_else(|| tool_not_found(&call.name, |name| self.get(name).is_some()))?;
        let arguments = tool.schema.parse_and_validate(&call.arguments, &self.inner.limits)?;
        Ok(PreparedCall { tool: Arc::clone(tool), arguments })
    }

    /// [`prepare`](Self::prepare), on tokio's blocking pool when it may take long: the tool's
    /// schema has a `pattern` matched by backtracking ([`CompiledSchema::backtracks`]), or the
    /// arguments are over `OFF_THREAD_ARGUMENT_BYTES`. The async workers stay free meanwhile
    /// (the runtime's other runs go on), and a cancel of `signal` answers `tool_cancelled` at
    /// once: the validation then ends in the background and its result is dropped, never used to
    /// run the tool. At most `OFF_THREAD_VALIDATIONS` such validations hold a thread of the pool
    /// at once (the rest wait without holding one), so the pool keeps threads for other work
    /// (a `FileStore`'s). Outside a tokio runtime, or for other calls, the gates run inline.
    ///
    /// # Errors
    /// As [`prepare`](Self::prepare), or `tool_cancelled`.
    pub async fn prepare_off_thread(
        &self,
        call: &ToolCall,
        signal: &CancellationSignal,
    ) -> Result<PreparedCall, AgentError> {
        let Some(tool) = self.get(&call.name) else { return self.prepare(call) };
        let slow = tool.schema.backtracks() || call.arguments.len() > OFF_THREAD_ARGUMENT_BYTES;
        if !slow || tokio::runtime::Handle::try_current().is_err() {
            return self.prepare(call);
        }
        let tool = Arc::clone(tool);
        let (arguments, limits) = (call.arguments.clone(), self.inner.limits);
        let validated = async move {
            let slot = VALIDATION_SLOTS
                .acquire()
                .await
                .map_err(|e| AgentError::of(codes::INTERNAL_PANIC, e.to_string()))?;
            let checked = Arc::clone(&tool);
            let arguments = tokio::task::spawn_blocking(move || {
                // The slot is held until the validation ends, even one whose call was cancelled.
                let _slot = slot;
                checked.schema.parse_and_validate(&arguments, &limits)
            })
            .await
            .map_err(|e| {
                AgentError::of(codes::INTERNAL_PANIC, format!("the validation task failed: {e}"))
            })??;
            Ok(PreparedCall { tool, arguments })
        };
        tokio::select! {
            biased;
            _ = signal.cancelled() => Err(cancelled_error(signal)),
            prepared = validated => prepared,
        }
    }

    /// [`prepare_off_thread`](Self::prepare_off_thread) within `timeout` (none: as long as it
    /// takes). Arguments a slow pattern could not check in it are answered `tool_not_started`:
    /// the executor never started, so calling it again is safe (not `tool_timeout`'s "may or may
    /// not have taken effect"); the validation ends in the background, its result dropped.
    ///
    /// # Errors
    /// As [`prepare_off_thread`](Self::prepare_off_thread), or `tool_not_started`.
    pub async fn prepare_within(
        &self,
        call: &ToolCall,
        signal: &CancellationSignal,
        timeout: Option<std::time::Duration>,
    ) -> Result<PreparedCall, AgentError> {
        let Some(timeout) = timeout else { return self.prepare_off_thread(call, signal).await };
        tokio::time::timeout(timeout, self.prepare_off_thread(call, signal)).await.unwrap_or_else(|_| {
            Err(AgentError::of(
                codes::TOOL_NOT_STARTED,
                format!(
                    "the arguments of {} could not be checked against its schema within {} ms (a \
                     schema pattern that takes long on them), and the tool did not run",
                    call.name,
                    timeout.as_millis()
                ),
            ))
        })
    }

    /// All four gates ([`prepare_within`](Self::prepare_within) the tool's timeout, when its
    /// definition has one), then the executor.
    ///
    /// # Errors
    /// Any gate's error, `tool_cancelled`, `tool_not_started`, the executor's domain error, or
    /// `tool_execution_failed`.
    pub async fn execute(&self, call: &ToolCall, context: ToolContext) -> Result<ToolResult, AgentError> {
        let timeout = self.definition(&call.name).and_then(|d| d.timeout);
        self.execute_within(call, context, timeout).await
    }

    /// [`execute`](Self::execute) with the gates held to `gate_timeout` (the executor keeps its
    /// own): a binding whose executors time themselves passes the time they have.
    ///
    /// # Errors
    /// As [`execute`](Self::execute).
    pub async fn execute_within(
        &self,
        call: &ToolCall,
        context: ToolContext,
        gate_timeout: Option<std::time::Duration>,
    ) -> Result<ToolResult, AgentError> {
        self.prepare_within(call, &context.signal, gate_timeout).await?.run(context).await
    }
}

/// Arguments longer than this (in bytes) are validated on tokio's blocking pool
/// ([`ToolSnapshot::prepare_off_thread`]): parsing and checking them takes about a millisecond
/// or more, which an async worker should not spend.
pub const OFF_THREAD_ARGUMENT_BYTES: usize = 64 * 1024;

/// The most validations on tokio's blocking pool at once ([`ToolSnapshot::prepare_off_thread`]):
/// half the pool the native module builds (16 threads), so slow patterns never take every thread
/// a `FileStore` needs.
pub const OFF_THREAD_VALIDATIONS: usize = 8;

static VALIDATION_SLOTS: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(OFF_THREAD_VALIDATIONS);

/// A call that passed gates one to three.
#[derive(Debug)]
pub struct PreparedCall {
    /// The tool.
    pub tool: Arc<RegisteredTool>,
    /// The validated arguments.
    pub arguments: Map<String, Value>,
}

impl PreparedCall {
    /// Gate four (not cancelled), then the executor, the call marked started
    /// ([`ToolContext::started`]) as it is entered; a panic becomes `tool_execution_failed`.
    ///
    /// # Errors
    /// `tool_cancelled`, the executor's domain error, or `tool_execution_failed`.
    pub async fn run(self, context: ToolContext) -> Result<ToolResult, AgentError> {
        if context.signal.is_cancelled() {
            return Err(cancelled_error(&context.signal));
        }
        if !self.tool.executor.marks_own_start() && !context.started.start() {
            return Err(AgentError::of(
                codes::TOOL_CANCELLED,
                "the call was given up before it started (its run ended first)",
            ));
        }
        let fut = self.tool.executor.execute(self.arguments, context);
        match AssertUnwindSafe(fut).catch_unwind().await {
            Ok(Ok(result)) => {
                result.check_depth(&format!("the executor of {}", self.tool.definition.name))?;
                Ok(result)
            }
            Ok(Err(e)) => Err(e),
            Err(panic) => Err(AgentError::execution_failed(panic_message(&panic))),
        }
    }
}

/// The error of a call of `name` cut off at its time limit `timeout`, which gives the call up
/// (`ToolContext::started`): `tool_timeout` when its executor had been entered (it may have
/// acted), `tool_not_started` when it had not (it never will be: the tool did not run, and calling
/// it again is safe). An adapter's own limit of the same length may fire a tick later: whichever
/// fires first, a call never entered is `tool_not_started`.
pub(crate) fn timed_out_error(name: &str, timeout: std::time::Duration, started: &CallStart) -> AgentError {
    let ms = timeout.as_millis();
    if started.give_up() {
        AgentError::of(
            codes::TOOL_NOT_STARTED,
            format!("{name} was not started within {ms} ms, and the tool did not run"),
        )
    } else {
        AgentError::of(codes::TOOL_TIMEOUT, format!("{name} did not finish within {ms} ms"))
    }
}

/// The `tool_cancelled` error for a cancelled signal.
pub(crate) fn cancelled_error(signal: &CancellationSignal) -> AgentError {
    AgentError::of(codes::TOOL_CANCELLED, signal.reason().unwrap_or_else(|| "Tool cancelled".to_string()))
}

/// The `tool_not_found` error of a call of `name`, a tool that is not registered. A name model
/// APIs refuse is quoted (blanks and look-alike letters show) with the stand-in the call goes
/// back by in later requests ([`wire_safe_tool_name`], free of the tool names `taken` says are
/// offered), so the model reads what it wrote, what is wrong with it and the name its call then
/// shows under.
pub(crate) fn tool_not_found(name: &str, taken: impl Fn(&str) -> bool) -> AgentError {
    if is_wire_tool_name(name) {
        return AgentError::of(codes::TOOL_NOT_FOUND, format!("Tool not found: {name}"));
    }
    let count = name.chars().count();
    let shown: String = name.chars().take(SHOWN_NAME_CHARS).collect();
    let cut = if count > SHOWN_NAME_CHARS { format!("… ({count} characters)") } else { String::new() };
    AgentError::of(
        codes::TOOL_NOT_FOUND,
        format!(
            "Tool not found: {shown:?}{cut}, a name model APIs refuse (only ASCII letters, digits, '_' and '-', \
             1 to {MAX_TOOL_NAME_CHARS} of them); the call goes back in the conversation as {:?}",
            wire_safe_tool_name(name, taken)
        ),
    )
}

/// The text of a caught panic, without the secrets registered with the process logger (a
/// panic's text may hold anything it formatted, an API key included).
pub(crate) fn panic_message(panic: &Box<dyn std::any::Any + Send>) -> String {
    match crate::logging::panic_text(panic.as_ref()) {
        Some(text) => format!("executor panicked: {text}"),
        None => "executor panicked".to_string(),
    }
}

/// The longest tool name OpenAI-compatible APIs accept.
pub const MAX_TOOL_NAME_CHARS: usize = 64;

/// The most characters of a name an error message quotes.
const SHOWN_NAME_CHARS: usize = 80;

/// What a call of an empty name goes back by in requests ([`wire_safe_tool_name`]).
pub(crate) const EMPTY_TOOL_NAME_STAND_IN: &str = "unknown_tool";

/// Whether `c` may be in a tool name model APIs accept.
fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == '-'
}

/// Whether model APIs accept `name` as a tool's or a call's name in a request: OpenAI's
/// `^[a-zA-Z0-9_-]{1,64}$`, which the compatible providers follow (OpenAI answers 400 to a request
/// whose history holds a call by any other name).
pub(crate) fn is_wire_tool_name(name: &str) -> bool {
    !name.is_empty() && name.len() <= MAX_TOOL_NAME_CHARS && name.chars().all(is_name_char)
}

/// The name a recorded call of `name` goes by in requests: `name` itself when model APIs accept
/// it ([`is_wire_tool_name`]: every registered tool's name is one), else a stand-in they accept,
/// each character they refuse replaced by `_` and cut to [`MAX_TOOL_NAME_CHARS`]
/// (`functions.query_order` -> `functions_query_order`), and [`EMPTY_TOOL_NAME_STAND_IN`] for an
/// empty name. A stand-in that is `taken` (a tool of the request goes by it: `query order` ->
/// `query_order`) gets the first suffix `_1`, `_2`... that makes it free, cut to fit in
/// [`MAX_TOOL_NAME_CHARS`]: the history never shows a real tool's call answered `tool_not_found`.
/// A model that calls a tool by such a name is answered `tool_not_found` (which quotes the name as
/// written, [`tool_not_found`]); the history keeps the name as written, and only the requests
/// carry the stand-in, else every later request of the session would be refused.
pub(crate) fn wire_safe_tool_name<'a>(name: &'a str, taken: impl Fn(&str) -> bool) -> Cow<'a, str> {
    if is_wire_tool_name(name) {
        return Cow::Borrowed(name);
    }
    let stand_in: Cow<'_, str> = if name.is_empty() {
        Cow::Borrowed(EMPTY_TOOL_NAME_STAND_IN)
    } else {
        Cow::Owned(
            name.chars().take(MAX_TOOL_NAME_CHARS).map(|c| if is_name_char(c) { c } else { '_' }).collect(),
        )
    };
    if !taken(&stand_in) {
        return stand_in;
    }
    // A request names finitely many tools: some suffix is free. The stand-in is ASCII, so its
    // characters are its bytes.
    let mut n = 1usize;
    loop {
        let suffix = format!("_{n}");
        let mut candidate = stand_in[..stand_in.len().min(MAX_TOOL_NAME_CHARS - suffix.len())].to_string();
        candidate.push_str(&suffix);
        if !taken(&candidate) {
            return Cow::Owned(candidate);
        }
        n += 1;
    }
}

/// Refuses a name the model's API would refuse in every request (OpenAI's `^[a-zA-Z0-9_-]{1,64}$`,
/// which the compatible providers follow), naming the first offending character.
fn check_name(name: &str) -> Result<(), AgentError> {
    let shown: String = name.chars().take(SHOWN_NAME_CHARS).collect();
    if let Some(c) = name.chars().find(|c| !is_name_char(*c)) {
        return Err(AgentError::of(
            codes::TOOL_NAME_INVALID,
            format!(
                "Tool name {shown:?} has the character {c:?}: model APIs accept only ASCII letters, digits, '_' and '-'"
            ),
        ));
    }
    if name.len() > MAX_TOOL_NAME_CHARS {
        return Err(AgentError::of(
            codes::TOOL_NAME_INVALID,
            format!(
                "Tool name {shown:?} has {} characters: model APIs accept at most {MAX_TOOL_NAME_CHARS}",
                name.len()
            ),
        ));
    }
    Ok(())
}
