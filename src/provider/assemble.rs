//! Stream assembly: SSE payloads (`chat.completion.chunk`) in, [`ModelEvent`]s out, with every
//! provider difference normalised in this one place.
//!
//! Merging a call fragment: the key is its `index` when present, else its non-empty `id`, else the
//! previous call. An `id` or `name` that is `""` never overwrites (Qwen, GLM continuations); a name
//! may arrive late, or in pieces, which are joined (but for a piece that repeats the whole name so
//! far: providers that send it in every fragment); several calls may share one delta (Mistral);
//! indexes may start at 1 (Claude through a compatible endpoint) and are renumbered from 0 in
//! order of appearance; a known index that arrives with a different non-empty id goes to the call
//! of that id, else starts a new call when the fragment names a tool or has no `function` (gateways
//! that send every call as index 0), while one with arguments and no name continues the call at
//! its index (Poolside sends a call's later fragments with another id than its name's); a new
//! index starts a new call, even with the id of an earlier call, unless it repeats that call whole
//! (below). After its call's arguments
//! form a whole JSON value, a fragment without the call's id that names a tool and brings
//! arguments that start a value (`{`, `[`), or no arguments and another name, starts a new call
//! too (Gemini's compatible endpoint sends each parallel call at index 0, without an id, whole
//! name and arguments each); one with the call's id is that call (arguments joined to whole ones
//! are not JSON then: nothing runs). A fragment that repeats a call whole (the same name and the
//! same whole arguments) with the call's id, or without an id, or for a call that has none, is
//! dropped, so the call runs once: gateways that stream a call, then send it again in one chunk,
//! at its index or at a new one (any earlier call there, even the second of two with one id).
//! The same whole arguments are the same JSON value: whitespace and the order of an object's
//! keys aside (parsed only for a fragment that names the call's tool and whose text differs).
//! One with an id other than the call's is another call, even the same one (gateways that send
//! every call at index 0; a model may ask twice), and runs as in a whole answer. Ids are made
//! unique within the answer before they are announced (`call_<n>` for a missing one, `<id>_<n>` for a repeated one): each result is
//! paired with its call by id; fragments are matched by the id the provider sent, which a call
//! made unique keeps for its later fragments.
//! A call is announced (`ToolCallStarted`) once its name is whole, so the event names the tool the
//! answer will: when its arguments start, when a fragment of another call comes, or at the end
//! (the arguments that came before the announcement follow it in one piece; a piece of the name
//! that came after it would still join the call, not the event).
//! Arguments are appended as text; an object is serialised; empty arguments become `{}` at the
//! end, and text that is not valid JSON is kept as it is (the registry reports it).
//! `tool_calls` that is `null` or not an array, an entry that is not an object and a `function`
//! that is not an object add nothing (read as leniently as a whole answer's, see
//! [`wire::chunk`](super::wire::chunk)), and a call none of whose fragments had a `function` is
//! left out at the end, as a whole answer's entry without one is.
//! `tool_calls: []`, usage-only chunks with `choices: []` and `finish_reason: "stop"` despite
//! tool calls are all fine: the calls are what the stream contained.
//!
//! A payload is first read on the fast path (`chunk_read`: into a record on the stack, no `Vec`s);
//! one it does not read (an error in the stream, bad JSON, odd shapes) is parsed into
//! [`ChatCompletionChunk`] as before, which decides. Either way the assembler changes only after the
//! whole payload was read.
//!
//! A payload that neither reads because it holds the `\u` escape of a lone UTF-16 surrogate (a JS
//! gateway that slices text by UTF-16 index writes `"\ud83d"` in one chunk, `"\ude00"` in the
//! next; `JSON.parse`, the official Node SDK's reader, accepts them) is read with each such escape
//! a U+FFFD, as a whole answer's body is. In the content and the reasoning the two halves of a
//! character cut across two chunks are joined: a high half that ends a piece is held back until
//! the next piece of that text (or the end). A call's arguments keep the U+FFFDs (the registry
//! reads the arguments whole). Only a payload that failed to read is looked at again: the usual
//! one costs nothing more.

use super::chunk_read::{read_chunk, ChunkRecord};
use super::convert::{
    error_of_body, legacy_function_call_error, normalise_arguments, parse_response, raw_excerpt,
};
use super::sse::SseParser;
use super::wire::{is_choice_zero, ChatCompletionChunk, ProviderErrorDetail, WireArguments, WireContent};
use super::{ModelEvent, ModelResponse};
use crate::error::{codes, AgentError};
use crate::json::{lone_surrogate_escapes_mapped, lone_surrogate_escapes_replaced};
use crate::message::{unique_call_id, ToolCall, Usage};
use std::borrow::Cow;

#[derive(Debug, Default)]
struct CallSlot {
    /// The id the call is announced with: the provider's, made unique within the answer when it
    /// starts (see [`StreamAssembler::make_id_unique`]).
    id: String,
    /// The first non-empty id the provider sent for the call, which its later fragments repeat:
    /// what they are matched by, whatever the call was announced as.
    wire_id: String,
    name: String,
    arguments: String,
    started: bool,
    /// A fragment of the call had a `function` object: a call that never had one names nothing
    /// to run and is left out at the end, as a whole answer's entry without a `function` is.
    has_function: bool,
}

impl CallSlot {
    /// Not announced yet and has an id and a name. The name may still be incomplete (it may come
    /// in pieces): the call is announced once its arguments start, a fragment of another call
    /// comes or the answer ends (see [`StreamAssembler::merge`]).
    fn can_announce(&self) -> bool {
        !self.started && !self.id.is_empty() && !self.name.is_empty()
    }
}

/// Assembles the payloads of one streamed answer.
#[derive(Debug, Default)]
pub struct StreamAssembler {
    calls: Vec<CallSlot>,
    index_map: Vec<(u32, usize)>,
    last: Option<usize>,
    content: String,
    reasoning: String,
    finish_reason: Option<String>,
    usage: Option<Usage>,
    finished: bool,
    /// Answer data (text, reasoning, a call fragment) came after a finish reason: this provider
    /// sends finish reasons before the end (Gemini's intermediate tool-call chunks through some
    /// gateways, a finish reason after every call), so none of them says the answer is complete.
    data_after_finish: bool,
    /// Answer data came since the last finish reason (or none came yet): a stream cut off here
    /// may have been cut inside the answer (see [`ends_on_finish_reason`](Self::ends_on_finish_reason)).
    data_since_finish: bool,
    /// A delta of choice 0 had a legacy `function_call` (see [`check_calls`](Self::check_calls)).
    legacy_function_call: bool,
    /// The provider's error that ended the stream, when it sent one (see
    /// [`provider_error`](Self::provider_error)).
    failure: Option<ProviderErrorDetail>,
    /// A lone high surrogate escape that ended the last piece of the content (`[0]`) or the
    /// reasoning (`[1]`), held back: the next piece may start with its low half (see
    /// [`push_cut_payload`](Self::push_cut_payload)).
    held_high: [Option<u32>; 2],
    /// The cut characters at the edges of the content and the reasoning of the payload being read
    /// leniently (see [`push_cut_payload`](Self::push_cut_payload)).
    cut_edges: Option<[CutEdges; 2]>,
}

/// Where a piece of text of a payload read leniently begins with a lone low surrogate escape
/// (its code unit) and ends with a lone high one: the halves of a character a gateway cut across
/// two chunks.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct CutEdges {
    starts_low: Option<u32>,
    ends_high: Option<u32>,
}

impl StreamAssembler {
    /// An empty assembler.
    pub fn new() -> Self {
        StreamAssembler::default()
    }

    /// True once a choice reported a finish reason.
    pub fn saw_finish_reason(&self) -> bool {
        self.finish_reason.is_some()
    }

    /// True once a finish reason came and no answer data (text, reasoning, a call fragment) ever
    /// came after one: the answer looks complete, only the usage chunk and `[DONE]` should follow.
    /// Once data followed a finish reason, the stream's finish reasons are known to come early and
    /// this stays false (the client then waits the idle limit, not the one after the finish
    /// reason, for the rest).
    pub fn answer_looks_complete(&self) -> bool {
        self.finish_reason.is_some() && !self.data_after_finish
    }

