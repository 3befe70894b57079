/*
 * Declarations of the native module libarkagent.so (src/napi of the arkagent crate).
 * Exactly the module's exports: tests/node/exports.test.mjs compares the names declared with
 * `export declare` here against the loaded module, both ways.
 *
 * Errors: every failure is an Error with two extra string properties, `code` (the stable
 * snake_case code of src/error.rs) and `layer` (config, decode, tool, cancelled, runtime,
 * provider, persistence, internal). A Rust panic becomes code `internal_panic`. Arguments of the
 * wrong type (a missing field, a string where a function is expected) are refused before that by
 * the binding layer with its own Error (code 'InvalidArg', no layer); the types below rule them out.
 * Dynamic JSON (schemas, JSON content, metadata) crosses as JSON text.
 */

/** A tool definition. */
export interface ToolDefinitionObject {
  /** The name the model calls (not blank, unique in the registry). */
  name: string;
  /** What the tool does; the model decides from this. */
  description: string;
  /** The JSON Schema of the arguments, as JSON text (an object schema, whitelisted keywords). */
  parametersJson: string;
  /** 'safe' (default), 'sensitive' or 'dangerous'. */
  riskLevel?: string;
  /** Running the call twice has the effect of once (default false). */
  idempotent?: boolean;
  /** The executor's timeout in ms, a whole number from 1 to 86400000 (default: the registry's defaultTimeoutMs). */
  timeoutMs?: number;
}

/** One output part: { type: 'text', text } or { type: 'json', json: '<JSON text>' }. */
export interface ContentPartObject {
  type: string;
  text?: string;
  json?: string;
}

/** A tool result. Errors are results too (isError). */
export interface ToolResultObject {
  contents: Array<ContentPartObject>;
  /** True when the call failed (default false). */
  isError?: boolean;
  /** True when the run should end after this batch (default false). */
  stop?: boolean;
  /** App data, not shown to the model: a JSON object as text. */
  metadataJson?: string;
}

/** A tool call as the model produced it. */
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
  /** The session metadata: a JSON object as text. */
  metadataJson: string;
  /** Cancelled when the call is cancelled or times out (reason 'timeout'). */
  signal: CancellationHandle;
}

/**
 * An executor: gets the validated arguments as JSON object text and the context; returns a
 * ToolResultObject or a Promise of one. A throw or a rejection becomes tool_execution_failed,
 * undefined or a wrong shape tool_result_invalid, no answer within the timeout tool_timeout.
 */
export type ToolExecutorFunction =
  (argumentsJson: string, context: ToolContextObject) => ToolResultObject | Promise<ToolResultObject>;

/** Options of new ToolRegistry(). */
export interface ToolRegistryOptions {
  /** Timeout of executors whose definition has none, 1 to 86400000 ms (default 60000). */
  defaultTimeoutMs?: number;
  /** Size limit of a call's arguments text in bytes (default 1048576). */
  maxArgumentBytes?: number;
  /** Nesting limit of a call's arguments (default 64). */
  maxArgumentDepth?: number;
}

/** Options of ToolRegistry.execute(): the context the executor sees. */
export interface ExecuteOptions {
  sessionId?: string;
  batchCallId?: string;
  /** A JSON object as text. */
  metadataJson?: string;
}

/** The crate version. */
export declare function version(): string;

/** The RFC 8785 canonical form of a JSON text. Throws json_invalid (layer decode). */
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
  /** Calls callback(reason) once when cancelled (soon, if it already is); never keeps the process alive. */
  onCancel(callback: (reason: string) => void): void;
}

/** The tools of an app. */
export declare class ToolRegistry {
  constructor(options?: ToolRegistryOptions);
  /** Throws tool_name_empty, tool_name_duplicate, schema_* or config_invalid. */
  register(definition: ToolDefinitionObject, executor: ToolExecutorFunction): void;
  /** Removes a tool; returns whether it was there. */
  unregister(name: string): boolean;
  /** The registered names, in registration order. */
  names(): Array<string>;
  /** The definitions as a JSON array (name, description, parameters, risk_level, idempotent, timeout). */
  definitionsJson(): string;
  /**
   * Runs one call through the four gates (registered, arguments are a JSON object, schema, not
   * cancelled) and the executor. Rejects with the coded error of the gate or the executor.
   */
  execute(call: ToolCallObject, signal?: CancellationHandle, options?: ExecuteOptions): Promise<ToolResultObject>;
}
