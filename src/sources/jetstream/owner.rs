//! One daemon per durable consumer: before it consumes, an instance claims its consumer's name
//! on the NATS server, and refuses to consume while another daemon holds it.
//!
//! Two daemons reading as one durable consumer (the same `instance` in two homes, or two
//! default names that differ only in what a NATS name cannot hold) would each store about
//! half of the stream, and each ingest would wait in vain for the other half (issue 46.6).
//!
//! The claim is a subject, `PREFIX.owner.<consumer>`, that the holder answers with its
//! [`Claim`]. An instance asks it first: no responders, the name is free; an answer, it is
//! held, and this instance says so (`status`: `NOT READY`, with the holder) and asks again
//! every few seconds, taking over once the holder is gone. Two instances that asked at the
//! same moment both find it free: once subscribed, each asks again, hears every answer, and
//! the one that claimed later (by time, then nonce) gives the name up.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use futures::StreamExt;
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

use super::Shared;

/// How long an instance waits for the holder's answer, and for every answer once it holds the
/// name.
const ASK_FOR: Duration = Duration::from_millis(500);
/// How long an instance that found its name held waits before it asks again.
const ASK_AGAIN: Duration = Duration::from_secs(2);

/// What the holder of a consumer's name answers.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct Claim {
    /// Its instance name.
    instance: String,
    /// Its host.
    host: String,
    /// A random number of its process, telling two daemons apart.
    nonce: u64,
    /// When it claimed the name (Unix milliseconds).
    since_ms: i64,
}

/// The subject the holder of consumer `durable` answers on.
fn subject(prefix: &str, durable: &str) -> String {
    format!("{prefix}.owner.{durable}")
}

/// Why the name cannot be held now.
enum Refused {
    /// Another daemon holds it.
    Held(Claim),
    /// The server could not be asked.
    Unreachable(String),
}

/// Holds the consumer's name for as long as the daemon runs: `claimed` is true while it does
/// (the consumer consumes only then).
pub(super) async fn hold(s: Arc<Shared>, shutdown: CancellationToken) {
    let claimed = &s.claimed;
    let nonce = getrandom::u64().unwrap_or_else(|_| u64::from(std::process::id()));
    loop {
        let outcome = tokio::select! {
            _ = shutdown.cancelled() => return,
            held = claim(&s, nonce) => held,
        };
        match outcome {
            Ok(mut answers) => {
                s.recovered("consumer name");
                claimed.send_replace(true);
                tokio::select! {
                    _ = shutdown.cancelled() => return,
                    _ = answer(&s, &mut answers.0, &answers.1) => {}
                }
                claimed.send_replace(false);
            }
            Err(Refused::Held(other)) => {
                s.ready.store(false, Ordering::Release);
                s.fail(
                    "consumer name",
                    format!(
                        "another daemon (instance \"{}\" on {}) already reads stream `{}` as \
                         consumer `{}`; give each daemon its own `jetstream.instance`",
                        other.instance.escape_debug(),
                        other.host,
                        s.settings.stream,
                        s.durable
                    ),
                );
            }
            Err(Refused::Unreachable(e)) => s.fail("consumer name", e),
        }
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(ASK_AGAIN) => {}
        }
    }
}

/// Claims the name: the subscription its holder answers on, and its claim.
async fn claim(s: &Shared, nonce: u64) -> Result<(async_nats::Subscriber, Claim), Refused> {
    let subject = subject(&s.settings.subject_prefix, &s.durable);
    let mine = Claim {
        instance: s.instance.clone(),
        host: super::host_name(),
        nonce,
        since_ms: chrono::Utc::now().timestamp_millis(),
    };
    if let Some(other) = holder(s, &subject).await? {
        return Err(Refused::Held(other));
    }
    let subscriber = s
        .client
        .subscribe(subject.clone())
        .await
        .map_err(|e| Refused::Unreachable(e.to_string()))?;
    // Another instance may have found the name free at the same moment: this one answers
    // from now on, and hears whoever else does.
    let answering = answer_while(s, subscriber, &mine);
    let others = holders(s, &subject, nonce);
    let (subscriber, others) = futures::join!(answering, others);
    let earlier = others?
        .into_iter()
        .find(|o| (o.since_ms, o.nonce) < (mine.since_ms, mine.nonce));
    match earlier {
        Some(other) => Err(Refused::Held(other)),
        None => Ok((subscriber, mine)),
    }
}

/// Answers requests on `subscriber` for [`ASK_FOR`]; gives it back.
async fn answer_while(
    s: &Shared,
    mut subscriber: async_nats::Subscriber,
    mine: &Claim,
) -> async_nats::Subscriber {
    let _ = tokio::time::timeout(ASK_FOR, answer(s, &mut subscriber, mine)).await;
    subscriber
}

/// Answers every request on `subscriber` with `mine`, until the subscription ends.
async fn answer(s: &Shared, subscriber: &mut async_nats::Subscriber, mine: &Claim) {
    let body = serde_json::to_vec(mine).unwrap_or_default();
    while let Some(request) = subscriber.next().await {
        if let Some(reply) = request.reply {
            let _ = s.client.publish(reply, body.clone().into()).await;
        }
    }
}

/// The daemon that answers for the name first, if any (no responders: none, at once).
async fn holder(s: &Shared, subject: &str) -> Result<Option<Claim>, Refused> {
    let request = async_nats::Request::new()
        .payload(Vec::new().into())
        .timeout(Some(ASK_FOR));
    match s.client.send_request(subject.to_string(), request).await {
        Ok(reply) => Ok(serde_json::from_slice::<Claim>(&reply.payload).ok()),
        Err(e) if e.kind() == async_nats::RequestErrorKind::NoResponders => Ok(None),
        // A holder too slow to answer is as good as none; the second look below hears it.
        Err(e) if e.kind() == async_nats::RequestErrorKind::TimedOut => Ok(None),
        Err(e) => Err(Refused::Unreachable(e.to_string())),
    }
}

/// Every daemon but this one (`nonce`) that answers for the name, within [`ASK_FOR`].
async fn holders(s: &Shared, subject: &str, nonce: u64) -> Result<Vec<Claim>, Refused> {
    let unreachable = |e: &dyn std::fmt::Display| Refused::Unreachable(e.to_string());
    let inbox = s.client.new_inbox();
    let mut replies = s
        .client
        .subscribe(inbox.clone())
        .await
        .map_err(|e| unreachable(&e))?;
    s.client
        .publish_with_reply(subject.to_string(), inbox, Vec::new().into())
        .await
        .map_err(|e| unreachable(&e))?;
    s.client.flush().await.map_err(|e| unreachable(&e))?;
    let mut out = Vec::new();
    let deadline = tokio::time::Instant::now() + ASK_FOR;
    while let Ok(Some(reply)) = tokio::time::timeout_at(deadline, replies.next()).await {
        if let Ok(claim) = serde_json::from_slice::<Claim>(&reply.payload)
            && claim.nonce != nonce
        {
            out.push(claim);
        }
    }
    Ok(out)
}