    /// True when a finish reason came and no answer data after the last one: a stream that ends
    /// or breaks off here without `[DONE]` is taken as complete. Not when data followed the last
    /// finish reason (a provider that sends them early, then a call cut off after its name): the
    /// stream may have been cut inside the answer.
    pub fn ends_on_finish_reason(&self) -> bool {
        self.finish_reason.is_some() && !self.data_since_finish
    }

    /// True once [`finish`](Self::finish) ran.
    pub fn is_finished(&self) -> bool {
        self.finished
    }

    /// The error the provider sent inside the stream, when a payload was one (its code and form,
    /// which the error returned for it keeps only as text): the client reads it to retry a rate
    /// limit or a failure on the provider's side that came before any answer data.
    pub fn provider_error(&self) -> Option<&ProviderErrorDetail> {
        self.failure.as_ref()
    }

    /// The error of the provider's error `detail`, which is kept (see
    /// [`provider_error`](Self::provider_error)).
    fn fail(&mut self, detail: ProviderErrorDetail) -> AgentError {
        let e = stream_error(&detail);
        self.failure = Some(detail);
        e
    }

    /// The last usage report so far (what [`finish`](Self::finish) will report).
    pub fn usage(&self) -> Option<Usage> {
        self.usage
    }

    /// Takes one SSE payload. Returns `true` for the `[DONE]` sentinel. Empty payloads
    /// (keep-alives) are ignored, and so are non-JSON payloads of named events other than
    /// `message` and `error`.
    ///
    /// # Errors
    /// `provider_decode` (with the raw payload) for a payload that is not a chunk;
    /// `provider_http_status` for an error sent inside the stream (`{"error": ...}`, an
    /// `event: error`, or a payload with no choices and no usage whose `message` or `msg` is text:
    /// the top-level form of [`ProviderErrorDetail::of_body`]).
    pub fn push_payload(
        &mut self,
        event: Option<&str>,
        data: &str,
        out: &mut Vec<ModelEvent>,
    ) -> Result<bool, AgentError> {
        self.push(event, data, out, true)
    }

    /// [`push_payload`](Self::push_payload) with every payload read the derived way
    /// (`ChatCompletionChunk`), never in place: the reference the in-place read is tested against
    /// (`tests/sse_fast_path.rs`). Same results, slower.
    ///
    /// # Errors
    /// As [`push_payload`](Self::push_payload).
    #[doc(hidden)]
    pub fn push_payload_derived(
        &mut self,
        event: Option<&str>,
        data: &str,
        out: &mut Vec<ModelEvent>,
    ) -> Result<bool, AgentError> {
        self.push(event, data, out, false)
    }

