//! The byte formats under hostile input: arbitrary bytes never panic the decoders, and any single
//! corrupted byte of a journal yields a prefix of its events (never a wrong event). And what every
//! persisted type accepts when read back, from JSON text and from a `Value` alike: every kind, the
//! defaults of optional fields, and the refusals with their wording (a change to a type's serde
//! attributes that changes what old states decode to shows up here).

mod state_support;

use arkagent::codes;
use arkagent::state::codec::{
    decode_journal, decode_snapshot, encode_records, encode_snapshot, journal_header, JournalTail,
};
use arkagent::state::StateEvent;
use proptest::prelude::*;
use state_support::{state_after, turn};

fn journal_of(turns: u64) -> (Vec<u8>, Vec<StateEvent>) {
    let events: Vec<StateEvent> = (1..=turns).flat_map(turn).collect();
    let mut bytes = journal_header(1).to_vec();
    bytes.extend(encode_records(&events).unwrap());
    (bytes, events)
}

/// Decodes `text` as a `T` from the text and from a `Value`; both must agree. The `Value` result.
fn both<T: serde::de::DeserializeOwned + PartialEq + std::fmt::Debug>(text: &str) -> Result<T, String> {
    let from_text = serde_json::from_str::<T>(text).map_err(|e| e.to_string());
    let from_value = serde_json::from_value::<T>(serde_json::from_str::<serde_json::Value>(text).unwrap())
        .map_err(|e| e.to_string());
    match (&from_text, &from_value) {
        (Ok(a), Ok(b)) => assert_eq!(a, b, "{text}"),
        (Err(_), Err(_)) => {}
        _ => panic!("{text}: text gave {from_text:?}, value gave {from_value:?}"),
    }
    from_value
}

/// Asserts that each text is refused with an error starting with its message.
fn refused<T: serde::de::DeserializeOwned + PartialEq + std::fmt::Debug>(cases: &[(String, &str)]) {
    for (text, message) in cases {
        let error = both::<T>(text).unwrap_err();
        assert!(error.starts_with(message), "{text}: {error}");
    }
}

proptest! {
    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..512), as_journal in any::<bool>()) {
        if as_journal {
            let mut b = journal_header(1).to_vec();
            b.extend(&bytes);
            if let Ok(scan) = decode_journal(&b) {
                prop_assert!(scan.valid_len <= b.len());
            }
            let _ = decode_journal(&bytes);
        } else {
            let _ = decode_snapshot(&bytes);
            let mut b = b"ARKS".to_vec();
            b.extend(&bytes);
            let _ = decode_snapshot(&b);
        }
    }

    #[test]
    fn a_corrupted_byte_yields_a_prefix_of_the_events(pos in any::<prop::sample::Index>(), xor in 1u8..=255) {
        let (bytes, events) = journal_of(6);
        let mut bad = bytes.clone();
        let i = pos.index(bad.len());
        bad[i] ^= xor;
        // Never refused as a newer version: the header's checksum tells a damaged format field.
        let scan = decode_journal(&bad).map_err(|e| TestCaseError::fail(format!("flip at {i}: {e}")))?;
        prop_assert!(scan.events.len() <= events.len());
        prop_assert_eq!(&scan.events[..], &events[..scan.events.len()]);
        prop_assert!(scan.tail != JournalTail::Clean, "a flip at {} went unnoticed", i);
        prop_assert!(scan.events.len() < events.len());
    }

    #[test]
    fn a_corrupted_snapshot_byte_is_always_caught(pos in any::<prop::sample::Index>(), xor in 1u8..=255) {
        let bytes = encode_snapshot(&state_after("s1", 9)).unwrap();
        let mut bad = bytes.clone();
        let i = pos.index(bad.len());
        bad[i] ^= xor;
        let e = decode_snapshot(&bad).unwrap_err();
        prop_assert_eq!(e.code, codes::STATE_CORRUPT);
    }
}

