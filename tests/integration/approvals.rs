//! Approvals that come from a person: who answered (`via`) and each rule's `approveVia`, the
//! approval page (`/ui`), elicitation forms and Claude Code's permission relay.

use std::time::Duration;

use rmcp::ServiceExt;
use serde_json::{Value, json};

use super::util::*;

const ASK: &str = r#"{"rules": [
  {"name": "ask", "channel": "alerts/*", "mode": "confirm", "prompt": "Investigate: {{content}}",
   "tools": ["view"], "approveVia": ["cli", "web"]},
  {"name": "ask-any", "channel": "ci/*", "mode": "confirm", "prompt": "Fix: {{content}}",
   "tools": ["edit"]}
]}"#;

/// `channel_confirm` with `args`: (structured content, is_error).
async fn confirm_tool(client: &Client, args: Value) -> (Value, bool) {
    let mut params = rmcp::model::CallToolRequestParams::new("channel_confirm");
    params.arguments = args.as_object().cloned();
    let result = client.call_tool(params).await.expect("tool call answered");
    (
        result.structured_content.expect("structured"),
        result.is_error == Some(true),
    )
}

fn pending_ids(home: &std::path::Path) -> Vec<u64> {
    control(home, json!({"op": "pending"}))["result"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["id"].as_u64().unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn approve_via_keeps_the_agent_from_approving_and_every_answer_records_its_path() {
    let mut sb = Switchboard::new();
    sb.write("triggers.json", ASK);
    sb.spawn();
    let client = rmcp::model::ClientConfig::default()
        .serve(http_transport(&sb))
        .await
        .expect("client connects");
    send_messages(
        sb.home.path(),
        &[("alerts/db", "db down"), ("ci/main", "build broke")],
    );
    eventually_async(Duration::from_secs(5), "two pending confirms", || {
        (pending_ids(sb.home.path()) == [1, 2]).then_some(())
    })
    .await;

    // The agent's own tool is not a path `ask` takes: refused, still pending.
    let (refused, is_error) = confirm_tool(&client, json!({"id": 1, "decision": "yes"})).await;
    assert!(is_error, "{refused}");
    assert_eq!(
        refused["error"],
        "confirm 1 cannot be answered via `tool`: rule `ask` takes answers only via cli, web; \
         ask a person to answer it there"
    );
    assert_eq!(refused["code"], "not_allowed", "{refused}");
    assert_eq!(refused["action_id"], 1, "{refused}");
    assert_eq!(pending_ids(sb.home.path()), [1, 2]);

    // A person at the terminal may; a rule without `approveVia` takes the tool.
    let out = sb.cli(&["confirm", "1", "yes"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let (denied, is_error) = confirm_tool(&client, json!({"id": 2, "decision": "no"})).await;
    assert!(!is_error, "{denied}");

    let records = action_records(sb.home.path());
    let answer = |id: u64| {
        records
            .iter()
            .find(|r| r["id"] == id && r["via"].is_string())
            .cloned()
            .unwrap_or_else(|| panic!("no answer of {id} with `via`: {records:?}"))
    };
    assert_eq!(
        (answer(1)["state"].clone(), answer(1)["via"].clone()),
        (json!("approved"), json!("cli"))
    );
    assert_eq!(
        (answer(2)["state"].clone(), answer(2)["via"].clone()),
        (json!("denied"), json!("tool"))
    );

    let out = sb.cli(&["pending", "--closed"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    let lines: Vec<&str> = text.lines().collect();
    assert!(
        lines[0].starts_with("#1 [ask] approved via cli by ") && lines[0].contains(" at "),
        "{text}"
    );
    assert!(
        lines[1].starts_with("#2 [ask-any] denied via tool by "),
        "{text}"
    );
    assert_eq!(lines[2], "no pending confirms", "{text}");
    client.cancel().await.ok();
}

/// A fresh one-time link from `switchboard ui --no-open`: (path and query, the whole URL).
pub fn ui_link(sb: &Switchboard) -> (String, String) {
    ui_link_with(sb, &[])
}

/// A fresh one-time link from `switchboard ui --no-open ARGS`: (path and query, the URL).
pub fn ui_link_with(sb: &Switchboard, args: &[&str]) -> (String, String) {
    let out = sb.cli(&[&["ui", "--no-open"], args].concat());
    assert!(out.status.success(), "{}", stderr(&out));
    let url = stdout(&out).lines().next().unwrap().to_string();
    let ingest = sb.ingest.clone().unwrap();
    let path = url
        .strip_prefix(&format!("http://{ingest}"))
        .unwrap_or_else(|| panic!("{url} is not on the ingest listener {ingest}"))
        .to_string();
    assert!(
        !url.contains(&sb.token()),
        "the ingest token is never in a URL"
    );
    (path, url)
}

#[test]
fn the_page_answers_nothing_without_its_cookie_and_a_link_works_once() {
    let mut sb = Switchboard::new();
    sb.write("triggers.json", ASK);
    sb.spawn();
    let ingest = sb.ingest.clone().unwrap();
    send_messages(sb.home.path(), &[("alerts/db", "secret-looking db down")]);
    eventually(Duration::from_secs(5), "a pending confirm", || {
        (pending_ids(sb.home.path()) == [1]).then_some(())
    });

    // Without the cookie: nothing of the inbox anywhere under /ui, with or without the token;
    // the page says how to get a session, on this home.
    let ui_here = format!(
        "<code>switchboard --home {} ui</code>",
        sb.home.path().display()
    );
    let signed_out = http_request(&ingest, "GET", "/ui", &[], b"");
    assert!(signed_out.body.contains(&ui_here), "{}", signed_out.body);
    let bearer = format!("Bearer {}", sb.token());
    for path in ["/ui", "/ui/", "/ui/api/state", "/ui/api/events"] {
        for headers in [vec![], vec![("Authorization", bearer.as_str())]] {
            let r = http_request(&ingest, "GET", path, &headers, b"");
            assert_eq!(r.status, 401, "{path}: {}", r.body);
            assert!(!r.body.contains("db down"), "{path}: {}", r.body);
        }
    }
    let r = http_request(
        &ingest,
        "POST",
        "/ui/api/confirm",
        &[("Content-Type", "application/json")],
        br#"{"id": 1, "decision": "approve"}"#,
    );
    r.assert_error(401, "no_session");

    let (login, _) = ui_link(&sb);
    let r = http_request(&ingest, "GET", &login, &[], b"");
    assert_eq!(r.status, 303, "{}", r.body);
    assert_eq!(r.header("location"), Some("/ui"));
    let cookie = r.header("set-cookie").unwrap().to_string();
    for part in ["HttpOnly", "SameSite=Strict", "Path=/ui"] {
        assert!(cookie.contains(part), "{cookie}");
    }
    let session = cookie.split(';').next().unwrap().to_string();
    let again = http_request(&ingest, "GET", &login, &[], b"");
    assert_eq!(again.status, 403, "a link works once");
    assert!(again.body.contains(&ui_here), "{}", again.body);
    assert!(again.header("set-cookie").is_none());

    let page = http_request(&ingest, "GET", "/ui", &[("Cookie", &session)], b"");
    assert_eq!(page.status, 200);
    assert!(
        page.body.contains("<script src=\"/ui/app.js\""),
        "{}",
        page.body
    );
    let state = http_request(
        &ingest,
        "GET",
        "/ui/api/state",
        &[("Cookie", &session)],
        b"",
    );
    let state = state.json();
    assert_eq!(state["pending"][0]["id"], 1);
    assert_eq!(state["pending"][0]["content"], "secret-looking db down");
    assert_eq!(state["pending"][0]["approve_via"], json!(["cli", "web"]));
    let csrf = state["csrf"].as_str().unwrap().to_string();

    // State-changing requests: the CSRF token, JSON, and no other site.
    let body = br#"{"id": 1, "decision": "approve"}"#;
    let json_type = ("Content-Type", "application/json");
    let same_origin = ("Sec-Fetch-Site", "same-origin");
    let answer = |headers: &[(&str, &str)]| {
        let headers = [&[("Cookie", session.as_str())][..], headers].concat();
        http_request(&ingest, "POST", "/ui/api/confirm", &headers, body)
    };
    answer(&[json_type, same_origin]).assert_error(403, "csrf");
    // Issue 47: with the cookie and the token but neither `Origin` nor `Sec-Fetch-Site`, the
    // answer was taken; what the README says is now true: no `same-origin`, no answer.
    let r = answer(&[json_type, ("X-CSRF-Token", &csrf)]);
    r.assert_error(403, "cross_site");
    assert!(
        r.json()["message"]
            .as_str()
            .unwrap()
            .contains("`Sec-Fetch-Site: same-origin`"),
        "{}",
        r.body
    );
    // An `Origin` on another host is refused even beside `same-origin` (a proxy may add that).
    answer(&[
        json_type,
        ("X-CSRF-Token", &csrf),
        ("Origin", "http://evil.example"),
        same_origin,
    ])
    .assert_error(403, "cross_site");
    // Another host stays another site over TLS too, and through a proxy naming another host.
    answer(&[
        json_type,
        ("X-CSRF-Token", &csrf),
        ("Origin", "https://evil.example"),
        ("X-Forwarded-Host", "approvals.example"),
        same_origin,
    ])
    .assert_error(403, "cross_site");
    answer(&[
        json_type,
        ("X-CSRF-Token", &csrf),
        ("Sec-Fetch-Site", "cross-site"),
    ])
    .assert_error(403, "cross_site");
    let r = answer(&[
        ("Content-Type", "text/plain"),
        ("X-CSRF-Token", &csrf),
        same_origin,
    ]);
    r.assert_error(415, "unsupported_media_type");
    assert_eq!(pending_ids(sb.home.path()), [1], "nothing answered it yet");

    // Behind a reverse proxy with TLS the browser's `Origin` is `https://` on the same host.
    let origin = format!("https://{ingest}");
    let r = http_request(
        &ingest,
        "POST",
        "/ui/api/confirm",
        &[
            ("Cookie", &session),
            json_type,
            ("X-CSRF-Token", &csrf),
            ("Origin", &origin),
            ("Sec-Fetch-Site", "same-origin"),
        ],
        body,
    );
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json()["approved"], true);
    let r = http_request(
        &ingest,
        "POST",
        "/ui/api/confirm",
        &[
            ("Cookie", &session),
            json_type,
            ("X-CSRF-Token", &csrf),
            same_origin,
        ],
        br#"{"id": 1, "decision": "deny"}"#,
    );
    // Each kind of refusal keeps its own status and code (it was 409 `refused` for all).
    r.assert_error(409, "already_answered");
    assert!(
        r.json()["message"]
            .as_str()
            .unwrap()
            .contains("already answered: approved via web by page link ")
    );
    let out = sb.cli(&["pending", "--closed"]);
    assert!(
        stdout(&out).starts_with("#1 [ask] approved via web by page link "),
        "{}",
        stdout(&out)
    );
}

/// A session cookie for the page: `name=value`.
pub fn ui_session(sb: &Switchboard) -> String {
    let (login, _) = ui_link(sb);
    let r = http_request(sb.ingest.as_ref().unwrap(), "GET", &login, &[], b"");
    assert_eq!(r.status, 303, "{}", r.body);
    let cookie = r.header("set-cookie").unwrap();
    cookie.split(';').next().unwrap().to_string()
}

/// Issue 46: `X-Forwarded-Host` (the page's own host, for the `Origin` check) and
/// `X-Forwarded-Proto` (https: a `Secure` cookie) count only from a proxy listed in
/// `http.trustedProxies`. Today any client's `X-Forwarded-Host` passed the check, and the
/// cookie was never `Secure`.
#[test]
fn forwarded_headers_count_only_from_a_trusted_proxy() {
    for trusted in [false, true] {
        let mut sb = Switchboard::new();
        sb.write("triggers.json", ASK);
        if trusted {
            sb.write(
                "switchboard.json",
                r#"{"http": {"trustedProxies": ["127.0.0.1", "10.0.0.0/8"]}}"#,
            );
        }
        sb.spawn();
        let ingest = sb.ingest.clone().unwrap();
        send_messages(sb.home.path(), &[("alerts/db", "db down")]);
        eventually(Duration::from_secs(5), "a pending confirm", || {
            (pending_ids(sb.home.path()) == [1]).then_some(())
        });
        let (login, _) = ui_link(&sb);
        let r = http_request(
            &ingest,
            "GET",
            &login,
            &[("X-Forwarded-Proto", "https")],
            b"",
        );
        assert_eq!(r.status, 303, "{}", r.body);
        let cookie = r.header("set-cookie").unwrap().to_string();
        assert_eq!(cookie.contains("; Secure"), trusted, "{cookie}");
        let session = cookie.split(';').next().unwrap().to_string();
        let state = http_request(
            &ingest,
            "GET",
            "/ui/api/state",
            &[("Cookie", &session)],
            b"",
        );
        let csrf = state.json()["csrf"].as_str().unwrap().to_string();
        // A browser on https://approvals.example, through the proxy.
        let r = http_request(
            &ingest,
            "POST",
            "/ui/api/confirm",
            &[
                ("Cookie", &session),
                ("Content-Type", "application/json"),
                ("X-CSRF-Token", &csrf),
                ("Origin", "https://approvals.example"),
                ("X-Forwarded-Host", "approvals.example"),
                ("Sec-Fetch-Site", "same-origin"),
            ],
            br#"{"id": 1, "decision": "approve"}"#,
        );
        if trusted {
            assert_eq!(r.status, 200, "{}", r.body);
        } else {
            r.assert_error(403, "cross_site");
            assert_eq!(pending_ids(sb.home.path()), [1]);
        }
        sb.terminate();
    }
}

/// Issue 46: a page served on every address over plain HTTP gets a link only with `--public`,
/// and a usable one (today: `http://0.0.0.0:PORT/...`, with no word of warning); `ui --revoke`
/// signs every browser out and voids the links not opened yet.
#[test]
fn a_page_served_beyond_loopback_needs_public_and_revoke_signs_everyone_out() {
    let mut sb = Switchboard::new();
    sb.spawn_with(&["serve", "--no-stdio", "--listen", "0.0.0.0:0"]);
    let port = sb
        .ingest
        .clone()
        .unwrap()
        .rsplit(':')
        .next()
        .unwrap()
        .to_string();
    assert!(sb.log().contains("over plain HTTP"), "{}", sb.log());

    let out = sb.cli(&["ui", "--no-open"]);
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(
        err.contains(&format!(
            "the approval page is served on 0.0.0.0:{port} over plain HTTP, beyond this machine"
        )) && err.contains(&format!(
            "`switchboard --home {} ui --public`",
            sb.home.path().display()
        )),
        "{err}"
    );
    let out = sb.cli(&["ui", "--no-open", "--public"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    let url = text.lines().next().unwrap();
    let local = format!("http://127.0.0.1:{port}");
    let login = url
        .strip_prefix(&local)
        .unwrap_or_else(|| panic!("a link on loopback, not on 0.0.0.0: {text}"));
    assert!(
        text.contains("use this machine's name or address"),
        "{text}"
    );
    assert!(
        text.contains("warning: the page is served over plain HTTP"),
        "{text}"
    );
    let addr = format!("127.0.0.1:{port}");
    let r = http_request(&addr, "GET", login, &[], b"");
    assert_eq!(r.status, 303, "the link works: {}", r.body);
    let session = r
        .header("set-cookie")
        .unwrap()
        .split(';')
        .next()
        .unwrap()
        .to_string();
    let state = http_request(&addr, "GET", "/ui/api/state", &[("Cookie", &session)], b"");
    assert_eq!(state.status, 200, "{}", state.body);

    // One more link, never opened; then everything is revoked.
    let unused = stdout(&sb.cli(&["ui", "--no-open", "--public"]));
    let unused = unused
        .lines()
        .next()
        .unwrap()
        .strip_prefix(&local)
        .unwrap()
        .to_string();
    let out = sb.cli(&["ui", "--revoke"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        stdout(&out).trim(),
        format!(
            "revoked 1 page session and 1 unused link; run `switchboard --home {} ui` for a new \
             link",
            sb.home.path().display()
        )
    );
    let state = http_request(&addr, "GET", "/ui/api/state", &[("Cookie", &session)], b"");
    state.assert_error(401, "no_session");
    assert_eq!(http_request(&addr, "GET", &unused, &[], b"").status, 403);
    sb.terminate();
}

#[test]
fn an_expired_confirm_leaves_the_page_and_pending_says_how_it_ended() {
    let mut sb = Switchboard::new();
    sb.write(
        "triggers.json",
        r#"{"rules": [{"name": "ask", "channel": "alerts/*", "mode": "confirm",
            "prompt": "Investigate: {{content}}", "confirmTimeout": "1s"}]}"#,
    );
    sb.spawn();
    let ingest = sb.ingest.clone().unwrap();
    let session = ui_session(&sb);
    let state = || {
        http_request(
            &ingest,
            "GET",
            "/ui/api/state",
            &[("Cookie", &session)],
            b"",
        )
        .json()
    };
    send_messages(sb.home.path(), &[("alerts/db", "db down")]);
    let shown = eventually(Duration::from_secs(5), "the confirm on the page", || {
        let s = state();
        (s["pending"][0]["id"] == 1).then_some(s)
    });
    assert!(shown["closed"].as_array().unwrap().is_empty(), "{shown}");
    let gone = eventually(
        Duration::from_secs(10),
        "the confirm expired off the page",
        || {
            let s = state();
            s["pending"].as_array().unwrap().is_empty().then_some(s)
        },
    );
    assert_eq!(gone["closed"][0]["id"], 1, "{gone}");
    assert_eq!(gone["closed"][0]["state"], "expired", "{gone}");

    // A late answer is 410 `expired`; an id that names nothing is 404 `unknown`.
    let csrf = gone["csrf"].as_str().unwrap().to_string();
    let answer = |body: &[u8]| {
        let headers = [
            ("Cookie", session.as_str()),
            ("Content-Type", "application/json"),
            ("X-CSRF-Token", &csrf),
            ("Sec-Fetch-Site", "same-origin"),
        ];
        http_request(&ingest, "POST", "/ui/api/confirm", &headers, body)
    };
    let r = answer(br#"{"id": 1, "decision": "approve"}"#);
    r.assert_error(410, "expired");
    assert!(
        r.json()["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("confirm 1 expired at ")),
        "{}",
        r.body
    );
    answer(br#"{"id": 99, "decision": "deny"}"#).assert_error(404, "unknown");
    let out = sb.cli(&["pending", "--closed"]);
    let text = stdout(&out);
    assert!(
        text.starts_with("#1 [ask] expired unanswered at "),
        "{text}"
    );
    assert!(text.ends_with("no pending confirms\n"), "{text}");
}

/// Elicitation forms through the official Python SDK (`mcp` 2.3.0) as the client, with an
/// elicitation callback: approve (the prompt reaches the next wait, `via: elicitation` in
/// `pending --closed` and actions.jsonl), deny, decline and cancel (left pending), no form for
/// a rule whose `approveVia` leaves it out, an answer from the CLI while the form is open and
/// an expiry while it is open (the form is cancelled both times); over HTTP, every form rides
/// the stream of the wait it relates to. The checks are in `tests/python/elicitation.py`; this
/// runs it in the Python SDK tests' venv.
fn elicitation_through_the_python_sdk(transport: &str) {
    let Some(stderr) = super::python_sdk::run_sdk_script("elicitation.py", transport) else {
        return;
    };
    let mut checks = vec![
        "approved in the form",
        "denied in the form",
        "decline in the form leaves it pending",
        "cancel in the form leaves it pending",
        "puts no form",
        "answered at the CLI while the form was open",
        "expired while the form was open",
    ];
    if transport == "http" {
        checks.push("every form was sent on the stream of the wait it relates to");
    }
    for check in checks {
        assert!(stderr.contains(check), "{check}\n{stderr}");
    }
}

#[test]
fn elicitation_forms_through_the_python_sdk_over_stdio() {
    elicitation_through_the_python_sdk("stdio");
}

#[test]
fn elicitation_forms_through_the_python_sdk_over_http() {
    elicitation_through_the_python_sdk("http");
}