    fn push(
        &mut self,
        event: Option<&str>,
        data: &str,
        out: &mut Vec<ModelEvent>,
        in_place: bool,
    ) -> Result<bool, AgentError> {
        // A chunk object needs no trimming (its ends are not whitespace): the usual case.
        let trimmed = match data.as_bytes() {
            [b'{', .., b'}'] => data,
            _ => data.trim(),
        };
        if trimmed.is_empty() {
            return Ok(false);
        }
        if trimmed == "[DONE]" {
            return Ok(true);
        }
        let is_error_event = event == Some("error");
        if in_place && !is_error_event {
            // The usual payload is read in place; anything else is read below, which decides.
            if let Ok(record) = read_chunk(data) {
                if record.choice.is_none() && record.usage.is_none() {
                    if let Some(detail) = top_level_error(data) {
                        return Err(self.fail(detail));
                    }
                }
                self.push_record(record, out);
                return Ok(false);
            }
        }
        match serde_json::from_str::<ChatCompletionChunk<'_>>(data) {
            Ok(chunk) => {
                if let Some(err) = chunk.error {
                    // The whole payload read as an error body: `{"error": true, ...}` has the
                    // error's details beside the flag.
                    return Err(self.fail(ProviderErrorDetail::of_body(data).unwrap_or(*err)));
                }
                if chunk.failed_base_resp {
                    // MiniMax's failed status, beside choices too (1027: the answer withheld by
                    // moderation; see `wire::error`): the stream's error, not more of the answer.
                    if let Some(detail) = ProviderErrorDetail::of_body(data) {
                        return Err(self.fail(detail));
                    }
                }
                if is_error_event {
                    return Err(AgentError::of(
                        codes::PROVIDER_HTTP_STATUS,
                        format!("error event in stream: {}", raw_excerpt(data.as_bytes())),
                    ));
                }
                if chunk.choices.is_empty() && chunk.usage.is_none() {
                    if let Some(detail) = top_level_error(data) {
                        return Err(self.fail(detail));
                    }
                }
                self.push_chunk(chunk, out);
                Ok(false)
            }
            Err(e) => {
                if let Cow::Owned(fixed) = lone_surrogate_escapes_replaced(data) {
                    return self.push_cut_payload(event, data, &fixed, out, in_place);
                }
                if is_error_event {
                    return Err(AgentError::of(
                        codes::PROVIDER_HTTP_STATUS,
                        format!("error event in stream: {}", raw_excerpt(data.as_bytes())),
                    ));
                }
                if matches!(event, Some(name) if name != "message") {
                    log::debug!("ignoring a non-JSON payload of SSE event {event:?}");
                    return Ok(false);
                }
                Err(AgentError::of(
                    codes::PROVIDER_DECODE,
                    format!("invalid stream chunk ({e}); raw payload: {}", raw_excerpt(data.as_bytes())),
                ))
            }
        }
    }

    /// Takes a payload that holds the escape of a lone UTF-16 surrogate (`"\ud83d"` in one chunk,
    /// `"\ude00"` in the next: a JS gateway that slices text by UTF-16 index cut an emoji), which
    /// serde_json refuses and `JSON.parse` (the official Node SDK) accepts: read as `fixed`, each
    /// such escape a U+FFFD. In the content and the reasoning, a high half that ends one piece is
    /// held back and joined with a low half that starts the next piece of the same text; without
    /// one, it is a U+FFFD after all. A call's arguments, its id and name keep the U+FFFD.
    ///
    /// Only a payload that failed to parse comes here: the usual payload pays nothing.
    fn push_cut_payload(
        &mut self,
        event: Option<&str>,
        data: &str,
        fixed: &str,
        out: &mut Vec<ModelEvent>,
        in_place: bool,
    ) -> Result<bool, AgentError> {
        self.cut_edges = Some(cut_edges(data));
        let pushed = self.push(event, fixed, out, in_place);
        self.cut_edges = None;
        pushed
    }

    /// Takes one parsed chunk (its `error` is not looked at: see
    /// [`push_payload`](Self::push_payload)).
    pub fn push_chunk(&mut self, chunk: ChatCompletionChunk<'_>, out: &mut Vec<ModelEvent>) {
        if let Some(u) = chunk.usage {
            self.usage = Some(u.into());
        }
        let has_zero = chunk.choices.iter().any(|c| c.index == Some(0));
        for choice in chunk.choices {
            if !is_choice_zero(choice.index, has_zero) {
                continue;
            }
            if let Some(u) = choice.usage {
                self.usage = Some((*u).into());
            }
            if let Some(delta) = choice.delta {
                self.legacy_function_call |= delta.legacy_function_call;
                let (content, reasoning) =
                    WireContent::text_and_reasoning(delta.content, delta.reasoning_content);
                self.push_text(reasoning, content, out);
                for fragment in delta.tool_calls {
                    let (name, arguments, has_function) = match fragment.function {
                        Some(f) => (f.name, f.arguments, true),
                        None => (None, None, false),
                    };
                    self.merge(fragment.index, fragment.id, has_function, name, arguments, out);
                }
            }
            self.push_finish_reason(choice.finish_reason);
        }
    }

    /// Takes a payload read on the fast path: the same steps as [`push_chunk`](Self::push_chunk)
    /// for its choice 0.
    fn push_record(&mut self, record: ChunkRecord<'_>, out: &mut Vec<ModelEvent>) {
        if let Some(u) = record.usage {
            self.usage = Some(u.into());
        }
        let Some(choice) = record.choice else { return };
        if let Some(u) = choice.usage {
            self.usage = Some(u.into());
        }
        self.push_text(choice.reasoning, choice.content, out);
        for f in choice.fragments.into_iter().take(choice.fragment_count) {
            self.merge(f.index, f.id, f.has_function, f.name, f.arguments, out);
        }
        self.push_finish_reason(choice.finish_reason);
    }

    fn push_text(
        &mut self,
        reasoning: Option<Cow<'_, str>>,
        content: Option<Cow<'_, str>>,
        out: &mut Vec<ModelEvent>,
    ) {
        let reasoning = reasoning.filter(|s| !s.is_empty());
        let content = content.filter(|s| !s.is_empty());
        if reasoning.is_none() && content.is_none() {
            return;
        }
        self.data_after_finish |= self.finish_reason.is_some();
        self.data_since_finish = true;
        let edges = self.cut_edges.take().unwrap_or_default();
        if let Some(r) = reasoning {
            let r = join_cut_halves(&mut self.held_high[1], r, edges[1]);
            if !r.is_empty() {
                self.reasoning.push_str(&r);
                out.push(ModelEvent::ReasoningDelta(r.into_owned()));
            }
        }
        if let Some(c) = content {
            let c = join_cut_halves(&mut self.held_high[0], c, edges[0]);
            if !c.is_empty() {
                self.content.push_str(&c);
                out.push(ModelEvent::TextDelta(c.into_owned()));
            }
        }
    }

    /// The high halves still held back (see [`push_cut_payload`](Self::push_cut_payload)), each
    /// a U+FFFD: no low half can follow.
    fn release_held_halves(&mut self, out: &mut Vec<ModelEvent>) {
        if self.held_high[1].take().is_some() {
            self.reasoning.push('\u{FFFD}');
            out.push(ModelEvent::ReasoningDelta("\u{FFFD}".into()));
        }
        if self.held_high[0].take().is_some() {
            self.content.push('\u{FFFD}');
            out.push(ModelEvent::TextDelta("\u{FFFD}".into()));
        }
    }

    fn push_finish_reason(&mut self, reason: Option<Cow<'_, str>>) {
        if let Some(reason) = reason.filter(|s| !s.is_empty()) {
            self.finish_reason = Some(reason.into_owned());
            self.data_since_finish = false;
        }
    }

    /// Merges one call fragment (its `index`, `id`, whether it has a `function`, `function.name`,
    /// `function.arguments`).
    fn merge(
        &mut self,
        index: Option<u32>,
        id: Option<Cow<'_, str>>,
        has_function: bool,
        name: Option<Cow<'_, str>>,
        arguments: Option<WireArguments<'_>>,
        out: &mut Vec<ModelEvent>,
    ) {
        self.data_after_finish |= self.finish_reason.is_some();
        self.data_since_finish = true;
        let id = id.filter(|s| !s.is_empty());
        let name = name.filter(|s| !s.is_empty());
        let arguments = arguments.map(|a| a.0).filter(|s| !s.is_empty());
        let Some(slot) =
            self.find_slot(index, id.as_deref(), has_function, name.as_deref(), arguments.as_deref())
        else {
            log::debug!("dropping a streamed call fragment that repeats its call whole");
            return;
        };
        // A fragment of another call: the one before has its whole name by now.
        if let Some(before) = self.last.replace(slot).filter(|before| *before != slot) {
            if self.calls[before].can_announce() {
                self.announce(before, out);
            }
        }
        let call = &mut self.calls[slot];
        call.has_function |= has_function;
        if call.wire_id.is_empty() {
            if let Some(id) = id {
                // A call announced without an id has its made-up one already.
                if call.id.is_empty() {
                    call.id = id.to_string();
                }
                call.wire_id = id.into_owned();
            }
        }
        if let Some(name) = name {
            // A name streamed in pieces (`get_`, `weather`) is joined; one repeated whole in each
            // fragment is not doubled.
            if call.name.is_empty() {
                call.name = name.into_owned();
            } else if *name != *call.name {
                call.name.push_str(&name);
            }
        }
        if let Some(args) = arguments {
            call.arguments.push_str(&args);
            if call.started {
                out.push(ModelEvent::ToolCallArgumentsDelta { index: slot, delta: args.into_owned() });
            } else if call.can_announce() {
                // Its arguments started: its name is whole (the arguments so far follow the start).
                self.announce(slot, out);
            }
        }
    }

    /// Announces the call in `slot`, once: `ToolCallStarted` with its id made unique, then the
    /// arguments that came before, in one piece.
    fn announce(&mut self, slot: usize, out: &mut Vec<ModelEvent>) {
        if self.calls[slot].started {
            return;
        }
        self.make_id_unique(slot);
        let call = &mut self.calls[slot];
        call.started = true;
        out.push(ModelEvent::ToolCallStarted { index: slot, id: call.id.clone(), name: call.name.clone() });
        if !call.arguments.is_empty() {
            out.push(ModelEvent::ToolCallArgumentsDelta { index: slot, delta: call.arguments.clone() });
        }
    }

    /// Gives the call in `slot` an id no other call of the answer has (`call_<slot>` for a missing
    /// one, `<id>_<slot>` for a repeated one), before its id is announced. A call without a
    /// `function` so far takes no id from it (it may be left out at the end; should it get one and
    /// start later, its own id is made unique then).
    fn make_id_unique(&mut self, slot: usize) {
        let calls = &self.calls;
        let taken =
            |id: &str| calls.iter().enumerate().any(|(i, c)| i != slot && c.has_function && c.id == id);
        if let Some(id) = unique_call_id(&calls[slot].id, slot, taken) {
            self.calls[slot].id = id;
        }
    }

    fn new_slot(&mut self) -> usize {
        self.calls.push(CallSlot::default());
        self.calls.len() - 1
    }

    /// The slot of a call fragment: its `index`, `id`, whether it has a `function`, the tool it
    /// names, and its arguments (see the module's docs). `None` for a fragment that repeats its
    /// call whole (dropped).
    fn find_slot(
        &mut self,
        index: Option<u32>,
        id: Option<&str>,
        has_function: bool,
        name: Option<&str>,
        arguments: Option<&str>,
    ) -> Option<usize> {
        // Matched by the id the provider sent, not the one announced: a repeated id made unique
        // (`A` announced as `A_1`) still comes as `A` on the call's later fragments.
        let by_id = |calls: &[CallSlot], id: &str| calls.iter().position(|c| c.wire_id == id);
        let found = match index {
            Some(ix) => {
                // Each index is in the map once; the call being streamed is usually the last one.
                let Some(pos) = self.index_map.iter().rposition(|(i, _)| *i == ix) else {
                    // A new index is a new call, even with the id of an earlier one (made unique
                    // when it starts), unless it repeats an earlier call whole with that call's
                    // id or without one (a gateway that streams a call, then sends it again in
                    // one chunk at the next index). Every earlier call is looked at: several may
                    // have the same provider's id (`A`, then `A` announced as `A_1`).
                    if (0..self.calls.len()).any(|s| self.repeats_whole(s, id, name, arguments)) {
                        return None;
                    }
                    let slot = self.new_slot();
                    self.index_map.push((ix, slot));
                    return Some(slot);
                };
                let at_index = self.index_map[pos].1;
                if self.repeats_whole(at_index, id, name, arguments) {
                    return None;
                }
                let wire_id = &self.calls[at_index].wire_id;
                let found = match id {
                    // Another id: the call of that id (gateways that send every call as index
                    // 0), else a new call when the fragment names a tool or has no function (an
                    // id sent alone, its name to follow). A fragment with arguments and no name
                    // starts no call: it continues the one at its index (Poolside sends a call's
                    // later fragments with another id than the one beside its name).
                    Some(id) if !wire_id.is_empty() && wire_id != id => {
                        by_id(&self.calls, id).or((name.is_none() && has_function).then_some(at_index))
                    }
                    _ => Some(at_index),
                };
                let slot = self.unless_started_again(found, id, name, arguments)?;
                self.index_map[pos].1 = slot;
                return Some(slot);
            }
            None => match id {
                Some(id) => by_id(&self.calls, id),
                None => self.last,
            },
        };
        if self.last.is_some_and(|last| self.repeats_whole(last, id, name, arguments)) {
            return None;
        }
        self.unless_started_again(found, id, name, arguments)
    }

    /// Whether a fragment that names a tool and brings arguments repeats the call in `slot`
    /// whole: the same name, the same arguments, which form a whole JSON value (the same value:
    /// whitespace and the order of an object's keys aside), and the same id (or none on either
    /// side: gateways that stream a call, then send it again in one chunk).
    /// A fragment with an id of its own is another call, which the model may make twice on
    /// purpose (gateways that send every call at index 0): it runs as a whole answer's would.
    fn repeats_whole(
        &self,
        slot: usize,
        id: Option<&str>,
        name: Option<&str>,
        arguments: Option<&str>,
    ) -> bool {
        let call = &self.calls[slot];
        // The name first: a continuation of the arguments has none, and costs nothing more.
        let (Some(name), Some(arguments)) = (name, arguments) else { return false };
        if name != call.name || !id.is_none_or(|id| call.wire_id.is_empty() || call.wire_id == id) {
            return false;
        }
        let (sent, whole) = (arguments.trim(), call.arguments.trim());
        if sent == whole {
            return is_whole_json(whole);
        }
        // The same value written otherwise (whitespace, the order of an object's keys): parsed
        // only for a fragment that names the call's tool and ends as a whole value would.
        sent.ends_with(['}', ']'])
            && whole.ends_with(['}', ']'])
            && matches!(
                (serde_json::from_str::<serde_json::Value>(sent), serde_json::from_str::<serde_json::Value>(whole)),
                (Ok(a), Ok(b)) if a == b
            )
    }

    /// `found`, or a new slot when there is none or the fragment starts a call again there: it
    /// names a tool after the call's arguments form a whole JSON value already, and brings
    /// arguments that start a value, or no arguments and another name (Gemini's compatible
    /// endpoint sends each parallel call at index 0, without an id, whole name and whole arguments
    /// each). A fragment with the id the call was opened with is that call, whatever it brings
    /// (arguments joined to whole ones are then not JSON: the registry refuses them and nothing
    /// runs). A name repeated beside a continuation of the arguments (providers that send it in
    /// every fragment) joins the call, as before. `None` for a fragment that repeats the call
    /// whole ([`repeats_whole`](Self::repeats_whole)).
    fn unless_started_again(
        &mut self,
        found: Option<usize>,
        id: Option<&str>,
        name: Option<&str>,
        arguments: Option<&str>,
    ) -> Option<usize> {
        let Some(slot) = found else { return Some(self.new_slot()) };
        if self.repeats_whole(slot, id, name, arguments) {
            return None;
        }
        let call = &self.calls[slot];
        let Some(name) = name else { return Some(slot) };
        if id.is_some_and(|id| id == call.wire_id) || !is_whole_json(&call.arguments) {
            return Some(slot);
        }
        let starts_again = match arguments.map(str::trim_start).filter(|a| !a.is_empty()) {
            Some(a) => a.starts_with(['{', '[']),
            None => name != call.name,
        };
        Some(if starts_again { self.new_slot() } else { slot })
    }

    /// Whether the answer may end: not when it called a function only with the legacy
    /// `function_call` and has no call in `tool_calls` (see [`parse_response`]).
    ///
    /// # Errors
    /// `provider_decode` naming `function_call` then.
    pub fn check_calls(&self) -> Result<(), AgentError> {
        if self.legacy_function_call && !self.calls.iter().any(|c| c.has_function) {
            return Err(legacy_function_call_error());
        }
        Ok(())
    }

    /// Ends the answer: every call not announced yet gets `ToolCallStarted` (one that never had
    /// both id and name with its id made unique as above, so a missing one reads `call_<n>`), then
    /// every call `ToolCallFinished`,
    /// then `Usage` (once, the last report) and `Finished`. Returns the response.
    ///
    /// A call none of whose fragments had a `function` object is left out (no events: it never
    /// had a name to start with), as the seed's `ResponseParser` leaves out a whole answer's entry
    /// without one; the other calls keep the positions (`index`) they were announced with.
    pub fn finish(&mut self, out: &mut Vec<ModelEvent>) -> ModelResponse {
        self.release_held_halves(out);
        let mut tool_calls = Vec::with_capacity(self.calls.len());
        for i in 0..self.calls.len() {
            if !self.calls[i].has_function {
                log::debug!("ignoring a streamed call without a function (id {:?})", self.calls[i].id);
                continue;
            }
            self.announce(i, out);
            let call = &self.calls[i];
            let done = ToolCall::new(
                call.id.clone(),
                call.name.clone(),
                normalise_arguments(call.arguments.clone()),
            );
            out.push(ModelEvent::ToolCallFinished { index: i, call: done.clone() });
            tool_calls.push(done);
        }
        if let Some(u) = self.usage {
            out.push(ModelEvent::Usage(u));
        }
        let response = ModelResponse {
            content: (!self.content.is_empty()).then(|| self.content.clone()),
            reasoning_content: (!self.reasoning.is_empty()).then(|| self.reasoning.clone()),
            tool_calls,
            finish_reason: self.finish_reason.clone(),
            usage: self.usage,
        };
        out.push(ModelEvent::Finished(response.clone()));
        self.finished = true;
        response
    }
}