/// The journal's events decode from their own JSON text, and a field of the wrong shape is refused
/// (some fields are decoded through a `serde_json::Value`; this pins that it changes nothing).
#[test]
fn every_event_kind_decodes_from_its_text_and_a_field_of_the_wrong_shape_is_refused() {
    let events: Vec<StateEvent> = (1..=5).flat_map(turn).collect();
    let (bytes, _) = journal_of(5);
    let scan = decode_journal(&bytes).unwrap();
    assert_eq!(scan.events, events);
    assert_eq!(scan.tail, JournalTail::Clean);
    for event in &events {
        let text = serde_json::to_vec(event).unwrap();
        assert_eq!(&serde_json::from_slice::<StateEvent>(&text).unwrap(), event);
    }
    let bad = [
        r#"{"event":"usage_added","usage":{"prompt_tokens":"1","completion_tokens":1,"total_tokens":2}}"#,
        r#"{"event":"usage_added","usage":{"prompt_tokens":-1,"completion_tokens":1,"total_tokens":2}}"#,
        r#"{"event":"usage_added"}"#,
        r#"{"event":"status_changed","status":"sleeping"}"#,
        r#"{"event":"loop_window","window":["a",1]}"#,
        r#"{"event":"approval_decided","approval_id":"a","decision":"maybe","decided_at_ms":1}"#,
        r#"{"event":"approval_requested","batch":{"batch_id":"b","run_id":"r"}}"#,
        r#"{"event":"approval_requested","batch":[]}"#,
        r#"{"event":"run_started"}"#,
        r#"{"event":"metadata_set","key":"k"}"#,
        r#"{"event":"round_started","round":4294967296}"#,
        r#"{"event":"tool_finished","call_id":"c","name":"t","result":{"contents":[{"type":"video"}]}}"#,
        r#"{"event":"run_ended","run_id":"r"}"#,
        r#"{"event":7,"run_id":"r"}"#,
        r#"{"run_id":"r"}"#,
        r#""run_started""#,
        r#"null"#,
    ];
    for text in bad {
        assert!(serde_json::from_slice::<StateEvent>(text.as_bytes()).is_err(), "{text}");
    }
    let good = [
        (
            r#"{"status":"max_rounds","event":"status_changed","extra":true}"#,
            StateEvent::StatusChanged {
                status: arkagent::state::RunStatus::MaxRounds,
                finish_reason: None,
                error: None,
            },
        ),
        (
            r#"{"event":"batch_completed","ignored":[1]}"#,
            StateEvent::BatchCompleted { stop_requested: false },
        ),
        (
            r#"{"event":"batch_completed","stop_requested":true}"#,
            StateEvent::BatchCompleted { stop_requested: true },
        ),
        (
            r#"{"event":"approval_decided","approval_id":"a","decision":"denied","decided_at_ms":3}"#,
            StateEvent::ApprovalDecided {
                approval_id: "a".into(),
                decision: arkagent::approval::ApprovalDecision::Denied,
                deny_reason: None,
                decided_at_ms: 3,
            },
        ),
        (
            r#"{"event":"metadata_set","key":"k","value":null}"#,
            StateEvent::MetadataSet { key: "k".into(), value: serde_json::Value::Null },
        ),
    ];
    for (text, event) in good {
        assert_eq!(serde_json::from_slice::<StateEvent>(text.as_bytes()).unwrap(), event, "{text}");
    }
}

