//! A tool result is saved inside the journal's records, and serde_json reads back at most 128
//! levels: a result whose JSON nests deeper than `MAX_RESULT_DEPTH` (64) is refused where it enters
//! (an executor's: `tool_result_invalid`, the model reads the error; a hook's: `hook_failed`, which
//! aborts the run as any failed after-hook does), so
//! nothing is saved that cannot be read back. Before, a JSON part 124 levels deep was saved, then
//! its record could not be read: the finished call came back "interrupted" and ran again.

#[path = "support/runtime.rs"]
mod support;

use arkagent::agent::{AgentBuilder, EventLog, RunOutcome};
use arkagent::hook::{AfterToolCall, AfterToolCallAction, AgentHook, HookContext};
use arkagent::state::{FileStore, RunStatus, StateStore};
use arkagent::tool::{FnExecutor, ToolContext, ToolDefinition, ToolRegistry, ToolResult, MAX_RESULT_DEPTH};
use arkagent::ChatMessage;
use arkagent::{CancellationSignal, ToolCall};
use serde_json::{json, Map, Value};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use support::{answer, calls, Script};

/// `[[...[]...]]`, `depth` levels.
fn nested(depth: usize) -> Value {
    (1..depth).fold(json!([]), |inner, _| Value::Array(vec![inner]))
}

fn registry(result: fn(usize) -> ToolResult, depth: usize, runs: &Arc<AtomicUsize>) -> ToolRegistry {
    let mut r = ToolRegistry::new();
    let runs = runs.clone();
    r.register(
        ToolDefinition::new("report", "d", json!({"type": "object"})).idempotent(true),
        Arc::new(FnExecutor(move |_a: Map<String, Value>, _c: ToolContext| {
            runs.fetch_add(1, Ordering::SeqCst);
            async move { Ok(result(depth)) }
        })),
    )
    .unwrap();
    r
}

fn json_part(depth: usize) -> ToolResult {
    ToolResult::json(nested(depth))
}

fn metadata(depth: usize) -> ToolResult {
    let mut result = ToolResult::text("ok");
    // The metadata object is the first level.
    result.metadata = Some(Map::from_iter([("x".to_string(), nested(depth - 1))]));
    result
}

#[tokio::test]
async fn a_result_nesting_deeper_than_the_limit_is_refused_by_the_registry() {
    for make in [json_part as fn(usize) -> ToolResult, metadata] {
        let runs = Arc::new(AtomicUsize::new(0));
        let ok = registry(make, MAX_RESULT_DEPTH, &runs);
        let call = ToolCall::new("c1", "report", "{}");
        ok.execute(&call, ToolContext::detached("s1", "c1")).await.unwrap();
        for depth in [MAX_RESULT_DEPTH + 1, 125, 200] {
            let deep = registry(make, depth, &runs);
            let e = deep.execute(&call, ToolContext::detached("s1", "c1")).await.unwrap_err();
            assert_eq!(e.code, "tool_result_invalid", "{depth}: {e}");
            assert!(e.message.contains("report") && e.message.contains("64 levels"), "{e}");
        }
    }
}

#[tokio::test]
async fn a_run_with_such_a_result_completes_and_reads_back_whole() {
    for (depth, refused) in [(MAX_RESULT_DEPTH, false), (125, true)] {
        let dir = tempfile::tempdir().unwrap();
        let runs = Arc::new(AtomicUsize::new(0));
        let model = Arc::new(Script::new(vec![calls(&[("c1", "report", "{}")]), answer("done")]));
        let store: Arc<dyn StateStore> = Arc::new(FileStore::new(dir.path()));
        let agent = AgentBuilder::new(model, store).tools(registry(json_part, depth, &runs)).build();
        let out = agent.run("s", "q", &EventLog::new(), &CancellationSignal::new()).await.unwrap();
        assert!(matches!(&out, RunOutcome::Finished { status: RunStatus::Completed, .. }), "{out:?}");
        // Another process reads the session back: every record, the call finished.
        let reread = FileStore::new(dir.path()).load("s").await.unwrap().unwrap();
        assert_eq!(reread.status, RunStatus::Completed, "{depth}");
        assert_eq!(reread.messages.len(), 4, "{depth}: {:?}", reread.messages);
        let ChatMessage::Tool { content, is_error, .. } = &reread.messages[2] else {
            panic!("{depth}: {:?}", reread.messages)
        };
        assert_eq!(*is_error, refused, "{depth}: {content}");
        assert_eq!(content.contains("tool_result_invalid"), refused, "{depth}: {content}");
        assert_eq!(runs.load(Ordering::SeqCst), 1);
    }
}

/// An after-hook that rewrites every result into one nesting `depth` levels.
struct Rewrites(usize);

#[async_trait::async_trait]
impl AgentHook for Rewrites {
    async fn after_tool_call(
        &self,
        _ctx: &HookContext<'_>,
        _call: &ToolCall,
        _result: &ToolResult,
    ) -> AfterToolCall {
        AfterToolCall { action: AfterToolCallAction::Proceed(Some(json_part(self.0))), inject: Vec::new() }
    }
}

#[tokio::test]
async fn a_hook_rewriting_a_result_that_deep_fails() {
    let dir = tempfile::tempdir().unwrap();
    let runs = Arc::new(AtomicUsize::new(0));
    let model = Arc::new(Script::new(vec![calls(&[("c1", "report", "{}")]), answer("done")]));
    let store: Arc<dyn StateStore> = Arc::new(FileStore::new(dir.path()));
    let agent = AgentBuilder::new(model, store)
        .tools(registry(json_part, 1, &runs))
        .hook(Arc::new(Rewrites(125)))
        .build();
    let e = agent.run("s", "q", &EventLog::new(), &CancellationSignal::new()).await;
    let state = FileStore::new(dir.path()).load("s").await.unwrap().unwrap();
    assert_eq!(state.status, RunStatus::Aborted, "{e:?}");
    assert_eq!(state.run_error.as_ref().map(|e| e.code.as_ref()), Some("hook_failed"), "{state:?}");
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}