/// Whether a call's `arguments` so far are one whole JSON object or array (parsed only when they
/// end as one: a fragment that names a tool again is rare, and most arguments end otherwise while
/// they stream).
fn is_whole_json(arguments: &str) -> bool {
    arguments.trim_end().ends_with(['}', ']'])
        && serde_json::from_str::<serde::de::IgnoredAny>(arguments).is_ok()
}

/// A piece of the content or the reasoning with the halves of a cut character joined: `text` is
/// read with each lone surrogate escape a U+FFFD, `edges` says which of its ends were such
/// escapes, `held` is the high half held back from the previous piece of the same text. A held
/// half without a low one to join is a U+FFFD before the piece; a high half that ends the piece
/// is held back (taken off the piece). Without either, `text` as it is.
fn join_cut_halves<'a>(held: &mut Option<u32>, text: Cow<'a, str>, edges: CutEdges) -> Cow<'a, str> {
    if held.is_none() && edges.ends_high.is_none() {
        return text;
    }
    let mut text = text.into_owned();
    if let Some(high) = held.take() {
        let joined = edges
            .starts_low
            .and_then(|low| char::from_u32(0x10000 + ((high - 0xD800) << 10) + (low - 0xDC00)));
        match joined {
            // The U+FFFD the low half was read as.
            Some(c) => text.replace_range(..'\u{FFFD}'.len_utf8(), c.encode_utf8(&mut [0; 4])),
            None => text.insert(0, '\u{FFFD}'),
        }
    }
    if let Some(high) = edges.ends_high {
        text.truncate(text.len() - '\u{FFFD}'.len_utf8());
        *held = Some(high);
    }
    Cow::Owned(text)
}

