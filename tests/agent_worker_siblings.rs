//! Parallel delegations of one batch whose workers freeze side by side: the parent mirrors one
//! worker's batch (`worker_session`), the others wait beside it. `Agent::usage_so_far` of the
//! frozen parent counts all of them, once, and the parent's resume still reaches each in turn.

#[path = "support/delegation.rs"]
mod delegation;
#[path = "support/runtime.rs"]
mod support;

use arkagent::agent::{EventLog, RunOutcome, DELEGATE_TASK};
use arkagent::message::Usage;
use arkagent::provider::ModelResponse;
use arkagent::state::{RunStatus, StateStore};
use arkagent::CancellationSignal;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use support::{answer, calls, MemStore, Script};

fn costing(mut response: ModelResponse, prompt: u64, completion: u64) -> ModelResponse {
    response.usage = Some(usage(prompt, completion));
    response
}

fn usage(prompt: u64, completion: u64) -> Usage {
    Usage { prompt_tokens: prompt, completion_tokens: completion, total_tokens: prompt + completion }
}

fn none() -> CancellationSignal {
    CancellationSignal::new()
}

/// The parent's answer: two delegations in one batch (both `delegate_task`, safe: they run in
/// parallel).
fn two_delegations() -> ModelResponse {
    costing(
        calls(&[
            ("d1", DELEGATE_TASK, r#"{"task":"清缓存 A"}"#),
            ("d2", DELEGATE_TASK, r#"{"task":"清缓存 B"}"#),
        ]),
        100,
        10,
    )
}

#[tokio::test]
async fn usage_so_far_counts_every_worker_frozen_in_the_batch_once() {
    let cleared = Arc::new(AtomicUsize::new(0));
    let model = Arc::new(Script::new(vec![
        two_delegations(),
        costing(calls(&[("w1", "clear_baking_cache", "{}")]), 200, 20),
        costing(calls(&[("w1", "clear_baking_cache", "{}")]), 300, 30),
    ]));
    let store = Arc::new(MemStore::new());
    let agent = delegation::agent(model, store.clone(), &cleared, 1);
    let out = agent.run("parent", "q", &EventLog::new(), &none()).await.unwrap();
    let RunOutcome::Suspended { .. } = out else { panic!("{out:?}") };
    // Its own round and both workers' (the mirrored one and the one beside it), once each.
    assert_eq!(agent.usage_so_far("parent").await.unwrap(), Some(usage(600, 60)));
    assert_eq!(store.load("parent").await.unwrap().unwrap().usage, usage(100, 10), "not saved yet");
}

#[tokio::test]
async fn a_resume_still_reaches_the_second_frozen_worker_counted_once() {
    let cleared = Arc::new(AtomicUsize::new(0));
    let model = Arc::new(Script::new(vec![
        two_delegations(),
        costing(calls(&[("w1", "clear_baking_cache", "{}")]), 200, 20),
        costing(calls(&[("w1", "clear_baking_cache", "{}")]), 300, 30),
        costing(answer("worker done"), 400, 40), // the mirrored worker, continued
        costing(answer("worker done"), 500, 50), // the other, continued on the second resume
        costing(answer("parent done"), 600, 60),
    ]));
    let store = Arc::new(MemStore::new());
    let agent = delegation::agent(model.clone(), store.clone(), &cleared, 1);
    let out = agent.run("parent", "q", &EventLog::new(), &none()).await.unwrap();
    let RunOutcome::Suspended { batch } = out else { panic!("{out:?}") };
    agent.approve("parent", &batch.items[0].approval_id).await.unwrap();
    let out = agent.resume("parent", &EventLog::new(), &none()).await.unwrap();
    let RunOutcome::Suspended { batch: second } = out else { panic!("{out:?}") };
    assert_ne!(second.worker_session, batch.worker_session, "the other worker's items, as before");
    assert_eq!(cleared.load(Ordering::SeqCst), 1);
    // The first worker finished (its usage is the parent's now), the second is mirrored.
    assert_eq!(agent.usage_so_far("parent").await.unwrap(), Some(usage(1000, 100)));
    agent.approve("parent", &second.items[0].approval_id).await.unwrap();
    let out = agent.resume("parent", &EventLog::new(), &none()).await.unwrap();
    let RunOutcome::Finished { status, usage: used, .. } = out else { panic!("{out:?}") };
    assert_eq!(status, RunStatus::Completed);
    assert_eq!(used, usage(2100, 210));
    assert_eq!(cleared.load(Ordering::SeqCst), 2);
}
