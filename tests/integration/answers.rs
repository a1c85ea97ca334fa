//! An answer is kept or refused, never claimed (issue 45). With `actions.jsonl` made
//! unwritable (`chattr +i`, as the fault tests do), every path a person answers by refuses:
//! `switchboard confirm` (exit 7, `not recorded: ...; try again`), the approval page (503
//! `not_recorded`), the `channel_confirm` tool, an elicitation form (the user is told in a log
//! notification) and the permission relay (no verdict goes to the host). Every confirm stays
//! pending; once the journal takes writes again the same answers are kept, and after a restart
//! nothing answered is pending. `switchboard stop` with changes of state the journal could not
//! take says how many and exits 8.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rmcp::model::{
    ClientConfig, ClientNotification, CustomNotification, ElicitRequestParams, ElicitResult,
    ElicitationAction, ElicitationCapability, ErrorData, FormElicitationCapability,
};
use rmcp::service::{NotificationContext, RequestContext, RoleClient, RunningService};
use rmcp::{ClientHandler, ServiceExt};
use serde_json::{Value, json};

use super::approvals::ui_link_with;
use super::faults::{Immutable, immutable};
use super::util::*;

const ASK: &str = r#"{"rules": [
  {"name": "ask", "channel": "alerts/*", "mode": "confirm", "prompt": "Look at {{content}}",
   "tools": ["view"], "confirmTimeout": "1h"},
  {"name": "work", "channel": "work/*", "mode": "auto", "prompt": "Do {{content}}",
   "tools": ["view"]}
]}"#;

/// A host that answers every form "approve", and keeps what it is told: log notifications,
/// permission verdicts, the forms it was shown.
#[derive(Clone, Default)]
struct Host {
    logs: Arc<Mutex<Vec<Value>>>,
    verdicts: Arc<Mutex<Vec<Value>>>,
    forms: Arc<Mutex<Vec<String>>>,
}

impl ClientHandler for Host {
    fn get_info(&self) -> ClientConfig {
        let mut config = pinned_client("claude-code", "2.1.81");
        config.capabilities.elicitation =
            Some(ElicitationCapability::new().with_form(FormElicitationCapability::default()));
        config
    }

    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        _cx: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        if let ElicitRequestParams::FormElicitationParams { message, .. } = request {
            self.forms.lock().unwrap().push(message);
        }
        Ok(ElicitResult::new(ElicitationAction::Accept)
            .with_content(json!({"decision": "approve"})))
    }

    #[allow(deprecated)]
    async fn on_logging_message(
        &self,
        params: rmcp::model::LoggingMessageNotificationParam,
        _cx: NotificationContext<RoleClient>,
    ) {
        self.logs.lock().unwrap().push(params.data);
    }

    async fn on_custom_notification(
        &self,
        n: CustomNotification,
        _cx: NotificationContext<RoleClient>,
    ) {
        if n.method == "notifications/claude/channel/permission" {
            self.verdicts
                .lock()
                .unwrap()
                .push(n.params.unwrap_or_default());
        }
    }
}

type HostClient = RunningService<RoleClient, Host>;

