/*
 * Declarations of the native module libarkagent.so (src/napi of the arkagent crate).
 * Exactly the module's exports: tests/node/exports.test.mjs compares the names declared with
 * `export declare` here against the loaded module, both ways.
 *
 * Errors: every failure is an Error with two extra string properties, `code` (the stable
 * snake_case code of src/error.rs) and `layer` (config, decode, tool, cancelled, runtime,
 * provider, persistence, internal). A Rust panic becomes code `internal_panic`; one in the module
 * while it calls an app function (an executor, a hook, the policy, the listener, an onCancel
 * callback) is a failure of that call instead, handled as a throw of the function would be (an
 * executor's tool_execution_failed, a beforeToolCall's or afterToolCall's hook_failed, the policy's
 * fail-closed confirmation, a dropped event; tests/node/panic_js_thread.test.mjs). An argument of
 * the wrong type or shape (a missing field, a string where a function is expected, an instance of
 * another class) is refused before the call does anything, with code `argument_invalid` (layer
 * config), thrown (also by the methods that return a Promise: the argument is read before one is
 * made); the types below rule them out (tests/node/arguments.test.mjs calls every export wrongly).
 * So is a class's constructor called without `new` (or on an object already built): nothing is made.
 * So is an id holding a lone UTF-16 surrogate (a session id, an approval id, a metadata key, a tool
 * name, a call's id and name, execute's sessionId and batchCallId), with a message naming it: read
 * as UTF-8 it would become U+FFFD and name what another id names (tests/node/surrogates.test.mjs).
 * In any other string a lone surrogate reads as U+FFFD, on ArkVM as on Node (src/napi/text.rs); a
 * refused element of an array names its index (`excludedNames[2]: ...`, `contents[1].text: ...`).
 * Dynamic JSON (schemas, JSON content, metadata) crosses as JSON text; in it, the \u escape
 * JSON.stringify writes for a lone surrogate (a string cut inside an emoji) reads as U+FFFD too, as
 * it does in a model's answer (two halves of an emoji cut across two chunks of streamed text are
 * joined).
 *
 * Memory: an Agent or a ToolRegistry keeps the functions given to it (executors, hooks, the policy,
 * the listener) for as long as it lives, through native references the GC does not trace. A function
 * that references its own Agent or ToolRegistry (directly or through what it captures) therefore
 * keeps it, with its sessions, in memory for good; dropped otherwise, it is collected.
 */

/**
 * A tool definition. Like every options object of the module, it may have no other key (one
 * whose value is undefined counts as absent): a misspelt one (risklevel) is config_invalid naming
 * it and the key it is nearest to.
 */
export interface ToolDefinitionObject {
  /**
   * The name the model calls: 1 to 64 ASCII letters, digits, '_' or '-' (what model APIs accept;
   * tool_name_empty / tool_name_invalid otherwise), unique in the registry.
   */
  name: string;
  /** What the tool does; the model decides from this. */
  description: string;
  /**
   * The JSON Schema of the arguments, as JSON text: an object schema ("type": "object" at the
   * root), compiled at registration and enforced before the executor runs. Supported keywords (each
   * fully enforced, JSON Schema 2020-12 semantics): `type` (a name or an array of names),
   * `properties`, `required`, `additionalProperties` (a boolean or a schema), `items` (one schema
   * for every item), `minItems`, `maxItems`, `uniqueItems`, `enum`, `const`, `anyOf`, `minimum`,
   * `maximum`, `exclusiveMinimum`, `exclusiveMaximum`, `multipleOf`, `minLength`, `maxLength` (in
   * code points), `pattern` (ECMA-262, not anchored), and the annotations `description`, `title`
   * and `default`; a root `$schema` is accepted and ignored, and true / false may stand for a
   * subschema. Any other keyword at any depth (`oneOf`, `format`, `$ref`, `items` as an array...)
   * is refused at registration with schema_unsupported_keyword, naming the keyword and where it is.
   * Text that is not JSON, or that names a key twice in one object, is schema_invalid_root; more
   * than 64 subschemas deep, or more than 128 JSON levels, schema_too_deep.
   *
   * The model is sent this text, compacted (whitespace outside strings dropped), with its keys in
   * the order written at every level: models tend to fill the arguments in the order of
   * `properties`, so put e.g. a "reasoning" property before "answer" on purpose. definitionsJson,
   * and the definition a hook or the approval policy is given, show it the same way. Validation
   * reads the parsed schema: the order never changes what is accepted.
   */
  parametersJson: string;
  /** 'safe' (default), 'sensitive' or 'dangerous'. */
  riskLevel?: string;
  /** Running the call twice has the effect of once (default false). */
  idempotent?: boolean;
  /**
   * The executor's timeout in ms, a whole number from 1 to 86400000 (default: the registry's
   * defaultTimeoutMs; for Agent.registerTool, the agent's toolTimeoutMs).
   */
  timeoutMs?: number;
}

/**
 * One output part: { type: 'text', text } or { type: 'json', json: '<JSON text>' }. Another key
 * (one whose value is undefined counts as absent) makes the result tool_result_invalid, naming it.
 */
export interface ContentPartObject {
  type: string;
  text?: string;
  json?: string;
}

/**
 * A tool result. Errors are results too (isError). An executor's result with another key (a
 * misspelling such as iserror or the state's is_error; undefined counts as absent) is
 * tool_result_invalid naming it and the key it is nearest to, never read as a success.
 */
export interface ToolResultObject {
  contents: Array<ContentPartObject>;
  /** True when the call failed (default false). */
  isError?: boolean;
  /** True when the run should end after this batch (default false). */
  stop?: boolean;
  /** App data, not shown to the model: a JSON object as text. */
  metadataJson?: string;
}

/**
 * A tool call as the model produced it. Given to ToolRegistry.execute, another key rejects with
 * config_invalid naming it and the key it is nearest to (argument: did you mean arguments?).
 */
export interface ToolCallObject {
  id: string;
  name: string;
  /** The raw arguments text. */
  arguments: string;
}

