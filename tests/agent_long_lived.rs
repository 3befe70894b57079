//! An agent kept alive for days: what it keeps per session is pruned once the session is idle,
//! so memory follows the sessions in use, not every session id the agent ever saw.

#[path = "support/runtime.rs"]
mod support;

use arkagent::agent::{AgentBuilder, EventLog};
use arkagent::state::{FileStore, RunStatus, StateStore};
use arkagent::CancellationSignal;
use std::sync::Arc;
use support::{answer, Script};

#[tokio::test]
async fn an_agent_and_its_store_keep_no_entry_for_every_session_they_ever_saw() {
    const SESSIONS: usize = 700;
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(FileStore::new(dir.path()));
    let model =
        Arc::new(Script::new((0..SESSIONS).map(|i| answer(&format!("answer {i}"))).collect::<Vec<_>>()));
    let agent = AgentBuilder::new(model, store.clone() as Arc<dyn StateStore>).build();
    let (events, signal) = (EventLog::new(), CancellationSignal::new());
    let mut most = (0, 0);
    for i in 0..SESSIONS {
        let id = format!("chat-{i}");
        let out = agent.run(&id, "hello", &events, &signal).await.unwrap();
        assert_eq!(out.status(), RunStatus::Completed);
        // A call on a session that does not exist leaves its entry too.
        assert!(agent.resume(&format!("missing-{i}"), &events, &signal).await.is_err());
        assert!(agent.delete_session(&id).await.unwrap());
        most = (most.0.max(agent.tracked_sessions()), most.1.max(store.tracked_sessions()));
    }
    // 1400 session ids were seen; what is kept stays near the pruning threshold (256).
    assert!(most.0 <= 300, "the agent kept up to {} sessions", most.0);
    assert!(most.1 <= 300, "the store kept up to {} sessions", most.1);
    assert_eq!(store.list().await.unwrap(), Vec::<String>::new());
}
