use super::*;
use crate::actions::journal::ActionLog;
use crate::message::NewMessage;
use chrono::TimeDelta;

fn action(id: ActionId, mode: Mode, now: DateTime<Utc>) -> (Action, Arc<Message>) {
    let msg = Message::from_new(NewMessage::new("s", "c", format!("m{id}")), id, now);
    let a = Action {
        id,
        rule: "r".into(),
        mode,
        seq: id,
        prompt: format!("p{id}"),
        tools: vec!["t".into()],
        created: now,
        expires: (mode == Mode::Confirm).then(|| now + TimeDelta::minutes(30)),
    };
    (a, Arc::new(msg))
}

fn ids(items: &[Item]) -> Vec<(ItemKind, ActionId)> {
    items.iter().map(|i| (i.kind, i.action_id)).collect()
}

#[test]
fn nudges_per_consumer_work_consumed_once() {
    let hub = Hub::default();
    let now = Utc::now();
    hub.offer(
        vec![
            action(1, Mode::Notify, now),
            action(2, Mode::Auto, now),
            action(3, Mode::Confirm, now),
        ],
        None,
        now,
    );
    use ItemKind::*;
    assert_eq!(
        ids(&hub.take("a", 10)),
        [(Auto, 2), (Nudge, 1), (ConfirmRequest, 3)]
    );
    assert_eq!(
        ids(&hub.take("b", 10)),
        [(Nudge, 1), (ConfirmRequest, 3)],
        "auto was consumed by a"
    );
    assert!(hub.take("a", 10).is_empty(), "each item once per consumer");
    assert!(hub.take("b", 10).is_empty());
    assert_eq!(ids(&hub.take("late", 1)), [(Nudge, 1)], "max is respected");
    assert_eq!(ids(&hub.take("late", 1)), [(ConfirmRequest, 3)]);
}

#[test]
fn overflow_refuses_the_newest_and_counts_it() {
    let hub = Hub::new(4, None);
    let now = Utc::now();
    let batch = (1..=10).map(|i| action(i, Mode::Notify, now)).collect();
    let offered = hub.offer(batch, None, now);
    assert_eq!(
        offered
            .queued
            .iter()
            .map(|i| i.action_id)
            .collect::<Vec<_>>(),
        [1, 2, 3, 4]
    );
    assert_eq!(
        offered.dropped.iter().map(|a| a.id).collect::<Vec<_>>(),
        [5, 6, 7, 8, 9, 10]
    );
    assert_eq!(hub.dropped_total(), 6);
    // Delivering frees room; delivered nudges stay visible to other consumers.
    assert_eq!(hub.take("a", 10).len(), 4);
    let offered = hub.offer(vec![action(11, Mode::Notify, now)], None, now);
    assert_eq!(offered.queued.len(), 1);
    assert_eq!(hub.take("b", 10).len(), 5);
}

#[test]
fn confirm_answers() {
    let hub = Hub::default();
    let now = Utc::now();
    hub.offer(
        (1..=3).map(|i| action(i, Mode::Confirm, now)).collect(),
        None,
        now,
    );
    let yes = hub.confirm(1, true, Some("agent"), now).unwrap().unwrap();
    assert_eq!((yes.kind, yes.prompt.as_str()), (ItemKind::Approved, "p1"));
    assert!(
        hub.take("other", 10)
            .iter()
            .all(|i| i.action_id != 1 || i.kind != ItemKind::Approved),
        "approved through the tool goes to the taker only"
    );
    assert_eq!(hub.confirm(2, false, None, now), Ok(None));
    assert!(matches!(
        hub.confirm(1, true, None, now),
        Err(ConfirmError::AlreadyAnswered { .. })
    ));
    assert!(matches!(
        hub.confirm(2, true, None, now),
        Err(ConfirmError::AlreadyAnswered { .. })
    ));
    assert_eq!(
        hub.confirm(99, true, None, now),
        Err(ConfirmError::Unknown(99))
    );
    // CLI approval queues it as work for the next consumer.
    let later = now + TimeDelta::minutes(1);
    hub.confirm(3, true, None, later).unwrap();
    assert_eq!(
        ids(&hub.take("x", 10)).first(),
        Some(&(ItemKind::Approved, 3))
    );
}

