//! `switchboard watch`: one line per message, per action transition and per suppression, for
//! the on-call engineer's terminal.
//!
//! At start it shows the confirms already waiting, then follows the stream. Text from outside
//! (channels, content, prompts, rule and consumer names) is escaped ([`escape`]) and, on a
//! terminal, cut to its width (`--full` prints it whole); colour only on a terminal and never
//! with `NO_COLOR`. `--json` prints one JSON object a line, messages in the shape the MCP
//! tools use (`server`, not the journal's `serverName`). When the server goes away the command
//! says so and exits non-zero. [`open_stream`] is the one place that opens the stream (the
//! seam for reconnecting to a restarted daemon).

use std::io::Write;
use std::path::Path;
use std::process::ExitCode;

use clap::Args;
use serde_json::{Value, json};

use super::show::{escape, message_line, pending_line};
use crate::actions::{Event, ItemKind};
use crate::backend::Client;
use crate::control::ops::{Pending, Pull};
use crate::control::wire::Down;
use crate::control::{ItemView, PendingView};
use crate::message::{Message, MessageView, Seq};

/// A line of `watch`: a message or an action transition.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum WatchEvent {
    /// A committed message.
    Message(Message),
    /// An action transition (queued, answered, expired, resolved, claimed, delivered,
    /// released, dropped).
    Action(Event),
    /// A matching rule that did not fire (dedup, rate limit).
    Suppressed(crate::metrics::Suppression),
    /// A file of the home was reloaded, or could not be.
    Reload(crate::control::ops::Reloaded),
}

/// Options of `watch`.
#[derive(Debug, Args)]
pub struct WatchArgs {
    /// Also show a desktop notification (notify-send) for each action.
    #[arg(long)]
    pub toast: bool,
    /// Print JSON lines instead of text.
    #[arg(long)]
    pub json: bool,
    /// Print whole lines; by default a line is cut to the terminal's width.
    #[arg(long)]
    pub full: bool,
}

/// Opens the event stream of the server on `home`; and the newest seq, where messages start.
pub async fn open_stream(home: &Path) -> anyhow::Result<(Client, Seq)> {
    let mut client = Client::watch(home).await?;
    let last = client
        .call(crate::control::ops::List {
            channel: None,
            limit: 1,
        })
        .await?
        .last_seq;
    Ok((client, last))
}

/// The stream: pushes, and the messages each commit makes readable.
struct Stream {
    client: Client,
    after: Seq,
    ready: std::collections::VecDeque<WatchEvent>,
}

impl Stream {
    /// The next event; `Err` with why once the daemon went away.
    async fn next(&mut self) -> Result<WatchEvent, String> {
        loop {
            if let Some(e) = self.ready.pop_front() {
                return Ok(e);
            }
            match self.client.next_push().await {
                Ok(Some(Down::Event(e))) => return Ok(WatchEvent::Action(e)),
                Ok(Some(Down::Suppressed(s))) => return Ok(WatchEvent::Suppressed(s)),
                Ok(Some(Down::Reloaded(r))) => return Ok(WatchEvent::Reload(r)),
                Ok(Some(Down::Committed(seq))) if seq > self.after => {
                    let read = self
                        .client
                        .call(Pull {
                            consumer: String::new(),
                            since_seq: Some(self.after),
                            limit: 256,
                            channel: None,
                            mark_read: false,
                        })
                        .await
                        .map_err(|e| e.to_string())?;
                    for m in read.messages {
                        self.after = self.after.max(m.seq);
                        self.ready.push_back(WatchEvent::Message(m));
                    }
                }
                Ok(Some(Down::Stopping)) => return Err("the daemon is stopping".into()),
                Ok(Some(_)) => {}
                Ok(None) => return Err("the event stream ended".into()),
                Err(e) => return Err(e.to_string()),
            }
        }
    }
}

/// How long `watch` waits for a daemon that went away to come back.
pub const RECONNECT_FOR: std::time::Duration = std::time::Duration::from_secs(10);

