//! A model-based property test of the runtime's public API under interleavings, cancels and
//! crashes: proptest generates sequences of operations on two sessions of one agent (`run`,
//! `approve`, `deny`, `dismiss`, `resume`, `set_metadata`, `delete_session`), some of them
//! cancelled (before they start or at the k-th await point of the model, a tool or the store), some
//! cut short by a crash (the agent is dropped at the k-th point, optionally right after a store
//! write reached the store, and a new agent is built on the same store), pairs of operations
//! run concurrently with `tokio::join!` (also cut short by a crash), and operations on a second
//! agent over its own store instance on the same data, alone or at the same time as the first
//! (where the store's lease answers `session_busy`). After every step it checks the invariants
//! listed below; at the end of a case, every session must still be usable (decide, resume, run to
//! an answer).
//!
//! The world: tools of every risk level (`look` safe, `idem` safe and idempotent, `sens`
//! sensitive, `danger` dangerous and idempotent, `halt` safe with a stop), `delegate_task`, and a
//! model ([`PlanModel`]) whose answers follow a plan named by the run's user message (`plan N`,
//! see [`PLANS`]): one batch of calls per round (single calls, multi-call batches, delegations
//! whose worker asks for a call needing approval, a model failure), then a text answer. Call ids
//! are unique over the whole case, so the tools count executions per call id. The store is a
//! [`MemoryStore`] or a [`FileStore`] (in `/dev/shm` when it exists), wrapped in a [`TestStore`]
//! that counts its writes as points, for cancels and crashes at exact places (all in
//! `tests/support/interleave_world.rs`).
//!
//! Invariants checked after every step, on every session in the store (workers included):
//! - pairing: every call of the history is answered by exactly one tool message, in call order,
//!   before the next assistant message; only the last assistant message's calls may be
//!   unanswered, and only while the session awaits approval, was cancelled or aborted by a hook
//!   mid-batch ("a cancelled run is not backfilled": repair answers it on the next load) or
//!   stayed `running` after a crash. The state `load`
//!   returns (repaired) pairs fully, except a batch awaiting approval;
//! - no executor ran twice for one call id (an idempotent tool may run once more per crash: the
//!   documented exception of `Agent::resume`);
//! - a call needing approval ran only after the test's `approve` of it returned `Ok`; a call the
//!   test denied, or left pending when it dismissed the batch, never ran;
//! - tools see the session's metadata as set before the run (`ToolContext.state.metadata`);
//! - usage: each answer with calls in the history counted once (the model reports 5 tokens each),
//!   plus what its workers used, each worker at most once;
//! - status and batch agree: `awaiting_approval` iff a batch is saved that is undecided or
//!   decided but not settled; an undecided batch only while awaiting; `idle` only without history;
//!   `running` only after a crash;
//! - errors are structured `AgentError`s with the codes each method documents (predicted exactly
//!   from the state before a single operation; within a concurrent pair, one of the documented
//!   codes), never panics; a refused call changes nothing in the store;
//! - events: `run_started` first; `run_finished` last with the outcome's status and text, or one
//!   `approval_required` with the outcome's batch when suspended; at most one `tool_result` per
//!   call; every worker run that started ends or suspends;
//! - what an operation returned is what the store holds afterwards (status, frozen batch,
//!   decisions, metadata, deletion); a new `FileStore` on the same directory loads the same state;
//!   nothing saved is lost (each session's history only grows, usage never shrinks, metadata the
//!   test set stays) until the session is deleted; deleting a session deletes its workers, and no
//!   worker session is left that no session names.
//!
//! Cases: 256 by default (about 4 s on 2 cores, debug build); set `ARKAGENT_INTERLEAVE_CASES`
//! for more, e.g. `ARKAGENT_INTERLEAVE_CASES=3000 cargo test --test agent_interleave` (about 40 s).
//! `ARKAGENT_INTERLEAVE_STATS=1` (with `-- --nocapture`) prints how the operations ended.
//!
//! Documented behaviour the invariants follow: a decision that reached a worker's session before a
//! crash stands (the parent's item still shows pending; the same decision succeeds, the other is
//! `approval_already_decided`); a deletion a crash cut short keeps the session, whose workers may
//! be gone (deciding on it may fail with `session_not_found`) until it is deleted again.
//!
//! Bugs the property found, each fixed on the branch that added this file and kept as a plain
//! regression test at the end of the file (the minimal sequence, its symptom asserted directly):
//! 1. after a crash mid-batch, `resume` answered a non-idempotent call at once (repair) and the
//!    idempotent call it re-ran only after it: results out of call order
//!    (`regression_a_crash_then_resume_answers_in_call_order`);
//! 2. a cancel while a worker ran left the worker's session `running`
//!    (`regression_a_cancel_ends_the_worker_too`);
//! 3. a refused `resume` repaired and saved the session, which put the results out of call order
//!    (`regression_a_refused_resume_writes_nothing`);
//! 4. a run that ended while it settled a decided batch (a cancelled resume) kept the batch
//!    (`regression_a_cancelled_resume_keeps_no_batch`).

#[path = "support/interleave_world.rs"]
mod world;

use arkagent::agent::{Agent, AgentBuilder, AgentConfig, AgentEvent, EventLog, NoEvents, RunOutcome};
use arkagent::approval::{ApprovalDecision, PendingApprovalBatch};
use arkagent::message::ChatMessage;
use arkagent::state::{check_pairing, AgentState, FileStore, MemoryStore, RunStatus, StateStore};
use arkagent::{codes, AgentError, CancellationSignal};
use proptest::prelude::*;
use serde_json::{json, Value};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use tokio::sync::Notify;
use world::{tools, PlanModel, TestHook, TestStore, Trigger, World, PLANS};

/// The number of cases (default [`DEFAULT_CASES`]).
const CASES_ENV: &str = "ARKAGENT_INTERLEAVE_CASES";
const DEFAULT_CASES: u32 = 256;
const SESSIONS: [&str; 2] = ["s0", "s1"];

// ---------------------------------------------------------------------------------------------
// Operations.

/// An operation as generated (approval items are picked by index when the step runs).
#[derive(Debug, Clone)]
enum Op {
    Run {
        s: u8,
        plan: u8,
    },
    Approve {
        s: u8,
        pick: u8,
    },
    Deny {
        s: u8,
        pick: u8,
    },
    Resume {
        s: u8,
    },
    Dismiss {
        s: u8,
    },
    Meta {
        s: u8,
        key: u8,
        value: Option<u8>,
    },
    /// Approves (or denies) every item of the session's batch, one call each, then resumes it
    /// (`resume`).
    DecideAll {
        s: u8,
        approve: bool,
        resume: bool,
    },
    Delete {
        s: u8,
    },
    /// Cancelled before it starts (`at` 0) or at the `at`-th point.
    Cancelled {
        op: Box<Op>,
        at: u8,
    },
    /// A crash at the `at`-th point of `op` (or between operations); `after_write`: a write at
    /// that point reaches the store first.
    Crash {
        op: Option<Box<Op>>,
        at: u8,
        after_write: bool,
    },
    /// A crash at the `at`-th point of two operations running at the same time.
    CrashPair {
        a: Box<Op>,
        b: Box<Op>,
        at: u8,
        after_write: bool,
    },
    Pair(Box<Op>, Box<Op>),
    /// The operation on a second agent over the same store (a second `FileStore` on the same
    /// directory, or the same `MemoryStore`).
    Other(Box<Op>),
    /// The first on the agent, the second on the second agent, at the same time: either may be
    /// refused with `session_busy` (the store's lease).
    Pair2(Box<Op>, Box<Op>),
}