#[test]
fn expiry_by_timer_and_on_answer() {
    let hub = Hub::default();
    let now = Utc::now();
    hub.offer(
        (1..=2).map(|i| action(i, Mode::Confirm, now)).collect(),
        None,
        now,
    );
    let after = now + TimeDelta::minutes(31);
    assert!(matches!(
        hub.confirm(1, true, None, after),
        Err(ConfirmError::Expired { .. })
    ));
    assert!(
        matches!(
            hub.confirm(1, true, None, after),
            Err(ConfirmError::Expired { .. })
        ),
        "stays expired"
    );
    assert_eq!(hub.expire_due(after), None);
    assert!(hub.pending_confirms().is_empty(), "2 expired too");
    assert!(matches!(
        hub.confirm(2, false, None, after),
        Err(ConfirmError::Expired { .. })
    ));
}

#[tokio::test]
async fn expiry_task_expires_without_a_read() {
    let hub = Hub::default();
    let now = Utc::now();
    let (mut a, m) = action(1, Mode::Confirm, now);
    a.expires = Some(now + TimeDelta::milliseconds(100));
    let token = tokio_util::sync::CancellationToken::new();
    let task = tokio::spawn({
        let hub = hub.clone();
        let token = token.clone();
        async move { hub.run_expiry(token).await }
    });
    hub.offer(vec![(a, m)], None, now);
    assert_eq!(hub.pending_confirms().len(), 1);
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while !hub.pending_confirms().is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "not expired by the timer"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    token.cancel();
    task.await.unwrap();
}

#[tokio::test]
async fn wait_wakes_on_offer() {
    let hub = Hub::default();
    let waiter = tokio::spawn({
        let hub = hub.clone();
        async move { hub.wait("a", 10, Duration::from_secs(5)).await }
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    let start = std::time::Instant::now();
    let now = Utc::now();
    hub.offer(vec![action(1, Mode::Auto, now)], None, now);
    let items = waiter.await.unwrap();
    assert_eq!(ids(&items), [(ItemKind::Auto, 1)]);
    assert!(start.elapsed() < Duration::from_secs(1));
    let empty = hub.wait("a", 10, Duration::from_millis(50)).await;
    assert!(empty.is_empty());
}

#[test]
fn journal_restores_pending_and_undelivered() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("actions.jsonl");
    let now = Utc::now();
    let expires;
    {
        let (log, _) = ActionLog::open(&path).unwrap();
        let hub = Hub::new(64, Some(Arc::new(log)));
        let (c, m) = action(1, Mode::Confirm, now);
        expires = c.expires;
        hub.offer(
            vec![
                (c, m),
                action(2, Mode::Auto, now),
                action(3, Mode::Auto, now),
                action(4, Mode::Notify, now),
                action(5, Mode::Confirm, now),
            ],
            Some(5),
            now,
        );
        assert_eq!(ids(&hub.take("a", 1)), [(ItemKind::Auto, 2)]);
        hub.confirm(5, false, None, now).unwrap();
    }
    let (_, replay) = ActionLog::open(&path).unwrap();
    assert_eq!(replay.evaluated, Some(5));
    assert_eq!(replay.next_id, 6);
    let hub = Hub::default();
    hub.restore(replay.live.into_values());
    let items = hub.take("b", 10);
    use ItemKind::*;
    assert_eq!(ids(&items), [(Auto, 3), (ConfirmRequest, 1), (Nudge, 4)]);
    assert_eq!(items[1].expires_at, expires, "original expiry kept");
}