/** What an executor gets besides its arguments. */
export interface ToolContextObject {
  sessionId: string;
  callId: string;
  batchCallId: string;
  /** The schema version of the session state (ReadonlyAgentState.schemaVersion). */
  schemaVersion: number;
  /** The session metadata: a JSON object as text. */
  metadataJson: string;
  /** Cancelled when the call is cancelled or times out (reason 'timeout'). */
  signal: CancellationHandle;
}

/**
 * An executor: gets the validated arguments as JSON object text and the context; returns a
 * ToolResultObject or a Promise of one. A throw or a rejection with a domain error (an object whose
 * `code` is a stable code: snake_case /^[a-z][a-z0-9_]*$/, at most 64 characters, e.g. the
 * bindings' ArkAgentError) becomes that code (layer tool) with the error's message (`<code> (no
 * message)` when it has no non-empty one and its toString says nothing more); any other throw
 * or rejection becomes tool_execution_failed; undefined or a wrong shape tool_result_invalid (also a
 * json part or metadataJson nesting deeper than 64 levels), no answer within the timeout tool_timeout.
 * The timeout counts from when the call is made, including any wait for the JS thread: a call that
 * times out or is cancelled while the thread is busy (the app's own synchronous work, another
 * executor's) is never started, so the tool does not act after the model was told it did not: a
 * timeout then is tool_not_started ("the tool did not run": calling it again is safe) rather than
 * tool_timeout (whose message says it may or may not have taken effect), whichever limit ends it
 * (the executor's own, or the run's toolTimeoutMs, which words it without "executor of"). The
 * checks before the executor (the arguments against the schema) have the same time of their own,
 * the executor's counting from when they passed: arguments a slow schema pattern could not check
 * in it are tool_not_started too, the executor never called.
 */
export type ToolExecutorFunction =
  (argumentsJson: string, context: ToolContextObject) => ToolResultObject | Promise<ToolResultObject>;

/** Options of new ToolRegistry(); another key is config_invalid (as for ToolDefinitionObject). */
export interface ToolRegistryOptions {
  /** Timeout of executors whose definition has none, 1 to 86400000 ms (default 60000). */
  defaultTimeoutMs?: number;
  /** Size limit of a call's arguments text in bytes (default 1048576). */
  maxArgumentBytes?: number;
  /** Nesting limit of a call's arguments (default 64; more than 128 levels are refused whatever it says). */
  maxArgumentDepth?: number;
}

/** Options of ToolRegistry.execute(): the context the executor sees; another key rejects with config_invalid. */
export interface ExecuteOptions {
  sessionId?: string;
  batchCallId?: string;
  /** A JSON object as text. */
  metadataJson?: string;
}

/** The crate version. */
export declare function version(): string;

/**
 * The RFC 8785 canonical form of a JSON text. Throws json_invalid (layer decode), also for an object
 * with a name twice (RFC 8785 takes I-JSON), and json_too_deep past 128 levels.
 */
export declare function canonicalJson(text: string): string;

/** A cancellation signal shared between ArkTS and the runtime. */
export declare class CancellationHandle {
  constructor();
  /** Cancels; the first reason wins (default 'cancelled by the app'). */
  cancel(reason?: string): void;
  /** True once cancelled. */
  get cancelled(): boolean;
  /** The reason, once cancelled (a call's signal reports the reason of the signal it derives from). */
  get reason(): string | null;
  /**
   * Calls callback(reason) once when cancelled (soon, if it already is); never keeps the process alive.
   * A throw, or an async callback's rejection (logged), is contained.
   */
  onCancel(callback: (reason: string) => void): void;
}

/** The tools of an app. */
export declare class ToolRegistry {
  constructor(options?: ToolRegistryOptions);
  /**
   * Throws tool_name_empty, tool_name_invalid, tool_name_duplicate, schema_* or config_invalid;
   * tool_name_reserved for delegate_task, the delegation's own tool, as Agent.registerTool refuses
   * it (so no registry holds one for copyInto to carry). The schema goes to the model as definition.parametersJson was written, keys in their order
   * (see ToolDefinitionObject.parametersJson).
   */
  register(definition: ToolDefinitionObject, executor: ToolExecutorFunction): void;
  /** Removes a tool; returns whether it was there. */
  unregister(name: string): boolean;
  /**
   * Copies every tool into target (executors shared), after target's own. Throws
   * tool_name_duplicate when target already has one of the names; target is then unchanged.
   */
  copyInto(target: ToolRegistry): void;
  /** As copyInto, leaving out the named tools (names not registered are ignored). */
  copyIntoExcluding(target: ToolRegistry, excludedNames: Array<string>): void;
  /** The registered names, in registration order. */
  names(): Array<string>;
  /**
   * The definitions as a JSON array (name, description, parameters, risk_level, idempotent, timeout
   * when set); parameters as parametersJson was written, keys in their order, compacted.
   */
  definitionsJson(): string;
  /**
   * Runs one call through the four gates (registered, arguments are a JSON object, schema, not
   * cancelled) and the executor. Rejects with the coded error of the gate or the executor, or
   * config_invalid for a key the call or the options do not have, or an options.metadataJson that
   * is not a JSON object.
   */
  execute(call: ToolCallObject, signal?: CancellationHandle, options?: ExecuteOptions): Promise<ToolResultObject>;
}

/**
 * Options of new Agent(). Numbers are whole and positive unless said otherwise. Another key, here
 * or in loopDiagnosis, is config_invalid naming it and the key it is nearest to (maxRound: did you
 * mean maxRounds?), so a misspelt option never silently keeps its default; undefined counts as absent.
 */