/// An operation resolved against the store.
#[derive(Debug, Clone)]
enum Call {
    Run { s: &'static str, plan: u8 },
    Approve { s: &'static str, id: String },
    Deny { s: &'static str, id: String },
    Resume { s: &'static str },
    Dismiss { s: &'static str },
    Meta { s: &'static str, key: String, value: Value },
    Delete { s: &'static str },
}

impl Call {
    fn session(&self) -> &'static str {
        match self {
            Call::Run { s, .. }
            | Call::Approve { s, .. }
            | Call::Deny { s, .. }
            | Call::Resume { s }
            | Call::Dismiss { s }
            | Call::Meta { s, .. }
            | Call::Delete { s } => s,
        }
    }

    /// The codes its method documents.
    fn documented(&self) -> &'static [&'static str] {
        const DECIDE: &[&str] = &[
            codes::SESSION_NOT_FOUND,
            codes::NO_PENDING_APPROVAL,
            codes::APPROVAL_NOT_FOUND,
            codes::APPROVAL_ALREADY_DECIDED,
        ];
        match self {
            Call::Run { .. } => &[codes::APPROVAL_PENDING],
            Call::Approve { .. } | Call::Deny { .. } => DECIDE,
            Call::Resume { .. } => &[codes::SESSION_NOT_FOUND, codes::APPROVAL_PENDING, codes::INVALID_STATE],
            Call::Dismiss { .. } => &[
                codes::SESSION_NOT_FOUND,
                codes::NO_PENDING_APPROVAL,
                codes::APPROVAL_NOT_FOUND,
                codes::APPROVAL_ALREADY_DECIDED,
                codes::APPROVAL_PENDING,
                codes::INVALID_STATE,
            ],
            Call::Meta { .. } => &[codes::SESSION_BUSY, codes::INVALID_STATE],
            Call::Delete { .. } => &[codes::SESSION_BUSY],
        }
    }

    /// The error a single, uncrashed call must give on `pre` (`None`: success).
    /// `worker`: the session of the worker whose batch `pre`'s batch mirrors, if any: a decision
    /// already made there stands (a crash between the worker's and the parent's commits): the
    /// same decision again succeeds, the other is `approval_already_decided`.
    fn expected_error(&self, pre: Option<&AgentState>, worker: Option<&AgentState>) -> Option<&'static str> {
        let awaiting = |s: &AgentState| s.status == RunStatus::AwaitingApproval;
        match self {
            Call::Run { .. } => pre.filter(|s| awaiting(s)).map(|_| codes::APPROVAL_PENDING),
            Call::Resume { .. } => match pre {
                None => Some(codes::SESSION_NOT_FOUND),
                // An item still pending here that the worker's batch holds decided (a crash
                // between the two commits) counts as decided: the resume takes it from below.
                Some(s) if awaiting(s) => {
                    let below = |id: &str| {
                        worker
                            .and_then(|w| w.pending_approval.as_ref())
                            .and_then(|b| b.item(id))
                            .is_some_and(|i| i.decision != ApprovalDecision::Pending)
                    };
                    let decided = |b: &arkagent::approval::PendingApprovalBatch| {
                        b.items
                            .iter()
                            .all(|i| i.decision != ApprovalDecision::Pending || below(&i.approval_id))
                    };
                    (!s.pending_approval.as_ref().is_some_and(decided)).then_some(codes::APPROVAL_PENDING)
                }
                Some(s) if s.status == RunStatus::Running => None,
                Some(_) => Some(codes::INVALID_STATE),
            },
            Call::Approve { id, .. } | Call::Deny { id, .. } => match pre {
                None => Some(codes::SESSION_NOT_FOUND),
                Some(s) => match &s.pending_approval {
                    None => Some(codes::NO_PENDING_APPROVAL),
                    Some(b) => match b.item(id) {
                        None => Some(codes::APPROVAL_NOT_FOUND),
                        Some(i) if i.decision != ApprovalDecision::Pending => {
                            Some(codes::APPROVAL_ALREADY_DECIDED)
                        }
                        Some(_) => {
                            let wanted = match self {
                                Call::Approve { .. } => ApprovalDecision::Approved,
                                _ => ApprovalDecision::Denied,
                            };
                            let there = worker
                                .and_then(|w| w.pending_approval.as_ref())
                                .and_then(|b| b.item(id))
                                .map(|i| i.decision)
                                .filter(|d| *d != ApprovalDecision::Pending);
                            match there {
                                Some(d) if d != wanted => Some(codes::APPROVAL_ALREADY_DECIDED),
                                _ => None,
                            }
                        }
                    },
                },
            },
            Call::Dismiss { .. } => match pre {
                None => Some(codes::SESSION_NOT_FOUND),
                Some(s) if awaiting(s) && s.pending_approval.is_some() => None,
                Some(_) => Some(codes::NO_PENDING_APPROVAL),
            },
            // A change (not the removal of an absent key) on a session whose batch is under way
            // without a run: frozen on a worker's, or stopped mid-batch.
            Call::Meta { key, value, .. } => pre
                .filter(|s| !value.is_null() || s.metadata.contains_key(key))
                .filter(|s| match s.status {
                    RunStatus::AwaitingApproval => {
                        s.pending_approval.as_ref().is_some_and(|b| b.worker_session.is_some())
                    }
                    RunStatus::Running => !s.tool_runs.is_empty(),
                    _ => false,
                })
                .map(|_| codes::INVALID_STATE),
            Call::Delete { .. } => None,
        }
    }
}

#[derive(Debug)]
enum Done {
    Outcome(RunOutcome),
    Decided(PendingApprovalBatch),
    Meta,
    Deleted(bool),
}

/// Outcome counts (printed with `ARKAGENT_INTERLEAVE_STATS` set), to see what the cases reach.
static STATS: Mutex<BTreeMap<String, usize>> = Mutex::new(BTreeMap::new());

fn stat(key: String) {
    *STATS.lock().unwrap().entry(key).or_insert(0) += 1;
}

async fn exec(
    agent: &Agent,
    world: &World,
    call: &Call,
    cancel: &CancellationSignal,
) -> Result<Done, AgentError> {
    let events = EventLog::new();
    let result = exec_inner(agent, world, call, cancel, &events).await;
    if let Ok(Done::Outcome(outcome)) = &result {
        if let Err(e) = check_events(call, outcome, &events.events()) {
            world.violation(format!("{call:?}: events: {e}"));
        }
    }
    let what = format!("{call:?}");
    let what = what.split([' ', '{']).next().unwrap_or_default().to_string();
    stat(match &result {
        Ok(Done::Outcome(RunOutcome::Finished { status, .. })) => format!("{what} -> {status:?}"),
        Ok(Done::Outcome(RunOutcome::Suspended { batch })) => {
            format!("{what} -> suspended{}", if batch.worker_session.is_some() { " (worker)" } else { "" })
        }
        Ok(_) => format!("{what} -> ok"),
        Err(e) => format!("{what} -> {}", e.code),
    });
    result
}

async fn exec_inner(
    agent: &Agent,
    world: &World,
    call: &Call,
    cancel: &CancellationSignal,
    sink: &EventLog,
) -> Result<Done, AgentError> {
    match call {
        Call::Run { s, plan } => agent.run(s, &format!("plan {plan}"), sink, cancel).await.map(Done::Outcome),
        Call::Approve { s, id } => {
            let batch = agent.approve(s, id).await?;
            world.record_decision(&batch, id, true);
            Ok(Done::Decided(batch))
        }
        Call::Deny { s, id } => {
            let batch = agent.deny(s, id, "no").await?;
            world.record_decision(&batch, id, false);
            Ok(Done::Decided(batch))
        }
        Call::Resume { s } => agent.resume(s, sink, cancel).await.map(Done::Outcome),
        Call::Dismiss { s } => agent.dismiss(s, "moved on", sink, cancel).await.map(Done::Outcome),
        Call::Meta { s, key, value } => agent.set_metadata(s, key, value.clone()).await.map(|()| Done::Meta),
        Call::Delete { s } => agent.delete_session(s).await.map(Done::Deleted),
    }
}

fn op_strategy() -> impl Strategy<Value = Op> {
    let s = || 0u8..2;
    let basic = prop_oneof![
        4 => (s(), 0..PLANS.len() as u8).prop_map(|(s, plan)| Op::Run { s, plan }),
        3 => (s(), 0u8..4).prop_map(|(s, pick)| Op::Approve { s, pick }),
        1 => (s(), 0u8..4).prop_map(|(s, pick)| Op::Deny { s, pick }),
        2 => s().prop_map(|s| Op::Resume { s }),
        1 => s().prop_map(|s| Op::Dismiss { s }),
        1 => (s(), 0u8..2, prop::option::of(0u8..3)).prop_map(|(s, key, value)| Op::Meta { s, key, value }),
        1 => s().prop_map(|s| Op::Delete { s }),
    ];
    let runlike = prop_oneof![
        (s(), 0..PLANS.len() as u8).prop_map(|(s, plan)| Op::Run { s, plan }),
        s().prop_map(|s| Op::Resume { s }),
        s().prop_map(|s| Op::Dismiss { s }),
    ];
    prop_oneof![
        8 => basic.clone(),
        1 => (runlike, 0u8..12).prop_map(|(op, at)| Op::Cancelled { op: Box::new(op), at }),
        2 => (prop::option::of(basic.clone()), 1u8..16, any::<bool>())
            .prop_map(|(op, at, after_write)| Op::Crash { op: op.map(Box::new), at, after_write }),
        2 => (basic.clone(), basic.clone()).prop_map(|(a, b)| Op::Pair(Box::new(a), Box::new(b))),
        1 => basic.clone().prop_map(|a| Op::Other(Box::new(a))),
        1 => (basic.clone(), basic.clone(), 1u8..20, any::<bool>()).prop_map(|(a, b, at, after_write)| {
            Op::CrashPair { a: Box::new(a), b: Box::new(b), at, after_write }
        }),
        1 => (basic.clone(), basic).prop_map(|(a, b)| Op::Pair2(Box::new(a), Box::new(b))),
        3 => (s(), prop::bool::weighted(0.8), prop::bool::weighted(0.7))
            .prop_map(|(s, approve, resume)| Op::DecideAll { s, approve, resume }),
    ]
}

// ---------------------------------------------------------------------------------------------
// The harness.

#[derive(Clone, Copy, Debug)]
enum StoreKind {
    Memory,
    File,
}

struct Harness {
    world: Arc<World>,
    kind: StoreKind,
    _dir: Option<tempfile::TempDir>,
    root: Option<std::path::PathBuf>,
    inner: Arc<dyn StateStore>,
    memory: Option<Arc<MemoryStore>>,
    agent: Arc<Agent>,
    config: AgentConfig,
    /// A second agent over its own store instance on the same data.
    agent2: Arc<Agent>,
    /// `session_busy` is a documented answer for any call (two agents at once).
    allow_busy: bool,
    /// The last state seen per session (unrepaired), to check that nothing saved is lost.
    seen: HashMap<String, AgentState>,
    /// The metadata the test set, per top-level session.
    metadata: HashMap<&'static str, BTreeMap<String, Value>>,
    /// Sessions whose deletion a crash cut short: documented to keep the session (its workers may
    /// be gone) until it is deleted again, so a decision on it may fail with `session_not_found`.
    half_deleted: HashSet<&'static str>,
}

fn temp_root() -> tempfile::TempDir {
    let shm = std::path::Path::new("/dev/shm");
    if shm.is_dir() {
        if let Ok(dir) = tempfile::tempdir_in(shm) {
            return dir;
        }
    }
    tempfile::tempdir().unwrap()
}

impl Harness {
    fn new(kind: StoreKind) -> Self {
        Self::with_config(kind, test_config())
    }

    fn with_config(kind: StoreKind, config: AgentConfig) -> Self {
        let world = Arc::new(World::default());
        let (dir, root, memory) = match kind {
            StoreKind::Memory => (None, None, Some(Arc::new(MemoryStore::new()))),
            StoreKind::File => {
                let dir = temp_root();
                let root = dir.path().to_path_buf();
                (Some(dir), Some(root), None)
            }
        };
        let inner = Self::open(&root, &memory);
        let agent = Self::build(&world, &inner, &config);
        let agent2 = Self::build(&world, &Self::open(&root, &memory), &config);
        Harness {
            world,
            kind,
            _dir: dir,
            root,
            inner,
            memory,
            agent,
            agent2,
            config,
            allow_busy: false,
            seen: HashMap::new(),
            metadata: HashMap::new(),
            half_deleted: HashSet::new(),
        }
    }

    fn open(root: &Option<std::path::PathBuf>, memory: &Option<Arc<MemoryStore>>) -> Arc<dyn StateStore> {
        match (root, memory) {
            (Some(root), _) => Arc::new(FileStore::new(root)),
            (None, Some(m)) => Arc::clone(m) as Arc<dyn StateStore>,
            (None, None) => unreachable!(),
        }
    }

    fn build(world: &Arc<World>, inner: &Arc<dyn StateStore>, config: &AgentConfig) -> Arc<Agent> {
        let store = Arc::new(TestStore { inner: Arc::clone(inner), world: Arc::clone(world) });
        let config = config.clone();
        let agent = Arc::new(
            AgentBuilder::new(Arc::new(PlanModel { world: Arc::clone(world) }), store)
                .tools(tools(world))
                .hook(Arc::new(TestHook))
                .config(config)
                .build(),
        );
        agent.enable_delegation(None).unwrap();
        agent
    }

    /// A crash: the agent (and its store, for a file store) is gone; a new one opens the same
    /// store once every store call of the dead one has finished.
    async fn crash(&mut self) {
        while self.world.inflight.load(Ordering::SeqCst) > 0 {
            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
        }
        self.world.crashes.fetch_add(1, Ordering::SeqCst);
        *self.world.trigger.lock().unwrap() = Trigger::Off;
        self.inner = Self::open(&self.root, &self.memory);
        self.agent = Self::build(&self.world, &self.inner, &self.config);
        self.agent2 = Self::build(&self.world, &Self::open(&self.root, &self.memory), &self.config);
        self.world.dead.store(false, Ordering::SeqCst);
        // What reached the store is what was decided or set (the dead call may not have returned).
        for id in self.list_sessions() {
            if let Some(state) = self.inner.load_unrepaired(&id).await.unwrap() {
                if let Some(batch) = &state.pending_approval {
                    for item in &batch.items {
                        match item.decision {
                            ApprovalDecision::Approved => {
                                self.world.approved.lock().unwrap().insert(item.tool_call.id.clone());
                            }
                            ApprovalDecision::Denied => {
                                self.world.denied.lock().unwrap().insert(item.tool_call.id.clone());
                            }
                            ApprovalDecision::Pending => {}
                        }
                    }
                }
            }
        }
        self.resync_metadata().await;
    }

    async fn resync_metadata(&mut self) {
        for s in SESSIONS {
            let state = self.inner.load_unrepaired(s).await.unwrap();
            self.metadata.insert(s, state.map(|s| s.metadata).unwrap_or_default());
        }
    }

    fn list_sessions(&self) -> Vec<String> {
        match self.kind {
            StoreKind::Memory => self.memory.as_ref().unwrap().session_ids(),
            StoreKind::File => {
                let mut ids: Vec<String> = std::fs::read_dir(self.root.as_ref().unwrap())
                    .unwrap()
                    .filter_map(|e| e.ok())
                    .filter(|e| e.path().is_dir())
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .filter(|n| n != arkagent::state::LOCK_DIR && n != arkagent::state::TRASH_DIR)
                    .collect();
                ids.sort();
                ids
            }
        }
    }

    async fn resolve(&self, op: &Op) -> Call {
        let session = |s: u8| SESSIONS[usize::from(s % 2)];
        let pick_id = |s: u8, pick: u8| {
            let inner = Arc::clone(&self.inner);
            async move {
                let state = inner.load_unrepaired(session(s)).await.unwrap();
                let items = state.and_then(|st| st.pending_approval).map(|b| b.items).unwrap_or_default();
                match items.get(usize::from(pick)) {
                    Some(item) => item.approval_id.clone(),
                    None => format!("bogus-{pick}"),
                }
            }
        };
        match op {
            Op::Run { s, plan } => Call::Run { s: session(*s), plan: *plan },
            Op::Approve { s, pick } => Call::Approve { s: session(*s), id: pick_id(*s, *pick).await },
            Op::Deny { s, pick } => Call::Deny { s: session(*s), id: pick_id(*s, *pick).await },
            Op::Resume { s } => Call::Resume { s: session(*s) },
            Op::Dismiss { s } => Call::Dismiss { s: session(*s) },
            Op::Meta { s, key, value } => Call::Meta {
                s: session(*s),
                key: format!("k{key}"),
                value: value.map(|v| json!(v)).unwrap_or(Value::Null),
            },
            Op::Delete { s } => Call::Delete { s: session(*s) },
            Op::Cancelled { .. }
            | Op::Crash { .. }
            | Op::Pair(..)
            | Op::Pair2(..)
            | Op::CrashPair { .. }
            | Op::Other(..)
            | Op::DecideAll { .. } => {
                unreachable!("resolved by the step")
            }
        }
    }

    async fn load(&self, s: &str) -> Option<AgentState> {
        self.inner.load_unrepaired(s).await.unwrap()
    }

    /// A session's state, and that of the worker its frozen batch mirrors.
    async fn load_pre(&self, s: &str) -> (Option<AgentState>, Option<AgentState>) {
        let pre = self.load(s).await;
        let worker =
            pre.as_ref().and_then(|p| p.pending_approval.as_ref()).and_then(|b| b.worker_session.clone());
        let worker = match worker {
            Some(w) => self.load(&w).await,
            None => None,
        };
        (pre, worker)
    }

    /// Checks a finished call's result against the store (`exact`: against the prediction too).
    async fn check_result(
        &mut self,
        call: &Call,
        pre: Option<&AgentState>,
        worker: Option<&AgentState>,
        result: &Result<Done, AgentError>,
        exact: bool,
    ) -> Result<(), String> {
        let s = call.session();
        let exact = exact && !self.half_deleted.contains(s);
        match result {
            Err(e) => {
                let busy = self.allow_busy && e.code == codes::SESSION_BUSY;
                if !busy && !call.documented().contains(&e.code.as_ref()) {
                    return Err(format!("{call:?} failed with an undocumented code: {e:?}"));
                }
                if exact {
                    let post = self.load(s).await;
                    if post.as_ref() != pre {
                        return Err(format!(
                            "{call:?} was refused with {} but changed the stored state",
                            e.code
                        ));
                    }
                }
                if exact && call.expected_error(pre, worker) != Some(e.code.as_ref()) {
                    return Err(format!(
                        "{call:?} failed with {e:?}, expected {:?} (state before: {:?})",
                        call.expected_error(pre, worker),
                        pre.map(|s| (s.status, s.pending_approval.is_some()))
                    ));
                }
                return Ok(());
            }
            Ok(_) if exact => {
                if let Some(code) = call.expected_error(pre, worker) {
                    return Err(format!("{call:?} succeeded, expected {code}: {result:?}"));
                }
            }
            Ok(_) => {}
        }
        let done = result.as_ref().unwrap();
        let post = self.load(s).await;
        match done {
            Done::Meta => {
                if let Call::Meta { key, value, .. } = call {
                    let entry = self.metadata.entry(s).or_default();
                    if value.is_null() {
                        entry.remove(key);
                    } else {
                        entry.insert(key.clone(), value.clone());
                    }
                }
            }
            Done::Deleted(existed) => {
                self.metadata.insert(s, BTreeMap::new());
                self.half_deleted.remove(s);
                if exact && *existed != pre.is_some() {
                    return Err(format!(
                        "{call:?} returned {existed}, the session existed: {}",
                        pre.is_some()
                    ));
                }
            }
            _ => {}
        }
        if !exact {
            // The other call of a pair may have changed the session since.
            return Ok(());
        }
        match done {
            Done::Outcome(RunOutcome::Finished { status, final_text, .. }) => {
                let post = post.ok_or_else(|| format!("{call:?} finished but the session is gone"))?;
                if post.status != *status {
                    return Err(format!("{call:?} finished {status:?}, the store says {:?}", post.status));
                }
                if !status.is_terminal() {
                    return Err(format!("{call:?} finished with a non-terminal status {status:?}"));
                }
                if let (RunStatus::Completed, Some(text)) = (status, final_text) {
                    match post.messages.last() {
                        Some(ChatMessage::Assistant { content: Some(c), tool_calls, .. })
                            if c == text && tool_calls.is_empty() => {}
                        other => {
                            return Err(format!(
                                "{call:?} answered {text:?}, the history ends with {other:?}"
                            ))
                        }
                    }
                }
            }
            Done::Outcome(RunOutcome::Suspended { batch }) => {
                let post = post.ok_or_else(|| format!("{call:?} suspended but the session is gone"))?;
                if post.status != RunStatus::AwaitingApproval || post.pending_approval.as_ref() != Some(batch)
                {
                    return Err(format!(
                        "{call:?} suspended on batch {}, the store has {:?} / {:?}",
                        batch.batch_id,
                        post.status,
                        post.pending_approval.as_ref().map(|b| &b.batch_id)
                    ));
                }
            }
            Done::Decided(batch) => {
                let post = post.ok_or_else(|| format!("{call:?} decided but the session is gone"))?;
                if post.pending_approval.as_ref() != Some(batch) {
                    return Err(format!("{call:?} returned a batch the store does not hold"));
                }
            }
            Done::Meta => {
                if let Call::Meta { key, value, .. } = call {
                    let got = post.as_ref().and_then(|p| p.metadata.get(key));
                    let want = (!value.is_null()).then_some(value);
                    if got != want {
                        return Err(format!("{call:?}: the store holds {got:?}"));
                    }
                }
            }
            Done::Deleted(_) => {
                if post.is_some() {
                    return Err(format!("{call:?} returned but the session is still stored"));
                }
            }
        }
        Ok(())
    }

    /// Runs one step; returns the sessions it may have deleted.
    async fn step(&mut self, op: &Op) -> Result<HashSet<&'static str>, String> {
        let mut deleted = HashSet::new();
        match op {
            Op::DecideAll { s, approve, resume } => {
                let session = SESSIONS[usize::from(s % 2)];
                let items =
                    self.load(session).await.and_then(|st| st.pending_approval).map(|b| b.items.len());
                for pick in 0..items.unwrap_or(0) as u8 {
                    let one = if *approve { Op::Approve { s: *s, pick } } else { Op::Deny { s: *s, pick } };
                    Box::pin(self.step(&one)).await?;
                }
                if *resume {
                    Box::pin(self.step(&Op::Resume { s: *s })).await?;
                }
            }
            Op::Other(op) => {
                let call = self.resolve(op).await;
                if let Call::Delete { s } = &call {
                    deleted.insert(*s);
                }
                let (pre, worker) = self.load_pre(call.session()).await;
                let result = exec(&self.agent2, &self.world, &call, &CancellationSignal::new()).await;
                self.check_result(&call, pre.as_ref(), worker.as_ref(), &result, true).await?;
            }
            Op::Pair2(a, b) => {
                let (ca, cb) = (self.resolve(a).await, self.resolve(b).await);
                let ((pa, wa), (pb, wb)) =
                    (self.load_pre(ca.session()).await, self.load_pre(cb.session()).await);
                let cancel = CancellationSignal::new();
                let (one, two, world) =
                    (Arc::clone(&self.agent), Arc::clone(&self.agent2), Arc::clone(&self.world));
                let (ra, rb) =
                    tokio::join!(exec(&one, &world, &ca, &cancel), exec(&two, &world, &cb, &cancel));
                for c in [&ca, &cb] {
                    if let Call::Delete { s } = c {
                        deleted.insert(*s);
                    }
                }
                self.allow_busy = true;
                let checked = async {
                    self.check_result(&ca, pa.as_ref(), wa.as_ref(), &ra, false).await?;
                    self.check_result(&cb, pb.as_ref(), wb.as_ref(), &rb, false).await
                }
                .await;
                self.allow_busy = false;
                checked?;
                self.resync_metadata().await;
            }
            Op::Pair(a, b) => {
                let (ca, cb) = (self.resolve(a).await, self.resolve(b).await);
                let ((pa, wa), (pb, wb)) =
                    (self.load_pre(ca.session()).await, self.load_pre(cb.session()).await);
                let cancel = CancellationSignal::new();
                let (agent, world) = (Arc::clone(&self.agent), Arc::clone(&self.world));
                let (ra, rb) =
                    tokio::join!(exec(&agent, &world, &ca, &cancel), exec(&agent, &world, &cb, &cancel));
                for c in [&ca, &cb] {
                    if let Call::Delete { s } = c {
                        deleted.insert(*s);
                    }
                }
                let same = ca.session() == cb.session();
                self.check_result(&ca, pa.as_ref(), wa.as_ref(), &ra, false).await?;
                self.check_result(&cb, pb.as_ref(), wb.as_ref(), &rb, false).await?;
                if same || !deleted.is_empty() {
                    self.resync_metadata().await;
                }
                if !same {
                    // Independent sessions: each result must be what it would be alone.
                    self.check_independent(&ca, pa.as_ref(), wa.as_ref(), &ra)?;
                    self.check_independent(&cb, pb.as_ref(), wb.as_ref(), &rb)?;
                }
            }
            Op::Cancelled { op, at } => {
                let call = self.resolve(op).await;
                let (pre, worker) = self.load_pre(call.session()).await;
                let cancel = CancellationSignal::new();
                if *at == 0 {
                    cancel.cancel("cancelled before the call");
                } else {
                    *self.world.trigger.lock().unwrap() =
                        Trigger::Cancel { left: u32::from(*at), signal: cancel.clone() };
                }
                let result = exec(&self.agent, &self.world, &call, &cancel).await;
                *self.world.trigger.lock().unwrap() = Trigger::Off;
                self.check_result(&call, pre.as_ref(), worker.as_ref(), &result, true).await?;
            }
            Op::Crash { op, at, after_write } => {
                let notify = Arc::new(Notify::new());
                *self.world.trigger.lock().unwrap() = Trigger::Crash {
                    left: u32::from(*at),
                    after_write: *after_write,
                    notify: Arc::clone(&notify),
                };
                if let Some(op) = op {
                    let call = self.resolve(op).await;
                    if let Call::Delete { s } = &call {
                        deleted.insert(*s);
                    }
                    let (pre, worker) = self.load_pre(call.session()).await;
                    let cancel = CancellationSignal::new();
                    let finished = {
                        let run = exec(&self.agent, &self.world, &call, &cancel);
                        tokio::select! {
                            biased;
                            _ = notify.notified() => None,
                            r = run => Some(r),
                        }
                    };
                    if finished.is_none() {
                        if let Call::Delete { s } = &call {
                            self.half_deleted.insert(s);
                        }
                    }
                    if let Some(result) = finished {
                        // Done before the crash point: a normal call, then the crash.
                        *self.world.trigger.lock().unwrap() = Trigger::Off;
                        if !self.world.dead.load(Ordering::SeqCst) {
                            self.check_result(&call, pre.as_ref(), worker.as_ref(), &result, true).await?;
                        }
                    }
                }
                self.crash().await;
            }
            Op::CrashPair { a, b, at, after_write } => {
                let (ca, cb) = (self.resolve(a).await, self.resolve(b).await);
                let notify = Arc::new(Notify::new());
                *self.world.trigger.lock().unwrap() = Trigger::Crash {
                    left: u32::from(*at),
                    after_write: *after_write,
                    notify: Arc::clone(&notify),
                };
                let cancel = CancellationSignal::new();
                let finished = {
                    let both = async {
                        tokio::join!(
                            exec(&self.agent, &self.world, &ca, &cancel),
                            exec(&self.agent, &self.world, &cb, &cancel)
                        )
                    };
                    tokio::select! {
                        biased;
                        _ = notify.notified() => None,
                        r = both => Some(r),
                    }
                };
                for c in [&ca, &cb] {
                    if let Call::Delete { s } = c {
                        deleted.insert(*s);
                        if finished.is_none() {
                            self.half_deleted.insert(s);
                        }
                    }
                }
                if let Some((ra, rb)) = finished {
                    *self.world.trigger.lock().unwrap() = Trigger::Off;
                    if !self.world.dead.load(Ordering::SeqCst) {
                        self.check_result(&ca, None, None, &ra, false).await?;
                        self.check_result(&cb, None, None, &rb, false).await?;
                    }
                }
                self.crash().await;
            }
            single => {
                let call = self.resolve(single).await;
                if let Call::Delete { s } = &call {
                    deleted.insert(*s);
                }
                let (pre, worker) = self.load_pre(call.session()).await;
                if let (Call::Dismiss { .. }, Some(batch)) =
                    (&call, pre.as_ref().and_then(|p| p.pending_approval.as_ref()))
                {
                    // Dismissed: what is still pending is denied, so it must never run (unless a
                    // worker's decision made before a crash approved it: that decision stands).
                    for item in batch.pending_items() {
                        let there = worker
                            .as_ref()
                            .and_then(|w| w.pending_approval.as_ref())
                            .and_then(|b| b.item(&item.approval_id));
                        if !there.is_some_and(|i| i.decision == ApprovalDecision::Approved) {
                            self.world.denied.lock().unwrap().insert(item.tool_call.id.clone());
                        }
                    }
                }
                self.world.tool_metadata.lock().unwrap().clear();
                let result = exec(&self.agent, &self.world, &call, &CancellationSignal::new()).await;
                self.check_result(&call, pre.as_ref(), worker.as_ref(), &result, true).await?;
                // Tools of the session saw its metadata (nothing could change it meanwhile).
                let want = pre.map(|p| p.metadata).unwrap_or_default();
                for (session, seen) in std::mem::take(&mut *self.world.tool_metadata.lock().unwrap()) {
                    if session == call.session() && seen != want {
                        return Err(format!(
                            "{call:?}: a tool saw the metadata {seen:?}, the session has {want:?}"
                        ));
                    }
                }
            }
        }
        Ok(deleted)
    }

    /// A call of a pair whose partner worked on the other session: its error is the predicted one.
    fn check_independent(
        &self,
        call: &Call,
        pre: Option<&AgentState>,
        worker: Option<&AgentState>,
        result: &Result<Done, AgentError>,
    ) -> Result<(), String> {
        // A delete or metadata change of the other session never touches this one; but a run may
        // hold both agents' attention only through the shared model and tools.
        let got = result.as_ref().err().map(|e| e.code.to_string());
        let want = call.expected_error(pre, worker).map(str::to_string);
        if got != want {
            return Err(format!(
                "{call:?} (concurrent with another session) gave {got:?}, expected {want:?}"
            ));
        }
        Ok(())
    }

    /// The invariants over everything stored.
    async fn check_invariants(&mut self, deleted: &HashSet<&'static str>) -> Result<(), String> {
        let violations = std::mem::take(&mut *self.world.violations.lock().unwrap());
        if !violations.is_empty() {
            return Err(violations.join("; "));
        }
        let crashed = self.world.crashes.load(Ordering::SeqCst) > 0;
        let ids = self.list_sessions();
        let mut states = HashMap::new();
        for id in &ids {
            let Some(state) = self.load(id).await else { continue };
            states.insert(id.clone(), state);
        }
        // No worker without a session that names it.
        let mut named: HashSet<String> = SESSIONS.iter().map(|s| s.to_string()).collect();
        for state in states.values() {
            named.extend(state.workers.iter().cloned());
        }
        for id in states.keys() {
            if !named.contains(id) {
                return Err(format!("session {id} is stored but no session names it"));
            }
        }
        for (id, state) in &states {
            // What its workers used (each worker's own usage includes its workers'): counted in
            // this session's once its delegating call finished (or a dismissal left it frozen).
            // Unknown when one is gone (a deletion cut short deletes the workers first).
            let workers: Option<u64> =
                state.workers.iter().map(|w| states.get(w).map(|w| w.usage.total_tokens)).sum();
            check_state(id, state, crashed, workers).map_err(|e| format!("session {id}: {e}"))?;
            let repaired = self.inner.load(id).await.unwrap().unwrap();
            let pending: Vec<&str> = match (&repaired.status, &repaired.pending_approval) {
                (RunStatus::AwaitingApproval, Some(_)) => unanswered(&repaired.messages),
                _ => Vec::new(),
            };
            check_pairing(&repaired.messages, &pending)
                .map_err(|e| format!("session {id}: the loaded (repaired) history: {}", e.message))?;
            if let StoreKind::File = self.kind {
                let fresh = FileStore::new(self.root.as_ref().unwrap()).load_unrepaired(id).await.unwrap();
                if fresh.as_ref() != Some(state) {
                    return Err(format!("session {id}: a new FileStore loads another state"));
                }
            }
        }
        // Nothing saved is lost.
        let deleted_too: HashSet<String> = deleted
            .iter()
            .flat_map(|s| {
                let mut all = vec![s.to_string()];
                if let Some(old) = self.seen.get(*s) {
                    all.extend(old.workers.iter().cloned());
                }
                all
            })
            .collect();
        for (id, old) in &self.seen {
            if deleted_too.contains(id) {
                continue;
            }
            let Some(new) = states.get(id) else {
                return Err(format!("session {id} disappeared without a deletion"));
            };
            if !new.messages.starts_with(&old.messages) {
                return Err(format!(
                    "session {id}: the history lost messages ({} before, {} now)",
                    old.messages.len(),
                    new.messages.len()
                ));
            }
            if new.usage.total_tokens < old.usage.total_tokens {
                return Err(format!("session {id}: usage went down"));
            }
        }
        for s in SESSIONS {
            let stored = states.get(s).map(|st| st.metadata.clone()).unwrap_or_default();
            let want = self.metadata.get(s).cloned().unwrap_or_default();
            if stored != want {
                return Err(format!("session {s}: metadata {stored:?}, the test set {want:?}"));
            }
        }
        self.seen = states;
        Ok(())
    }

    /// At the end: every session can still be brought to an answer.
    async fn check_usable(&mut self) -> Result<(), String> {
        let mut deleted = HashSet::new();
        for s in SESSIONS {
            if self.half_deleted.remove(s) {
                deleted.insert(s);
                // "Deleting it again finishes the job".
                self.agent
                    .delete_session(s)
                    .await
                    .map_err(|e| format!("{s}: deleting again failed: {e:?}"))?;
                self.metadata.insert(s, BTreeMap::new());
                if self.load(s).await.is_some() {
                    return Err(format!("{s}: deleting again left the session"));
                }
            }
            for _ in 0..8 {
                let Some(state) = self.load(s).await else { break };
                match state.status {
                    RunStatus::AwaitingApproval => {
                        let batch = state.pending_approval.clone().ok_or("awaiting without a batch")?;
                        for item in batch.pending_items() {
                            let id = &item.approval_id;
                            match self.agent.approve(s, id).await {
                                Ok(b) => self.world.record_decision(&b, id, true),
                                // Denied on the worker before a crash: that decision stands.
                                Err(e) if e.code == codes::APPROVAL_ALREADY_DECIDED => {
                                    let b =
                                        self.agent.deny(s, id, "already denied").await.map_err(|e| {
                                            format!("{s}: denying {id} at the end failed: {e:?}")
                                        })?;
                                    self.world.record_decision(&b, id, false);
                                }
                                Err(e) => {
                                    return Err(format!("{s}: approving {id} at the end failed: {e:?}"))
                                }
                            }
                        }
                        self.agent
                            .resume(s, &NoEvents, &CancellationSignal::new())
                            .await
                            .map_err(|e| format!("{s}: resume at the end failed: {e:?}"))?;
                    }
                    RunStatus::Running => {
                        self.agent
                            .resume(s, &NoEvents, &CancellationSignal::new())
                            .await
                            .map_err(|e| format!("{s}: resume after a crash failed: {e:?}"))?;
                    }
                    _ => break,
                }
            }
            let out = self
                .agent
                .run(s, "plan 0", &NoEvents, &CancellationSignal::new())
                .await
                .map_err(|e| format!("{s}: a last run failed: {e:?}"))?;
            match out {
                RunOutcome::Finished { status: RunStatus::Completed, final_text: Some(t), .. }
                    if t == "done 0" => {}
                other => return Err(format!("{s}: a last run did not answer: {other:?}")),
            }
        }
        self.check_invariants(&deleted).await
    }
}

/// The events of a run, resume or dismissal that returned `outcome` (see the order in
/// `arkagent::agent::events`): `RunStarted` first; `RunFinished` last with the outcome's status and
/// text, or one `ApprovalRequired` with the outcome's batch when suspended; one `ToolResult` per
/// call at most; every worker run that started ends (`RunFinished`) or suspends.
fn check_events(call: &Call, outcome: &RunOutcome, events: &[AgentEvent]) -> Result<(), String> {
    let resumed = !matches!(call, Call::Run { .. });
    match events.first() {
        Some(AgentEvent::RunStarted { session_id, resumed: r, .. })
            if session_id == call.session() && *r == resumed => {}
        other => return Err(format!("the first event is {other:?}")),
    }
    let finished: Vec<&AgentEvent> =
        events.iter().filter(|e| matches!(e, AgentEvent::RunFinished { .. })).collect();
    let required: Vec<&AgentEvent> =
        events.iter().filter(|e| matches!(e, AgentEvent::ApprovalRequired { .. })).collect();
    match outcome {
        RunOutcome::Finished { status, final_text, .. } => {
            match events.last() {
                Some(AgentEvent::RunFinished { status: s, final_text: t, .. })
                    if s == status && t == final_text => {}
                other => return Err(format!("finished {status:?} but the last event is {other:?}")),
            }
            if finished.len() != 1 {
                return Err(format!("{} run_finished events", finished.len()));
            }
        }
        RunOutcome::Suspended { batch } => {
            if !finished.is_empty() {
                return Err("suspended but run_finished was sent".into());
            }
            match required.as_slice() {
                [AgentEvent::ApprovalRequired { batch: b }] if b == batch => {}
                other => return Err(format!("suspended, approval_required events: {}", other.len())),
            }
        }
    }
    let mut results = HashSet::new();
    // Per worker session: is a run open (started, neither finished nor suspended)?
    let mut open: HashMap<String, bool> = HashMap::new();
    for event in events {
        match event {
            AgentEvent::ToolResult { call_id, .. } if !results.insert(call_id.clone()) => {
                return Err(format!("two tool_result events for {call_id}"));
            }
            AgentEvent::WorkerEvent { session_id, event, .. } => {
                let now_open = match event.as_ref() {
                    AgentEvent::RunStarted { .. } => true,
                    AgentEvent::RunFinished { .. } | AgentEvent::ApprovalRequired { .. } => false,
                    _ => continue,
                };
                if now_open && open.get(session_id) == Some(&true) {
                    return Err(format!("worker {session_id} started twice"));
                }
                open.insert(session_id.clone(), now_open);
            }
            _ => {}
        }
    }
    if let Some((worker, _)) = open.iter().find(|(_, o)| **o) {
        return Err(format!("the run of worker {worker} started and never ended"));
    }
    Ok(())
}

/// The unanswered calls of the last assistant message.
fn unanswered(messages: &[ChatMessage]) -> Vec<&str> {
    let Some(pos) = messages.iter().rposition(|m| matches!(m, ChatMessage::Assistant { .. })) else {
        return Vec::new();
    };
    let answered: HashSet<&str> = messages[pos + 1..].iter().filter_map(|m| m.tool_call_id()).collect();
    messages[pos].tool_calls().iter().map(|c| c.id.as_str()).filter(|id| !answered.contains(id)).collect()
}

/// The invariants of one stored (unrepaired) state.
fn check_state(
    id: &str,
    state: &AgentState,
    crashed: bool,
    workers_usage: Option<u64>,
) -> Result<(), String> {
    if state.session_id != id {
        return Err(format!("holds the state of {}", state.session_id));
    }
    let batch = state.pending_approval.as_ref();
    match state.status {
        RunStatus::AwaitingApproval if batch.is_none() => {
            return Err("awaiting approval without a batch".into())
        }
        RunStatus::Running if !crashed => return Err("running, with no crash".into()),
        RunStatus::Idle if !state.messages.is_empty() || batch.is_some() => {
            return Err("idle with a history".into())
        }
        _ => {}
    }
    if let Some(b) = batch {
        if !b.is_fully_decided() && state.status != RunStatus::AwaitingApproval && !crashed {
            return Err(format!("an undecided batch while {:?}", state.status));
        }
        if state.status.is_terminal() {
            return Err(format!("a batch is kept after the run ended {:?}", state.status));
        }
    }
    // Usage: each answer with calls carries 5 tokens (text answers none), counted once; on top,
    // what the workers used, each worker at most once (a crash between a delegating call's
    // result and its usage loses the worker's share, never counts it twice).
    let answers = state.messages.iter().filter(|m| !m.tool_calls().is_empty()).count() as u64;
    let own = 5 * answers;
    let total = state.usage.total_tokens;
    let over = workers_usage.is_some_and(|w| total > own + w);
    if total < own || over || !(total - own).is_multiple_of(5) {
        return Err(format!(
            "usage {total} for {answers} answers with calls and {workers_usage:?} used by its workers"
        ));
    }
    // Pairing, in call order. A run cancelled or aborted (by a hook) mid-batch ends without
    // backfilling the batch: the next load's repair answers it (`Agent::state` shows it repaired).
    let tail_open = matches!(
        state.status,
        RunStatus::AwaitingApproval | RunStatus::Running | RunStatus::Cancelled | RunStatus::Aborted
    );
    let pending = if tail_open { unanswered(&state.messages) } else { Vec::new() };
    check_pairing(&state.messages, &pending).map_err(|e| e.message)?;
    for (i, m) in state.messages.iter().enumerate() {
        let calls = m.tool_calls();
        if calls.is_empty() {
            continue;
        }
        let results: Vec<&str> = state.messages[i + 1..].iter().map_while(|m| m.tool_call_id()).collect();
        let order: Vec<&str> =
            calls.iter().map(|c| c.id.as_str()).filter(|id| results.contains(id)).collect();
        if order != results {
            return Err(format!("message {i}: results {results:?} are not in call order {order:?}"));
        }
    }
    if state.status == RunStatus::AwaitingApproval {
        let b = batch.unwrap();
        if b.worker_session.is_none() {
            let open = unanswered(&state.messages);
            for item in &b.items {
                if !open.contains(&item.tool_call.id.as_str()) {
                    return Err(format!("the item {} is for no open call", item.approval_id));
                }
            }
        }
    }
    Ok(())
}

/// The configuration of the regression tests (and of the property's default case).
fn test_config() -> AgentConfig {
    AgentConfig { max_parallel_tools: 2, ..AgentConfig::default() }
}

/// Varied per case: a round limit that the two-batch plans reach, calls one at a time or two at
/// once, streamed or whole answers.
fn config_strategy() -> impl Strategy<Value = AgentConfig> {
    (prop_oneof![Just(10u32), Just(2u32)], 1usize..=2, any::<bool>()).prop_map(
        |(max_rounds, max_parallel_tools, streaming)| AgentConfig {
            max_rounds,
            max_parallel_tools,
            streaming,
            ..AgentConfig::default()
        },
    )
}

async fn run_case(kind: StoreKind, config: AgentConfig, ops: &[Op]) -> Result<(), String> {
    let mut h = Harness::with_config(kind, config);
    for (i, op) in ops.iter().enumerate() {
        let deleted = h.step(op).await.map_err(|e| format!("step {i} {op:?}: {e}"))?;
        h.check_invariants(&deleted).await.map_err(|e| format!("after step {i} {op:?}: {e}"))?;
    }
    h.check_usable().await.map_err(|e| format!("at the end: {e}"))
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
}

fn cases() -> u32 {
    std::env::var(CASES_ENV).ok().and_then(|v| v.parse().ok()).unwrap_or(DEFAULT_CASES)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), max_shrink_iters: 4000, ..ProptestConfig::default() })]

    #[test]
    fn the_api_keeps_its_invariants_under_interleavings_and_crashes(
        file in any::<bool>(),
        config in config_strategy(),
        ops in prop::collection::vec(op_strategy(), 1..16),
    ) {
        let kind = if file { StoreKind::File } else { StoreKind::Memory };
        let result = runtime().block_on(run_case(kind, config, &ops));
        if std::env::var_os("ARKAGENT_INTERLEAVE_STATS").is_some() {
            eprintln!("{:?}", STATS.lock().unwrap());
        }
        prop_assert!(result.is_ok(), "{}", result.unwrap_err());
    }
}

