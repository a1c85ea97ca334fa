//! A scripted model server on loopback: a test double for the *model* behind a real headless
//! host, never for the host itself. It speaks just enough of two wire protocols, streaming only:
//! OpenAI chat completions (`POST /v1/chat/completions`, `stream: true`, SSE `data:` chunks and
//! `[DONE]`; Copilot CLI's BYOK provider) and Anthropic messages (`POST /v1/messages`, SSE
//! `message_start` … `message_stop`; Claude Code). `GET …/models` lists the one model.
//!
//! The script: the first request (no tool result yet) asks for one tool call, when the script
//! names a tool (or any request whose last message contains `tool_when`); then a final text
//! answer. Every request body is kept for the test to assert what
//! the host sent (the prompt, the tools it offered the model).

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use serde_json::{Value, json};

/// What the model does.
#[derive(Clone, Debug)]
pub struct Script {
    /// The model's id.
    pub model: String,
    /// A tool to call first, with its arguments.
    pub tool: Option<(String, Value)>,
    /// Call the tool only when the conversation's last message contains this text (a later
    /// turn, not the first).
    pub tool_when: Option<String>,
    /// The final answer.
    pub answer: String,
    /// Refuse every model request with 401, as a provider does a wrong key.
    pub reject: bool,
}

/// One request the double received.
#[derive(Clone, Debug)]
pub struct Seen {
    /// `POST /v1/chat/completions`, ...
    pub method: String,
    /// The path, query included.
    pub path: String,
    /// The JSON body (`Null` when none or not JSON).
    pub body: Value,
}

/// The running double.
pub struct ModelDouble {
    /// Its port on 127.0.0.1.
    pub port: u16,
    seen: Arc<Mutex<Vec<Seen>>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl ModelDouble {
    /// Starts serving `script` on a free loopback port.
    pub fn start(script: Script) -> ModelDouble {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the model double");
        let port = listener.local_addr().unwrap().port();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (seen2, stop2) = (seen.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            for conn in listener.incoming() {
                if stop2.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(conn) = conn else { continue };
                let (seen, script) = (seen2.clone(), script.clone());
                std::thread::spawn(move || {
                    let _ = serve(conn, &script, &seen);
                });
            }
        });
        ModelDouble {
            port,
            seen,
            stop,
            thread: Some(thread),
        }
    }

    /// The requests with a JSON body, in arrival order.
    pub fn posts(&self) -> Vec<Seen> {
        self.seen
            .lock()
            .unwrap()
            .iter()
            .filter(|s| s.method == "POST")
            .cloned()
            .collect()
    }

    /// The requests as they arrive, for a test that acts on them while the host runs.
    pub fn seen_handle(&self) -> Arc<Mutex<Vec<Seen>>> {
        self.seen.clone()
    }

    /// Everything received, for failure messages.
    pub fn describe(&self) -> String {
        self.seen
            .lock()
            .unwrap()
            .iter()
            .map(|s| format!("{} {}", s.method, s.path))
            .collect::<Vec<_>>()
            .join("\n")
    }
}

impl Drop for ModelDouble {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(("127.0.0.1", self.port));
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn serve(conn: TcpStream, script: &Script, seen: &Mutex<Vec<Seen>>) -> std::io::Result<()> {
    conn.set_read_timeout(Some(Duration::from_secs(30)))?;
    let mut reader = BufReader::new(conn.try_clone()?);
    let mut out = conn;
    let mut first = String::new();
    reader.read_line(&mut first)?;
    let mut parts = first.split_whitespace();
    let method = parts.next().unwrap_or_default().to_string();
    let path = parts.next().unwrap_or_default().to_string();
    let mut length = 0usize;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line)? == 0 || line == "\r\n" || line == "\n" {
            break;
        }
        if let Some((k, v)) = line.split_once(':')
            && k.eq_ignore_ascii_case("content-length")
        {
            length = v.trim().parse().unwrap_or(0);
        }
    }
    let mut raw = vec![0u8; length];
    reader.read_exact(&mut raw)?;
    let body: Value = serde_json::from_slice(&raw).unwrap_or(Value::Null);
    seen.lock().unwrap().push(Seen {
        method: method.clone(),
        path: path.clone(),
        body: body.clone(),
    });
    let route = path.split('?').next().unwrap_or_default();
    if script.reject && method == "POST" {
        let error = if route.ends_with("/messages") {
            json!({"type": "error", "error": {"type": "authentication_error", "message": "invalid x-api-key"}})
        } else {
            json!({"error": {"message": "Incorrect API key provided", "type": "invalid_request_error",
                "code": "invalid_api_key"}})
        };
        return reply_json(&mut out, 401, &error);
    }
    if method == "GET" && route.ends_with("/models") {
        let list = json!({"object": "list", "data": [
            {"id": script.model, "object": "model", "type": "model", "display_name": script.model}
        ]});
        return reply_json(&mut out, 200, &list);
    }
    if method == "POST" && route.ends_with("/chat/completions") {
        return openai(&mut out, script, &body);
    }
    if method == "POST" && route.ends_with("/messages") {
        return anthropic(&mut out, script, &body);
    }
    reply_json(
        &mut out,
        404,
        &json!({"error": {"message": format!("no route {method} {path}")}}),
    )
}