/// Reopens the stream once a daemon answers again, trying for [`RECONNECT_FOR`].
async fn reconnect(home: &Path) -> Option<(Client, Seq)> {
    let deadline = tokio::time::Instant::now() + RECONNECT_FOR;
    while tokio::time::Instant::now() < deadline {
        if let Ok(client) = open_stream(home).await {
            return Some(client);
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    None
}

/// How lines are printed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Style {
    /// ANSI colours.
    pub colour: bool,
    /// Cut every line to this many columns.
    pub width: Option<usize>,
}

impl Style {
    fn paint(&self, code: &str, text: String) -> String {
        let text = match self.width {
            Some(w) => cut(&text, w),
            None => text,
        };
        if self.colour {
            format!("\x1b[{code}m{text}\x1b[0m")
        } else {
            text
        }
    }
}

/// `switchboard watch`: until interrupted, or until the server goes away (an error).
pub async fn execute(home: std::path::PathBuf, args: WatchArgs) -> anyhow::Result<ExitCode> {
    let stdout = std::io::stdout();
    let tty = std::io::IsTerminal::is_terminal(&stdout);
    let style = Style {
        colour: !args.json && super::show::colour(tty),
        width: (tty && !args.full && !args.json)
            .then(terminal_width)
            .flatten(),
    };
    let toast = args.toast && {
        let found = on_path("notify-send");
        if !found {
            eprintln!(
                "warning: `--toast` shows nothing: `notify-send` is not on PATH; install it \
                 (Debian/Ubuntu: libnotify-bin) or drop `--toast`"
            );
        }
        found
    };
    let (client, after) = open_stream(&home).await?;
    let mut stream = Stream {
        client,
        after,
        ready: Default::default(),
    };
    // The confirms already waiting; asked after the stream opened, so none falls between the
    // two (one created meanwhile shows twice, never zero times).
    let open: Vec<PendingView> = stream.client.call(Pending {}).await?;
    {
        let mut out = stdout.lock();
        let now = chrono::Utc::now();
        for p in &open {
            let line = if args.json {
                let mut v = serde_json::to_value(p)?;
                v["type"] = "pending".into();
                v.to_string()
            } else {
                style.paint("33", format!("  pending {}", pending_line(p, now)))
            };
            writeln!(out, "{line}")?;
        }
        if !args.json {
            let header = format!(
                "watching {}: {} pending; messages, actions and suppressions as they happen \
                 (Ctrl-C stops)",
                escape(&home.display().to_string()),
                open.len()
            );
            writeln!(out, "{}", style.paint("2", header))?;
        }
        out.flush()?;
    }
    loop {
        let event = match stream.next().await {
            Ok(event) => event,
            Err(why) => {
                // A daemon restarted by a front end (or systemd) is back within a second or so.
                match reconnect(&home).await {
                    Some((client, after)) => {
                        stream = Stream {
                            client,
                            after,
                            ready: Default::default(),
                        };
                        if !args.json {
                            let note = format!(
                                "reconnected: the daemon restarted ({why}); messages that came \
                                 in between are in `{}`",
                                crate::home::command("list")
                            );
                            let mut out = stdout.lock();
                            writeln!(out, "{}", style.paint("2", note))?;
                            out.flush()?;
                        }
                        continue;
                    }
                    None => anyhow::bail!(
                        "the switchboard on {} went away ({why}) and did not come back within \
                         {}s; start it again with `{}` and rerun `{}`",
                        home.display(),
                        RECONNECT_FOR.as_secs(),
                        crate::home::command("start"),
                        crate::home::command("watch")
                    ),
                }
            }
        };
        let line = if args.json {
            json_line(&event).to_string()
        } else {
            text_line(&event, style)
        };
        if toast && let WatchEvent::Action(Event::Queued { item }) = &event {
            let first = escape(item.prompt.lines().next().unwrap_or_default()).into_owned();
            show_toast(
                kind_label(item.kind),
                &escape(&item.rule),
                &cut(&first, 200),
            );
        }
        let mut out = stdout.lock();
        writeln!(out, "{line}")?;
        out.flush()?;
    }
}

/// One `--json` line: messages (also inside items) as the MCP tools show them.
pub fn json_line(event: &WatchEvent) -> Value {
    match event {
        WatchEvent::Message(m) => {
            let mut v = serde_json::to_value(MessageView::from(m)).unwrap_or_default();
            v["type"] = "message".into();
            v
        }
        WatchEvent::Action(Event::Queued { item }) => {
            json!({"type": "action", "event": "queued", "item": ItemView::from(item)})
        }
        WatchEvent::Reload(r) => {
            let mut v = serde_json::to_value(r).unwrap_or_default();
            v["type"] = "reload".into();
            v
        }
        other => serde_json::to_value(other).unwrap_or_default(),
    }
}

fn kind_label(kind: ItemKind) -> &'static str {
    match kind {
        ItemKind::Nudge => "nudge",
        ItemKind::ConfirmRequest => "confirm?",
        ItemKind::Auto => "auto",
        ItemKind::Approved => "work",
    }
}

