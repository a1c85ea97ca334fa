//! Polling Microsoft Graph for new chat messages (the default: a laptop has no public endpoint).
//!
//! Each pass: who is signed in (`GET /me`, once), the chats with their newest message
//! (`GET /me/chats?$expand=lastMessagePreview`, every page), and for each chat whose newest
//! message is past its cursor, its messages newest first (`GET /chats/{id}/messages?$orderby=
//! createdDateTime desc&$top=50`, page after page) back to the cursor; the new ones are appended
//! oldest first, then the cursor moves and is saved. Graph's default order is by last change,
//! where an edit of an old message comes first; by creation time an edit is never new.
//!
//! Between passes it waits the poll interval, or, while change notifications are subscribed,
//! until a catch-up is asked for. A pass that fails waits longer each time (up to five minutes);
//! a sign-in that no longer works stops the source, which checks every interval (a file read)
//! whether someone signed in again. It never loops on an error.

use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use serde_json::Value;

use super::auth::AuthError;
use super::client::{GraphError, segment};
use super::cursors::{ChatCursor, Cursors};
use super::mapping::{self, Me};
use super::{Inner, SERVER};
use crate::sources::SourceContext;

/// The most pages of chats read in one pass.
const MAX_CHAT_PAGES: usize = 50;

/// The most pages of one chat's messages read in one pass (2,500 messages); what is older waits
/// for the next pass.
const MAX_MESSAGE_PAGES: usize = 50;

/// The longest wait after failed passes.
const MAX_BACKOFF: Duration = Duration::from_secs(300);

/// Polls until the daemon stops.
pub async fn run(inner: Arc<Inner>, sources: SourceContext) {
    let path = inner.cursors.clone();
    let mut cursors = Cursors::load(&path);
    let mut failures: u32 = 0;
    loop {
        let wait = match pass(&inner, &sources, &mut cursors).await {
            Ok(chats) => {
                failures = 0;
                let subscribed = inner.subscribed();
                inner.set_state(|s| {
                    s.state = if subscribed { "subscribed" } else { "polling" }.into();
                    s.chats = chats;
                    s.last_poll = Some(crate::message::format_timestamp(Utc::now()));
                    s.error = None;
                });
                (!subscribed).then_some(inner.settings.poll)
            }
            Err(e) => {
                inner.failed(&e);
                match e {
                    // Checked again each interval: a file read, until someone signs in.
                    GraphError::Auth(AuthError::SignInNeeded(_)) => Some(inner.settings.poll),
                    _ => {
                        failures = failures.saturating_add(1);
                        let backoff = inner.settings.poll * 2u32.saturating_pow(failures.min(16));
                        Some(backoff.min(MAX_BACKOFF))
                    }
                }
            }
        };
        let sleep = async {
            match wait {
                Some(wait) => tokio::time::sleep(wait).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = sources.shutdown().cancelled() => return,
            _ = sleep => {}
            _ = inner.catch_up.notified() => {}
        }
    }
}

/// One pass over every chat; the number of chats read.
async fn pass(
    inner: &Inner,
    sources: &SourceContext,
    cursors: &mut Option<Cursors>,
) -> Result<usize, GraphError> {
    let started = Utc::now();
    let me = inner.me().await?;
    let mut chats: Vec<Value> = Vec::new();
    inner
        .graph
        .pages(
            &format!("{}/chats?$expand=lastMessagePreview", inner.who()),
            MAX_CHAT_PAGES,
            |page| {
                chats.extend(page.iter().cloned());
                true
            },
        )
        .await?;
    let first = cursors.is_none();
    let saved = cursors.get_or_insert_with(Cursors::default);
    let since = saved.listed.unwrap_or(started);
    let mut read = 0;
    for chat in &chats {
        let Some(id) = mapping::str_at(chat, &["id"]) else {
            continue;
        };
        let chat_type = mapping::str_at(chat, &["chatType"]).unwrap_or_default();
        inner.learn_chat(id, chat_type);
        if !inner.settings.wants(chat_type) {
            continue;
        }
        read += 1;
        let preview = chat
            .get("lastMessagePreview")
            .filter(|p| !p.is_null())
            .and_then(|p| Some((mapping::created(p)?, mapping::message_id(p)?)));
        let cursor = match saved.chats.get(id) {
            Some(c) => c.clone(),
            None if first => {
                // The first start begins from now: the newest message is the cursor.
                let mut c = ChatCursor::at(started);
                if let Some((at, newest)) = preview {
                    c = ChatCursor::at(at);
                    c.take(at, newest);
                }
                saved.chats.insert(id.to_string(), c);
                continue;
            }
            None => ChatCursor::at(since),
        };
        let has_messages = chat.get("lastMessagePreview").is_none_or(|p| !p.is_null());
        let behind = match preview {
            Some((at, newest)) => cursor.is_new(at, newest),
            None => has_messages,
        };
        if !behind {
            saved.chats.entry(id.to_string()).or_insert(cursor);
            continue;
        }
        let moved = read_chat(inner, sources, &me, id, chat_type, cursor).await?;
        saved.chats.insert(id.to_string(), moved);
        save(&inner.cursors, saved);
    }
    saved.listed = Some(started);
    save(&inner.cursors, saved);
    Ok(read)
}

/// Reads chat `id` back to `cursor`, appends what is new, and returns the moved cursor.
async fn read_chat(
    inner: &Inner,
    sources: &SourceContext,
    me: &Me,
    id: &str,
    chat_type: &str,
    mut cursor: ChatCursor,
) -> Result<ChatCursor, GraphError> {
    let mut newer: Vec<Value> = Vec::new();
    let path = format!(
        "/chats/{}/messages?$orderby=createdDateTime%20desc&$top=50",
        segment(id)
    );
    inner
        .graph
        .pages(&path, MAX_MESSAGE_PAGES, |page| {
            for m in page {
                match mapping::created(m) {
                    Some(at) if at < cursor.at => return false,
                    Some(_) => newer.push(m.clone()),
                    None => {}
                }
            }
            true
        })
        .await?;
    let mut out = Vec::new();
    for m in newer.iter().rev() {
        let (Some(at), Some(mid)) = (mapping::created(m), mapping::message_id(m)) else {
            continue;
        };
        if !cursor.is_new(at, mid) {
            continue;
        }
        cursor.take(at, mid);
        if inner.seen(&format!("{id}/{mid}")) {
            continue;
        }
        match mapping::to_message(m, id, chat_type, me) {
            Ok(message) => out.push(message),
            Err(skip) => {
                tracing::debug!(chat = %id, message = %mid, ?skip, "teams: message skipped")
            }
        }
    }
    let taken = out.len();
    inner
        .append(sources, out)
        .await
        .map_err(|e| GraphError::Transport {
            what: format!("appending {taken} {SERVER} messages"),
            cause: e.to_string(),
        })?;
    Ok(cursor)
}

fn save(path: &std::path::Path, cursors: &Cursors) {
    if let Err(e) = cursors.save(path) {
        tracing::warn!(path = %path.display(), cause = %e, "teams: cannot save the chat cursors; a restart may read some messages again (the inbox drops repeats)");
    }
}