/// The [`CutEdges`] of the content (`[0]`) and the reasoning (`[1]`) of choice 0 of `data`, a
/// payload with lone surrogate escapes: read again with each such escape marked (U+FDD0, a
/// noncharacter, then its code unit in the private use area U+E000..U+E7FF), so the edges of
/// each text show what was there. A payload that holds U+FDD0 itself joins nothing.
fn cut_edges(data: &str) -> [CutEdges; 2] {
    const MARK: char = '\u{FDD0}';
    let none = [CutEdges::default(); 2];
    if data.contains(MARK) || data.to_ascii_lowercase().contains("\\ufdd0") {
        return none;
    }
    let marked = lone_surrogate_escapes_mapped(data, |unit, out| {
        out.push_str(&format!("\\uFDD0\\u{:04X}", 0xE000 + unit - 0xD800));
    });
    let Ok(chunk) = serde_json::from_str::<ChatCompletionChunk<'_>>(&marked) else { return none };
    let has_zero = chunk.choices.iter().any(|c| c.index == Some(0));
    let Some(delta) =
        chunk.choices.into_iter().find(|c| is_choice_zero(c.index, has_zero)).and_then(|c| c.delta)
    else {
        return none;
    };
    let unit = |pair: [Option<char>; 2]| match pair {
        [Some(MARK), Some(u)] => Some(u32::from(u) - 0xE000 + 0xD800),
        _ => None,
    };
    let edges = |text: Option<&Cow<'_, str>>| {
        let Some(text) = text else { return CutEdges::default() };
        let mut start = text.chars();
        let mut end = text.chars().rev();
        let last = end.next();
        CutEdges {
            starts_low: unit([start.next(), start.next()]).filter(|u| (0xDC00..=0xDFFF).contains(u)),
            ends_high: unit([end.next(), last]).filter(|u| (0xD800..=0xDBFF).contains(u)),
        }
    };
    let (content, reasoning) = WireContent::text_and_reasoning(delta.content, delta.reasoning_content);
    [edges(content.as_ref()), edges(reasoning.as_ref())]
}

/// The error of a provider that reported a failure inside its stream: the stable code its own
/// code names ([`ProviderErrorDetail::stable_code`]: auth, rate limit, quota exhausted, content
/// filtered), else `provider_http_status`.
fn stream_error(err: &ProviderErrorDetail) -> AgentError {
    let code = err.stable_code().unwrap_or(codes::PROVIDER_HTTP_STATUS);
    AgentError::of(code, format!("error in stream: {}", err.describe()))
}

/// A payload with neither choices nor usage that is an error at the top level (`{"code",
/// "message"}`: iFlytek Spark's compatible API, relays; see [`ProviderErrorDetail::of_body`]) is
/// the stream's error, not a chunk that adds nothing (which left a cut answer, or an empty one
/// before `[DONE]`, and hid the reason). Read only for such payloads (keep-alives, odd chunks),
/// never for the usual chunk.
fn top_level_error(data: &str) -> Option<ProviderErrorDetail> {
    ProviderErrorDetail::of_body(data)
}

/// SSE framing plus assembly: the bytes of a streamed body in, events out.
///
/// A body that holds no event and does not begin as an event stream (a gateway's error JSON or
/// HTML page sent with a 200 and a content type other than JSON, a whole `chat.completion` of a
/// gateway that ignores `stream: true`) is read at its end as a non-streamed answer: its answer,
/// or the error it holds, or a `provider_decode` error with its raw text, never an interrupted
/// stream that hides what the server said.
#[derive(Debug, Default)]
pub struct StreamDecoder {
    parser: SseParser,
    assembler: StreamAssembler,
    saw_done: bool,
    /// The body so far, while it holds no event and may not be an event stream.
    whole_body: Vec<u8>,
    /// Set once the body is known to be an event stream (an event came, or its first bytes are
    /// those of one): `whole_body` is no longer kept.
    is_event_stream: bool,
    /// The error body a gateway sent whole (not as an event stream), when the body was one.
    whole_body_error: Option<ProviderErrorDetail>,
}

impl StreamDecoder {
    /// A decoder for one answer.
    pub fn new() -> Self {
        StreamDecoder::default()
    }

    /// True once the answer finished (`Finished` was emitted).
    pub fn is_finished(&self) -> bool {
        self.assembler.is_finished()
    }

    /// True once a chunk reported a finish reason.
    pub fn saw_finish_reason(&self) -> bool {
        self.assembler.saw_finish_reason()
    }

    /// See [`StreamAssembler::ends_on_finish_reason`]: [`finish`](Self::finish) then completes
    /// the answer whether or not `[DONE]` came, and a stream that stalls or breaks off here is
    /// complete.
    pub fn ends_on_finish_reason(&self) -> bool {
        self.assembler.ends_on_finish_reason()
    }

    /// See [`StreamAssembler::answer_looks_complete`]: a finish reason came and no answer data
    /// after any finish reason, so only the usage chunk and `[DONE]` should follow.
    pub fn answer_looks_complete(&self) -> bool {
        self.assembler.answer_looks_complete()
    }

    /// See [`StreamAssembler::usage`]: the last usage report so far.
    pub fn usage(&self) -> Option<Usage> {
        self.assembler.usage()
    }

    /// The provider's error that ended the answer, when it sent one: an error inside the stream
    /// (see [`StreamAssembler::provider_error`]) or the error body a gateway sent whole.
    pub fn provider_error(&self) -> Option<&ProviderErrorDetail> {
        self.whole_body_error.as_ref().or(self.assembler.provider_error())
    }

    /// See [`SseParser::pending_event_bytes`]: the buffered bytes of an event still coming.
    pub fn pending_event_bytes(&self) -> usize {
        self.parser.pending_event_bytes()
    }

    /// Feeds body bytes (any split); appends the events they complete to `out`. At `[DONE]` the
    /// answer is finished and later bytes are ignored; so it is at a bad payload, an error in the
    /// stream or an oversized event that comes after the finish reason, with no answer data
    /// between ([`ends_on_finish_reason`](Self::ends_on_finish_reason)): the answer is complete,
    /// as when the stream breaks off there. Returns [`is_finished`](Self::is_finished).
    ///
    /// # Errors
    /// A provider-layer error for a bad payload, an error in the stream, or an oversized event,
    /// before the answer's finish reason (or after answer data that followed it: its finish
    /// reasons come early).
    pub fn feed(&mut self, bytes: &[u8], out: &mut Vec<ModelEvent>) -> Result<bool, AgentError> {
        if self.assembler.is_finished() {
            return Ok(true);
        }
        if !self.is_event_stream {
            // Copied only when its first bytes do not tell it is an event stream (the usual body
            // is not copied, not even its first read).
            let kept = !self.whole_body.is_empty();
            if kept {
                self.whole_body.extend_from_slice(bytes);
            }
            let head = if kept { &self.whole_body[..] } else { bytes };
            if starts_as_event_stream(head) == Some(true) {
                self.stop_keeping_the_body();
            } else if !kept {
                self.whole_body.extend_from_slice(bytes);
            }
        }
        let assembler = &mut self.assembler;
        let saw_done = &mut self.saw_done;
        let mut saw_event = false;
        let fed = self.parser.feed(bytes, |ev| {
            saw_event = true;
            if !*saw_done && assembler.push_payload(ev.event, ev.data, out)? {
                *saw_done = true;
            }
            Ok(())
        });
        if let Err(e) = fed {
            self.end_at_finish_reason(e)?;
        }
        if saw_event && !self.is_event_stream {
            self.stop_keeping_the_body();
        }
        if self.saw_done {
            self.assembler.check_calls()?;
            self.assembler.finish(out);
        }
        Ok(self.is_finished())
    }

    /// After `e`, the error of a payload: when the answer ended on its finish reason before it,
    /// the payload is taken as the end of the stream (as `[DONE]` is, or a break there: the
    /// answer was complete, and a gateway's trailing error or garbage does not undo it), with a
    /// warning that names only the error's code (its message quotes the provider's raw text);
    /// otherwise `e` stands.
    fn end_at_finish_reason(&mut self, e: AgentError) -> Result<(), AgentError> {
        if !self.assembler.ends_on_finish_reason() {
            return Err(e);
        }
        log::warn!(
            "provider: the stream sent a payload that is no more of the answer ({}) after its finish \
             reason; the answer is complete",
            e.code
        );
        self.saw_done = true;
        Ok(())
    }

    fn stop_keeping_the_body(&mut self) {
        self.is_event_stream = true;
        self.whole_body = Vec::new();
    }