export interface AgentConfigObject {
  /**
   * 'openai', 'deepseek', 'zhipu', 'qwen', 'moonshot', 'custom' (any OpenAI-compatible gateway,
   * Pangu included; needs baseUrl), or 'scripted' (offline: replays scriptJson). Also accepted:
   * 'glm' and 'bigmodel' (zhipu), 'dashscope' (qwen), 'kimi' (moonshot), 'pangu' (custom).
   */
  provider: string;
  /**
   * Overrides the preset's base URL (required for 'custom'). Plain http:// only to loopback unless
   * allowInsecureHttp; credentials in the URL (user:password@) are refused (config_invalid).
   * '/chat/completions' is added to its path, before a query, which is kept ('?api-version=...');
   * a '#fragment' or a path already ending in '/chat/completions' is refused (config_invalid
   * naming baseUrl).
   */
  baseUrl?: string;
  /** The model name (required except for 'scripted'). */
  model?: string;
  /**
   * Lives only inside the native provider: never in state, events, logs, errors or ToolContext. A key
   * with a line break, tab, NUL or another control character, with whitespace around it, blank
   * (only whitespace: give none instead), or with anything but visible ASCII ('!' to '~') inside it
   * (a space, a zero-width space or byte order mark from a copy, a look-alike letter) makes the
   * constructor throw config_invalid naming apiKey and saying what kind of character and where (not
   * the key): a copy-paste slip, which the provider would answer with a 401. Required (the constructor throws
   * config_invalid naming apiKey without one) for a preset's own cloud endpoint, which refuses
   * every request without it; a baseUrl of its own (a local server, a gateway) may go without.
   */
  apiKey?: string;
  /**
   * For 'scripted': a JSON array of model answers replayed in order, each
   * {"content"?: string, "reasoning_content"?: string, "tool_calls"?: [{"id","name","arguments"}]}.
   * One queue for the agent and its sub-agents' workers: each model request, whoever makes it, takes
   * the next answer, so workers of delegations running in parallel take theirs in the order they ask
   * (not fixed: script parallel delegations with interchangeable answers, or maxParallelTools: 1).
   */
  scriptJson?: string;
  /**
   * Directory of the session states (a directory per session; created with its parents when missing;
   * a relative path is taken from the process's working directory when the Agent is made, so give an
   * absolute one, e.g. under the ability's filesDir); omitted: kept in memory only, and nothing survives
   * the app being killed. The constructor throws config_invalid for an empty name, one holding a NUL or
   * one naming an existing file, and argument_invalid for one holding a lone UTF-16 surrogate
   * (tests/node/agent_state_dir.test.mjs). File work runs on at most 16 native threads shared by all
   * Agents of the process (more runs at once queue for them), beside the module's two runtime
   * threads, for the life of the process (Workers that load the module and end included); a run
   * waiting on the app (its policy, hooks or tools) holds none.
   */
  stateDir?: string;
  /**
   * A system message put first in a new session; empty or only whitespace (invisible characters
   * included: Unicode's Default_Ignorable_Code_Point set, such as U+200B..U+200F, U+2060..U+206F,
   * U+FEFF, U+00AD, U+3164, variation selectors, tag characters): none (not sent).
   */
  systemPrompt?: string;
  /** Model rounds per run before the fixed fallback answer (default 10). */
  maxRounds?: number;
  /** Calls of an all-safe batch run at once (default 4). */
  maxParallelTools?: number;
  /** Per-call timeout unless a definition sets its own, and the timeout of each hook call (default 60000 ms). */
  toolTimeoutMs?: number;
  /**
   * Stream the model's answer as events (default true). false: no text_delta, reasoning_delta or
   * tool_call_* events; the text arrives whole in run_finished's final_text (RunOutcome.finalText),
   * each call's result in its tool_result event. (A model that answers only streamed requests, the
   * 'qwen' preset's thinking-only models, is still asked with a stream, read whole.)
   */
  streaming?: boolean;
  /**
   * Sampling temperature, 0 to 2. Omitted: the preset's default (0.2 when tools are present; none
   * for 'moonshot' and for OpenAI's o-series and gpt-5 models, which refuse any value but their own).
   * null: no temperature is sent at all (the model's own default), for models that refuse one.
   */
  temperature?: number | null;
  /** Completion token limit, of every request the agent sends (the loop diagnosis's too). */
  maxTokens?: number;
  /** Allow plain http:// to hosts other than loopback (default false). */
  allowInsecureHttp?: boolean;
  /** Extra trusted root certificates, PEM text (added to the bundled roots; no certificate in it: provider_tls). */
  extraRootsPem?: string;
  /** Loop detector window (default 5). */
  loopWindow?: number;
  /** Longest short cycle looked for, a loop after three whole turns (default 3; 1 = off; at most 3). */
  loopMaxCyclePeriod?: number;
  /** Register the delegate_task tool (sub-agents; default false). */
  enableDelegation?: boolean;
  /**
   * The largest tool result recorded, in bytes: its texts, JSON parts and metadata as compact JSON,
   * counted after afterToolCall (which may shrink it) (whole, >= 1; default 1048576). A larger one is
   * recorded as the error tool_result_too_large instead (the call's result to the model, the state
   * and the tool_result event), so it is neither saved nor sent with every later request. A larger
   * error result (json_invalid, tool_execution_failed...) keeps its code and metadata, its text cut
   * to fit after its `error [code]: ` (what tells the model the failure; an executor's own text
   * without one is cut after the `error: ` the model reads before it) and ended by
   * `… [N more bytes cut]` (a limit under a few hundred bytes may be passed by that code, the
   * metadata's code, layer and approval id and the note alone, by at most 346 bytes in all; the
   * tool_result_too_large error itself is cut so under a limit shorter than its message). The
   * result a beforeToolCall deny or the approval policy's deny gives a call is held to this limit
   * the same way: cut, not refused (a user's deny or dismiss reason over it is refused instead).
   */
  maxResultBytes?: number;