/// One human line; everything from outside is escaped, then the line is cut to the width.
pub fn text_line(event: &WatchEvent, style: Style) -> String {
    match event {
        WatchEvent::Message(m) => style.paint("2", message_line(m)),
        WatchEvent::Action(Event::Queued { item }) => {
            let code = match item.kind {
                ItemKind::Nudge => "36",
                ItemKind::ConfirmRequest => "33",
                ItemKind::Auto => "35",
                ItemKind::Approved => "32",
            };
            // Only a confirm request is answered: approved work carries its confirm's expiry,
            // which says nothing any more (the `approved` line said who answered).
            let expires = item
                .expires_at
                .filter(|_| item.kind == ItemKind::ConfirmRequest)
                .map(|e| {
                    let left = (e - chrono::Utc::now()).num_seconds().max(0) as u64;
                    format!(
                        " (answer within {}: `{}`)",
                        humantime::format_duration(std::time::Duration::from_secs(left)),
                        crate::home::command(&format!("confirm {} yes|no", item.action_id))
                    )
                })
                .unwrap_or_default();
            let queued = match item.kind {
                ItemKind::Approved => ", queued for the agent",
                _ => "",
            };
            style.paint(
                code,
                format!(
                    "  {} #{} [{}] seq {}{queued}{expires}: {}",
                    kind_label(item.kind),
                    item.action_id,
                    escape(&item.rule),
                    item.message.seq,
                    escape(item.prompt.lines().next().unwrap_or_default())
                ),
            )
        }
        WatchEvent::Action(e) => {
            let code = match e {
                Event::Answered { .. } | Event::Resolved { .. } => "32",
                Event::Expired { .. } | Event::Dropped { .. } | Event::Ended { .. } => "31",
                _ => "2",
            };
            // Rule, consumer names and reasons can come from outside (a client's name): escaped.
            style.paint(code, format!("  {}", escape(&transition_line(e))))
        }
        WatchEvent::Reload(r) => style.paint(
            if r.ok { "32" } else { "1;31" },
            escape(&r.line).into_owned(),
        ),
        WatchEvent::Suppressed(s) => style.paint(
            "2",
            format!(
                "  suppressed [{}]: {}",
                escape(&s.rule),
                match s.reason.as_str() {
                    "dedup" => "dedup (a repeat inside its dedupWindow)",
                    "rate_limited" => "rate limited (over its rateLimit)",
                    "regex_budget" =>
                        "regex_budget (its contentRegex could not be decided within \
                                       its budget; an auto or notify rule does not fire on that)",
                    other => other,
                }
            ),
        ),
    }
}

/// One line for an action transition other than `queued`.
/// Whether `consumer` is a host's stop hook (`copilot-hook:SESSION`).
fn is_hook_consumer(consumer: &str) -> bool {
    ["copilot", "claude"]
        .iter()
        .any(|host| consumer.starts_with(&crate::control::ops::hook_stop::hook_consumer(host, "")))
}

