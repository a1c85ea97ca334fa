//! Confirms put to the user in the 2026-07-28 era, where the server may not send requests of
//! its own: multi-round-trip requests (MRTR, `input_required` results) in place of the
//! session's elicitation forms ([`super::elicit`]).
//!
//! A `wait_for_inbound_message` call of that era whose client declared form elicitation
//! (`_meta` client capabilities), with `mcp.elicitation` on, whose result holds confirms the
//! rule lets be answered by `elicitation` and no work (nothing claimed is held back), returns
//! `resultType: "input_required"` instead: one `elicitation/create` form per confirm (the same
//! form as in 2025-11-25) and a `requestState` that carries the result the wait took. The
//! client retries the call with `inputResponses` and that `requestState`: the answers go to the
//! `confirm` operation (`via: elicitation`, as the reading consumer), and the retry returns the
//! wait's result with what became of each answer in its `note`. It does not wait again.
//!
//! `requestState` comes back from the client, so it is signed (HMAC-SHA256, rmcp's
//! `RequestStateCodec`) with a key drawn at random when the process starts and never written
//! anywhere, bound to the consumer it was made for, good for [`STATE_TTL`], and single use: a
//! tampered, foreign, expired or replayed state is refused with -32602 and answers nothing.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use chrono::Utc;
use rmcp::model::{
    CallToolRequestParams, ElicitRequest, ElicitRequestParams, ElicitResult, ErrorData,
    InputRequest, InputRequests, InputRequiredResult, RequestId, RequestStateCodec, SealOptions,
};
use rmcp::service::{RequestContext, RoleServer};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::McpServer;
use super::elicit::{Choice, choice, form_message, form_schema};
use crate::actions::{ActionId, Item, Via};
use crate::control::ops::Confirm;
use crate::delivery::ItemKind;

/// How long a `requestState` may be answered.
pub const STATE_TTL: Duration = Duration::from_secs(600);

/// The prefix of each form's key in `inputRequests`; the action id follows.
const KEY: &str = "confirm-";

/// What a `requestState` carries.
#[derive(Serialize, Deserialize)]
struct State {
    /// Single use: a state whose nonce was answered already is refused.
    nonce: String,
    /// The confirms asked, by their key in `inputRequests`.
    asked: Vec<(String, ActionId)>,
    /// The wait's result, returned by the retry.
    result: Value,
}

/// The `input_required` results a session's wait calls chose, by request, until `call_tool`
/// returns them.
#[derive(Default)]
pub struct Pending(Mutex<HashMap<RequestId, InputRequiredResult>>);

impl Pending {
    /// The `input_required` result request `id` chose, if it did.
    pub fn take(&self, id: &RequestId) -> Option<InputRequiredResult> {
        self.0.lock().unwrap().remove(id)
    }
}

/// The process's signing key: random, never stored, so a state is good only in the process
/// (daemon or front end) that made it.
fn codec() -> &'static RequestStateCodec {
    static CODEC: OnceLock<RequestStateCodec> = OnceLock::new();
    CODEC.get_or_init(|| {
        let mut key = [0u8; 32];
        getrandom::fill(&mut key).expect("the system's random source");
        RequestStateCodec::try_new(key.to_vec()).expect("a 32-byte key is long enough")
    })
}

/// The nonces answered within the last [`STATE_TTL`].
fn used() -> &'static Mutex<HashMap<String, Instant>> {
    static USED: OnceLock<Mutex<HashMap<String, Instant>>> = OnceLock::new();
    USED.get_or_init(Mutex::default)
}

/// What a state is bound to: the tool and the consumer it was made for.
fn bound_to(consumer: &str) -> Vec<u8> {
    format!("switchboard|wait_for_inbound_message|{consumer}").into_bytes()
}

/// Whether the wait call of `context` may return an `input_required` result.
fn applies(server: &McpServer, context: &RequestContext<RoleServer>) -> bool {
    server.api.settings().elicitation
        && super::era::is_new(context.meta.protocol_version().as_ref())
        && context
            .meta
            .client_capabilities()
            .and_then(|caps| caps.elicitation)
            .is_some_and(|e| e.form.is_some() || e.url.is_none())
}

/// The confirms of `items` that may be put in a form.
fn askable(items: &[Item]) -> Vec<&Item> {
    let now = Utc::now();
    items
        .iter()
        .filter(|i| {
            i.kind == ItemKind::ConfirmRequest
                && i.allows(Via::Elicitation)
                && i.expires_at.is_none_or(|e| e > now)
        })
        .collect()
}

/// Keeps an `input_required` result for the wait call of `context`, reading as `consumer`,
/// when it may return one and its `items` hold confirms to ask and no work; `result` is the
/// wait's result as it would be returned otherwise.
pub fn offer(
    server: &McpServer,
    context: &RequestContext<RoleServer>,
    consumer: &str,
    items: &[Item],
    result: &impl Serialize,
) {
    if applies(server, context)
        && let Ok(value) = serde_json::to_value(result)
    {
        choose(&server.input, &context.id, consumer, items, value);
    }
}