// ---------------------------------------------------------------------------------------------
// Regressions: the minimal sequences the property found, each with its symptom asserted directly.

/// The results after the assistant message at `index`, as call ids.
fn result_ids(state: &AgentState, index: usize) -> Vec<String> {
    state.messages[index + 1..].iter().map_while(|m| m.tool_call_id().map(str::to_string)).collect()
}

/// Bug 1: a crash while an idempotent call (`idem`) and a non-idempotent one (`look`) of one batch
/// run; `resume` answered `look` as interrupted at once (repair) and `idem` only after it ran
/// again, so the results were not in call order.
#[tokio::test]
async fn regression_a_crash_then_resume_answers_in_call_order() {
    let mut h = Harness::new(StoreKind::Memory);
    // Points: 1 the run's first commit, 2 the model, 3 the batch's `started` commit (written).
    h.step(&Op::Crash { op: Some(Box::new(Op::Run { s: 0, plan: 5 })), at: 3, after_write: true })
        .await
        .unwrap();
    let out = h.agent.resume("s0", &NoEvents, &CancellationSignal::new()).await.unwrap();
    assert_eq!(out.status(), RunStatus::Completed);
    let state = h.load("s0").await.unwrap();
    assert_eq!(result_ids(&state, 1), ["c0", "c1"], "{:#?}", state.messages);
}

