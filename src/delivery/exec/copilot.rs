//! GitHub Copilot CLI as a headless host: its command line and its JSONL normaliser.
//!
//! Checked against `copilot --help` of npm `@github/copilot` 1.0.102 and against the binary:
//! without `-p` and with its stdin a pipe, it reads the whole of stdin as the prompt and runs it
//! non-interactively, as `--prompt` does (its help: "combine with -i, -p, or piped stdin"), so
//! the prompt, message text included, never appears on its command line (readable by every
//! local user in `/proc/PID/cmdline`); nor can a prompt that starts with `-` be read as a flag.
//! `-s` prints no stats, `--no-ask-user` removes the ask_user tool, `--output-format json`
//! prints one JSON event a line, `--available-tools=a,b` is what the model is offered and
//! `--allow-tool=a,b` what runs without asking. No allow-all flag is ever passed: a tool
//! outside the whitelist is neither offered nor permitted.

use serde_json::Value;

use super::event::ExecEvent;
use super::{HostSpec, Normaliser};

/// The command line for a prompt (given on stdin) with the whitelist `tools`.
pub fn command(spec: &HostSpec, tools: &[String]) -> Vec<String> {
    let list = tools.join(",");
    let mut args = vec![
        "-s".to_string(),
        "--no-ask-user".to_string(),
        "--output-format".to_string(),
        "json".to_string(),
        format!("--available-tools={list}"),
        format!("--allow-tool={list}"),
    ];
    if let Some(model) = &spec.model {
        args.push(format!("--model={model}"));
    }
    args.extend(spec.args.iter().cloned());
    args
}

/// Copilot CLI's events (`assistant.turn_start`, `tool.execution_complete`, `result`, ...).
#[derive(Default)]
pub struct CopilotEvents;

impl Normaliser for CopilotEvents {
    fn line(&mut self, v: &Value) -> Vec<ExecEvent> {
        let data = &v["data"];
        let text = |key: &str| data[key].as_str().unwrap_or_default().to_string();
        match v["type"].as_str().unwrap_or_default() {
            "assistant.turn_start" => vec![ExecEvent::TurnStart],
            "assistant.turn_end" => vec![ExecEvent::TurnEnd],
            "tool.execution_start" => vec![ExecEvent::ToolStart {
                id: text("toolCallId"),
                name: text("toolName"),
            }],
            "tool.execution_complete" => vec![ExecEvent::ToolComplete {
                id: text("toolCallId"),
                name: data["toolName"].as_str().map(String::from),
                success: data["success"].as_bool().unwrap_or(false),
            }],
            "assistant.message" => match data["content"].as_str() {
                Some(t) if !t.is_empty() => vec![ExecEvent::Message {
                    text: t.to_string(),
                }],
                _ => vec![],
            },
            "session.error" => vec![ExecEvent::Error {
                text: data["message"]
                    .as_str()
                    .map(String::from)
                    .unwrap_or_else(|| data.to_string()),
                auth: data["errorType"] == "authentication",
            }],
            "result" => {
                let exit_code = v["exitCode"].as_i64().map(|c| c as i32);
                vec![ExecEvent::Result {
                    is_error: exit_code.is_some_and(|c| c != 0),
                    exit_code,
                    usage: v.get("usage").cloned(),
                    text: None,
                }]
            }
            _ => vec![],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn copilot_events_are_normalised() {
        let mut n = CopilotEvents;
        let lines = [
            json!({"type":"session.info","data":{"message":"x"}}),
            json!({"type":"assistant.turn_start","data":{"turnId":"0"}}),
            json!({"type":"tool.execution_start","data":{"toolCallId":"c1","toolName":"view"}}),
            json!({"type":"tool.execution_complete","data":{"toolCallId":"c1","success":true}}),
            json!({"type":"assistant.message","data":{"content":""}}),
            json!({"type":"assistant.message","data":{"content":"All clear."}}),
            json!({"type":"assistant.turn_end","data":{"turnId":"0"}}),
            json!({"type":"session.error","data":{"errorType":"authentication","message":"401"}}),
            json!({"type":"result","exitCode":0,"usage":{"premiumRequests":0}}),
        ];
        let got: Vec<ExecEvent> = lines.iter().flat_map(|l| n.line(l)).collect();
        assert_eq!(
            got,
            vec![
                ExecEvent::TurnStart,
                ExecEvent::ToolStart {
                    id: "c1".into(),
                    name: "view".into()
                },
                ExecEvent::ToolComplete {
                    id: "c1".into(),
                    name: None,
                    success: true
                },
                ExecEvent::Message {
                    text: "All clear.".into()
                },
                ExecEvent::TurnEnd,
                ExecEvent::Error {
                    text: "401".into(),
                    auth: true
                },
                ExecEvent::Result {
                    is_error: false,
                    exit_code: Some(0),
                    usage: Some(json!({"premiumRequests":0})),
                    text: None
                },
            ]
        );
    }

    #[test]
    fn the_whitelist_is_both_offered_and_allowed_and_nothing_more() {
        let spec = HostSpec::default();
        let args = command(&spec, &["view".into(), "grep".into()]);
        assert!(!args.iter().any(|a| a.starts_with("--prompt") || a == "-p"));
        assert!(args.contains(&"--available-tools=view,grep".to_string()));
        assert!(args.contains(&"--allow-tool=view,grep".to_string()));
        assert!(
            !args
                .iter()
                .any(|a| a.starts_with("--allow-all") || a == "--yolo")
        );
    }
}
