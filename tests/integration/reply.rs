//! `channel_reply` and `switchboard reply`: answering a message in the conversation it came from.
//! The Teams replier is tested against a stand-in of Microsoft Graph in `teams.rs`; here, the path
//! every source shares and the refusal for a message that cannot be answered.

use rmcp::ServiceExt;
use serde_json::json;

use super::util::*;

#[tokio::test(flavor = "multi_thread")]
async fn a_message_from_a_source_that_cannot_be_answered_is_refused_with_its_source_named() {
    let sb = Switchboard::start();
    let seqs = send_messages(sb.home.path(), &[("alerts/critical", "disk full on db-1")]);
    let seq = seqs[0].to_string();
    let out = sb.cli(&["reply", &seq, "looking at it"]);
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    let err = stderr(&out);
    assert!(
        err.contains(&format!(
            "message {seq} came from `test`, which cannot be answered; `channel_reply` answers \
             teams and slack messages"
        )),
        "{err}"
    );
    let client = rmcp::model::ClientConfig::default()
        .serve(http_transport(&sb))
        .await
        .expect("client connects");
    let mut params = rmcp::model::CallToolRequestParams::new("channel_reply");
    params.arguments = json!({"seq": seqs[0], "text": "looking at it"})
        .as_object()
        .cloned();
    let result = client.call_tool(params).await.expect("answered");
    assert_eq!(result.is_error, Some(true));
    let error = result.structured_content.unwrap()["error"].to_string();
    assert!(
        error.contains("came from `test`, which cannot be answered"),
        "{error}"
    );
    let out = sb.cli(&["reply", "999", "hello"]);
    assert!(
        stderr(&out).contains("no message with seq 999"),
        "{}",
        stderr(&out)
    );
    client.cancel().await.unwrap();
}
