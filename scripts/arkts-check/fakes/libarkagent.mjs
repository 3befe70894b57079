// A fake of the native module libarkagent.so for host tests of the ArkTS adapters: the Agent,
// ToolRegistry and CancellationHandle classes of
// arkts-bindings/src/main/cpp/types/libarkagent/index.d.ts, recording what the wrappers pass in
// and answering what a test sets. No runtime behind it.

function codedError(code, layer, message) {
  const e = new Error(message);
  e.code = code;
  e.layer = layer;
  return e;
}

/**
 * The definitions of registered tools (`{ definition, executor }` by name) as the native
 * definitionsJson() writes them: the core's serialised ToolDefinition (src/tool/definition.rs), in
 * registration order, `timeout` (ms) only when set.
 */
function definitionsJsonOf(tools) {
  return JSON.stringify([...tools.values()].map(({ definition: d }) => ({ name: d.name, description: d.description,
    parameters: JSON.parse(d.parametersJson), risk_level: d.riskLevel ?? 'safe', idempotent: d.idempotent ?? false,
    ...(d.timeoutMs === undefined ? {} : { timeout: d.timeoutMs }) })));
}

/**
 * One entry of a native listSessionsJson() with `fields` on top: every key the core's
 * SessionSummary writes (src/agent/sessions.rs), in its order, absent values null. A completed,
 * readable session by default.
 */
export function sessionSummaryJson(fields = {}) {
  return { session_id: 's', status: 'completed', approval_pending: false, interrupted: false, busy: false,
    message_count: 0, updated_at_ms: null, title: null, last_message: null, run_error: null, parent_session: null,
    error: null, ...fields };
}

export class CancellationHandle {
  #cancelled = false;
  #reason = null;
  #callbacks = [];