  // Provider options and history trimming.
  /**
   * Approximate token budget of the history sent with each request: the oldest messages are left
   * out of the request (the state keeps them) until it fits; system messages, the run's question
   * and the last user message always stay, a tool call never loses its result. Omitted: the whole history is sent.
   */
  contextBudgetTokens?: number;
  /**
   * Send stream_options {include_usage: true} on streamed requests (default true). false for
   * gateways that reject the parameter; token usage is then only what the provider reports anyway.
   */
  streamUsage?: boolean;
  /**
   * Send the assistant's reasoning_content back: of every message that called tools (every turn;
   * empty when it has none) and of the current turn ('moonshot': of every message). Default: the preset's (true for
   * 'deepseek', 'zhipu' and 'moonshot', whose thinking models need it; false elsewhere, where it
   * may be rejected).
   */
  sendReasoningContent?: boolean;
  /**
   * tool_choice of every request with tools: 'auto', 'none', 'required', or any other text as the
   * name of the tool the model must call. Omitted: not sent (the provider's default, auto).
   * 'zhipu' only accepts 'auto': for 'none' no tools are sent (the model has nothing to call),
   * 'required' and a tool name are left out. 'moonshot' sends each Kimi model what it takes (README,
   * provider presets): 'required' only to kimi-k3, a tool name as 'required' there. A tool name
   * must be registered when the agent has tools: run() and resume() reject with config_invalid
   * otherwise (dismiss(), which asks no model, does not), and a run during which it is unregistered
   * ends 'failed' with config_invalid before its next request (the history is kept). A sub-agent's worker asks without a tool
   * name it does not have (delegate_task itself, or a tool its factory took away).
   */
  toolChoice?: string;
  /**
   * parallel_tool_calls sent with every request that has tools: true lets the model call several
   * tools in one answer where the provider's default is one, false asks for one at
   * a time. Omitted: not sent (the provider's default).
   */
  parallelToolCalls?: boolean;
  /**
   * Also ask the agent's own model (same provider, endpoint, key, model name and maxTokens; no
   * tools, not streamed) whether the session is stuck in a loop, after the tool batches of the scheduled rounds.
   * A verdict {"is_loop": true, "confidence" > minConfidence} ends the run 'loop_detected' (errorCode
   * loop_detected, the confidence and reason in errorMessage); a failed or unreadable diagnosis counts
   * as no loop. The tokens a diagnosis uses count in the session's usage (usageJson, run_finished's
   * "usage"), an unreadable answer's too. With 'scripted', a diagnosis takes the next scripted
   * answer. Omitted: never asked.
   * Not an object, or a field not a number: argument_invalid naming it ('loopDiagnosis.firstRound:
   * expected a number, got a string'); a bad value: config_invalid naming the field.
   */
  loopDiagnosis?: LoopDiagnosisObject;

  // Provider timeouts (HTTP; checked for 'scripted' too). Each is a whole number of ms from 1 to
  // 86400000, else config_invalid naming it. Omitted: the model's default. A limit set above the
  // one that bounds it (firstByteTimeoutMs or idleTimeoutMs above the total, connectTimeoutMs above
  // the first byte limit; set or default) is config_invalid naming both: it could never be reached.
  // A default above a lower limit that is set is lowered to it (totalTimeoutMs: 30000 alone makes
  // first byte and idle 30000 too). A limit hit fails the run with provider_timeout.
  /** TCP + TLS set-up of each attempt (default 10000 ms). */
  connectTimeoutMs?: number;
  /**
   * From sending a request to the response head, connecting included, per attempt (default 60000
   * ms; for OpenAI's reasoning models, o1/o3/o4-mini and gpt-5 but not gpt-5-chat, the total, as
   * they send nothing while they reason: there it follows totalTimeoutMs). Raise it for a slow
   * model or gateway; with streaming: false the head comes only once the whole answer is ready.
   * A streamed request that reaches it is retried (within totalTimeoutMs); a non-streamed one is not.
   */
  firstByteTimeoutMs?: number;
  /**
   * Longest silence between two chunks of the answer (default 60000 ms; the total for OpenAI's
   * reasoning models, following totalTimeoutMs). SSE keep-alive comments count as data.
   */
  idleTimeoutMs?: number;
  /** The whole model call: every attempt, backoff, and the whole answer or stream (default 600000 ms). */
  totalTimeoutMs?: number;
  /**
   * Once the answer's finish reason has arrived, how long the rest of the stream (the usage
   * chunk, [DONE]) is waited for before the answer is kept without it; counted from the finish
   * reason and again from a usage report, never extended by keep-alives; default 5000 ms, the
   * idle limit if that is lower. Checked against no other limit. Not applied in a stream where
   * answer data followed a finish reason (its finish reasons come early): the idle limit applies
   * there.
   */
  afterFinishTimeoutMs?: number;
}

/** When the LLM loop diagnosis is asked and when it counts; each field has its default. */
export interface LoopDiagnosisObject {
  /**
   * The first model round asked about, counted over the session's model answers (the fixed answer
   * of a run that reached maxRounds is not one) (whole, >= 1; default 30).
   */
  firstRound?: number;
  /** Then every this many rounds; 0 asks at firstRound only (whole, >= 0; default 10). */
  every?: number;
  /** A loop counts only with a confidence strictly above this (0 <= minConfidence < 1; default 0.8). */
  minConfidence?: number;
}

/** How run() or resume() ended. */
export interface RunOutcomeObject {
  /**
   * 'completed', 'max_rounds', 'loop_detected', 'aborted', 'cancelled', 'failed', or
   * 'awaiting_approval' (suspended: decide with approve()/deny(), then resume()).
   */
  status: string;
  /** The final answer, if any. */
  finalText?: string;
  /** The error that ended a failed or aborted run: its code, layer and message. */
  errorCode?: string;
  errorLayer?: string;
  errorMessage?: string;
  /**
   * The frozen batch when status is 'awaiting_approval', as JSON (PendingApprovalBatch, snake_case).
   * A sub-agent's: worker_session names the worker; the items of workers frozen beside it (parallel
   * delegations) come in the same batch, after its own, with item_workers {approval_id: worker session}.
   */
  batchJson?: string;
  /**
   * Token usage of the session so far, as JSON {prompt_tokens, completion_tokens, total_tokens}.
   * Suspended on a sub-agent's batch: with what the sub-agents frozen on it used until then, and
   * the sub-agents frozen beside it (parallel delegations of the same batch), each counted once.
   */
  usageJson: string;
  /**
   * Why the model's last answer ended, when the provider said (an empty answer without a reason: 'stop'): 'stop', 'length' (cut off at the
   * token limit), 'content_filter', 'tool_calls'... A 'completed' run without finalText and with
   * 'length' or 'content_filter' was cut off or filtered. A 'max_rounds' run has its last answer's
   * ('tool_calls': the fixed fallback is no model answer). None when the run's last model request got
   * no answer (a 'failed' run whose request failed, a run cancelled during it): an earlier round's
   * reason is not told.
   */
  finishReason?: string;
}

