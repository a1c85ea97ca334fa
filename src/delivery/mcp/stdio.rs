//! MCP over stdio: newline-delimited JSON-RPC, framed here rather than by rmcp, so that
//!
//! - every malformed line gets the error the JSON-RPC spec names (-32700 with id null for a
//!   line that is not JSON, -32600 for one that is not a request, -32602 for a known method
//!   with bad params), and a line over [`MAX_LINE`] an error instead of silence;
//! - `server/discover` is refused with -32601 before rmcp answers it for the clients that stay
//!   on the 2025-11-25 lifecycle (Claude Code; see [`super::era`]), and answered by rmcp for the
//!   others; a request carrying the 2026-07-28 `_meta` goes to rmcp without `initialize`;
//! - stdin EOF ends the session at once ([`SessionLink::end`]): a wait in flight returns empty
//!   before it takes anything, and the process exits within a second;
//! - the result of a wait that claimed work is settled by what writing it to stdout did: a
//!   write that failed releases its claims back to the queue; a line written and flushed is
//!   reported sent, and delivered once the session shows it is there (a later call, or stdin
//!   still open after `mcp.deliveryGrace`; see [`SessionLink`]). Every request read counts as
//!   a call.

use std::sync::Arc;

use rmcp::model::{ClientJsonRpcMessage, ClientRequest, JsonRpcMessage, ServerJsonRpcMessage};
use rmcp::service::RoleServer;
use rmcp::transport::Transport;
use serde_json::{Value, json};
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncWrite, AsyncWriteExt, BufReader};

use super::{SessionLink, era, invalid_params, is_discover, not_initialized};

/// The longest request line accepted (bytes, without the newline).
pub const MAX_LINE: usize = 4 * 1024 * 1024;

/// A line transport over a reader and a writer (stdin and stdout in production).
pub struct LineTransport<R, W> {
    reader: BufReader<R>,
    writer: Arc<tokio::sync::Mutex<W>>,
    link: Arc<SessionLink>,
    /// `initialize` (or a request of the 2026-07-28 era) was received: before it, other
    /// requests are told to send `initialize` first.
    initialized: bool,
}

impl<R, W> LineTransport<R, W>
where
    R: tokio::io::AsyncRead + Unpin + Send,
    W: AsyncWrite + Unpin + Send + 'static,
{
    /// Frames `reader`/`writer` for the session `link`.
    pub fn new(reader: R, writer: W, link: Arc<SessionLink>) -> LineTransport<R, W> {
        link.reports_sends();
        LineTransport {
            reader: BufReader::new(reader),
            writer: Arc::new(tokio::sync::Mutex::new(writer)),
            link,
            initialized: false,
        }
    }

    /// Answers the peer directly (errors rmcp never sees the request for); false when the
    /// peer is gone.
    fn answer(&mut self, value: Value) -> impl Future<Output = bool> + Send + 'static {
        let writer = self.writer.clone();
        let link = self.link.clone();
        async move {
            let written = async move {
                let mut line = serde_json::to_vec(&value).map_err(std::io::Error::other)?;
                line.push(b'\n');
                let mut w = writer.lock().await;
                w.write_all(&line).await?;
                w.flush().await
            };
            if written.await.is_err() {
                link.end();
                return false;
            }
            true
        }
    }
}

/// One line read from the peer.
enum Line {
    Text(Vec<u8>),
    TooLong(usize),
    Eof,
}

async fn read_line(reader: &mut (impl AsyncBufRead + Unpin)) -> std::io::Result<Line> {
    let mut line = Vec::new();
    let mut dropped = 0usize;
    loop {
        let buf = reader.fill_buf().await?;
        if buf.is_empty() {
            return Ok(match (line.is_empty(), dropped) {
                (true, 0) => Line::Eof,
                (_, 0) => Line::Text(line),
                (_, n) => Line::TooLong(n),
            });
        }
        let (chunk, done) = match buf.iter().position(|&b| b == b'\n') {
            Some(i) => (&buf[..i], Some(i + 1)),
            None => (buf, None),
        };
        if dropped == 0 && line.len() + chunk.len() <= MAX_LINE {
            line.extend_from_slice(chunk);
        } else {
            dropped += line.len() + chunk.len();
            line.clear();
        }
        let used = done.unwrap_or(buf.len());
        reader.consume(used);
        if done.is_some() {
            return Ok(if dropped > 0 {
                Line::TooLong(dropped)
            } else {
                Line::Text(line)
            });
        }
    }
}

