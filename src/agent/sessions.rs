//! The listing of the sessions an agent's store holds ([`Agent::list_sessions`]): one
//! [`SessionSummary`] per session, what a chat app shows in its list of conversations (a title,
//! the status, whether a decision waits, when it was last written) and what it needs after a
//! restart to offer to continue a run a kill cut short ([`SessionSummary::interrupted`]), told
//! apart from a run another process is going on with now ([`SessionSummary::busy`]).

use super::driver::Agent;
use super::machine::{phase, Phase};
use crate::error::AgentError;
use crate::message::ChatMessage;
use crate::state::{AgentState, RunStatus, StateStore};
use futures_util::stream::{self, StreamExt};
use serde::Serialize;
use std::collections::HashMap;

/// The longest [`SessionSummary::title`], in characters (Unicode scalar values); a longer first
/// message is cut on a character boundary and ends with `…` (which counts in the limit).
pub const SESSION_TITLE_CHARS: usize = 60;

/// How many sessions a listing loads at once (each load is a blocking read on a file store).
const LOADS_AT_ONCE: usize = 4;

/// What a listing's load of one session found.
enum Loaded {
    Read(Box<AgentState>),
    Unreadable(AgentError),
    Gone,
}

/// One session of a listing ([`Agent::list_sessions`]). Serialised with snake_case keys, as
/// [`AgentState`] is (the bindings' `listSessionsJson`). Non-exhaustive: fields may be added.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[non_exhaustive]
pub struct SessionSummary {
    /// The session id.
    pub session_id: String,
    /// Where its run stands ([`AgentState::status`]); `None` when the session could not be read
    /// (see [`error`](Self::error)).
    pub status: Option<RunStatus>,
    /// A frozen batch waits for the user's decisions (at least one item undecided: the run's
    /// [`phase`] is [`Phase::AwaitingApproval`]): show approve / deny, then [`Agent::resume`]
    /// (which, before every item is decided, refuses with `approval_pending` or returns the batch
    /// suspended again, running nothing).
    pub approval_pending: bool,
    /// The run stopped part way, [`Agent::resume`] continues it, and nothing of this agent
    /// continues it now: the session is `running` (the process died or was killed mid-run), or
    /// awaits approval with nothing left to decide (killed between the last decision and the
    /// resume), and its [`phase`] has something to do: ask the model, run or settle the calls
    /// of its last answer (a call that had started and not finished is answered
    /// `tool_interrupted`, never run twice), or complete the run with the answer that came. A
    /// `running` session with nothing to do (no history) is not interrupted: `resume` returns it
    /// as it stands, running nothing. A new [`Agent::run`] message also moves on from an
    /// interrupted run.
    /// Never with [`busy`](Self::busy): a session another agent or process is running now was
    /// not cut short (its `resume` would fail with `session_busy`). A store that cannot tell
    /// ([`StateStore::lease_held`] answers unknown: an
    /// app's own store) lists such a session interrupted.
    pub interrupted: bool,
    /// Another agent or process holds the session now (its store's lease, e.g. a process on the
    /// same [`FileStore`](crate::state::FileStore) root running it, or another [`Agent`] on the
    /// same store), not a call of this agent: it is being run or decided elsewhere, so it is not
    /// [`interrupted`](Self::interrupted), and `resume`, `run` or a decision fails with
    /// `session_busy` until it is released (list again later: a holder that was killed releases
    /// it). Its fields are as that holder last wrote them. Looked at, once the session is
    /// loaded, for a run that stands part way (`running` or awaiting approval) only: a session
    /// whose last commit ended its run is never busy (another process changing its metadata, or
    /// a run there that has not yet written its start, is not seen). False when the store cannot
    /// tell, and for an unreadable session.
    pub busy: bool,
    /// Messages in its history (system, user, answers, tool results), as [`Agent::state`] reads
    /// it (repaired: an interrupted call counts its `tool_interrupted` result).
    pub message_count: usize,
    /// When the session was last written, in ms since the Unix epoch, when the store tells
    /// ([`StateStore::updated_at_ms`]); sort by it for a
    /// most-recent-first list.
    pub updated_at_ms: Option<u64>,
    /// The first user message, on one line (whitespace runs made one space), at most
    /// [`SESSION_TITLE_CHARS`] characters; `None` before any user message.
    pub title: Option<String>,
    /// The last visible message (the user's, or an answer's text; tool results and calls without
    /// text skipped), on one line and cut as the title: the preview line of a chat list. `None`
    /// before any.
    pub last_message: Option<String>,
    /// The error that ended the last run (`failed`, `aborted`...: [`AgentState::run_error`]), e.g.
    /// `provider_auth`, so a list can say why a conversation stopped. Not a load error (that is
    /// [`error`](Self::error)).
    pub run_error: Option<AgentError>,
    /// For a worker session (a `delegate_task` call's): the session that delegated. Known from
    /// the worker's state ([`AgentState::delegation`]) or, for workers saved before it existed
    /// and for an unreadable worker, from the parent session naming it in its
    /// [`workers`](AgentState::workers).
    pub parent_session: Option<String>,
    /// The error a load of the session gave (`state_corrupt`, `state_version_unsupported`,
    /// `state_io`...), its code stable: the session is listed all the same (an app may show it as
    /// damaged and offer to delete it), its state fields empty.
    pub error: Option<AgentError>,
}