/**
 * Receives every event of every run as JSON: {"type": "run_started" | "text_delta" |
 * "reasoning_delta" | "tool_call_started" | "tool_call_arguments_delta" | "tool_call_finished" |
 * "approval_required" | "tool_result" | "state_persisted" | "run_finished" | "worker_event",
 * "run_id": <the run's id, as its run_started gave it>, ...snake_case fields}. Every event names its
 * run, so the events of runs in flight together (on different sessions) can be told apart. A
 * sub-agent's events (the worker a delegate_task call runs) come wrapped: {"type": "worker_event",
 * "run_id": <the parent's run>, "call_id": <the parent's delegate_task call>, "session_id": <the
 * worker's session>, "event": <the worker's event, with the worker's run_id; a worker_event again for
 * a worker's worker>}, between the delegating call's start and its tool_result. A worker left frozen
 * (its last event approval_required) when its parent's run ends cancelled or aborted is ended
 * cancelled, never continued, and its run says so as any run ends: a run_started ("resumed": true)
 * then a run_finished ("status": "cancelled"), wrapped, before the parent's run_finished. A resumed run
 * reports first the results its batch already had, and some of those were reported before: the
 * calls that finished before a sub-agent froze the batch, or before the app was killed. Key a call's
 * result by its call_id (a second tool_result for a call carries the same result): a call_id is
 * unique in its session, as the model's ids are renamed (call_0_0, call_0_0_2...) when they repeat
 * an earlier answer's or one of the same answer. run_finished has
 * "status", "final_text" (null when none), "usage" ({prompt_tokens, completion_tokens, total_tokens}),
 * "finish_reason"? and, for a run that ended with an error (failed, aborted, loop_detected), "error":
 * {"layer", "code", "message"}: the outcome's errorLayer/errorCode/errorMessage (never the API key).
 * Every tool call of an answer gets exactly one tool_result, also one a cancel or an abort cut
 * short (right before run_finished, with the tool_interrupted answer the state gives it), except
 * the calls of a batch frozen for approval until a resume settles it. A call a stream announced
 * (tool_call_started) before the stream failed is no call of an answer: no tool_call_finished, no
 * tool_result, nothing runs it, and the run_finished that follows says 'failed'. A call whose arguments the
 * registry refuses for their size or depth (json_too_large, json_too_deep): its
 * tool_call_arguments_delta events stream the text as the model sent it, its tool_call_finished
 * carries "arguments": "{}" (as stateJson, the hooks and every later request do), and
 * its tool_result is that error; it never runs.
 * Order: see src/agent/events.rs. Its return value is ignored; a throw is contained, and so is the
 * rejection of an async listener's Promise (logged).
 */
export type AgentEventListener = (eventJson: string) => void;

/**
 * A hook: an object whose optional methods mirror AgentHook (all nine). Each may answer directly or
 * with a Promise; a throw, a rejection, a wrong shape or no answer within the hook timeout
 * (toolTimeoutMs) never escapes: a failing beforeToolCall answers the call with hook_failed, a
 * failing afterToolCall ends the run 'aborted' with hook_failed (its result never reaches the model),
 * a failing beforePersistState lets the save happen, a failing notification is logged. The timeout
 * counts from when the call is made, including any wait for the JS thread: a call that times out or
 * whose run is cancelled while the thread is busy (the app's own synchronous work, a synchronous
 * executor) is never made, so a method is never called for a call, a save or a run the runtime has
 * gone on without it. A notification of a run already cancelled when it is due (onRunEnd with
 * 'cancelled', onRunStart of a run cancelled before it started) is made all the same, and not
 * waited for: the app hears how every run ended. A run suspended for approval has not ended:
 * onApprovalRequired tells it (no onRunEnd), and its resume calls onRunStart again. Every method gets the hook context first: contextJson =
 * {"session_id","run_id","round"} (round: the model round, 1-based; 0 before the first).
 * - beforeToolCall(contextJson, callJson, definitionJson | null) -> {action: 'proceed', argumentsJson?} |
 *   {action: 'deny', resultJson} | {action: 'defer', reason} | {action: 'abort', reason}
 * - afterToolCall(contextJson, callJson, resultJson) -> {action: 'proceed', resultJson?} | {action: 'stop'} |
 *   {action: 'abort', reason}, with injectJson?: a JSON array of messages to append after the batch's
 *   results (not with abort, which fails the hook naming it: the run ends before they are appended; a system message is kept as one
 *   in the state and sent as a user message, as strict providers refuse one anywhere but first)
 * - beforePersistState(contextJson, stateJson) -> 'persist' | 'skip' (a skip is ignored for terminal
 *   states and frozen batches, which are always saved)
 * - onRunStart(contextJson), beforeModelCall(contextJson, requestJson), afterModelResponse(contextJson,
 *   responseJson), onApprovalRequired(contextJson, batchJson), onRunEnd(contextJson, status, finalText | null),
 *   onError(contextJson, errorJson): notifications, answers ignored. requestJson = {"messages","tools",
 *   "tool_choice"?,"temperature"?,"max_tokens"?,"parallel_tool_calls"?}; errorJson = {"layer","code","message"}.
 *   onError hears every error that ends a run (a provider's, hook_aborted, hook_failed, loop_detected:
 *   before onRunEnd) and a failing beforeToolCall's (its call is answered, the run goes on).
 * An answer of undefined (a method that returns nothing, or resolves to nothing) changes nothing:
 * beforeToolCall and afterToolCall proceed with the call or result as it is, beforePersistState
 * persists. null is not nothing: it is a wrong shape, a failure as above. A method property that is
 * there but not a function makes addHook throw argument_invalid; a function (own or inherited) that
 * is no method but is spelt like one (beforeToolcall, onerror, afterToolCal) makes it throw
 * config_invalid naming it and the method meant, as it would never be called. Other keys (fields and
 * helpers of a class instance) are left alone.
 * A value is serialized only for the methods the object has.
 */