/// Keeps an `input_required` result for the wait call `id` of `consumer`, when its `items`
/// hold confirms to ask and no work; `result` is the wait's result as it would be returned.
fn choose(pending: &Pending, id: &RequestId, consumer: &str, items: &[Item], result: Value) {
    let asked = askable(items);
    let work = items
        .iter()
        .any(|i| matches!(i.kind, ItemKind::Auto | ItemKind::Approved));
    if asked.is_empty() || work {
        return;
    }
    let now = Utc::now();
    let mut requests = InputRequests::new();
    let mut keys = Vec::new();
    for item in asked {
        let key = format!("{KEY}{}", item.action_id);
        let params = ElicitRequestParams::FormElicitationParams {
            meta: None,
            message: form_message(item, now),
            requested_schema: form_schema(),
        };
        requests.insert(
            key.clone(),
            InputRequest::Elicitation(ElicitRequest::new(params)),
        );
        keys.push((key, item.action_id));
    }
    let mut nonce = [0u8; 16];
    getrandom::fill(&mut nonce).expect("the system's random source");
    let state = State {
        nonce: nonce.iter().map(|b| format!("{b:02x}")).collect(),
        asked: keys,
        result,
    };
    let bound = bound_to(consumer);
    let options = SealOptions::new().associated_data(&bound).ttl(STATE_TTL);
    let Ok(sealed) = codec().seal_json_with(&state, &options) else {
        return;
    };
    let input = InputRequiredResult::new(Some(requests), Some(sealed));
    pending.0.lock().unwrap().insert(id.clone(), input);
}

/// The retry of an `input_required` wait: its answers applied as `consumer`, and the wait's
/// result with what became of them. `None` when the call is not a retry.
pub async fn answer(
    server: &McpServer,
    consumer: &str,
    request: &CallToolRequestParams,
) -> Result<Option<Value>, ErrorData> {
    let Some(sealed) = request.request_state.as_deref() else {
        return Ok(None);
    };
    let state: State = codec()
        .open_json_with(sealed, &bound_to(consumer))
        .map_err(|e| {
            ErrorData::invalid_params(
                format!(
                    "`requestState` refused: {e}; call `wait_for_inbound_message` afresh \
                     (without `requestState`)"
                ),
                None,
            )
        })?;
    {
        let mut used = used().lock().unwrap();
        used.retain(|_, at| at.elapsed() < STATE_TTL);
        if used.insert(state.nonce.clone(), Instant::now()).is_some() {
            return Err(ErrorData::invalid_params(
                "`requestState` refused: it was answered already; call \
                 `wait_for_inbound_message` afresh (without `requestState`)",
                None,
            ));
        }
    }
    let responses = request.input_responses.clone().unwrap_or_default();
    let mut notes = Vec::new();
    for (key, id) in &state.asked {
        let result = responses
            .get(key)
            .and_then(|v| serde_json::from_value::<ElicitResult>(v.clone()).ok());
        let note = match result.as_ref().map(choice) {
            None => format!("confirm {id}: no answer; left pending"),
            Some(Choice::Leave(why)) => format!("confirm {id}: {why}"),
            Some(Choice::Answer(decision)) => {
                let answered = server
                    .api
                    .call(Confirm {
                        id: *id,
                        decision,
                        by: server.answerer(consumer),
                        claim_for: None,
                        via: Some(Via::Elicitation),
                    })
                    .await;
                match answered {
                    Ok(_) if decision.is_yes() => format!(
                        "confirm {id}: approved in the form; its work comes with the next wait"
                    ),
                    Ok(_) => format!("confirm {id}: denied in the form"),
                    Err(e) => format!("confirm {id}: the answer was not taken: {e}"),
                }
            }
        };
        tracing::info!(
            action_id = *id,
            consumer,
            "elicitation (input_required): {note}"
        );
        notes.push(note);
    }
    let mut result = state.result;
    let note = result
        .get("note")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let note = format!("{} {note}", notes.join(". ") + ".");
    result["note"] = Value::String(note.trim().to_string());
    Ok(Some(result))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seal(consumer: &str, nonce: &str) -> String {
        let state = State {
            nonce: nonce.into(),
            asked: vec![(format!("{KEY}7"), 7)],
            result: serde_json::json!({"items": [], "note": "n"}),
        };
        let bound = bound_to(consumer);
        codec()
            .seal_json_with(
                &state,
                &SealOptions::new().associated_data(&bound).ttl(STATE_TTL),
            )
            .unwrap()
    }

    #[test]
    fn a_state_opens_only_unchanged_and_for_its_consumer() {
        let sealed = seal("alice", "n1");
        let opened: State = codec().open_json_with(&sealed, &bound_to("alice")).unwrap();
        assert_eq!(opened.asked, vec![(format!("{KEY}7"), 7)]);
        assert!(
            codec()
                .open_json_with::<State>(&sealed, &bound_to("bob"))
                .is_err()
        );
        let mut tampered = sealed.clone().into_bytes();
        let at = tampered.len() / 2;
        tampered[at] = if tampered[at] == b'A' { b'B' } else { b'A' };
        let tampered = String::from_utf8(tampered).unwrap();
        assert!(
            codec()
                .open_json_with::<State>(&tampered, &bound_to("alice"))
                .is_err()
        );
        // Another process's key.
        let other = RequestStateCodec::try_new(vec![9u8; 32]).unwrap();
        assert!(
            other
                .open_json_with::<State>(&sealed, &bound_to("alice"))
                .is_err()
        );
    }
}