/// What [`Agent::resume`] does with a session read as `state` (see [`SessionSummary`]): whether
/// it waits for decisions (resume refuses with `approval_pending`, or returns the batch suspended
/// again), and whether resume continues a run (asks the model, runs or settles a batch, or
/// completes the run with the answer that came). Follows [`phase`], as the resumed run does; a
/// session that is neither has nothing to resume (ended, idle, or a run with no history).
fn resume_would(state: &AgentState) -> (bool, bool) {
    match phase(state) {
        Phase::AwaitingApproval => (true, false),
        Phase::Inactive => (false, false),
        Phase::NeedsModel
        | Phase::ToolBatch { .. }
        | Phase::ApprovedBatch { .. }
        | Phase::Answered { .. } => (false, true),
    }
}

/// A session's state as a listing reads it, with when it was last written.
async fn load_one(store: &dyn StateStore, id: &str) -> (Loaded, Option<u64>) {
    let loaded = match store.load(id).await {
        Ok(Some(state)) => Loaded::Read(Box::new(state)),
        // Deleted between the listing and the load: not listed.
        Ok(None) => Loaded::Gone,
        Err(e) => Loaded::Unreadable(e),
    };
    match (loaded, store.updated_at_ms(id).await) {
        (Loaded::Read(_), Err(e)) => (Loaded::Unreadable(e), None),
        (loaded, updated) => (loaded, updated.ok().flatten()),
    }
}

/// Whether the store says a lease holds the session now; `false` when it cannot tell or the look
/// fails (logged: a listing never fails for it).
async fn lease_held(store: &dyn StateStore, session_id: &str) -> bool {
    match store.lease_held(session_id).await {
        Ok(held) => held.unwrap_or(false),
        Err(e) => {
            log::warn!("arkagent: whether session {session_id} is held could not be told: {e}");
            false
        }
    }
}

/// The title of a history: its first user message, whitespace runs made one space, cut to
/// [`SESSION_TITLE_CHARS`] characters on a character boundary.
pub(crate) fn session_title(messages: &[ChatMessage]) -> Option<String> {
    let text = messages.iter().find_map(|m| match m {
        ChatMessage::User { content } => Some(content.as_str()),
        _ => None,
    })?;
    Some(one_line_cut(text))
}

/// The preview of a history: its last user message or answer text, cut as the title.
pub(crate) fn session_preview(messages: &[ChatMessage]) -> Option<String> {
    let text = messages.iter().rev().find_map(|m| match m {
        ChatMessage::User { content } => Some(content.as_str()),
        ChatMessage::Assistant { content: Some(text), .. } if !text.trim().is_empty() => Some(text.as_str()),
        _ => None,
    })?;
    Some(one_line_cut(text))
}

/// `text` on one line (whitespace runs made one space), at most [`SESSION_TITLE_CHARS`]
/// characters, cut on a character boundary with `…`.
fn one_line_cut(text: &str) -> String {
    let one_line = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if one_line.chars().count() <= SESSION_TITLE_CHARS {
        return one_line;
    }
    let mut cut: String = one_line.chars().take(SESSION_TITLE_CHARS - 1).collect();
    cut.truncate(cut.trim_end().len());
    cut.push('…');
    cut
}