export interface AgentHookObject {
  onRunStart?: (contextJson: string) => void | Promise<void>;
  beforeModelCall?: (contextJson: string, requestJson: string) => void | Promise<void>;
  afterModelResponse?: (contextJson: string, responseJson: string) => void | Promise<void>;
  beforeToolCall?: (contextJson: string, callJson: string, definitionJson: string | null) =>
    HookDecisionObject | Promise<HookDecisionObject>;
  afterToolCall?: (contextJson: string, callJson: string, resultJson: string) =>
    HookDecisionObject | Promise<HookDecisionObject>;
  onApprovalRequired?: (contextJson: string, batchJson: string) => void | Promise<void>;
  beforePersistState?: (contextJson: string, stateJson: string) => string | Promise<string>;
  onRunEnd?: (contextJson: string, status: string, finalText: string | null) => void | Promise<void>;
  onError?: (contextJson: string, errorJson: string) => void | Promise<void>;
}

/**
 * A hook's answer (see AgentHookObject). A key it does not have (a misspelling such as
 * arguments_json), one the method does not read (injectJson from beforeToolCall, argumentsJson or
 * name from afterToolCall) or a rewrite its action does not read (argumentsJson or name but with
 * proceed; resultJson but with beforeToolCall deny or afterToolCall proceed) fails the hook
 * (hook_failed, naming the key, and for a key it does not have the one it is nearest to:
 * did you mean argumentsJson?) rather than being skipped: a rewrite that is not applied must not
 * pass for one. A key whose value is undefined is absent; reason is ignored where unused.
 */
export interface HookDecisionObject {
  action: string;
  argumentsJson?: string;
  /** beforeToolCall `proceed`: the rewritten call's tool name; another name than the call's is refused (hook_call_name_changed). */
  name?: string;
  /**
   * beforeToolCall `deny`, afterToolCall `proceed`: the call's result as JSON text, in either
   * spelling: the state's, as afterToolCall's resultJson argument and the ArkTS ToolResult.toJson()
   * write it ({"contents": [{"type": "text", "text"} | {"type": "json", "value": <any JSON>}],
   * "is_error"?, "stop"?, "metadata"?: {...}}), or an executor's, JSON.stringify of a
   * ToolResultObject ({"contents": [{"type": "text", "text"} | {"type": "json", "json": "<JSON text>"}],
   * "isError"?, "stop"?, "metadataJson"?: "<JSON object text>"}). Any other key, one field in both
   * spellings, or a part with another type's field fails the hook (hook_failed, naming it). A deny's
   * result (or its reason) over maxResultBytes is held to it as a tool's result is: an error cut to
   * fit, a success replaced by tool_result_too_large.
   */
  resultJson?: string;
  reason?: string;
  injectJson?: string;
}

/**
 * An app approval policy, consulted for each tool call after the beforeToolCall hooks.
 * callJson = {"id","name","arguments"} (the call as the hooks left it); definitionJson = the tool's
 * definition {"name","description","parameters","risk_level","idempotent","timeout"?}, or null for an
 * unknown tool. Answers (directly or with a Promise) one of: 'allow', 'deny', 'requireConfirmation'
 * (or 'require_confirmation'), or the JSON text {"action": one of those, "reason"?: string} with no
 * other key. deny: the call never runs and the model gets an error result (code tool_denied,
 * "denied by policy: <reason>", cut to maxResultBytes as an error result is); requireConfirmation: the whole batch freezes for the user (reason
 * shown in the pending item). A missing reason gets a default naming the tool.
 * Fails closed: a throw, a rejection, any other answer (undefined, an object, an unknown action, a
 * stray key) or no answer within the policy timeout makes the call need confirmation (reason
 * "approval_policy_failed: ..."), never allows it. A call of an unknown tool never needs
 * confirmation, whatever the policy answers or however it fails: nothing could run it, so the
 * registry answers it (tool_not_found). It runs on the JS thread; the run awaits its answer without
 * holding a native thread, so any number of runs may wait on it at once and it may await the agent's
 * other methods. Keep it quick: every run's policy and callbacks share the JS thread. The timeout counts from when the call is made, including any wait for the JS thread:
 * a call that times out or whose run is cancelled while the thread is busy is never made, so the
 * policy is never asked about a call already decided without it.
 */
export type ApprovalPolicyFunction =
  (callJson: string, definitionJson: string | null) => string | Promise<string>;

