//! A Slack event (the Events API's `event`, as Slack documents `message` and `app_mention`),
//! turned into our message. Pure: no I/O; the names it needs are looked up by the caller.
//!
//! - server `slack`; channel `slack/dm` (a direct message to the app), `slack/mention` (the app
//!   mentioned), `slack/channel/<name>` (a message in a channel of `slack.channels`);
//! - content: the text with Slack's markup made readable ([`readable`]): `<@U1>` → `@name`,
//!   `<#C1|general>` → `#general`, `<https://x|label>` → `label (https://x)`, `<!here>` →
//!   `@here`, and `&amp;`, `&lt;`, `&gt;` decoded;
//! - metadata: `channel_id`, `channel_name`, `user` (`U…`), `user_name`, `ts`, `thread_ts`
//!   (when in a thread), `team`;
//! - id: the envelope's `event_id` (else the message's `client_msg_id`): Slack's retries and
//!   redeliveries carry the same one, so the inbox stores it once;
//! - skipped: bot messages (ours too), and every `subtype` that is not a person writing
//!   (`message_changed`, `message_deleted`, `channel_join`, ...).

use std::collections::HashMap;

use serde_json::Value;

use crate::message::NewMessage;

/// The server name of every Slack message.
pub const SERVER: &str = "slack";

/// Every metadata key a Slack message can carry.
pub const META_KEYS: &[&str] = &[
    "channel_id",
    "channel_name",
    "user",
    "user_name",
    "ts",
    "thread_ts",
    "team",
];

/// The subtypes that are still a person writing.
const PERSON_SUBTYPES: &[&str] = &["thread_broadcast", "file_share", "me_message"];

/// Where a heard event goes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Heard {
    /// A direct message to the app (`message.im`).
    Dm,
    /// The app mentioned (`app_mention`).
    Mention,
    /// A message in a channel (`message.channels`, `message.groups`): its id.
    Channel(String),
}

/// Why an event is not a message of ours.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Skip {
    /// Not `message` or `app_mention`.
    Type,
    /// A bot wrote it (ours too).
    Bot,
    /// An edit, a deletion, a join: not a person writing.
    Subtype,
    /// A channel `message` that mentions the app: its `app_mention` is the one kept.
    Mentioned,
}

/// Which kind of message `event` is, or why it is skipped. `me` is the app's bot user id
/// (`auth.test`'s `user_id`), when known.
pub fn heard(event: &Value, me: Option<&str>) -> Result<Heard, Skip> {
    let kind = str_at(event, "type").unwrap_or_default();
    if kind != "message" && kind != "app_mention" {
        return Err(Skip::Type);
    }
    if event.get("bot_id").is_some_and(|b| !b.is_null())
        || event.get("bot_profile").is_some_and(|b| !b.is_null())
        || me.is_some_and(|me| str_at(event, "user") == Some(me))
    {
        return Err(Skip::Bot);
    }
    if let Some(subtype) = str_at(event, "subtype")
        && !PERSON_SUBTYPES.contains(&subtype)
    {
        return Err(if subtype == "bot_message" {
            Skip::Bot
        } else {
            Skip::Subtype
        });
    }
    if event.get("hidden").and_then(Value::as_bool) == Some(true) || str_at(event, "user").is_none()
    {
        return Err(Skip::Subtype);
    }
    if kind == "app_mention" {
        return Ok(Heard::Mention);
    }
    if str_at(event, "channel_type") == Some("im") {
        return Ok(Heard::Dm);
    }
    if let Some(me) = me
        && str_at(event, "text").is_some_and(|t| t.contains(&format!("<@{me}>")))
    {
        return Err(Skip::Mentioned);
    }
    Ok(Heard::Channel(
        str_at(event, "channel").unwrap_or_default().to_string(),
    ))
}

/// What the caller looked up for one event.
#[derive(Clone, Debug, Default)]
pub struct Names {
    /// Person names by user id.
    pub users: HashMap<String, String>,
    /// Channel names by id.
    pub channels: HashMap<String, String>,
}