impl Agent {
    /// The top-level sessions (conversations) the store holds, in the store's order (sorted by
    /// id): one [`SessionSummary`] each. Worker sessions (a `delegate_task` call's, deleted with
    /// their parent) are left out while their parent is listed; a worker whose parent is gone (a
    /// corrupt parent deleted leaves its workers) is listed, with its
    /// [`parent_session`](SessionSummary::parent_session), so the app can delete it.
    /// [`list_all_sessions`](Self::list_all_sessions) includes every worker.
    ///
    /// Reads only: no lease is taken, nothing is written (no repair made durable), a session this
    /// agent is running is read as its last commit left it (`running`, not `interrupted`), one
    /// another agent or process holds is [`busy`](SessionSummary::busy) (the store tells, from
    /// its leases: [`StateStore::lease_held`]). A
    /// session that cannot be read is listed with its [`error`](SessionSummary::error) instead of
    /// failing the listing. (A [`FileStore`](crate::state::FileStore)'s first listing sweeps
    /// what killed deletions left in its trash; see [`StateStore::list`].)
    ///
    /// # Errors
    /// The store's [`list`](crate::state::StateStore::list) errors: `state_list_unsupported` (an
    /// app's store that cannot list), `state_io` (the root cannot be read).
    pub async fn list_sessions(&self) -> Result<Vec<SessionSummary>, AgentError> {
        let mut all = self.list_all_sessions().await?;
        // A worker whose parent is gone (its parent's deletion left it: a parent no load read)
        // goes with nothing: it is listed, so the app can see it and delete it, as
        // `delete_session` deletes it as any session.
        let listed: std::collections::HashSet<String> = all.iter().map(|s| s.session_id.clone()).collect();
        all.retain(|s| s.parent_session.as_ref().is_none_or(|parent| !listed.contains(parent)));
        Ok(all)
    }

