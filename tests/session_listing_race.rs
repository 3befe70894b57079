//! A listing that races a run of the same agent: a session whose run this agent held while the
//! listing read it is never `interrupted`, even when the run ends before the listing does (its
//! load read the `running` of a run that was going on, not one a kill cut short). The listing
//! is held on the load of a later session while the run finishes; or a whole run fits in the
//! load of its session (the hold count taken around the load tells).

#[path = "support/runtime.rs"]
mod support;
#[path = "support/wrapped_store.rs"]
mod wrapped_store;

use arkagent::agent::{Agent, AgentBuilder, EventLog, RunOutcome};
use arkagent::provider::{ChatModel, ChatRequest, ModelEventStream, ModelResponse};
use arkagent::state::{AgentState, MemoryStore, RunStatus, StateEvent, StateStore};
use arkagent::{AgentError, CancellationSignal, ChatMessage};
use async_trait::async_trait;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use support::{answer, Script};
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use wrapped_store::{StoreHooks, Wrapped};

/// A model that answers once `go` is notified.
struct Gated {
    go: Arc<Notify>,
}

#[async_trait]
impl ChatModel for Gated {
    async fn complete(&self, request: &ChatRequest) -> Result<ModelResponse, AgentError> {
        self.go.notified().await;
        Script::new([answer("done")]).complete(request).await
    }

    async fn stream(&self, request: &ChatRequest) -> Result<ModelEventStream, AgentError> {
        self.go.notified().await;
        Script::new([answer("done")]).stream(request).await
    }
}

/// Hooks of a memory store whose first load of session `b` says it began, then waits for
/// `release`.
struct HeldAtB {
    held: AtomicBool,
    entered: Arc<Notify>,
    release: Arc<Notify>,
}

#[async_trait]
impl StoreHooks for HeldAtB {
    async fn load(&self, inner: &dyn StateStore, session_id: &str) -> Result<Option<AgentState>, AgentError> {
        if session_id == "b" && !self.held.swap(true, Ordering::SeqCst) {
            self.entered.notify_one();
            self.release.notified().await;
        }
        inner.load(session_id).await
    }
}

/// Starts a run of session `a` and waits until `store` shows it running (its first commit made,
/// its model asked).
async fn start_run(agent: &Arc<Agent>, store: &dyn StateStore) -> JoinHandle<Result<RunOutcome, AgentError>> {
    let run = {
        let agent = Arc::clone(agent);
        tokio::spawn(async move {
            agent.run("a", "plan my trip", &EventLog::new(), &CancellationSignal::new()).await
        })
    };
    for _ in 0..500 {
        if store.load("a").await.unwrap().is_some_and(|s| s.status == RunStatus::Running) {
            break;
        }
        tokio::task::yield_now().await;
    }
    assert_eq!(store.load("a").await.unwrap().unwrap().status, RunStatus::Running);
    run
}

#[tokio::test]
async fn a_run_that_ends_while_the_listing_goes_on_is_not_interrupted() {
    let entered = Arc::new(Notify::new());
    let release = Arc::new(Notify::new());
    let store = Arc::new(Wrapped::new(
        Arc::new(MemoryStore::new()),
        HeldAtB {
            held: AtomicBool::new(false),
            entered: Arc::clone(&entered),
            release: Arc::clone(&release),
        },
    ));
    let mut b = AgentState::new("b");
    let event = StateEvent::MessageAppended { message: ChatMessage::user("hello") };
    b.apply(&event);
    store.inner.commit(&b, &[event]).await.unwrap();

    let go = Arc::new(Notify::new());
    let agent = Arc::new(AgentBuilder::new(Arc::new(Gated { go: Arc::clone(&go) }), store.clone()).build());
    // The run's first commit: `a` stands running while the model is asked.
    let run = start_run(&agent, &*store.inner).await;

    let listing = {
        let agent = Arc::clone(&agent);
        tokio::spawn(async move { agent.list_sessions().await })
    };
    // `a` was read (running) and the listing waits on `b`: the run ends now.
    entered.notified().await;
    go.notify_one();
    let outcome = run.await.unwrap().unwrap();
    assert_eq!(outcome.status(), RunStatus::Completed);
    release.notify_one();
    let list = listing.await.unwrap().unwrap();
    let a = list.iter().find(|s| s.session_id == "a").expect("a listed");
    assert_eq!(a.status, Some(RunStatus::Running), "read while the run went on");
    assert!(!a.interrupted, "a run this agent held while it was read is no run a kill cut short: {a:?}");
    // Listed again, the session is as the run left it.
    let a = agent.list_sessions().await.unwrap().into_iter().find(|s| s.session_id == "a").unwrap();
    assert_eq!((a.status, a.interrupted), (Some(RunStatus::Completed), false));
}

/// Hooks of a memory store whose first load of session `a` once armed says it began and waits
/// for `read_now`, reads, says it read and waits for `finish`: a listing's load that a whole run
/// fits in.
#[derive(Default)]
struct HeldAroundA {
    armed: AtomicBool,
    entered: Notify,
    read_now: Notify,
    read: Notify,
    finish: Notify,
}

#[async_trait]
impl StoreHooks for HeldAroundA {
    async fn load(&self, inner: &dyn StateStore, session_id: &str) -> Result<Option<AgentState>, AgentError> {
        if session_id == "a" && self.armed.swap(false, Ordering::SeqCst) {
            self.entered.notify_one();
            self.read_now.notified().await;
            let loaded = inner.load(session_id).await;
            self.read.notify_one();
            self.finish.notified().await;
            return loaded;
        }
        inner.load(session_id).await
    }
}

#[tokio::test]
async fn a_run_that_begins_and_ends_within_the_listings_load_is_not_interrupted() {
    let store = Arc::new(Wrapped::new(Arc::new(MemoryStore::new()), HeldAroundA::default()));
    let mut a = AgentState::new("a");
    let event = StateEvent::MessageAppended { message: ChatMessage::user("hello") };
    a.apply(&event);
    store.inner.commit(&a, &[event]).await.unwrap();
    let go = Arc::new(Notify::new());
    let agent = Arc::new(AgentBuilder::new(Arc::new(Gated { go: Arc::clone(&go) }), store.clone()).build());

    // The listing looks at `a` (nothing holds it) and begins its load...
    store.hooks.armed.store(true, Ordering::SeqCst);
    let listing = {
        let agent = Arc::clone(&agent);
        tokio::spawn(async move { agent.list_sessions().await })
    };
    store.hooks.entered.notified().await;
    // ...a run of `a` starts, and stands running while the model is asked...
    let run = start_run(&agent, &*store.inner).await;
    // ...the load reads it so, and the run ends before the listing looks at `a` again.
    store.hooks.read_now.notify_one();
    store.hooks.read.notified().await;
    go.notify_one();
    assert_eq!(run.await.unwrap().unwrap().status(), RunStatus::Completed);
    store.hooks.finish.notify_one();
    let list = listing.await.unwrap().unwrap();
    let a = list.iter().find(|s| s.session_id == "a").expect("a listed");
    assert_eq!(a.status, Some(RunStatus::Running), "read while the run went on");
    assert!(!a.interrupted, "the run began and ended within the load: no kill cut it short: {a:?}");
}