/** The agent: a model, tools, hooks, the approval policy and a state store. */
export declare class Agent {
  /**
   * Throws config_invalid (a message names the field), insecure_url, or provider_tls for an
   * extraRootsPem that holds no readable certificate.
   */
  constructor(config: AgentConfigObject);
  /**
   * As ToolRegistry.register: the schema goes to the model as definition.parametersJson was
   * written, keys in their order. Also throws tool_name_reserved for the name delegate_task, the
   * tool enableDelegation registers (with delegation on or off).
   */
  registerTool(definition: ToolDefinitionObject, executor: ToolExecutorFunction): void;
  /**
   * Removes a tool; returns whether it was there. Throws tool_name_reserved for delegate_task while
   * delegation is on (enableDelegation): nothing could register it again. Takes effect at once,
   * also for a batch under way (from an executor, a hook or the approval policy): a call that has
   * not passed its gate yet is answered tool_not_found and does not run; one registered anew
   * meanwhile is answered tool_not_run (neither its old executor nor the new, unchecked one runs);
   * a call already past its gate finishes. The calls of one parallel chunk (maxParallelTools above
   * 1) pass their gates side by side: an executor's change reaches its siblings only if they had
   * not passed theirs yet, which depends on timing; with maxParallelTools: 1 each call's gate comes
   * after the call before it, and sees the change.
   */
  unregisterTool(name: string): boolean;
  /** The registered tool names, in registration order. */
  toolNames(): Array<string>;
  /**
   * The registered tool definitions as a JSON array, in registration order (as
   * ToolRegistry.definitionsJson: name, description, parameters, risk_level, idempotent, timeout in ms).
   */
  definitionsJson(): string;
  /** Adds a hook after the others (hooks run in the order added). */
  addHook(hook: AgentHookObject): void;
  /**
   * Sets the event listener (replaces the previous one). It hears each run's events in order; run() and
   * resume() resolve once it was handed the run's last event, or after 5 s if it has not been by then (a
   * listener slower than the run: the rest follows). Events wait for a slow listener in memory, unbounded:
   * keep it quick (e.g. append text deltas to a buffer that the UI reads). null or undefined removes
   * the listener (and its hold on what it captures); a run going on hears nothing from its next event.
   * Each event goes to the listener set when the JS thread delivers it: once onEvent returns (even
   * called from inside the listener), the previous listener is called no more, and the events still
   * waiting for the JS thread go to the new one, in order (with none set, they are dropped).
   * Before a run calls the executors of a batch, it waits until the listener was handed the events
   * emitted so far (the answer's tool_call_finished, the state_persisted of the calls' started
   * records), at most 5 s: the listener hears them before any executor is called (a slow listener
   * delays the tools), and a cancel from it there stops the batch before it runs. A sub-agent's
   * executors may be called before the listener hears its worker_event events.
   */
  onEvent(listener: AgentEventListener | null | undefined): void;
  /**
   * Sets the approval policy (replaces the previous one; null restores the default: safe and unknown
   * tools allowed, sensitive and dangerous ones need confirmation). timeoutMs bounds each answer,
   * a whole number from 1 to 86400000 (default: toolTimeoutMs); otherwise throws config_invalid.
   * A policy that is neither a function nor null (an object with a decide method, a string) throws
   * argument_invalid.
   */
  setApprovalPolicy(policy: ApprovalPolicyFunction | null, timeoutMs?: number): void;
  /**
   * Runs on a new user message. Rejects only for approval_pending, invalid_state (a sub-agent's
   * worker session, listed in its parent's state workers: it takes no new message, its parent would
   * never read the answer; nothing was written), argument_invalid (an input that is empty or only
   * whitespace, invisible characters included (Unicode's Default_Ignorable_Code_Point set, such
   * as U+200B..U+200F, U+FEFF, U+00AD, U+3164): providers refuse a user message without text;
   * nothing was sent or written),
   * session_id_invalid, config_invalid (toolChoice names
   * a tool the agent does not have, while it has others) and persistence errors, among them
   * session_busy: another Agent object or process is writing this session (run, resume, decision);
   * nothing was done. Calls on one session through one Agent wait for each other, and hold it in the
   * order they were made even when not awaited (run, resume, dismiss, approve, deny, deleteSession:
   * approve() then resume() without await approves first; deleteSession() then run() deletes first;
   * on a new session, run() then approveAll() or dismiss() waits for the run and acts on the batch it froze on:
   * a call looks for its session only once the calls made before it are over). So an executor, hook or policy of a run must not await such
   * a call on that run's own session: it would wait for the run, which waits for it, until the
   * executor's or hook's timeout (call it without awaiting it, or from the approvalRequired event).
   * A session a crash or a kill left running (its state's status is 'running') takes a new message:
   * its unfinished calls are answered tool_interrupted first; resume() instead continues that run.
   * A sub-agent's worker session such a delegating call left running or awaiting approval is ended
   * then ('cancelled', with or without enableDelegation): nobody reads its answer, so it is not listed
   * interrupted and resume() does not run it; it is deleted with its parent.
   */
  run(sessionId: string, input: string, signal?: CancellationHandle): Promise<RunOutcomeObject>;
  /**
   * Continues a suspended run once every item is decided (or a run interrupted by a crash); session_busy as run.
   * A call of the batch that was to run without asking, whose tool is registered as dangerous by now (or which
   * the approval policy now asks about), does not run unasked: the run suspends again (status
   * 'awaiting_approval', approvalRequired) with that call pending and the decisions made kept.
   * That is the only re-check: the current beforeToolCall hooks are not asked about a batch frozen
   * before them, and a call the user approved runs though the current policy would deny it (the
   * current registry still gates it: an unregistered tool is answered tool_not_found).
   * A sub-agent's worker session runs as its delegation runs it: the worker's tools (no delegate_task) and depth.
   * Rejects with session_not_found (also when the batch mirrors a sub-agent's worker session that is gone:
   * nothing is written), approval_pending, invalid_state (nothing to resume, a worker session
   * while enableDelegation is off, or a batch frozen on a sub-agent's call while enableDelegation is
   * off: only delegation continues the sub-agent; nothing is written, and decisions made are kept
   * for an agent with enableDelegation to resume it), delegation_depth_exceeded.
   */
  resume(sessionId: string, signal?: CancellationHandle): Promise<RunOutcomeObject>;
  /**
   * Ends a suspended run without asking the model again, for a user who moved on instead of
   * deciding: every pending item is denied with reason, the batch's calls are answered (with a
   * denial none of them runs; only a batch the user had approved entirely runs) and the run
   * completes without asking the model, so the next run() starts from a valid history in which
   * the model reads the denials. A batch frozen on a sub-agent's call does not continue the
   * sub-agent: its calls not run yet are answered tool_not_run (finished ones keep their results),
   * and the sub-agent's session completes with the denial, without its model (no longer awaiting
   * approval: nobody would read its answer); so does every sub-agent frozen beside it (parallel
   * delegations of the same batch), what each used counted in the parent's usage once. The batch
   * offering several sub-agents' items is one batch: with a denial of any of them, no sub-agent
   * runs any call, not even one the user approved (answered tool_not_run with reason).
   * A batch approved entirely runs and may meet a new freeze: the outcome is then suspended. Rejects with no_pending_approval when nothing
   * awaits approval, session_not_found for a session that does not exist or when the batch mirrors a worker session that is gone. A worker session may be dismissed itself: it runs as resume() runs it (invalid_state and
   * delegation_depth_exceeded as there). A batch frozen on a sub-agent's call is refused with invalid_state
   * while enableDelegation is off, before any denial is written (as resume()).
   */
  dismiss(sessionId: string, reason: string, signal?: CancellationHandle): Promise<RunOutcomeObject>;
  /**
   * Approves one pending item (durable when this resolves); resolves to the batch JSON; session_busy as run.
   * Rejects with approval_already_decided when the item was decided. On a sub-agent's worker session the
   * decision also reaches the parent's batch that mirrors it (so a different decision there is refused), and
   * a resume() of the parent called after this one, even not awaited, sees it.
   */
  approve(sessionId: string, approvalId: string): Promise<string>;
  /**
   * Denies one pending item (durable when this resolves); resolves to the batch JSON; as approve() otherwise.
   * The reason goes to the model as the call's result: one longer than maxResultBytes (in UTF-8 bytes) rejects
   * with argument_invalid before anything is written, as it does for dismiss(). The recorded result
   * ("denied by user: <reason>" and its metadata) is cut to the maxResultBytes of the agent that resumes.
   */
  deny(sessionId: string, approvalId: string, reason: string): Promise<string>;
  /**
   * Approves every item of the batch still pending in one durable commit (all or none), with the outcome of
   * approve() on each in turn; resolves to the batch JSON (as it stands, nothing written, when no item is
   * pending); errors as approve(). Items a sub-agent's worker holds (a mirrored batch) are decided one by one
   * in the worker first, as approve() decides them.
   */
  approveAll(sessionId: string): Promise<string>;
  /** Denies every item of the batch still pending with reason, as approveAll() approves them; errors as deny(). */
  denyAll(sessionId: string, reason: string): Promise<string>;
  /**
   * The persisted state of a session as JSON (AgentState, snake_case), or null. A call that started
   * and never finished (the app was killed) shows its tool_interrupted result; while a run holds the
   * session (of this Agent, or of another Agent or process on the same stateDir), its running calls
   * show no result yet, and listSessionsJson's message_count counts the messages as shown here.
   */
  stateJson(sessionId: string): Promise<string | null>;
  /**
   * Sets one key of a session's app metadata (e.g. userId) to a JSON value given as text, or removes
   * the key when valueJson is 'null'; resolves once durable. Executors read it from the next run on in
   * context.metadataJson (ReadonlyAgentState.metadata); stateJson shows it. A missing session is
   * created (idle, no messages); removing a key that is not there creates no session and writes
   * nothing. Limits: a key of 1 to 128 bytes
   * without control characters; a value of at most 65536 bytes of compact JSON and 64 levels;
   * 262144 bytes for the whole metadata.
   * Rejects with metadata_key_invalid, json_invalid (also for an object with a key twice, as in
   * tool arguments) / json_too_deep / json_too_large (the value; the message names the key),
   * metadata_too_large, session_id_invalid, or session_busy while a run, resume or decision holds the
   * session (this Agent or another process; nothing is written: set it again once the run is over),
   * or invalid_state on a sub-agent's worker session whose parent session still names it (set it on
   * the parent; nothing is written). A session suspended for approval is not held, but one frozen on a
   * sub-agent's call, or stopped mid-batch by a killed app, is in the middle of a batch: invalid_state
   * (resume it first, or dismiss one frozen on a sub-agent; nothing is written). A bad key or
   * value is refused as such (its code above) whether or not the session is busy.
   * It takes the session's turn when called: a run(), resume() or decision called after it waits
   * for it, awaited or not (the run sees the value); so does another setMetadata on the session
   * (the changes apply in the order they were called, none is session_busy for another).
   * The reverse holds too: a run(), resume(), dismiss(), approve(), deny() or deleteSession() keeps
   * its place from the moment it is called, so a setMetadata called after it, before it settles
   * (awaited or not), rejects with session_busy and the run never sees that value. Set metadata
   * before run(), or await the run first.
   */
  setMetadata(sessionId: string, key: string, valueJson: string): Promise<void>;
  /**
   * The pending approval batch of a session as JSON, or null. A read: it does not wait for calls
   * made before it (an approve() not yet resolved may not show yet; await it first).
   */
  pendingApprovalJson(sessionId: string): Promise<string | null>;
  /**
   * The sessions the store holds, as a JSON array sorted by session id, one object per session with
   * snake_case keys: session_id; status (a run status, null when the session cannot be read);
   * approval_pending (a frozen batch has undecided items); interrupted (the run stopped part way, a
   * kill or a crash, and neither this Agent nor anyone else is running it: resume() continues it);
   * busy (another Agent or process on the same stateDir holds the session now, e.g. runs it: not
   * interrupted, and resume() rejects with session_busy until it lets go; a killed process lets go
   * at once, and so does an Agent of a Worker that is terminated (its runs are cancelled); looked at only for a run that stands part way, running or awaiting approval: a session
   * whose run ended is never busy); message_count;
   * updated_at_ms (last write, ms since the epoch, or null); title (the first user message on one
   * line, at most 60 characters, or null); last_message (the last user message or answer text, cut
   * the same way, or null: a chat list's preview line); run_error (null, or {layer, code, message}
   * of the error that ended the last run: failed, aborted...); parent_session (a sub-agent worker's parent, else null);
   * error (null, or {layer, code, message} of a session that cannot be read: state_corrupt,
   * state_version_unsupported...; it is listed all the same). Without includeWorkers (or false),
   * only conversations: sub-agent worker sessions are left out (but for a worker whose parent is gone, listed so it can be deleted). Reads only: no session is locked or
   * written. Throws argument_invalid (includeWorkers not a boolean); rejects with state_io.
   */
  listSessionsJson(includeWorkers?: boolean): Promise<string>;
  /**
   * Deletes a session with the sub-agent (delegate_task) sessions it ran; resolves to whether it
   * existed (a missing session is not touched; one that cannot be read, state_corrupt,
   * state_version_unsupported or state_io, is deleted too, its sub-agent sessions, which only its
   * state names, left and listed as workers whose parent is gone, as is a file or link standing where its directory
   * should be). Only files arkagent wrote are removed: in a stateDir the app shares, a directory
   * holding none of arkagent's files (snapshot-*.ark, journal-*.ark...) is no session (resolves
   * false, nothing touched), and the app's own files in a session's directory stay there, with the
   * directory. It takes its place on the session when called, as run() does, whether or not it
   * is awaited: a run(), resume() or decision called after it waits for it (deleteSession then
   * run() on the same id, neither awaited, deletes first and the run starts a new session), and a
   * setMetadata called after it, before it settles, rejects with session_busy; called after
   * setMetadata calls not settled yet, it waits for them. Rejects with session_busy when a run(),
   * resume(), dismiss(), approve(), deny() or deleteSession() of the session called before it has
   * not settled (run() then deleteSession() without await is always session_busy: cancel or
   * await the run first; nothing is deleted), or while another Agent or process is writing the
   * session; invalid_state for a worker session whose parent session still names it (delete the
   * parent).
   */
  deleteSession(sessionId: string): Promise<boolean>;
}