fn pending_ids(sb: &Switchboard) -> Vec<u64> {
    let out = sb.cli(&["pending", "--json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    serde_json::from_str::<Value>(&stdout(&out))
        .unwrap()
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["id"].as_u64().unwrap())
        .collect()
}

/// A session cookie for the page and its CSRF token, signed in by a link labelled `phone`.
fn page_session(sb: &Switchboard) -> (String, String) {
    let ingest = sb.ingest.clone().unwrap();
    let (login, _) = ui_link_with(sb, &["--label", "phone"]);
    let r = http_request(&ingest, "GET", &login, &[], b"");
    assert_eq!(r.status, 303, "{}", r.body);
    let cookie = r.header("set-cookie").unwrap();
    let cookie = cookie.split(';').next().unwrap().to_string();
    let state = http_request(&ingest, "GET", "/ui/api/state", &[("Cookie", &cookie)], b"");
    let csrf = state.json()["csrf"].as_str().unwrap().to_string();
    (cookie, csrf)
}

/// The page's answer to confirm `id`.
fn page_answer(sb: &Switchboard, (cookie, csrf): &(String, String), id: u64) -> Reply {
    let body = json!({"id": id, "decision": "approve"}).to_string();
    http_request(
        sb.ingest.as_ref().unwrap(),
        "POST",
        "/ui/api/confirm",
        &[
            ("Cookie", cookie),
            ("Content-Type", "application/json"),
            ("X-CSRF-Token", csrf),
            ("Sec-Fetch-Site", "same-origin"),
        ],
        body.as_bytes(),
    )
}

/// `channel_confirm` yes for `id`: (structured content, is_error).
async fn tool_answer(client: &HostClient, id: u64) -> (Value, bool) {
    let mut params = rmcp::model::CallToolRequestParams::new("channel_confirm");
    params.arguments = json!({"id": id, "decision": "yes"}).as_object().cloned();
    let result = client.call_tool(params).await.expect("tool call answered");
    (
        result.structured_content.expect("structured"),
        result.is_error == Some(true),
    )
}

/// One wait of the host: a form goes out for the next confirm that takes one.
async fn host_waits(client: &HostClient) {
    let mut params = rmcp::model::CallToolRequestParams::new("wait_for_inbound_message");
    params.arguments = json!({"timeout_s": 1}).as_object().cloned();
    client.call_tool(params).await.expect("wait answered");
}

/// The refusal every surface words alike.
fn is_not_recorded(text: &str) -> bool {
    text.contains("not recorded: the actions journal cannot be written (")
        && text.contains("); try again")
}

#[tokio::test(flavor = "multi_thread")]
async fn with_the_actions_journal_unwritable_every_answer_is_refused_and_kept_once_it_recovers() {
    let mut sb = Switchboard::new();
    sb.write("triggers.json", ASK);
    sb.write(
        "switchboard.json",
        r#"{"mcp": {"permissionRelay": true, "deliveryGrace": "300ms"}}"#,
    );
    sb.spawn();
    let host = Host::default();
    let client = host
        .clone()
        .serve(http_transport(&sb))
        .await
        .expect("host connects");
    send_messages(
        sb.home.path(),
        &[
            ("alerts/a", "one"),
            ("alerts/b", "two"),
            ("alerts/c", "three"),
            ("alerts/d", "four"),
        ],
    );
    // A permission prompt of the host, relayed as confirm 5.
    let params = json!({"request_id": "abcde", "tool_name": "Bash",
                        "description": "Run Bash", "input_preview": "{\"command\":\"ls\"}"});
    client
        .send_notification(ClientNotification::CustomNotification(
            CustomNotification::new(
                "notifications/claude/channel/permission_request",
                Some(params),
            ),
        ))
        .await
        .unwrap();
    eventually_async(Duration::from_secs(10), "five pending confirms", || {
        (pending_ids(&sb) == [1, 2, 3, 4, 5]).then_some(())
    })
    .await;
    let page = page_session(&sb);

    let actions = sb.home.path().join("actions.jsonl");
    if !immutable(&actions, true) {
        return skip("`chattr +i` is refused here");
    }
    let guard = Immutable(&actions);

    // The CLI: a distinct exit, the reason, nothing changed.
    let out = sb.cli(&["confirm", "1", "no"]);
    assert_eq!(out.status.code(), Some(7), "{}", stderr(&out));
    let said = stderr(&out);
    assert!(said.starts_with("error: confirm 1: "), "{said}");
    assert!(is_not_recorded(&said), "{said}");
    assert!(
        stdout(&out).is_empty(),
        "no `denied` claimed: {}",
        stdout(&out)
    );
    // The page.
    let r = page_answer(&sb, &page, 2);
    r.assert_error(503, "not_recorded");
    assert!(
        is_not_recorded(r.json()["message"].as_str().unwrap()),
        "{}",
        r.body
    );
    // The tool.
    let (answer, is_error) = tool_answer(&client, 3).await;
    assert!(is_error, "{answer}");
    assert!(
        is_not_recorded(answer["error"].as_str().unwrap()),
        "{answer}"
    );
    // A form: answered, refused, and the user told so.
    host_waits(&client).await;
    let told = eventually_async(Duration::from_secs(10), "the user is told", || {
        host.logs
            .lock()
            .unwrap()
            .iter()
            .find(|l| l["error"].as_str().is_some_and(is_not_recorded))
            .cloned()
    })
    .await;
    assert_eq!(told["action_id"], 1, "{told}");
    // The relay: refused, and no verdict goes to the host.
    let out = sb.cli(&["confirm", "5", "yes"]);
    assert_eq!(out.status.code(), Some(7), "{}", stderr(&out));
    assert!(is_not_recorded(&stderr(&out)), "{}", stderr(&out));
    assert_eq!(
        pending_ids(&sb),
        [1, 2, 3, 4, 5],
        "every confirm still pending"
    );
    assert!(
        host.verdicts.lock().unwrap().is_empty(),
        "no verdict claimed"
    );

    // The journal takes writes again: the same answers are kept.
    drop(guard);
    let out = sb.cli(&["confirm", "1", "no"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out).trim(), "denied #1: nothing will run");
    let r = page_answer(&sb, &page, 2);
    assert_eq!(r.status, 200, "{}", r.body);
    let (answer, is_error) = tool_answer(&client, 3).await;
    assert!(!is_error && answer["approved"] == true, "{answer}");
    host_waits(&client).await;
    eventually_async(Duration::from_secs(10), "the form's answer is kept", || {
        (!pending_ids(&sb).contains(&4)).then_some(())
    })
    .await;
    let out = sb.cli(&["confirm", "5", "yes"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let verdict = eventually_async(Duration::from_secs(10), "the verdict", || {
        host.verdicts.lock().unwrap().first().cloned()
    })
    .await;
    assert_eq!(verdict["behavior"], "allow", "{verdict}");
    assert_eq!(pending_ids(&sb), Vec::<u64>::new());
    // Who answered, everywhere: the terminal's user, the page link's label, the MCP session.
    let (uid, login) = os_user();
    let closed = stdout(&sb.cli(&["pending", "--closed"]));
    for line in [
        format!("#1 [ask] denied via cli by {login}"),
        "#2 [ask] approved via web by page link \"phone\"".to_string(),
        "#3 [ask] approved via tool by claude-code#".to_string(),
        "#4 [ask] approved via elicitation by claude-code#".to_string(),
        format!("#5 [permission:Bash] approved via cli by {login}"),
    ] {
        assert!(closed.contains(&line), "missing `{line}` in\n{closed}");
    }
    let answered: HashMap<u64, Value> = action_records(sb.home.path())
        .into_iter()
        .filter(|r| r["state"] == "approved" || r["state"] == "denied")
        .map(|r| (r["id"].as_u64().unwrap(), r["by"].clone()))
        .collect();
    let closed_json = sb.cli(&["pending", "--closed", "--json"]);
    let closed_json: Value = serde_json::from_slice(&closed_json.stdout).unwrap();
    for (id, kind) in [
        (1, "user"),
        (2, "link"),
        (3, "client"),
        (4, "client"),
        (5, "user"),
    ] {
        let by = &answered[&id];
        assert_eq!(by["kind"], kind, "actions.jsonl, #{id}: {by}");
        let shown = closed_json["closed"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["id"] == id)
            .map(|c| c["by"].clone());
        assert_eq!(shown.as_ref(), Some(by), "pending --closed --json, #{id}");
    }
    assert_eq!(
        answered[&1],
        json!({"kind": "user", "id": uid, "name": login})
    );
    assert_eq!(answered[&2]["name"], "phone");
    assert_eq!(answered[&3]["name"], "claude-code");
    assert!(
        answered[&3]["id"]
            .as_str()
            .unwrap()
            .starts_with("claude-code#"),
        "{}",
        answered[&3]
    );
    client.cancel().await.ok();

    // After a restart nothing answered is pending again.
    assert!(sb.terminate().success());
    sb.spawn();
    assert_eq!(pending_ids(&sb), Vec::<u64>::new(), "an answer came undone");
}

#[test]
fn a_stop_that_leaves_changes_unsaved_says_how_many_and_exits_8() {
    let mut sb = Switchboard::new();
    sb.write("triggers.json", ASK);
    sb.spawn();
    let home = sb.home.path().to_path_buf();
    let before = send_messages(&home, &[("work/a", "before the outage")])[0];
    eventually(Duration::from_secs(5), "the first work is on disk", || {
        action_records(&home)
            .iter()
            .any(|r| r["action"]["seq"] == before)
            .then_some(())
    });
    let actions = home.join("actions.jsonl");
    if !immutable(&actions, true) {
        return skip("`chattr +i` is refused here");
    }
    let guard = Immutable(&actions);
    send_messages(&home, &[("work/b", "during the outage")]);
    eventually(Duration::from_secs(5), "stats says failing", || {
        let s = control(&home, json!({"op": "stats"}));
        s["result"]["delivery"]["actions_journal"]
            .as_str()
            .is_some_and(|j| j.starts_with("failing: "))
            .then_some(())
    });
    let out = sb.cli(&["stop"]);
    let said = stderr(&out);
    assert_eq!(out.status.code(), Some(8), "{said}");
    assert!(
        stdout(&out).contains("switchboard daemon stopped"),
        "{}",
        stdout(&out)
    );
    assert!(
        said.contains("changes of state were not saved: the actions journal cannot be written ("),
        "{said}"
    );
    let unsaved: u64 = said
        .strip_prefix("error: ")
        .and_then(|s| s.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("how many: {said}"));
    assert!(unsaved >= 1, "{said}");
    sb.kill9();
    drop(guard);
    // The message whose work was not saved is evaluated again: nothing of it is lost.
    sb.spawn();
    eventually(
        Duration::from_secs(5),
        "both pieces of work are queued",
        || {
            let s = control(&home, json!({"op": "stats"}));
            (s["result"]["delivery"]["queued_work"] == 2).then_some(())
        },
    );
}