/// The error answer to a line that is not a message rmcp can take, or `None` to ignore it
/// (a malformed notification or response: JSON-RPC answers only requests).
fn classify(value: &Value, parse_error: &serde_json::Error) -> Option<Value> {
    let error = |id: Value, code: i64, message: String| {
        Some(json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}}))
    };
    let Some(obj) = value.as_object() else {
        return if value.is_array() {
            error(
                Value::Null,
                -32600,
                "Invalid Request: JSON-RPC batches are not supported by MCP; send one message a line"
                    .into(),
            )
        } else {
            error(
                Value::Null,
                -32600,
                "Invalid Request: a JSON-RPC message is a JSON object".into(),
            )
        };
    };
    let id = obj.get("id").cloned();
    let valid_id = id
        .as_ref()
        .filter(|i| i.is_string() || i.is_i64() || i.is_u64());
    let method = obj.get("method").and_then(Value::as_str);
    match (method, valid_id) {
        (Some(_), None) if id.is_none() => None,
        (Some(method), Some(id)) if obj.get("jsonrpc").and_then(Value::as_str) == Some("2.0") => {
            error(
                id.clone(),
                -32602,
                format!("Invalid params for `{method}`: {parse_error}"),
            )
        }
        (None, _) if obj.contains_key("result") || obj.contains_key("error") => None,
        _ => error(
            valid_id.cloned().unwrap_or(Value::Null),
            -32600,
            format!(
                "Invalid Request: expected a JSON-RPC 2.0 request (`jsonrpc`: \"2.0\", a string or \
                 number `id`, a `method`): {parse_error}"
            ),
        ),
    }
}