/// The message of `event` (which [`heard`] took) in envelope `event_id` of `team`.
pub fn to_message(
    event: &Value,
    heard: &Heard,
    event_id: Option<&str>,
    team: Option<&str>,
    names: &Names,
) -> NewMessage {
    let channel_id = str_at(event, "channel").unwrap_or_default();
    let channel_name = names.channels.get(channel_id).map(String::as_str);
    let channel = match heard {
        Heard::Dm => "slack/dm".to_string(),
        Heard::Mention => "slack/mention".to_string(),
        Heard::Channel(id) => format!("slack/channel/{}", channel_name.unwrap_or(id)),
    };
    let text = str_at(event, "text").unwrap_or_default();
    let mut out = NewMessage::new(SERVER, channel, readable(text, names));
    out.id = event_id
        .or_else(|| str_at(event, "client_msg_id"))
        .map(String::from);
    let user = str_at(event, "user").unwrap_or_default();
    let ts = str_at(event, "ts").unwrap_or_default();
    out.timestamp = ts
        .split_once('.')
        .and_then(|(s, _)| s.parse::<i64>().ok())
        .and_then(|s| chrono::DateTime::from_timestamp(s, 0));
    let meta = &mut out.metadata;
    meta.insert("channel_id", channel_id);
    if let Some(name) = channel_name {
        meta.insert("channel_name", name);
    }
    meta.insert("user", user);
    meta.insert(
        "user_name",
        names.users.get(user).map_or(user, String::as_str),
    );
    meta.insert("ts", ts);
    if let Some(thread) = str_at(event, "thread_ts") {
        meta.insert("thread_ts", thread);
    }
    if let Some(team) = str_at(event, "team").or(team) {
        meta.insert("team", team);
    }
    out
}

/// A person's name from a `users.info` `user`: `profile.display_name`, else `real_name`, else
/// `name`.
pub fn person_name(user: &Value) -> Option<String> {
    let profile = user.get("profile");
    [
        profile.and_then(|p| str_at(p, "display_name")),
        profile.and_then(|p| str_at(p, "real_name")),
        str_at(user, "real_name"),
        str_at(user, "name"),
    ]
    .into_iter()
    .flatten()
    .find(|n| !n.trim().is_empty())
    .map(String::from)
}

/// The user ids and the unlabelled channel ids `text`'s markup names, to look up before
/// [`readable`].
pub fn refs(text: &str) -> (Vec<String>, Vec<String>) {
    let (mut users, mut channels) = (Vec::new(), Vec::new());
    for (inner, _) in spans(text) {
        let (target, label) = split_label(inner);
        if let Some(id) = target.strip_prefix('@')
            && label.is_none()
        {
            users.push(id.to_string());
        } else if let Some(id) = target.strip_prefix('#')
            && label.is_none()
        {
            channels.push(id.to_string());
        }
    }
    (users, channels)
}

/// `text` with Slack's markup made readable, the names taken from `names`.
pub fn readable(text: &str, names: &Names) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = 0;
    for (inner, at) in spans(text) {
        out.push_str(&decode(&text[rest..at]));
        rest = at + inner.len() + 2;
        out.push_str(&decode(&span(inner, names)));
    }
    out.push_str(&decode(&text[rest..]));
    out
}

/// One `<...>` span, readable.
fn span(inner: &str, names: &Names) -> String {
    let (target, label) = split_label(inner);
    if let Some(id) = target.strip_prefix('@') {
        let name = label.or_else(|| names.users.get(id).map(String::as_str));
        return format!("@{}", name.unwrap_or(id).trim_start_matches('@'));
    }
    if let Some(id) = target.strip_prefix('#') {
        let name = label.or_else(|| names.channels.get(id).map(String::as_str));
        return format!("#{}", name.unwrap_or(id));
    }
    if let Some(special) = target.strip_prefix('!') {
        return match (special.split('^').next().unwrap_or_default(), label) {
            ("here" | "channel" | "everyone", _) => format!("@{}", special),
            ("subteam", Some(label)) => format!("@{}", label.trim_start_matches('@')),
            (_, Some(label)) => label.to_string(),
            (other, None) => format!("@{other}"),
        };
    }
    let shown = target.strip_prefix("mailto:").unwrap_or(target);
    match label {
        Some(label) if label != shown => format!("{label} ({shown})"),
        _ => shown.to_string(),
    }
}

/// `target|label` split at the first `|`.
fn split_label(inner: &str) -> (&str, Option<&str>) {
    match inner.split_once('|') {
        Some((t, l)) => (t, Some(l)),
        None => (inner, None),
    }
}

/// Every `<...>` span: its inside and where its `<` is.
fn spans(text: &str) -> impl Iterator<Item = (&str, usize)> {
    let mut from = 0;
    std::iter::from_fn(move || {
        let open = from + text[from..].find('<')?;
        let close = open + text[open..].find('>')?;
        from = close + 1;
        Some((&text[open + 1..close], open))
    })
}

/// Slack's three escapes decoded (`&amp;` last, so `&amp;lt;` stays `&lt;`).
fn decode(text: &str) -> String {
    text.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&amp;", "&")
}

