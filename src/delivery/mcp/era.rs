//! Which MCP era a client gets: the 2025-11-25 session lifecycle (`initialize`, a session,
//! server push) or the stateless 2026-07-28 one (`server/discover`, per-request `_meta`, no
//! session, no push outside `subscriptions/listen`).
//!
//! A client chooses by what it sends first, on stdio and HTTP alike:
//!
//! - `initialize` → 2025-11-25, as before;
//! - a request whose `_meta` carries `io.modelcontextprotocol/protocolVersion` (and, as
//!   2026-07-28 requires, the client capabilities) → that version, served without a session;
//! - `server/discover` is answered the same way, except for clients that must stay on the
//!   session lifecycle: **Claude Code** (its probe's `_meta` carries `clientInfo.name`
//!   `claude-code`) refuses channel push outside it, so its probe gets -32601 and it falls back
//!   to `initialize`; a probe without params (Copilot CLI's, id 0) gets -32601 too, which is
//!   the fallback signal the spec gives for stdio. (Not the probe's id: Claude Code's
//!   `server-discover-probe-N` is the TypeScript SDK v2's, which clients of 2026-07-28 only
//!   send too.)
//! - a 2026-07-28 request for a method that era removed (`initialize`, `ping`,
//!   `logging/setLevel`, `resources/subscribe`, `resources/unsubscribe`) gets -32601 (HTTP 404).

use rmcp::model::{ProtocolVersion, RequestMetaObject};
use serde_json::{Value, json};

/// The `clientInfo.name` values whose `server/discover` is refused, so that they keep the
/// 2025-11-25 session and its push.
pub const SESSION_CLIENTS: &[&str] = &["claude-code"];

/// The versions switchboard speaks, oldest first.
pub fn supported() -> &'static [ProtocolVersion] {
    ProtocolVersion::known_up_to(&ProtocolVersion::V_2026_07_28)
}

/// Whether `version` (a request's, from its `_meta`) is of the 2026-07-28 era or later.
pub fn is_new(version: Option<&ProtocolVersion>) -> bool {
    version.is_some_and(|v| v.as_str() >= ProtocolVersion::V_2026_07_28.as_str())
}

/// The request `_meta` of a raw JSON-RPC message, if any.
fn meta(message: &Value) -> Option<RequestMetaObject> {
    let meta = message.get("params")?.get("_meta")?;
    serde_json::from_value(meta.clone()).ok()
}

/// Whether `message` (raw JSON-RPC) is a request of the 2026-07-28 era: its `_meta` names a
/// protocol version. (rmcp checks the rest of the `_meta` and answers what is missing.)
pub fn is_inline(message: &Value) -> bool {
    message.get("method").is_some_and(|m| m != "initialize")
        && meta(message).is_some_and(|m| m.protocol_version().is_some())
}

/// The methods 2026-07-28 removed: a request of that era for one gets -32601 (HTTP 404).
const REMOVED: &[&str] = &[
    "initialize",
    "ping",
    "logging/setLevel",
    "resources/subscribe",
    "resources/unsubscribe",
];

/// Whether `message` (raw JSON-RPC) is a 2026-07-28 request for a method that era removed.
pub fn is_removed(message: &Value) -> bool {
    message
        .get("method")
        .and_then(Value::as_str)
        .is_some_and(|m| REMOVED.contains(&m))
        && message.get("id").is_some()
        && is_new(meta(message).and_then(|m| m.protocol_version()).as_ref())
}

/// The -32601 answer to a removed method, for request `message`.
pub fn removed_answer(message: &Value) -> Value {
    let method = message
        .get("method")
        .and_then(Value::as_str)
        .unwrap_or_default();
    json!({"jsonrpc": "2.0", "id": message.get("id").cloned().unwrap_or(Value::Null), "error": {
        "code": -32601,
        "message": format!("Method not found: `{method}` is not part of MCP 2026-07-28"),
    }})
}

/// Whether the `server/discover` request `message` is answered -32601, keeping its client on
/// the 2025-11-25 lifecycle (see the module docs): Claude Code's probe, and a probe without
/// params (Copilot CLI's). One whose `_meta` is incomplete goes on to rmcp, which answers
/// -32602 saying what is missing.
pub fn refuses_discover(message: &Value) -> bool {
    if message.get("params").is_none() {
        return true;
    }
    meta(message)
        .and_then(|meta| meta.client_info())
        .is_some_and(|info| SESSION_CLIENTS.contains(&info.name.as_str()))
}

/// The message of the -32601 answer to a refused `server/discover`.
const DISCOVER_REFUSED: &str =
    "Method not found: server/discover; use initialize (MCP 2025-11-25 lifecycle)";

/// The -32601 answer to a refused `server/discover`, as a JSON-RPC message for request `id`.
pub fn discover_refusal(id: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32601, "message": DISCOVER_REFUSED}})
}

#[cfg(test)]
mod tests {
    use super::*;

    fn discover(id: Value, meta: Value) -> Value {
        json!({"jsonrpc": "2.0", "id": id, "method": "server/discover", "params": {"_meta": meta}})
    }

    #[test]
    fn claude_code_and_copilot_probes_are_refused_a_new_client_is_answered() {
        let caps = json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                          "io.modelcontextprotocol/clientCapabilities": {}});
        // Claude Code's probe.
        let mut claude = caps.clone();
        claude["io.modelcontextprotocol/clientInfo"] =
            json!({"name": "claude-code", "version": "2.1.330"});
        assert!(refuses_discover(&discover(
            json!("server-discover-probe-1"),
            claude
        )));
        // Copilot CLI's: no params at all.
        assert!(refuses_discover(
            &json!({"jsonrpc": "2.0", "id": 0, "method": "server/discover"})
        ));
        // Incomplete `_meta`: rmcp says what is missing.
        assert!(!refuses_discover(&discover(json!(2), json!({}))));
        // A 2026-07-28 client.
        let mut other = caps;
        other["io.modelcontextprotocol/clientInfo"] = json!({"name": "ts-v2", "version": "2"});
        assert!(!refuses_discover(&discover(
            json!("server-discover-probe-1"),
            other
        )));
    }

    #[test]
    fn inline_requests_are_told_by_their_meta() {
        let list = |meta: Value| json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": meta}});
        assert!(is_inline(&list(
            json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28"})
        )));
        assert!(!is_inline(&list(json!({"progressToken": 1}))));
        assert!(!is_inline(
            &json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
        ));
        let removed = |method: &str, version: &str| {
            json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": {"_meta":
                {"io.modelcontextprotocol/protocolVersion": version}}})
        };
        assert!(is_removed(&removed("initialize", "2026-07-28")));
        assert!(is_removed(&removed("resources/subscribe", "2026-07-28")));
        assert!(!is_removed(&removed("resources/subscribe", "2025-11-25")));
        assert!(!is_removed(&removed("tools/list", "2026-07-28")));
        assert_eq!(supported().last(), Some(&ProtocolVersion::V_2026_07_28));
        assert!(supported().contains(&ProtocolVersion::V_2025_11_25));
    }
}