fn transition_line(e: &Event) -> String {
    match e {
        Event::Queued { item } => format!("queued #{} [{}]", item.action_id, item.rule),
        Event::Answered {
            id,
            rule,
            state,
            by,
            via,
        } => match via {
            Some(via) => format!("{} #{id} [{rule}] via {via} by {by}", state.as_str()),
            None => format!("{} #{id} [{rule}] by {by}", state.as_str()),
        },
        Event::Expired { id, rule } => format!("expired #{id} [{rule}] unanswered"),
        Event::Resolved { id, rule, by_seq } => {
            format!("resolved #{id} [{rule}] by message seq {by_seq} before anyone answered")
        }
        Event::Ended { id, rule, reason } => format!("closed #{id} [{rule}]: {reason}"),
        Event::Claimed { id, consumer } => format!("claimed #{id} by {consumer}"),
        Event::Delivered { id, consumer } => format!(
            "delivered #{id} to {consumer}{}",
            if is_hook_consumer(consumer) {
                " by its stop hook"
            } else {
                ""
            }
        ),
        Event::Released {
            id,
            consumer,
            reason,
        } => format!("released #{id} from {consumer}: {reason}"),
        Event::Dropped {
            id, rule, reason, ..
        } => format!("dropped #{id} [{rule}]: {reason}"),
        Event::ExecQueued { item } => format!(
            "queued #{} [{}] for the exec host: {}",
            item.action_id,
            item.rule,
            item.prompt.lines().next().unwrap_or_default()
        ),
        Event::Running { id, rule } => format!("running #{id} [{rule}] in the exec host"),
        Event::Finished {
            id,
            rule,
            state,
            kind,
            reason,
            duration_ms,
            tool_calls,
        } => {
            let why = match (kind, reason) {
                (Some(k), Some(r)) => format!(" {k}: {r}"),
                (Some(k), None) => format!(" {k}"),
                (None, Some(r)) => format!(": {r}"),
                (None, None) => String::new(),
            };
            format!(
                "{} #{id} [{rule}] after {:.1}s, {tool_calls} tool calls{why}",
                state.as_str(),
                *duration_ms as f64 / 1000.0
            )
        }
    }
}

/// `text` cut to `width` characters, the last one `…` when something was cut. The text is
/// already escaped, so every character is one printable column (wide characters aside).
pub fn cut(text: &str, width: usize) -> String {
    let width = width.max(2);
    match text.char_indices().nth(width) {
        None => text.to_string(),
        Some(_) => {
            let keep = text
                .char_indices()
                .nth(width - 1)
                .map_or(text.len(), |(i, _)| i);
            format!("{}…", &text[..keep])
        }
    }
}

/// The width of the terminal on stdout, if it is one and says.
fn terminal_width() -> Option<usize> {
    // SAFETY: TIOCGWINSZ writes a `winsize` into the struct we own; a failure leaves it zeroed.
    let mut ws: libc::winsize = unsafe { std::mem::zeroed() };
    let ok = unsafe { libc::ioctl(libc::STDOUT_FILENO, libc::TIOCGWINSZ, &mut ws) } == 0;
    (ok && ws.ws_col > 0).then_some(ws.ws_col as usize)
}

fn on_path(program: &str) -> bool {
    std::env::var_os("PATH").is_some_and(|paths| {
        std::env::split_paths(&paths).any(|dir| {
            let p = dir.join(program);
            std::fs::metadata(&p).is_ok_and(|m| {
                use std::os::unix::fs::PermissionsExt;
                m.is_file() && m.permissions().mode() & 0o111 != 0
            })
        })
    })
}