fn reply_json(out: &mut TcpStream, status: u16, body: &Value) -> std::io::Result<()> {
    let text = body.to_string();
    write!(
        out,
        "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{text}",
        text.len()
    )?;
    out.flush()
}

fn sse_head(out: &mut TcpStream) -> std::io::Result<()> {
    write!(
        out,
        "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\nconnection: close\r\n\r\n"
    )
}

/// Whether this request is one the script calls its tool on (`tool_when`).
fn wanted(script: &Script, body: &Value) -> bool {
    match &script.tool_when {
        None => true,
        Some(needle) => body["messages"]
            .as_array()
            .and_then(|m| m.last())
            .is_some_and(|m| m.to_string().contains(needle.as_str())),
    }
}

/// OpenAI chat completions, streamed.
fn openai(out: &mut TcpStream, script: &Script, body: &Value) -> std::io::Result<()> {
    let answered = body["messages"]
        .as_array()
        .and_then(|m| m.last())
        .is_some_and(|m| m["role"] == "tool")
        || !wanted(script, body);
    sse_head(out)?;
    let chunk = |delta: Value, finish: Value, usage: Option<Value>| {
        let mut c = json!({"id": "chatcmpl-double", "object": "chat.completion.chunk",
            "created": 1, "model": script.model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]});
        if let Some(u) = usage {
            c["usage"] = u;
        }
        format!("data: {c}\n\n")
    };
    let usage = json!({"prompt_tokens": 40, "completion_tokens": 7, "total_tokens": 47});
    let mut text = String::new();
    match (&script.tool, answered) {
        (Some((name, args)), false) => {
            text += &chunk(
                json!({"role": "assistant", "tool_calls": [{"index": 0, "id": "call_double_1",
                    "type": "function", "function": {"name": name, "arguments": args.to_string()}}]}),
                Value::Null,
                None,
            );
            text += &chunk(json!({}), json!("tool_calls"), Some(usage));
        }
        _ => {
            text += &chunk(
                json!({"role": "assistant", "content": script.answer}),
                Value::Null,
                None,
            );
            text += &chunk(json!({}), json!("stop"), Some(usage));
        }
    }
    text += "data: [DONE]\n\n";
    out.write_all(text.as_bytes())?;
    out.flush()
}

/// Anthropic messages, streamed (a non-streaming request gets a plain message).
fn anthropic(out: &mut TcpStream, script: &Script, body: &Value) -> std::io::Result<()> {
    let answered = body["messages"]
        .as_array()
        .and_then(|m| m.last())
        .and_then(|m| m["content"].as_array())
        .is_some_and(|c| c.iter().any(|b| b["type"] == "tool_result"))
        || !wanted(script, body);
    let model = body["model"].as_str().unwrap_or(&script.model).to_string();
    let tool = script.tool.as_ref().filter(|_| !answered);
    if body["stream"] != true {
        let content = match tool {
            Some((name, args)) => {
                json!([{"type": "tool_use", "id": "toolu_double_1", "name": name, "input": args}])
            }
            None => json!([{"type": "text", "text": script.answer}]),
        };
        let msg = json!({"id": "msg_double", "type": "message", "role": "assistant",
            "model": model, "content": content,
            "stop_reason": if tool.is_some() { "tool_use" } else { "end_turn" },
            "usage": {"input_tokens": 40, "output_tokens": 7}});
        return reply_json(out, 200, &msg);
    }
    sse_head(out)?;
    let ev = |name: &str, data: Value| format!("event: {name}\ndata: {data}\n\n");
    let mut text = ev(
        "message_start",
        json!({"type": "message_start", "message": {"id": format!("msg_double_{}", u8::from(answered)),
            "type": "message", "role": "assistant", "model": model, "content": [],
            "stop_reason": null, "stop_sequence": null,
            "usage": {"input_tokens": 40, "output_tokens": 1}}}),
    );
    let stop = match tool {
        Some((name, args)) => {
            text += &ev(
                "content_block_start",
                json!({"type": "content_block_start", "index": 0, "content_block":
                    {"type": "tool_use", "id": "toolu_double_1", "name": name, "input": {}}}),
            );
            text += &ev(
                "content_block_delta",
                json!({"type": "content_block_delta", "index": 0, "delta":
                    {"type": "input_json_delta", "partial_json": args.to_string()}}),
            );
            "tool_use"
        }
        None => {
            text += &ev(
                "content_block_start",
                json!({"type": "content_block_start", "index": 0, "content_block":
                    {"type": "text", "text": ""}}),
            );
            text += &ev(
                "content_block_delta",
                json!({"type": "content_block_delta", "index": 0, "delta":
                    {"type": "text_delta", "text": script.answer}}),
            );
            "end_turn"
        }
    };
    text += &ev(
        "content_block_stop",
        json!({"type": "content_block_stop", "index": 0}),
    );
    text += &ev(
        "message_delta",
        json!({"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": null},
            "usage": {"output_tokens": 7}}),
    );
    text += &ev("message_stop", json!({"type": "message_stop"}));
    out.write_all(text.as_bytes())?;
    out.flush()
}