    /// The body ended. A stream without `[DONE]` is complete when a finish reason was seen.
    ///
    /// # Errors
    /// `provider_stream_interrupted` when the body ended before the answer finished; any error of
    /// a last payload.
    pub fn finish(&mut self, out: &mut Vec<ModelEvent>) -> Result<(), AgentError> {
        if self.assembler.is_finished() {
            return Ok(());
        }
        if !self.is_event_stream && starts_as_event_stream(&self.whole_body) == Some(false) {
            // Not an event stream: the body a gateway sent whole.
            let response = match parse_response(&self.whole_body) {
                Ok(response) => response,
                Err(mut e) => {
                    if e.code == codes::PROVIDER_DECODE {
                        e.message = format!("the streamed response is not an event stream: {}", e.message);
                    }
                    self.whole_body_error = error_of_body(&self.whole_body);
                    return Err(e);
                }
            };
            out.extend(ModelEvent::for_whole_answer(response));
            self.assembler.finished = true;
            return Ok(());
        }
        let cut_line = self.parser.has_partial_line();
        let assembler = &mut self.assembler;
        let saw_done = &mut self.saw_done;
        let fed = self.parser.finish(|ev| {
            if !*saw_done && assembler.push_payload(ev.event, ev.data, out)? {
                *saw_done = true;
            }
            Ok(())
        });
        if let Err(e) = fed {
            self.end_at_finish_reason(e)?;
        }
        if self.saw_done || self.assembler.ends_on_finish_reason() {
            self.assembler.check_calls()?;
            self.assembler.finish(out);
            return Ok(());
        }
        Err(AgentError::of(
            codes::PROVIDER_STREAM_INTERRUPTED,
            if cut_line {
                "the stream ended in the middle of a line, before the answer finished"
            } else {
                "the stream ended before the answer finished (no finish_reason after its last data, no [DONE])"
            },
        ))
    }
}

/// Whether a body beginning with `head` is an event stream: its first bytes after a UTF-8 BOM and
/// blank space are a comment or a field (`data:`, `event:`, `id:`, `retry:`); `None` while too few
/// bytes came to tell.
pub(crate) fn starts_as_event_stream(head: &[u8]) -> Option<bool> {
    let head = head.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(head).trim_ascii_start();
    if head.is_empty() {
        return None;
    }
    let fields: [&[u8]; 5] = [b":", b"data:", b"event:", b"id:", b"retry:"];
    if fields.iter().any(|f| head.starts_with(f)) {
        return Some(true);
    }
    if fields.iter().any(|f| f.starts_with(head)) {
        return None;
    }
    Some(false)
}