    /// Every session the store holds, the workers' included (each with its
    /// [`parent_session`](SessionSummary::parent_session)), sorted by id. As
    /// [`list_sessions`](Self::list_sessions) otherwise.
    ///
    /// # Errors
    /// As [`list_sessions`](Self::list_sessions).
    pub async fn list_all_sessions(&self) -> Result<Vec<SessionSummary>, AgentError> {
        let store = self.store();
        let ids = store.list().await?;
        let loaded: Vec<(String, Loaded, Option<u64>, bool, bool)> = stream::iter(ids)
            .map(|id| async move {
                // Whether a call of this agent held the session at any moment around the load
                // (before it: a run that ends while the listing goes on left the `running` it
                // read; after it: a run that began meanwhile; taken in between: a run that began
                // and ended within the load). Looked at once all loads are done, a run that ended
                // in between looked cut short.
                let before = self.session_in_use(&id);
                let (mut loaded, mut updated) = load_one(&**store, &id).await;
                let mut in_use = before.held_until(self.session_in_use(&id));
                // Whether another agent or process holds the session (a lease this agent's calls
                // did not take). Only a run that stands part way can be going on elsewhere or
                // have been cut short, so only such a session's lease is looked at (a file probe
                // each: most sessions have ended). Unknown (an error, or a store that cannot
                // tell) is not held.
                let mut busy = false;
                if !in_use && matches!(&loaded, Loaded::Read(state) if state.status.is_part_way()) {
                    busy = lease_held(&**store, &id).await;
                    if busy {
                        // A call of this agent that took the session since the load holds the
                        // lease the look found: its own, not another's (`holds` counts a hold
                        // before its lease is taken).
                        in_use = before.held_until(self.session_in_use(&id));
                        busy = !in_use;
                    } else {
                        // Free now: a holder that let go since the load may have moved the run on
                        // (ended it): what is listed is read after the look.
                        let again = self.session_in_use(&id);
                        (loaded, updated) = load_one(&**store, &id).await;
                        in_use = again.held_until(self.session_in_use(&id));
                    }
                }
                (id, loaded, updated, in_use, busy)
            })
            .buffered(LOADS_AT_ONCE)
            .collect()
            .await;
        // Workers saved before `delegation` existed, and unreadable ones, are known by the
        // parent that names them.
        let mut named_by: HashMap<&str, &str> = HashMap::new();
        for (id, state, _, _, _) in &loaded {
            if let Loaded::Read(state) = state {
                for worker in &state.workers {
                    named_by.entry(worker.as_str()).or_insert(id.as_str());
                }
            }
        }
        let mut summaries = Vec::with_capacity(loaded.len());
        for (id, state, updated_at_ms, in_use, busy) in &loaded {
            let named_parent = named_by.get(id.as_str()).map(|p| p.to_string());
            let summary = match state {
                Loaded::Gone => continue,
                Loaded::Unreadable(e) => SessionSummary {
                    session_id: id.clone(),
                    status: None,
                    approval_pending: false,
                    interrupted: false,
                    busy: *busy,
                    message_count: 0,
                    updated_at_ms: *updated_at_ms,
                    title: None,
                    last_message: None,
                    run_error: None,
                    parent_session: named_parent,
                    error: Some(e.clone()),
                },
                Loaded::Read(state) => {
                    let (approval_pending, continues) = resume_would(state);
                    // A session a run holds counts its messages as saved, as its state shows them
                    // (`Agent::state`): the repair's results for its running calls are not there.
                    let mut message_count = state.messages.len();
                    if *in_use || *busy {
                        if let Ok(Some(saved)) = store.load_unrepaired(id).await {
                            message_count = saved.messages.len();
                        }
                    }
                    SessionSummary {
                        session_id: id.clone(),
                        status: Some(state.status),
                        approval_pending,
                        interrupted: continues && !in_use && !busy,
                        busy: *busy,
                        message_count,
                        updated_at_ms: *updated_at_ms,
                        title: session_title(&state.messages),
                        last_message: session_preview(&state.messages),
                        run_error: state.run_error.clone(),
                        parent_session: state
                            .delegation
                            .as_ref()
                            .map(|d| d.parent_session.clone())
                            .or(named_parent),
                        error: None,
                    }
                }
            };
            summaries.push(summary);
        }
        Ok(summaries)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_title_is_the_first_user_message_on_one_line() {
        let messages = vec![
            ChatMessage::system("be brief"),
            ChatMessage::user("  帮我\n烤  一个\t蛋糕 "),
            ChatMessage::user("second"),
        ];
        assert_eq!(session_title(&messages).as_deref(), Some("帮我 烤 一个 蛋糕"));
        assert_eq!(session_title(&[ChatMessage::system("s")]), None);
    }

    #[test]
    fn the_preview_is_the_last_visible_message() {
        let call = crate::message::ToolCall::new("c1", "t", "{}");
        let messages = vec![
            ChatMessage::user("first"),
            ChatMessage::assistant_text("an   answer\n"),
            ChatMessage::user("second question"),
            ChatMessage::Assistant { content: None, reasoning_content: None, tool_calls: vec![call] },
            ChatMessage::Tool {
                tool_call_id: "c1".into(),
                name: "t".into(),
                content: "r".into(),
                is_error: false,
            },
        ];
        assert_eq!(session_preview(&messages).as_deref(), Some("second question"));
        assert_eq!(session_preview(&messages[..2]).as_deref(), Some("an answer"));
        assert_eq!(session_preview(&[ChatMessage::system("s")]), None);
    }

    #[test]
    fn a_long_title_is_cut_on_a_char_boundary() {
        let long = "蛋".repeat(SESSION_TITLE_CHARS + 10);
        let title = session_title(&[ChatMessage::user(long)]).unwrap();
        assert_eq!(title.chars().count(), SESSION_TITLE_CHARS);
        assert!(title.ends_with('…'));
        assert_eq!(title.chars().filter(|c| *c == '蛋').count(), SESSION_TITLE_CHARS - 1);
        let exact = "a".repeat(SESSION_TITLE_CHARS);
        assert_eq!(session_title(&[ChatMessage::user(exact.clone())]), Some(exact));
        // A space before the cut is not kept before the ellipsis.
        let spaced = format!("{} {}", "a".repeat(SESSION_TITLE_CHARS - 2), "b".repeat(20));
        let title = session_title(&[ChatMessage::user(spaced)]).unwrap();
        assert_eq!(title, format!("{}…", "a".repeat(SESSION_TITLE_CHARS - 2)));
    }
}
