//! A deletion cut short (a crash, a store error) deletes a session's workers first and leaves the
//! session itself, to be deleted again (`Agent::delete_session`). Such a session may be frozen on
//! a batch that mirrors a worker that is gone: deciding or resuming it would run the delegation
//! again from scratch in a new worker session (its model asked again, the calls it had made run
//! again). So a decision on it is refused with `session_not_found` naming the gone worker (as
//! `approve` and `deny` document), at any depth of a nested delegation, as are a `dismiss` and a
//! `resume` of it, and nothing is written: deleting it again finishes the job.

#[path = "support/delegation.rs"]
mod delegation;
#[path = "support/runtime.rs"]
mod support;

use arkagent::agent::{EventLog, RunOutcome};
use arkagent::state::StateStore;
use arkagent::CancellationSignal;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use support::{MemStore, Script};

fn none() -> CancellationSignal {
    CancellationSignal::new()
}

#[tokio::test]
async fn a_session_whose_deletion_was_cut_short_is_neither_decided_nor_resumed() {
    for decided_first in [false, true] {
        let store = Arc::new(MemStore::new());
        let cleared = Arc::new(AtomicUsize::new(0));
        let agent =
            delegation::agent(Arc::new(Script::new(delegation::clear_script())), store.clone(), &cleared, 1);
        let out = agent.run("parent", "q", &EventLog::new(), &none()).await.unwrap();
        let RunOutcome::Suspended { batch } = out else { panic!("{out:?}") };
        let worker = batch.worker_session.clone().unwrap();
        let id = batch.items[0].approval_id.clone();
        if decided_first {
            agent.approve("parent", &id).await.unwrap();
        }
        // The deletion went as far as the worker.
        assert!(store.delete(&worker).await.unwrap());
        let before = store.load("parent").await.unwrap().unwrap();

        if !decided_first {
            let e = agent.approve("parent", &id).await.unwrap_err();
            assert_eq!(e.code, "session_not_found", "{e}");
            assert!(e.message.contains(&worker), "names the worker: {e}");
            assert_eq!(agent.deny("parent", &id, "no").await.unwrap_err().code, "session_not_found");
            let e = agent.dismiss("parent", "moved on", &EventLog::new(), &none()).await.unwrap_err();
            assert_eq!(e.code, "session_not_found", "{e}");
        } else {
            let e = agent.resume("parent", &EventLog::new(), &none()).await.unwrap_err();
            assert_eq!(e.code, "session_not_found", "decided_first {decided_first}: {e}");
            assert!(e.message.contains(&worker), "names the worker: {e}");
        }
        // Nothing was written, no worker was started again.
        assert_eq!(store.load("parent").await.unwrap().unwrap(), before, "decided_first {decided_first}");
        assert_eq!(store.load(&worker).await.unwrap(), None, "decided_first {decided_first}");
        assert_eq!(cleared.load(Ordering::SeqCst), 0);
        // Deleting it again finishes the job.
        assert!(agent.delete_session("parent").await.unwrap());
        assert_eq!(store.load("parent").await.unwrap(), None);
    }
}

#[tokio::test]
async fn a_decision_is_refused_when_the_gone_worker_is_a_worker_of_a_worker() {
    use arkagent::agent::DELEGATE_TASK;
    use support::calls;
    let store = Arc::new(MemStore::new());
    let cleared = Arc::new(AtomicUsize::new(0));
    let script = vec![
        calls(&[("d1", DELEGATE_TASK, r#"{"task":"a"}"#)]),
        calls(&[("d2", DELEGATE_TASK, r#"{"task":"b"}"#)]),
        calls(&[("w1", "clear_baking_cache", "{}")]),
    ];
    let agent = delegation::agent(Arc::new(Script::new(script)), store.clone(), &cleared, 2);
    let out = agent.run("parent", "q", &EventLog::new(), &none()).await.unwrap();
    let RunOutcome::Suspended { batch } = out else { panic!("{out:?}") };
    let middle = batch.worker_session.clone().unwrap();
    let deepest =
        store.load(&middle).await.unwrap().unwrap().pending_approval.unwrap().worker_session.unwrap();
    // Deepest first: the deletion went as far as the worker's worker.
    assert!(store.delete(&deepest).await.unwrap());
    let (parent, mid) = (store.load("parent").await.unwrap(), store.load(&middle).await.unwrap());
    let e = agent.approve("parent", &batch.items[0].approval_id).await.unwrap_err();
    assert_eq!(e.code, "session_not_found", "{e}");
    assert!(e.message.contains(&deepest), "{e}");
    assert_eq!(store.load("parent").await.unwrap(), parent, "nothing written");
    assert_eq!(store.load(&middle).await.unwrap(), mid, "nothing written");
    assert!(agent.delete_session("parent").await.unwrap());
    assert_eq!(store.load(&middle).await.unwrap(), None);
}