/// Decodes a whole SSE body at once (tests, recordings, replays).
///
/// # Errors
/// As [`StreamDecoder::feed`] and [`StreamDecoder::finish`].
pub fn decode_sse_body(body: &[u8]) -> Result<Vec<ModelEvent>, AgentError> {
    let mut decoder = StreamDecoder::new();
    let mut out = Vec::new();
    decoder.feed(body, &mut out)?;
    decoder.finish(&mut out)?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sse(payloads: &[&str]) -> Vec<u8> {
        payloads.iter().map(|p| format!("data: {p}\n\n")).collect::<String>().into_bytes()
    }

    fn finished(events: &[ModelEvent]) -> &ModelResponse {
        match events.last() {
            Some(ModelEvent::Finished(r)) => r,
            other => panic!("last event {other:?}"),
        }
    }

    /// The text events (`'t'` text, `'r'` reasoning) of `events`, in order.
    fn text_events(events: &[ModelEvent]) -> Vec<(char, String)> {
        events
            .iter()
            .filter_map(|e| match e {
                ModelEvent::TextDelta(t) => Some(('t', t.clone())),
                ModelEvent::ReasoningDelta(t) => Some(('r', t.clone())),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn a_character_cut_into_escaped_halves_across_chunks_is_joined() {
        // What a JS gateway slicing by UTF-16 index sends for "Here 😀 done" (and its reasoning).
        let content = |t: &str| format!(r#"{{"choices":[{{"index":0,"delta":{{"content":"{t}"}}}}]}}"#);
        let reasoning = |t: &str| format!(r#"{{"choices":[{{"delta":{{"reasoning_content":"{t}"}}}}]}}"#);
        let payloads = [
            reasoning(r"hm \ud83d"),
            content(r"Here \ud83d"),
            reasoning(r"\ude00"),
            content(r"\ude00 done \ud83c\udf82 \u00e9"),
            content(r"\ud83d"),
            content(r"\ud83d"),
            content(r"\ude00\ud83d"),
            r#"{"choices":[{"delta":{},"finish_reason":"stop"}]}"#.to_string(),
        ];
        for in_place in [true, false] {
            let mut a = StreamAssembler::new();
            let mut out = Vec::new();
            for p in &payloads {
                if in_place {
                    a.push_payload(None, p, &mut out).unwrap();
                } else {
                    a.push_payload_derived(None, p, &mut out).unwrap();
                }
            }
            let r = a.finish(&mut out);
            assert_eq!(r.content.as_deref(), Some("Here 😀 done 🎂 é\u{FFFD}😀\u{FFFD}"));
            assert_eq!(r.reasoning_content.as_deref(), Some("hm 😀"));
            // The pieces handed out make the same text; a held half comes with the next piece.
            assert_eq!(
                text_events(&out),
                [
                    ('r', "hm ".into()),
                    ('t', "Here ".into()),
                    ('r', "😀".into()),
                    ('t', "😀 done 🎂 é".into()),
                    ('t', "\u{FFFD}".into()),
                    ('t', "😀".into()),
                    ('t', "\u{FFFD}".into()),
                ]
            );
        }
    }

    #[test]
    fn lone_escaped_halves_elsewhere_read_as_the_replacement_character() {
        let body = sse(&[
            r#"{"choices":[{"delta":{"content":"a \udc00 b \ud800"}}]}"#,
            r#"{"choices":[{"delta":{"content":"no low here"}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"id":"c\ud83d","function":{"name":"t","arguments":"{\"q\":\"\ud83d"}}]}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":"\ude00\"}"}}]}}]}"#,
            // A payload that holds U+FDD0 (the mark of a cut half) itself: read, nothing joined.
            r#"{"choices":[{"delta":{"content":"\ufdd0 \ud83d"}}]}"#,
            r#"{"choices":[{"delta":{"content":"\ude00"}}]}"#,
            r#"{"choices":[{"delta":{},"finish_reason":"stop"}]}"#,
        ]);
        let events = decode_sse_body(&body).unwrap();
        let r = finished(&events);
        assert_eq!(r.content.as_deref(), Some("a \u{FFFD} b \u{FFFD}no low here\u{FDD0} \u{FFFD}\u{FFFD}"));
        assert_eq!(r.tool_calls[0].id, "c\u{FFFD}");
        assert_eq!(r.tool_calls[0].arguments, "{\"q\":\"\u{FFFD}\u{FFFD}\"}");
        // A payload that is bad for another reason still fails, and says why.
        let e = decode_sse_body(&sse(&[r#"{"choices":[{"delta":{"content":"\ud83d"}}],"#])).unwrap_err();
        assert_eq!(e.code, codes::PROVIDER_DECODE);
    }

    #[test]
    fn same_index_with_another_id_starts_a_new_call() {
        let body = sse(&[
            r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"id":"a","function":{"name":"x","arguments":"{}"}}]}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"id":"b","function":{"name":"y","arguments":"{\"k\":"}}]}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":"1}"}}]},"finish_reason":"tool_calls"}]}"#,
        ]);
        let ev = decode_sse_body(&body).unwrap();
        let r = finished(&ev);
        assert_eq!(r.tool_calls, vec![ToolCall::new("a", "x", "{}"), ToolCall::new("b", "y", r#"{"k":1}"#)]);
    }

    #[test]
    fn a_new_index_with_a_repeated_id_is_another_call_with_a_unique_id() {
        let body = sse(&[
            r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"id":"x","function":{"name":"t","arguments":"{\"a\":"}}]}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"index":1,"id":"x","function":{"name":"t","arguments":"{\"a\":2}"}}]}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":"1}"}}]}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"index":2,"function":{"name":"t"}}]},"finish_reason":"tool_calls"}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"index":3,"id":"call_2","function":{"name":"t"}}]},"finish_reason":"tool_calls"}]}"#,
        ]);
        let ev = decode_sse_body(&body).unwrap();
        let started: Vec<(usize, &str)> = ev
            .iter()
            .filter_map(|e| match e {
                ModelEvent::ToolCallStarted { index, id, .. } => Some((*index, id.as_str())),
                _ => None,
            })
            .collect();
        // The repeated id is changed before it is announced; the call without an id gets one at
        // the end, past the provider's own `call_2` (announced at the end too: no arguments).
        assert_eq!(started, [(0, "x"), (1, "x_1"), (2, "call_2_2"), (3, "call_2")]);
        let r = finished(&ev);
        assert_eq!(
            r.tool_calls,
            vec![
                ToolCall::new("x", "t", r#"{"a":1}"#),
                ToolCall::new("x_1", "t", r#"{"a":2}"#),
                ToolCall::new("call_2_2", "t", "{}"),
                ToolCall::new("call_2", "t", "{}"),
            ]
        );
    }

    #[test]
    fn late_name_buffers_arguments_until_started() {
        let body = sse(&[
            r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"id":"a","function":{"arguments":"{\"q\""}}]}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"name":"search","arguments":":1"}}]}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":"}"}}]}}]}"#,
            "[DONE]",
        ]);
        let ev = decode_sse_body(&body).unwrap();
        assert_eq!(ev[0], ModelEvent::ToolCallStarted { index: 0, id: "a".into(), name: "search".into() });
        assert_eq!(ev[1], ModelEvent::ToolCallArgumentsDelta { index: 0, delta: "{\"q\":1".into() });
        assert_eq!(ev[2], ModelEvent::ToolCallArgumentsDelta { index: 0, delta: "}".into() });
        assert_eq!(finished(&ev).tool_calls[0].arguments, r#"{"q":1}"#);
        assert_eq!(finished(&ev).finish_reason, None);
    }

    #[test]
    fn invalid_arguments_are_kept_raw_and_missing_ids_are_made_up() {
        let body = sse(&[
            r#"{"choices":[{"delta":{"tool_calls":[{"function":{"name":"t","arguments":"{oops"}}]},"finish_reason":"tool_calls"}]}"#,
        ]);
        let ev = decode_sse_body(&body).unwrap();
        assert_eq!(finished(&ev).tool_calls, vec![ToolCall::new("call_0", "t", "{oops")]);
    }

    #[test]
    fn errors_in_the_stream_and_bad_payloads() {
        let e = decode_sse_body(&sse(&[r#"{"error":{"message":"overloaded","code":"server_busy"}}"#]))
            .unwrap_err();
        assert_eq!(e.code, codes::PROVIDER_HTTP_STATUS);
        assert!(e.message.contains("server_busy"));
        let e = decode_sse_body(b"event: error\ndata: {\"message\":\"boom\"}\n\n").unwrap_err();
        assert_eq!(e.code, codes::PROVIDER_HTTP_STATUS);
        assert!(e.message.contains("boom"));
        let e = decode_sse_body(b"data: {\"choices\":[{\"del\n\n").unwrap_err();
        assert_eq!(e.code, codes::PROVIDER_DECODE);
        assert!(e.message.contains("{\"choices\":[{\"del"));
        let ok = decode_sse_body(b"event: ping\ndata: hello\n\ndata: {\"choices\":[{\"delta\":{\"content\":\"x\"},\"finish_reason\":\"stop\"}]}\n\n").unwrap();
        assert_eq!(finished(&ok).content.as_deref(), Some("x"));
    }

    #[test]
    fn a_payload_with_an_error_adds_nothing_whatever_comes_first() {
        let cases = [
            (
                r#"{"choices":[{"delta":{"content":"x"}}],"error":{"message":"boom"}}"#,
                codes::PROVIDER_HTTP_STATUS,
            ),
            (r#"{"error":"boom","choices":[{"delta":{"content":"x"}}]}"#, codes::PROVIDER_HTTP_STATUS),
            // The error's details are read whole: a number out of range is not a chunk.
            (
                r#"{"choices":[{"delta":{"content":"x"}}],"error":{"message":"boom","n":1e999}}"#,
                codes::PROVIDER_DECODE,
            ),
            (
                r#"{"choices":[{"delta":{"content":"x"}}],"usage":{"prompt_tokens":1e999}}"#,
                codes::PROVIDER_DECODE,
            ),
        ];
        for (payload, code) in cases {
            let mut a = StreamAssembler::new();
            let mut out = Vec::new();
            let e = a.push_payload(None, payload, &mut out).unwrap_err();
            assert_eq!(e.code, code, "{payload}: {e}");
            assert!(out.is_empty(), "{payload}: {out:?}");
            assert!(!a.saw_finish_reason());
        }
        // `"error": null` is no error; a chunk sent as `event: error` is one.
        let mut a = StreamAssembler::new();
        let mut out = Vec::new();
        assert!(!a
            .push_payload(None, r#"{"error":null,"choices":[{"delta":{"content":"x"}}]}"#, &mut out)
            .unwrap());
        assert_eq!(out, [ModelEvent::TextDelta("x".into())]);
        let e = a
            .push_payload(Some("error"), r#"{"choices":[{"delta":{"content":"y"}}]}"#, &mut out)
            .unwrap_err();
        assert_eq!(e.code, codes::PROVIDER_HTTP_STATUS);
        assert_eq!(out.len(), 1);
        // A named event other than `message` whose data is not a chunk is skipped.
        assert!(!a.push_payload(Some("ping"), r#"{"choices":{}}"#, &mut out).unwrap());
        let e = a.push_payload(Some("message"), r#"{"choices":{}}"#, &mut out).unwrap_err();
        assert_eq!(e.code, codes::PROVIDER_DECODE);
        assert!(e.message.contains("invalid type: map, expected a sequence"), "{e}");
    }

    /// One payload pushed into a new assembler, read in place or the derived way: what the push
    /// answered, the events it handed out, and the provider's error it kept.
    fn push_one(
        in_place: bool,
        p: &str,
    ) -> (Result<bool, AgentError>, Vec<ModelEvent>, Option<ProviderErrorDetail>) {
        let mut a = StreamAssembler::new();
        let mut out = Vec::new();
        let r = if in_place {
            a.push_payload(None, p, &mut out)
        } else {
            a.push_payload_derived(None, p, &mut out)
        };
        (r, out, a.provider_error().cloned())
    }

    #[test]
    fn a_top_level_error_payload_is_an_error_in_both_readings() {
        for in_place in [true, false] {
            let push = |p: &str| {
                let (r, out, _) = push_one(in_place, p);
                (r, out)
            };
            for (p, want) in [
                (r#"{"code":10013,"message":"blocked","sid":"s"}"#, "error in stream: [10013] blocked"),
                (r#"{"choices":[],"msg":"slow down"}"#, "error in stream: slow down"),
                (r#"{"choices":null,"object":"error","message":"m","code":400}"#, "error in stream: [400] m"),
            ] {
                let (r, out) = push(p);
                let e = r.unwrap_err();
                assert_eq!((&*e.code, e.message.as_str()), (codes::PROVIDER_HTTP_STATUS, want), "{p}");
                assert!(out.is_empty());
            }
            // With usage or a choice, or without a message, it is a chunk.
            for p in [
                r#"{"choices":[],"usage":{"prompt_tokens":1},"message":"x"}"#,
                r#"{"choices":[{"index":1,"delta":{}}],"message":"x"}"#,
                r#"{"code":0,"data":{}}"#,
                "{}",
            ] {
                assert!(!push(p).0.unwrap(), "{p} (in place {in_place})");
            }
        }
    }

    /// MiniMax's failed `base_resp` beside choices (1027: output withheld by moderation) ends the
    /// stream with its error, in both readings; nothing of that payload is handed out, and the
    /// provider's error is kept for the client. A `base_resp` of 0, or not an object, is a chunk's.
    #[test]
    fn a_failed_base_resp_beside_choices_is_the_streams_error_in_both_readings() {
        for in_place in [true, false] {
            let push = |p: &str| push_one(in_place, p);
            let cut = r#"{"choices":[{"index":0,"delta":{"content":"the rest"},"finish_reason":"stop"}],"base_resp":{"status_code":1027,"status_msg":"output new_sensitive"}}"#;
            let (r, out, detail) = push(cut);
            let e = r.unwrap_err();
            assert_eq!(
                (&*e.code, e.message.as_str()),
                (codes::PROVIDER_CONTENT_FILTERED, "error in stream: [1027] output new_sensitive"),
                "in place {in_place}"
            );
            assert!(out.is_empty(), "{out:?}");
            assert_eq!(detail.and_then(|d| d.equivalent_status()), Some(400));
            for p in [
                r#"{"choices":[{"delta":{"content":"x"}}],"base_resp":{"status_code":0,"status_msg":""}}"#,
                r#"{"choices":[{"delta":{"content":"x"}}],"base_resp":"odd"}"#,
                r#"{"choices":[{"delta":{"content":"x"}}],"base_resp":null}"#,
            ] {
                let (r, out, detail) = push(p);
                assert!(!r.unwrap(), "{p}");
                assert_eq!(out, [ModelEvent::TextDelta("x".into())], "{p} (in place {in_place})");
                assert!(detail.is_none());
            }
        }
    }

    #[test]
    fn push_chunk_and_push_payload_agree() {
        let payloads = [
            r#"{"choices":[{"delta":{"reasoning_content":"r","content":"c","tool_calls":[{"index":0,"id":"a","function":{"name":"t","arguments":"{\"x\":"}}]}}]}"#,
            r#"{"choices":[{"index":1,"delta":{"content":"other choice"}},{"delta":{"tool_calls":[{"index":0,"function":{"arguments":"1}"}}]},"finish_reason":"tool_calls","usage":{"prompt_tokens":2,"completion_tokens":3}}]}"#,
        ];
        let (mut a, mut b) = (StreamAssembler::new(), StreamAssembler::new());
        let (mut out_a, mut out_b) = (Vec::new(), Vec::new());
        for p in payloads {
            a.push_payload(None, p, &mut out_a).unwrap();
            b.push_chunk(serde_json::from_str(p).unwrap(), &mut out_b);
        }
        assert_eq!(a.finish(&mut out_a), b.finish(&mut out_b));
        assert_eq!(out_a, out_b);
        let r = finished(&out_a);
        assert_eq!(r.tool_calls, vec![ToolCall::new("a", "t", r#"{"x":1}"#)]);
        assert_eq!((r.content.as_deref(), r.reasoning_content.as_deref()), (Some("c"), Some("r")));
        assert_eq!(r.usage, Some(Usage { prompt_tokens: 2, completion_tokens: 3, total_tokens: 5 }));
    }

    #[test]
    fn ends_without_finish_are_interrupted() {
        let e = decode_sse_body(&sse(&[r#"{"choices":[{"delta":{"content":"par"}}]}"#])).unwrap_err();
        assert_eq!(e.code, codes::PROVIDER_STREAM_INTERRUPTED);
        let e = decode_sse_body(b"data: {\"choices\":[{\"delta\":{\"content\":\"par\"}}]}\n\ndata: {\"cho")
            .unwrap_err();
        assert_eq!(e.code, codes::PROVIDER_STREAM_INTERRUPTED);
        assert!(e.message.contains("middle of a line"));
    }

    #[test]
    fn usage_is_reported_once_from_the_last_report() {
        let body = sse(&[
            r#"{"choices":[{"delta":{"content":"hi"},"finish_reason":"stop","usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}]}"#,
            r#"{"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":2,"total_tokens":7}}"#,
            "[DONE]",
            r#"{"garbage after done"#,
        ]);
        let ev = decode_sse_body(&body).unwrap();
        let usages: Vec<_> = ev.iter().filter(|e| matches!(e, ModelEvent::Usage(_))).collect();
        assert_eq!(
            usages,
            vec![&ModelEvent::Usage(Usage { prompt_tokens: 5, completion_tokens: 2, total_tokens: 7 })]
        );
    }

    #[test]
    fn what_starts_an_event_stream() {
        for head in [&b"data: {}"[..], b":ok", b"\xEF\xBB\xBF\r\n event: x", b"id:1", b"retry:"] {
            assert_eq!(starts_as_event_stream(head), Some(true), "{head:?}");
        }
        for head in [&b"{\"error\""[..], b"<html>", b"dat ", b"Data:", b"[DONE]"] {
            assert_eq!(starts_as_event_stream(head), Some(false), "{head:?}");
        }
        for head in [&b""[..], b" \n", b"\xEF\xBB\xBF", b"da", b"\nretr"] {
            assert_eq!(starts_as_event_stream(head), None, "{head:?}");
        }
    }

    #[test]
    fn a_body_without_events_is_read_whole() {
        let whole = br#"{"choices":[{"message":{"tool_calls":[{"id":"a","function":{"name":"f"}}]}}]}"#;
        let events = decode_sse_body(whole).unwrap();
        assert_eq!(finished(&events).tool_calls, vec![ToolCall::new("a", "f", "{}")]);
        // Whatever the pieces it came in.
        let mut decoder = StreamDecoder::new();
        let mut out = Vec::new();
        for piece in whole.chunks(3) {
            assert!(!decoder.feed(piece, &mut out).unwrap());
        }
        decoder.finish(&mut out).unwrap();
        assert!(decoder.is_finished());
        assert_eq!(out, events);
        let e = decode_sse_body(b"{\"error\":{\"message\":\"no\"}}").unwrap_err();
        assert_eq!((&*e.code, e.message.as_str()), (codes::PROVIDER_HTTP_STATUS, "no"));
        let e = decode_sse_body(b"Bad Gateway").unwrap_err();
        assert_eq!(e.code, codes::PROVIDER_DECODE);
        // Nothing but blank space and a BOM, or the start of a field: a stream cut short.
        for body in [&b"\xEF\xBB\xBF \r\n"[..], b"\nda"] {
            assert_eq!(decode_sse_body(body).unwrap_err().code, codes::PROVIDER_STREAM_INTERRUPTED);
        }
        // A body with an event is a stream, even after lines that are not.
        let e = decode_sse_body(b"junk\ndata: {\"choices\":[]}\n\n").unwrap_err();
        assert_eq!(e.code, codes::PROVIDER_STREAM_INTERRUPTED);
    }

    #[test]
    fn an_answer_looks_complete_until_data_follows_a_finish_reason() {
        // Both readings (in place and derived) decide the same.
        for in_place in [true, false] {
            let mut a = StreamAssembler::new();
            let mut out = Vec::new();
            let mut push = |a: &mut StreamAssembler, p: &str| {
                if in_place {
                    a.push_payload(None, p, &mut out).unwrap()
                } else {
                    a.push_payload_derived(None, p, &mut out).unwrap()
                };
            };
            push(&mut a, r#"{"choices":[{"delta":{"content":"x"}}]}"#);
            assert!(!a.answer_looks_complete());
            // Data and the finish reason in one chunk (vLLM), then usage and keep-alives: complete.
            push(&mut a, r#"{"choices":[{"delta":{"content":"y"},"finish_reason":"stop"}]}"#);
            assert!(a.answer_looks_complete());
            push(&mut a, r#"{"choices":[],"usage":{"prompt_tokens":1,"completion_tokens":2}}"#);
            push(&mut a, r#"{"choices":[{"delta":{"content":""},"finish_reason":null}]}"#);
            push(&mut a, "");
            assert!(a.answer_looks_complete());
            // A call fragment after it: this stream's finish reasons come early, for good.
            push(&mut a, r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"function":null}]}}]}"#);
            assert!(!a.answer_looks_complete() && a.saw_finish_reason());
            push(&mut a, r#"{"choices":[{"delta":{},"finish_reason":"tool_calls"}]}"#);
            assert!(!a.answer_looks_complete(), "in place {in_place}");
            // Text after one does the same.
            let mut b = StreamAssembler::new();
            push(&mut b, r#"{"choices":[{"delta":{},"finish_reason":"stop"}]}"#);
            assert!(b.answer_looks_complete());
            push(&mut b, r#"{"choices":[{"delta":{"reasoning_content":"r"}}]}"#);
            assert!(!b.answer_looks_complete(), "in place {in_place}");
        }
    }
}
