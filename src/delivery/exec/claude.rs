//! Claude Code as a headless host: its command line and its stream-json normaliser.
//!
//! Checked against `claude --help` of npm `@anthropic-ai/claude-code` 2.1.330: `-p` (print
//! mode) without a prompt argument reads the prompt from stdin, so the prompt, message text
//! included, never appears on its command line (readable by every local user in
//! `/proc/PID/cmdline`), nor can a prompt that starts with `-` be read as a flag.
//! `--output-format stream-json --verbose` prints one JSON message a line, `--tools=a,b`
//! restricts the built-in tool set to the whitelist, `--allowedTools=a,b` lets those run
//! without asking, and `--permission-prompts none` denies anything else instead of waiting for
//! a person who is not there. `--no-session-persistence` keeps runs out of the resume list.

use std::collections::HashSet;

use serde_json::Value;

use super::event::ExecEvent;
use super::{HostSpec, Normaliser};

/// The command line for a prompt (given on stdin) with the whitelist `tools`.
pub fn command(spec: &HostSpec, tools: &[String]) -> Vec<String> {
    let list = tools.join(",");
    let mut args = vec![
        "-p".to_string(),
        "--output-format".to_string(),
        "stream-json".to_string(),
        "--verbose".to_string(),
        format!("--tools={list}"),
        format!("--allowedTools={list}"),
        "--permission-prompts".to_string(),
        "none".to_string(),
        "--no-session-persistence".to_string(),
    ];
    if let Some(model) = &spec.model {
        args.push(format!("--model={model}"));
    }
    args.extend(spec.args.iter().cloned());
    args
}

/// Claude Code's stream-json messages (`system`, `assistant`, `user`, `result`).
#[derive(Default)]
pub struct ClaudeEvents {
    /// Assistant message ids seen: one API response can arrive as several lines.
    turns: HashSet<String>,
}

impl Normaliser for ClaudeEvents {
    fn line(&mut self, v: &Value) -> Vec<ExecEvent> {
        let mut out = Vec::new();
        let content = v["message"]["content"].as_array();
        match v["type"].as_str().unwrap_or_default() {
            "assistant" => {
                let id = v["message"]["id"].as_str().unwrap_or_default().to_string();
                let first = self.turns.insert(id);
                if first {
                    out.push(ExecEvent::TurnStart);
                }
                for c in content.into_iter().flatten() {
                    match c["type"].as_str() {
                        Some("tool_use") => out.push(ExecEvent::ToolStart {
                            id: c["id"].as_str().unwrap_or_default().to_string(),
                            name: c["name"].as_str().unwrap_or_default().to_string(),
                        }),
                        Some("text") => {
                            if let Some(t) = c["text"].as_str().filter(|t| !t.is_empty()) {
                                out.push(ExecEvent::Message {
                                    text: t.to_string(),
                                });
                            }
                        }
                        _ => {}
                    }
                }
                if first {
                    out.push(ExecEvent::TurnEnd);
                }
            }
            "user" => {
                for c in content.into_iter().flatten() {
                    if c["type"] == "tool_result" {
                        out.push(ExecEvent::ToolComplete {
                            id: c["tool_use_id"].as_str().unwrap_or_default().to_string(),
                            name: None,
                            success: !c["is_error"].as_bool().unwrap_or(false),
                        });
                    }
                }
            }
            // The API refused the key: Claude Code retries (10 times, minutes apart) anyway.
            "system" if v["subtype"] == "api_retry" && v["error"] == "authentication_failed" => {
                out.push(ExecEvent::Error {
                    text: format!(
                        "the model API refused the credentials (HTTP {})",
                        v["error_status"].as_u64().unwrap_or(401)
                    ),
                    auth: true,
                });
            }
            "result" => {
                let is_error = v["is_error"].as_bool().unwrap_or(false)
                    || v["subtype"].as_str().is_some_and(|s| s != "success");
                let text = v["result"].as_str().map(String::from).or_else(|| {
                    v["errors"]
                        .as_array()
                        .map(|e| Value::from(e.clone()).to_string())
                });
                out.push(ExecEvent::Result {
                    is_error,
                    exit_code: None,
                    usage: v.get("usage").cloned(),
                    text,
                });
            }
            _ => {}
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn claude_messages_are_normalised() {
        let mut n = ClaudeEvents::default();
        let lines = [
            json!({"type":"system","subtype":"init","tools":["Read"]}),
            json!({"type":"assistant","message":{"id":"m1","content":[{"type":"tool_use","id":"t1","name":"Read","input":{}}]}}),
            json!({"type":"user","message":{"content":[{"type":"tool_result","tool_use_id":"t1","content":"x"}]}}),
            json!({"type":"assistant","message":{"id":"m2","content":[{"type":"text","text":"All clear."}]}}),
            json!({"type":"system","subtype":"api_retry","error_status":401,"error":"authentication_failed"}),
            json!({"type":"result","subtype":"success","is_error":false,"result":"All clear.","usage":{"output_tokens":6}}),
        ];
        let got: Vec<ExecEvent> = lines.iter().flat_map(|l| n.line(l)).collect();
        assert_eq!(
            got,
            vec![
                ExecEvent::TurnStart,
                ExecEvent::ToolStart {
                    id: "t1".into(),
                    name: "Read".into()
                },
                ExecEvent::TurnEnd,
                ExecEvent::ToolComplete {
                    id: "t1".into(),
                    name: None,
                    success: true
                },
                ExecEvent::TurnStart,
                ExecEvent::Message {
                    text: "All clear.".into()
                },
                ExecEvent::TurnEnd,
                ExecEvent::Error {
                    text: "the model API refused the credentials (HTTP 401)".into(),
                    auth: true
                },
                ExecEvent::Result {
                    is_error: false,
                    exit_code: None,
                    usage: Some(json!({"output_tokens":6})),
                    text: Some("All clear.".into())
                },
            ]
        );
    }

    #[test]
    fn the_prompt_is_not_an_argument_and_the_builtin_set_is_restricted() {
        let args = command(&HostSpec::default(), &["Read".into()]);
        assert_eq!(args[0], "-p");
        assert_eq!(args.last().unwrap(), "--no-session-persistence");
        assert!(args.contains(&"--tools=Read".to_string()));
        assert!(args.contains(&"--allowedTools=Read".to_string()));
        assert!(
            !args
                .iter()
                .any(|a| a.contains("dangerously") || a.contains("bypass"))
        );
    }
}