fn str_at<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    v.get(key).and_then(Value::as_str)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn names() -> Names {
        Names {
            users: [("U2".to_string(), "ada".to_string())].into(),
            channels: [("C9".to_string(), "ops".to_string())].into(),
        }
    }

    #[test]
    fn markup_is_made_readable() {
        let text = "hi <@U2> and <@U7|bob>, see <#C1|general> and <#C9>: \
                    <https://x.example/a?b=1&amp;c=2|the runbook> or <https://y.example> \
                    <mailto:a@b.example|a@b.example> <!here> <!subteam^S1|@oncall> \
                    <!date^1392734382^{date}|Feb 18> 1 &lt; 2 &amp;&amp; 3 &gt; 2 &amp;lt;";
        assert_eq!(
            readable(text, &names()),
            "hi @ada and @bob, see #general and #ops: the runbook \
             (https://x.example/a?b=1&c=2) or https://y.example a@b.example @here @oncall \
             Feb 18 1 < 2 && 3 > 2 &lt;"
        );
        assert_eq!(readable("<@U5> <#C5>", &Names::default()), "@U5 #C5");
        assert_eq!(
            refs("<@U2> <@U3|x> <#C1|g> <#C9> <https://z>"),
            (vec!["U2".to_string()], vec!["C9".to_string()])
        );
    }

    #[test]
    fn a_persons_name_is_display_then_real_then_name() {
        let u = json!({"name": "ada.l", "real_name": "Ada Lovelace",
                       "profile": {"display_name": "ada", "real_name": "Ada Lovelace"}});
        assert_eq!(person_name(&u).as_deref(), Some("ada"));
        let u = json!({"name": "ada.l", "profile": {"display_name": "", "real_name": "Ada L"}});
        assert_eq!(person_name(&u).as_deref(), Some("Ada L"));
        assert_eq!(
            person_name(&json!({"name": "ada.l"})).as_deref(),
            Some("ada.l")
        );
    }

    #[test]
    fn bots_and_subtypes_are_skipped() {
        let me = Some("UBOT");
        let dm = json!({"type": "message", "channel": "D1", "channel_type": "im",
                        "user": "U2", "text": "hi", "ts": "1.2"});
        assert_eq!(heard(&dm, me), Ok(Heard::Dm));
        let mut bot = dm.clone();
        bot["bot_id"] = json!("B1");
        assert_eq!(heard(&bot, me), Err(Skip::Bot));
        let mut own = dm.clone();
        own["user"] = json!("UBOT");
        assert_eq!(heard(&own, me), Err(Skip::Bot));
        for subtype in ["message_changed", "message_deleted", "channel_join"] {
            let mut e = dm.clone();
            e["subtype"] = json!(subtype);
            assert_eq!(heard(&e, me), Err(Skip::Subtype), "{subtype}");
        }
        let mut broadcast = dm.clone();
        broadcast["subtype"] = json!("thread_broadcast");
        assert_eq!(heard(&broadcast, me), Ok(Heard::Dm));
        let chan = json!({"type": "message", "channel": "C9", "channel_type": "channel",
                          "user": "U2", "text": "hey <@UBOT>", "ts": "1.2"});
        assert_eq!(heard(&chan, me), Err(Skip::Mentioned));
        let mut mention = chan.clone();
        mention["type"] = json!("app_mention");
        assert_eq!(heard(&mention, me), Ok(Heard::Mention));
        assert_eq!(
            heard(&json!({"type": "reaction_added"}), me),
            Err(Skip::Type)
        );
    }

    #[test]
    fn the_message_carries_where_it_came_from() {
        let e = json!({"type": "message", "channel": "C9", "channel_type": "channel",
                       "user": "U2", "text": "deploy <#C9>?", "ts": "1700000000.000100",
                       "thread_ts": "1699999999.000200", "client_msg_id": "m-1"});
        let m = to_message(
            &e,
            &Heard::Channel("C9".into()),
            Some("Ev1"),
            Some("T1"),
            &names(),
        );
        assert_eq!(
            (m.channel.as_str(), m.content.as_str()),
            ("slack/channel/ops", "deploy #ops?")
        );
        assert_eq!(m.id.as_deref(), Some("Ev1"));
        for (k, v) in [
            ("channel_id", "C9"),
            ("channel_name", "ops"),
            ("user", "U2"),
            ("user_name", "ada"),
            ("ts", "1700000000.000100"),
            ("thread_ts", "1699999999.000200"),
            ("team", "T1"),
        ] {
            assert_eq!(m.metadata.get(k), Some(v), "{k}");
        }
        let m = to_message(&e, &Heard::Dm, None, None, &Names::default());
        assert_eq!(m.id.as_deref(), Some("m-1"));
        assert_eq!(m.channel, "slack/dm");
    }
}