/// A frozen batch with a call of each plan and tool runs of both phases come back equal from a
/// snapshot and from a journal record; their decoders refuse a missing or unknown kind or field.
#[test]
fn batch_calls_of_every_plan_and_tool_runs_of_both_phases_decode_back() {
    use arkagent::approval::{BatchCall, BatchCallPlan};
    use arkagent::state::ToolRunRecord;
    use arkagent::{ToolCall, ToolResult};

    let mut state = state_after("s1", 1);
    let mut result = ToolResult::text("cached").with_stop(true);
    result.metadata = serde_json::json!({"k": [1, {"a": null}]}).as_object().cloned();
    let batch = state.pending_approval.as_mut().expect("turn 1 freezes a batch");
    batch.calls = vec![
        BatchCall { call: ToolCall::new("c1", "a", "{}"), plan: BatchCallPlan::Run },
        BatchCall {
            call: ToolCall::new("c2", "b", "{\"x\":1}"),
            plan: BatchCallPlan::Answer { result: result.clone() },
        },
        BatchCall {
            call: ToolCall::new("c3", "c", "{}"),
            plan: BatchCallPlan::Confirm { approval_id: "appr-1".into() },
        },
    ];
    let batch = batch.clone();
    state.tool_runs.insert("c1".into(), ToolRunRecord::Started { name: "a".into() });
    state.tool_runs.insert(
        "c2".into(),
        ToolRunRecord::Finished { name: "b".into(), result, stop_requested: false, injected: Vec::new() },
    );
    assert_eq!(decode_snapshot(&encode_snapshot(&state).unwrap()).unwrap(), state);

    let events = vec![StateEvent::ApprovalRequested { batch, announced: false }];
    let mut bytes = journal_header(1).to_vec();
    bytes.extend(encode_records(&events).unwrap());
    assert_eq!(decode_journal(&bytes).unwrap().events, events);

    let call = r#""call":{"id":"c","name":"t","arguments":"{}"}"#;
    assert_eq!(
        serde_json::from_str::<BatchCall>(&format!(r#"{{"plan":"confirm","approval_id":"a",{call},"x":1}}"#))
            .unwrap(),
        BatchCall {
            call: ToolCall::new("c", "t", "{}"),
            plan: BatchCallPlan::Confirm { approval_id: "a".into() }
        }
    );
    for bad in [
        format!(r#"{{"plan":"answer",{call}}}"#),
        format!(r#"{{"plan":"skip",{call}}}"#),
        format!(r#"{{{call}}}"#),
        r#"{"plan":"run"}"#.to_string(),
        format!(r#"{{"plan":"answer","result":{{"contents":[{{"type":"text"}}]}},{call}}}"#),
    ] {
        assert!(serde_json::from_str::<BatchCall>(&bad).is_err(), "{bad}");
    }
    assert_eq!(
        serde_json::from_str::<ToolRunRecord>(r#"{"name":"t","phase":"started","extra":0}"#).unwrap(),
        ToolRunRecord::Started { name: "t".into() }
    );
    for bad in
        [r#"{"phase":"finished","name":"t"}"#, r#"{"phase":"queued","name":"t"}"#, r#"{"name":"t"}"#, "[]"]
    {
        assert!(serde_json::from_str::<ToolRunRecord>(bad).is_err(), "{bad}");
    }
}

/// Chat messages and content parts (parts of every state) decode from JSON text and from a
/// `Value` with serde's rules for them: defaults for the optional fields, refusals for a missing
/// or wrong kind or field, and the derive's wording for errors.
#[test]
fn chat_messages_and_content_parts_decode_with_their_defaults_and_refusals() {
    use arkagent::{ChatMessage, ContentPart, ToolCall, ToolResult};
    use serde_json::{json, Value};

    let messages = [
        ChatMessage::system("be brief"),
        ChatMessage::user("hi"),
        ChatMessage::assistant_text("hello"),
        ChatMessage::Assistant {
            content: None,
            reasoning_content: Some("hm".into()),
            tool_calls: vec![ToolCall::new("c1", "t", "{\"a\":1}")],
        },
        ChatMessage::Tool {
            tool_call_id: "c1".into(),
            name: "t".into(),
            content: "ok".into(),
            is_error: true,
        },
    ];
    for message in &messages {
        assert_eq!(&both::<ChatMessage>(&serde_json::to_string(message).unwrap()).unwrap(), message);
    }
    assert_eq!(
        both::<ChatMessage>(r#"{"content":null,"role":"assistant","extra":1}"#).unwrap(),
        ChatMessage::Assistant { content: None, reasoning_content: None, tool_calls: Vec::new() }
    );
    assert_eq!(
        both::<ChatMessage>(r#"{"role":"tool","tool_call_id":"c","name":"n","content":"x"}"#).unwrap(),
        ChatMessage::Tool {
            tool_call_id: "c".into(),
            name: "n".into(),
            content: "x".into(),
            is_error: false
        }
    );
    let refusals = [
        (
            r#"{"role":"bot","content":"x"}"#,
            "unknown variant `bot`, expected one of `system`, `user`, `assistant`, `tool`",
        ),
        (r#"{"role":7}"#, "invalid type: integer `7`, expected variant identifier"),
        (r#"{"content":"x"}"#, "missing field `role`"),
        (r#"{"role":"user"}"#, "missing field `content`"),
        (r#"{"role":"user","content":5}"#, "invalid type: integer `5`, expected a string"),
        (r#"{"role":"assistant","tool_calls":null}"#, "invalid type: null, expected a sequence"),
        (r#"{"role":"assistant","tool_calls":[{"id":"a"}]}"#, "missing field `name`"),
        (
            r#"{"role":"tool","tool_call_id":"a","name":"n","content":"c","is_error":"no"}"#,
            "invalid type: string \"no\", expected a boolean",
        ),
        (r#""user""#, "invalid type: string \"user\", expected internally tagged enum ChatMessage"),
    ];
    for (text, message) in refusals {
        let error = both::<ChatMessage>(text).unwrap_err();
        assert!(error.starts_with(message), "{text}: {error}");
    }

    assert_eq!(both::<ContentPart>(r#"{"text":"a","type":"text"}"#).unwrap(), ContentPart::text("a"));
    assert_eq!(
        both::<ContentPart>(r#"{"type":"json","value":null}"#).unwrap(),
        ContentPart::json(Value::Null)
    );
    let result = ToolResult::json(json!({"rows": [1, 2]}));
    assert_eq!(both::<ToolResult>(&serde_json::to_string(&result).unwrap()).unwrap(), result);
    let refusals = [
        (r#"{"type":"image"}"#, "unknown variant `image`, expected `text` or `json`"),
        (r#"{"type":"json"}"#, "missing field `value`"),
        (r#"{"type":"text","text":1}"#, "invalid type: integer `1`, expected a string"),
        (r#"{"text":"a"}"#, "missing field `type`"),
        (r#"{"type":null}"#, "invalid type: null, expected variant identifier"),
    ];
    for (text, message) in refusals {
        let error = both::<ContentPart>(text).unwrap_err();
        assert!(error.starts_with(message), "{text}: {error}");
    }
}

/// The approval batch and its items decode from text and from a `Value` with serde's defaults
/// and refusals (the first missing field named in declaration order, as the derive does).
#[test]
fn approval_batches_decode_with_their_defaults_and_refusals() {
    use arkagent::approval::{PendingApprovalBatch, PendingApprovalItem};

    let batch = state_after("s1", 1).pending_approval.expect("turn 1 freezes a batch");
    let text = serde_json::to_string(&batch).unwrap();
    assert_eq!(both::<PendingApprovalBatch>(&text).unwrap(), batch);
    let item = r#"{"approval_id":"a","tool_call":{"id":"c","name":"t","arguments":"{}"},"arguments_hash":"h",
        "risk_level":"sensitive","reason":"r","created_at_ms":5,"decision":"pending","extra":[1]}"#;
    let decoded = both::<PendingApprovalItem>(item).unwrap();
    assert_eq!((decoded.deny_reason, decoded.decided_at_ms), (None, None));
    let message = r#"{"role":"assistant"}"#;
    let minimal = format!(
        r#"{{"batch_id":"b","run_id":"r","items":[{item}],"assistant_message":{message},"created_at_ms":1}}"#
    );
    let decoded = both::<PendingApprovalBatch>(&minimal).unwrap();
    assert!(decoded.calls.is_empty());
    assert_eq!(decoded.items.len(), 1);

    let refusals = [
        (
            format!(r#"{{"items":[],"assistant_message":{message},"created_at_ms":1}}"#),
            "missing field `batch_id`",
        ),
        (
            format!(
                r#"{{"batch_id":"b","run_id":"r","items":{{}},"assistant_message":{message},"created_at_ms":1}}"#
            ),
            "invalid type: map, expected a sequence",
        ),
        (
            format!(
                r#"{{"batch_id":"b","run_id":"r","items":[{{"approval_id":"a"}}],"assistant_message":{message},"created_at_ms":1}}"#
            ),
            "missing field `tool_call`",
        ),
        (
            minimal.replace("\"pending\"", "\"maybe\""),
            "unknown variant `maybe`, expected one of `pending`, `approved`, `denied`",
        ),
        (
            minimal.replace("\"created_at_ms\":1}", "\"created_at_ms\":-1}"),
            "invalid value: integer `-1`, expected u64",
        ),
        (r#""batch""#.to_string(), "invalid type: string \"batch\", expected struct PendingApprovalBatch"),
    ];
    for (text, message) in refusals {
        let error = both::<PendingApprovalBatch>(&text).unwrap_err();
        assert!(error.starts_with(message), "{text}: {error}");
    }
}

/// A state, a tool call and a usage decode from text and from a `Value` with serde's defaults and
/// refusals (the first missing field named in declaration order, as the derive does).
#[test]
fn states_tool_calls_and_usage_decode_with_their_defaults_and_refusals() {
    use arkagent::state::AgentState;
    use arkagent::{ToolCall, Usage};

    for k in [1, 4, 6] {
        let state = state_after("s1", k);
        assert_eq!(both::<AgentState>(&serde_json::to_string(&state).unwrap()).unwrap(), state);
    }
    let fresh = AgentState::new("s");
    assert_eq!(both::<AgentState>(r#"{"schema_version":2,"session_id":"s"}"#).unwrap(), fresh);
    assert_eq!(
        both::<AgentState>(
            r#"{"session_id":"s","run_id":null,"pending_approval":null,"x":1,"schema_version":2}"#
        )
        .unwrap(),
        fresh
    );
    let state = |extra: &str| format!(r#"{{"schema_version":2,"session_id":"s",{extra}}}"#);
    refused::<AgentState>(&[
        (r#"{"session_id":"s"}"#.into(), "missing field `schema_version`"),
        ("{}".into(), "missing field `schema_version`"),
        (r#"{"schema_version":2}"#.into(), "missing field `session_id`"),
        (state(r#""messages":{}"#), "invalid type: map, expected a sequence"),
        (state(r#""messages":[{"role":"user"}]"#), "missing field `content`"),
        (state(r#""metadata":null"#), "invalid type: null, expected a map"),
        (state(r#""status":"sleeping""#), "unknown variant `sleeping`"),
        (state(r#""usage":{"prompt_tokens":1}"#), "missing field `completion_tokens`"),
        (state(r#""round":-1"#), "invalid value: integer `-1`, expected u32"),
        (state(r#""tool_runs":{"c":{"phase":"lost"}}"#), "unknown variant `lost`"),
        (r#""s""#.into(), "invalid type: string \"s\", expected struct AgentState"),
    ]);

    assert_eq!(
        both::<ToolCall>(r#"{"arguments":"{}","name":"n","id":"a","x":0}"#).unwrap(),
        ToolCall::new("a", "n", "{}")
    );
    refused::<ToolCall>(&[
        (r#"{"id":"a","name":"n"}"#.into(), "missing field `arguments`"),
        (r#"{"id":1,"name":"n","arguments":""}"#.into(), "invalid type: integer `1`, expected a string"),
    ]);
    let usage = Usage { prompt_tokens: 1, completion_tokens: 2, total_tokens: 3 };
    assert_eq!(both::<Usage>(&serde_json::to_string(&usage).unwrap()).unwrap(), usage);
    refused::<Usage>(&[
        (r#"{"prompt_tokens":1,"total_tokens":3}"#.into(), "missing field `completion_tokens`"),
        (
            r#"{"prompt_tokens":1.5,"completion_tokens":2,"total_tokens":3}"#.into(),
            "invalid type: floating point `1.5`, expected u64",
        ),
    ]);
}

#[test]
fn a_batch_completion_without_a_stop_is_written_as_before_the_field_existed() {
    // Readers that predate `stop_requested` take the record as they always did.
    let plain = serde_json::to_string(&StateEvent::BatchCompleted { stop_requested: false }).unwrap();
    assert_eq!(plain, r#"{"event":"batch_completed"}"#);
    let stop = serde_json::to_string(&StateEvent::BatchCompleted { stop_requested: true }).unwrap();
    assert_eq!(stop, r#"{"event":"batch_completed","stop_requested":true}"#);
    let state = serde_json::to_value(arkagent::state::AgentState::new("s")).unwrap();
    assert!(state.get("stop_requested").is_none(), "{state}");
}

#[test]
fn a_finished_call_without_after_hook_asks_is_written_as_before_the_fields_existed() {
    // Readers that predate `stop_requested` and `injected` take the record as they always did,
    // and a record they wrote reads with neither.
    let result = arkagent::ToolResult::text("r");
    let finished = |stop_requested, injected| StateEvent::ToolFinished {
        call_id: "c".into(),
        name: "t".into(),
        result: result.clone(),
        stop_requested,
        injected,
    };
    let plain = serde_json::to_value(finished(false, Vec::new())).unwrap();
    let keys: Vec<&String> = plain.as_object().unwrap().keys().collect();
    assert_eq!(keys, ["call_id", "event", "name", "result"], "{plain}");
    let old = r#"{"event":"tool_finished","call_id":"c","name":"t","result":{"contents":[{"type":"text","text":"r"}]}}"#;
    assert_eq!(serde_json::from_str::<StateEvent>(old).unwrap(), finished(false, Vec::new()));
    let asked = finished(true, vec![arkagent::message::ChatMessage::user("remember")]);
    let text = serde_json::to_string(&asked).unwrap();
    assert!(
        text.ends_with(r#""stop_requested":true,"injected":[{"role":"user","content":"remember"}]}"#),
        "{text}"
    );
    assert_eq!(serde_json::from_str::<StateEvent>(&text).unwrap(), asked);
    // In a snapshot too: the state's record of the call keeps them.
    let mut state = arkagent::state::AgentState::new("s");
    state.apply(&asked);
    assert_eq!(decode_snapshot(&encode_snapshot(&state).unwrap()).unwrap(), state);
    let record = serde_json::to_value(&state.tool_runs["c"]).unwrap();
    assert_eq!(record["stop_requested"], true, "{record}");
}

#[test]
fn a_runs_error_and_an_announced_batch_survive_a_snapshot_and_a_journal_and_are_absent_when_unset() {
    // What turns 1..=10 leave: the last run failed with its error (`run_error`); turn 6 froze a
    // batch saved as announced (`approval_announced`), which turn 9 cleared.
    let failed = state_after("s", 10);
    let error = failed.run_error.clone().expect("turn 10 failed with an error");
    assert_eq!(error.code, codes::PROVIDER_HTTP_STATUS);
    assert_eq!(decode_snapshot(&encode_snapshot(&failed).unwrap()).unwrap(), failed);
    let announced = state_after("s", 6);
    assert!(announced.approval_announced && announced.pending_approval.is_some());
    assert_eq!(decode_snapshot(&encode_snapshot(&announced).unwrap()).unwrap(), announced);
    assert!(!state_after("s", 9).approval_announced, "cleared with its batch");
    // Both as journal records.
    let events: Vec<StateEvent> = (6..=10).flat_map(turn).collect();
    let mut bytes = journal_header(1).to_vec();
    bytes.extend(encode_records(&events).unwrap());
    assert_eq!(decode_journal(&bytes).unwrap().events, events);
    // Unset, neither is written: the bytes are those of states and records saved before them.
    let quiet = serde_json::to_value(state_after("s", 5)).unwrap();
    assert!(quiet.get("run_error").is_none() && quiet.get("approval_announced").is_none(), "{quiet}");
    let plain = serde_json::to_value(&turn(1)[3]).unwrap();
    assert_eq!(plain["event"], "approval_requested");
    assert!(plain.get("announced").is_none(), "{plain}");
    let done = serde_json::to_value(&turn(5)[3]).unwrap();
    assert_eq!(done["event"], "status_changed");
    assert!(done.get("error").is_none(), "{done}");
}