impl<R, W> Transport<RoleServer> for LineTransport<R, W>
where
    R: tokio::io::AsyncRead + Unpin + Send,
    W: AsyncWrite + Unpin + Send + 'static,
{
    type Error = std::io::Error;

    fn send(
        &mut self,
        item: ServerJsonRpcMessage,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        let writer = self.writer.clone();
        let id = match &item {
            JsonRpcMessage::Response(r) => Some(r.id.clone()),
            JsonRpcMessage::Error(e) => e.id.clone(),
            _ => None,
        };
        let link = self.link.clone();
        async move {
            let written = async {
                let mut line = serde_json::to_vec(&item).map_err(std::io::Error::other)?;
                line.push(b'\n');
                let mut w = writer.lock().await;
                if let Some(id) = &id {
                    // From here the client may have the line, and answer it before the flush
                    // below returns.
                    link.handing(id);
                }
                w.write_all(&line).await?;
                w.flush().await
            }
            .await;
            if let Some(id) = id {
                match &written {
                    Ok(()) => link.written(&id),
                    Err(_) => link.unwritten(&id, "the result could not be written to stdout"),
                }
            }
            written
        }
    }

    async fn receive(&mut self) -> Option<ClientJsonRpcMessage> {
        loop {
            let line = match read_line(&mut self.reader).await {
                Ok(Line::Text(line)) => line,
                Ok(Line::TooLong(n)) => {
                    let answer = json!({"jsonrpc": "2.0", "id": null, "error": {
                        "code": -32600,
                        "message": format!("Invalid Request: a line of {n} bytes is over the limit of {MAX_LINE} bytes"),
                    }});
                    if !self.answer(answer).await {
                        return None;
                    }
                    continue;
                }
                Ok(Line::Eof) | Err(_) => {
                    tracing::debug!("stdin closed: the session ends");
                    self.link.end();
                    return None;
                }
            };
            let text = line.strip_suffix(b"\r").unwrap_or(&line);
            if text.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            let value: Value = match serde_json::from_slice(text) {
                Ok(v) => v,
                Err(e) => {
                    let answer = json!({"jsonrpc": "2.0", "id": null, "error": {
                        "code": -32700,
                        "message": format!("Parse error: {e}"),
                    }});
                    if !self.answer(answer).await {
                        return None;
                    }
                    continue;
                }
            };
            // From a reference: the value is kept for the answers below, and a clone of it
            // for every line cost a front end about 5% of its CPU.
            match <ClientJsonRpcMessage as serde::Deserialize>::deserialize(&value) {
                Ok(JsonRpcMessage::Request(_)) if era::is_removed(&value) => {
                    if !self.answer(era::removed_answer(&value)).await {
                        return None;
                    }
                }
                Ok(JsonRpcMessage::Request(req))
                    if is_discover(&req.request) && era::refuses_discover(&value) =>
                {
                    tracing::debug!(id = ?req.id, "server/discover refused: use initialize");
                    if !self.answer(era::discover_refusal(json!(req.id))).await {
                        return None;
                    }
                }
                Ok(JsonRpcMessage::Request(req))
                    if !self.initialized
                        && !is_discover(&req.request)
                        && !era::is_inline(&value)
                        && !matches!(
                            req.request,
                            ClientRequest::InitializeRequest(_) | ClientRequest::PingRequest(_)
                        ) =>
                {
                    if !self.answer(not_initialized(json!(req.id))).await {
                        return None;
                    }
                }
                Ok(msg) => match invalid_params(&msg, &value) {
                    Some(answer) => {
                        if !self.answer(answer).await {
                            return None;
                        }
                    }
                    None => {
                        if let JsonRpcMessage::Request(req) = &msg {
                            if matches!(req.request, ClientRequest::InitializeRequest(_))
                                || (!is_discover(&req.request) && era::is_inline(&value))
                            {
                                self.initialized = true;
                            }
                            self.link.called();
                        }
                        return Some(msg);
                    }
                },
                Err(e) => {
                    if value.get("method").and_then(Value::as_str) == Some("server/discover") {
                        let id = value.get("id").cloned().unwrap_or(Value::Null);
                        if !self.answer(era::discover_refusal(id)).await {
                            return None;
                        }
                        continue;
                    }
                    if let Some(answer) = classify(&value, &e) {
                        if !self.answer(answer).await {
                            return None;
                        }
                    } else {
                        tracing::debug!(cause = %e, "ignored a malformed notification or response");
                    }
                }
            }
        }
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        self.writer.lock().await.flush().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(line: &str) -> Option<Value> {
        let value: Value = serde_json::from_str(line).unwrap();
        match serde_json::from_value::<ClientJsonRpcMessage>(value.clone()) {
            Ok(msg) => invalid_params(&msg, &value),
            Err(err) => classify(&value, &err),
        }
    }

    #[test]
    fn bad_requests_get_the_error_the_spec_names() {
        let a =
            answer(r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"arguments":[]}}"#)
                .unwrap();
        assert_eq!(
            (a["id"].clone(), a["error"]["code"].clone()),
            (json!(3), json!(-32602))
        );
        let a = answer(r#"[{"jsonrpc":"2.0","id":1,"method":"ping"}]"#).unwrap();
        assert_eq!(
            (a["id"].clone(), a["error"]["code"].clone()),
            (Value::Null, json!(-32600))
        );
        let a = answer(r#"{"jsonrpc":"2.0","id":{"x":1},"method":"ping"}"#).unwrap();
        assert_eq!(a["error"]["code"], -32600);
        let a = answer(r#"{"id":1}"#).unwrap();
        assert_eq!(
            (a["id"].clone(), a["error"]["code"].clone()),
            (json!(1), json!(-32600))
        );
    }

    #[tokio::test]
    async fn long_lines_are_measured_and_skipped() {
        let mut input = vec![b'x'; MAX_LINE + 10];
        input.extend_from_slice(b"\n{\"a\":1}\n");
        let mut reader = BufReader::new(&input[..]);
        assert!(
            matches!(read_line(&mut reader).await.unwrap(), Line::TooLong(n) if n == MAX_LINE + 10)
        );
        assert!(
            matches!(read_line(&mut reader).await.unwrap(), Line::Text(t) if t == b"{\"a\":1}")
        );
        assert!(matches!(read_line(&mut reader).await.unwrap(), Line::Eof));
    }
}