/// Bug 2: cancelling a run while its `delegate_task` call runs the worker dropped the worker's
/// future at once, so the worker never recorded its own cancelled end: its session stayed
/// `running` (with an unanswered call) for good, and the hooks it shares with the parent never
/// heard its run end.
#[tokio::test]
async fn regression_a_cancel_ends_the_worker_too() {
    let mut h = Harness::new(StoreKind::Memory);
    h.step(&Op::Run { s: 1, plan: 6 }).await.unwrap();
    h.step(&Op::Approve { s: 1, pick: 0 }).await.unwrap();
    // Points: 1 the parent's `started` commit, 2 the worker's `started` commit (then cancelled).
    h.step(&Op::Cancelled { op: Box::new(Op::Resume { s: 1 }), at: 2 }).await.unwrap();
    let parent = h.load("s1").await.unwrap();
    assert_eq!(parent.status, RunStatus::Cancelled);
    for worker in &parent.workers {
        let state = h.load(worker).await.unwrap();
        assert_ne!(state.status, RunStatus::Running, "the worker {worker} was left running");
    }
}

/// Bug 3: `resume` of a session that has nothing to resume (here cancelled mid-batch) repaired and
/// saved its history before it refused with `invalid_state`, with the policy meant for a resumed
/// run: the idempotent `delegate_task` call was left unanswered, the `look` call answered, and the
/// next `run` answered `delegate_task` after `look`, out of call order.
#[tokio::test]
async fn regression_a_refused_resume_writes_nothing() {
    let mut h = Harness::new(StoreKind::Memory);
    // Points: 1 the run's first commit, 2 the model, 3 the batch's `started` commit (cancelled).
    h.step(&Op::Cancelled { op: Box::new(Op::Run { s: 0, plan: 7 }), at: 3 }).await.unwrap();
    let before = h.load("s0").await.unwrap();
    assert_eq!(before.status, RunStatus::Cancelled);
    let err = h.agent.resume("s0", &NoEvents, &CancellationSignal::new()).await.unwrap_err();
    assert_eq!(err.code, codes::INVALID_STATE);
    assert_eq!(h.load("s0").await.unwrap(), before, "a refused resume wrote the session");
    h.agent.run("s0", "plan 0", &NoEvents, &CancellationSignal::new()).await.unwrap();
    let state = h.load("s0").await.unwrap();
    assert_eq!(result_ids(&state, 1), ["c0", "c1"], "{:#?}", state.messages);
}