fn show_toast(label: &str, rule: &str, text: &str) {
    let _ = std::process::Command::new("notify-send")
        .arg(format!("switchboard: {label} ({rule})"))
        .arg(text)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn();
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::{Message, NewMessage};

    fn message(content: &str) -> Message {
        Message::from_new(
            NewMessage::new("alertmanager", "alerts/critical", content),
            7,
            chrono::Utc::now(),
        )
    }

    #[test]
    fn a_long_line_is_cut_to_the_width_and_marked() {
        let long = "x".repeat(1_000_000);
        let line = text_line(
            &WatchEvent::Message(message(&long)),
            Style {
                colour: false,
                width: Some(80),
            },
        );
        assert_eq!(line.chars().count(), 80, "{line}");
        assert!(line.ends_with('…'));
        let whole = text_line(&WatchEvent::Message(message(&long)), Style::default());
        assert!(whole.ends_with(&long), "without a width nothing is cut");
        assert_eq!(cut("short", 80), "short");
        assert_eq!(cut("ü€漢字abc", 4), "ü€漢…");
    }

    #[test]
    fn escaping_happens_before_the_cut_and_colour_wraps_the_line() {
        let line = text_line(
            &WatchEvent::Message(message("\x1b[2Jboom\nforged")),
            Style {
                colour: true,
                width: Some(200),
            },
        );
        assert!(
            line.starts_with("\x1b[2m") && line.ends_with("\x1b[0m"),
            "{line:?}"
        );
        let inner = &line[4..line.len() - 4];
        assert!(!inner.chars().any(|c| c.is_control()), "{inner:?}");
        assert!(inner.contains("\\x1b[2Jboom\\nforged"), "{inner:?}");
    }

    #[test]
    fn json_lines_use_server_never_server_name() {
        let v = json_line(&WatchEvent::Message(message("hi")));
        assert_eq!(v["type"], "message");
        assert_eq!(v["server"], "alertmanager");
        assert!(v.get("serverName").is_none(), "{v}");
        let item = crate::actions::Item {
            kind: ItemKind::ConfirmRequest,
            action_id: 3,
            rule: "crit".into(),
            prompt: "look".into(),
            tools: vec![],
            expires_at: None,
            message: std::sync::Arc::new(message("hi")),
            delivery: Default::default(),
            approve_via: vec![],
            consumers: Default::default(),
            redelivered: false,
        };
        let v = json_line(&WatchEvent::Action(Event::Queued { item }));
        assert_eq!(v["event"], "queued");
        assert_eq!(v["item"]["message"]["server"], "alertmanager");
        assert!(!v.to_string().contains("serverName"), "{v}");
        let v = json_line(&WatchEvent::Action(Event::Resolved {
            id: 3,
            rule: "crit".into(),
            by_seq: 9,
        }));
        assert_eq!(
            v,
            json!({"type": "action", "event": "resolved", "id": 3, "rule": "crit", "by_seq": 9})
        );
    }

    #[test]
    fn every_transition_and_suppression_has_its_line() {
        let plain = Style::default();
        let line = |e: WatchEvent| text_line(&e, plain);
        assert_eq!(
            line(WatchEvent::Action(Event::Resolved {
                id: 4,
                rule: "crit".into(),
                by_seq: 12
            })),
            "  resolved #4 [crit] by message seq 12 before anyone answered"
        );
        assert_eq!(
            line(WatchEvent::Action(Event::Answered {
                id: 4,
                rule: "crit".into(),
                state: crate::actions::ActionState::Denied,
                by: crate::actions::By::new(
                    crate::actions::ByKind::User,
                    "1000",
                    Some("ada".into())
                ),
                via: Some(crate::actions::Via::Cli),
            })),
            "  denied #4 [crit] via cli by ada"
        );
        assert_eq!(
            line(WatchEvent::Action(Event::Answered {
                id: 5,
                rule: "crit".into(),
                state: crate::actions::ActionState::Approved,
                by: crate::actions::By::new(
                    crate::actions::ByKind::Link,
                    "5f2a",
                    Some("phone".into())
                ),
                via: None,
            })),
            "  approved #5 [crit] by page link \"phone\"",
            "an event from a daemon older than `via` still reads"
        );
        assert_eq!(
            line(WatchEvent::Suppressed(crate::metrics::Suppression {
                rule: "r\x1b".into(),
                reason: "dedup".into()
            })),
            "  suppressed [r\\x1b]: dedup (a repeat inside its dedupWindow)"
        );
        assert_eq!(
            line(WatchEvent::Action(Event::Delivered {
                id: 5,
                consumer: "claude-hook:9f2".into()
            })),
            "  delivered #5 to claude-hook:9f2 by its stop hook"
        );
        assert_eq!(
            line(WatchEvent::Action(Event::Delivered {
                id: 6,
                consumer: "copilot-cli#2".into()
            })),
            "  delivered #6 to copilot-cli#2"
        );
    }
}