  cancel(reason = 'cancelled by the app') {
    if (this.#cancelled) return;
    this.#cancelled = true;
    this.#reason = reason;
    // Like the native handle: callbacks run soon, not inside cancel().
    for (const cb of this.#callbacks.splice(0)) queueMicrotask(() => cb(reason));
  }

  get cancelled() { return this.#cancelled; }

  get reason() { return this.#reason; }

  onCancel(callback) {
    if (this.#cancelled) queueMicrotask(() => callback(this.#reason));
    else this.#callbacks.push(callback);
  }
}

export class Agent {
  /** Every instance built, newest last. */
  static instances = [];

  constructor(config) {
    if (config.provider === 'custom' && config.baseUrl === undefined) {
      throw codedError('config_invalid', 'config', 'baseUrl is required for the custom provider');
    }
    this.config = config;
    this.tools = new Map();
    this.hooks = [];
    this.listener = null;
    this.policy = null;
    this.policyTimeoutMs = undefined;
    this.calls = [];
    /** What the async methods resolve to (or reject with, when an Error), by method name. */
    this.answers = {};
    /**
     * The sessions the store holds, for listSessionsJson (entries of sessionSummaryJson, in the
     * listing's order: by session id).
     */
    this.sessions = [];
    Agent.instances.push(this);
  }

  #answer(name, ...args) {
    this.calls.push([name, ...args]);
    const a = this.answers[name];
    return a instanceof Error ? Promise.reject(a) : Promise.resolve(a);
  }

  registerTool(definition, executor) {
    if (this.tools.has(definition.name)) {
      throw codedError('tool_name_duplicate', 'config', `tool ${definition.name} is already registered`);
    }
    this.tools.set(definition.name, { definition, executor });
  }

  unregisterTool(name) { return this.tools.delete(name); }

  toolNames() { return [...this.tools.keys()]; }

  addHook(hook) { this.hooks.push(hook); }

  onEvent(listener) { this.listener = listener; }

  /** The policy function last set (null: the default) and its timeout. */
  setApprovalPolicy(policy, timeoutMs) {
    this.policy = policy;
    this.policyTimeoutMs = timeoutMs;
  }

  run(sessionId, input, signal) { return this.#answer('run', sessionId, input, signal); }

  resume(sessionId, signal) { return this.#answer('resume', sessionId, signal); }

  dismiss(sessionId, reason, signal) { return this.#answer('dismiss', sessionId, reason, signal); }

  approve(sessionId, approvalId) { return this.#answer('approve', sessionId, approvalId); }

  deny(sessionId, approvalId, reason) { return this.#answer('deny', sessionId, approvalId, reason); }
  approveAll(sessionId) { return this.#answer('approveAll', sessionId); }
  denyAll(sessionId, reason) { return this.#answer('denyAll', sessionId, reason); }

  stateJson(sessionId) { return this.#answer('stateJson', sessionId); }

  setMetadata(sessionId, key, valueJson) { return this.#answer('setMetadata', sessionId, key, valueJson); }

  pendingApprovalJson(sessionId) { return this.#answer('pendingApprovalJson', sessionId); }

  deleteSession(sessionId) { return this.#answer('deleteSession', sessionId); }

  /**
   * As the native listing: `sessions` as JSON text, without the workers whose parent is listed
   * unless includeWorkers is true; an includeWorkers that is not a boolean (nor absent) is
   * refused with argument_invalid, as the native one does. An `answers.listSessionsJson` set (text, or an Error to reject
   * with) is answered instead.
   */
  listSessionsJson(includeWorkers) {
    if (includeWorkers !== undefined && includeWorkers !== null && typeof includeWorkers !== 'boolean') {
      return Promise.reject(codedError('argument_invalid', 'config', 'includeWorkers must be a boolean'));
    }
    if ('listSessionsJson' in this.answers) {
      return this.#answer('listSessionsJson', includeWorkers);
    }
    this.calls.push(['listSessionsJson', includeWorkers]);
    const listed = new Set(this.sessions.map((s) => s.session_id));
    const shown = includeWorkers === true ? this.sessions
      : this.sessions.filter((s) => s.parent_session === null || !listed.has(s.parent_session));
    return Promise.resolve(JSON.stringify(shown));
  }

  /**
   * The registered tools' definitions as the native definitionsJson() writes them (synchronous, as
   * the native method); an `answers.definitionsJson` text is answered instead.
   */
  definitionsJson() {
    this.calls.push(['definitionsJson']);
    return this.answers.definitionsJson ?? definitionsJsonOf(this.tools);
  }
}

export class ToolRegistry {
  /** Every instance built, newest last. */
  static instances = [];

  constructor(options) {
    this.options = options;
    this.tools = new Map();
    this.calls = [];
    /** What execute resolves to (or rejects with, when an Error). */
    this.answers = {};
    ToolRegistry.instances.push(this);
  }

  register(definition, executor) {
    // As the real module: the name is the delegation's, refused whatever the agent's config.
    if (definition.name === 'delegate_task') {
      throw codedError('tool_name_reserved', 'config', 'the tool name delegate_task is reserved for the delegation');
    }
    if (this.tools.has(definition.name)) {
      throw codedError('tool_name_duplicate', 'config', `Tool already registered: ${definition.name}`);
    }
    this.tools.set(definition.name, { definition, executor });
  }

  unregister(name) { return this.tools.delete(name); }

  names() { return [...this.tools.keys()]; }

  definitionsJson() { return definitionsJsonOf(this.tools); }

  copyInto(target) { this.copyIntoExcluding(target, []); }

  copyIntoExcluding(target, excludedNames) {
    if (!(target instanceof ToolRegistry)) throw new TypeError('target is not a ToolRegistry');
    this.calls.push(['copyIntoExcluding', target, excludedNames]);
    const chosen = [...this.tools.entries()].filter(([name]) => !excludedNames.includes(name));
    const dup = chosen.find(([name]) => target.tools.has(name));
    if (dup) throw codedError('tool_name_duplicate', 'config', `Tool already registered: ${dup[0]}`);
    for (const [name, tool] of chosen) target.tools.set(name, tool);
  }

  execute(call, signal, options) {
    this.calls.push(['execute', call, signal, options]);
    const a = this.answers.execute;
    return a instanceof Error ? Promise.reject(a) : Promise.resolve(a);
  }
}

export function version() { return '0.0.0-fake'; }