/// Bug 4: a run cancelled while it settles an approved batch (here: a resume cancelled before it
/// starts) ends `cancelled` but keeps the frozen batch: `Agent::state` (and the ArkTS
/// `pendingApproval()`) still show a batch that can no longer be resumed (`invalid_state`),
/// decided (`approval_already_decided`) or dismissed (`no_pending_approval`).
#[tokio::test]
async fn regression_a_cancelled_resume_keeps_no_batch() {
    let mut h = Harness::new(StoreKind::Memory);
    h.step(&Op::Run { s: 0, plan: 2 }).await.unwrap();
    h.step(&Op::Approve { s: 0, pick: 0 }).await.unwrap();
    h.step(&Op::Cancelled { op: Box::new(Op::Resume { s: 0 }), at: 0 }).await.unwrap();
    let state = h.load("s0").await.unwrap();
    assert_eq!(state.status, RunStatus::Cancelled);
    assert_eq!(state.pending_approval, None, "a cancelled session still shows its frozen batch");
    assert!(h.world.executions.lock().unwrap().is_empty(), "the cancelled resume ran nothing");
    // The next run answers the call that never ran, and goes on.
    let out = h.agent.run("s0", "plan 0", &NoEvents, &CancellationSignal::new()).await.unwrap();
    assert_eq!(out.status(), RunStatus::Completed);
    let state = h.load("s0").await.unwrap();
    check_pairing(&state.messages, &[]).unwrap();
}
