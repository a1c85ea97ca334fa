use super::*;
use crate::actions::journal::ActionLog;
use crate::actions::{Action, ActionSettings, Via};
use crate::home::FsyncPolicy;
use crate::message::{Message, NewMessage};
use chrono::TimeDelta;

pub(super) fn action(id: ActionId, mode: Mode, now: DateTime<Utc>) -> (Action, Arc<Message>) {
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
        delivery: Default::default(),
        approve_via: vec![],
        consumers: Default::default(),
    };
    (a, Arc::new(msg))
}

fn ids(items: &[Item]) -> Vec<(ItemKind, ActionId)> {
    items.iter().map(|i| (i.kind, i.action_id)).collect()
}

fn events(rx: &mut broadcast::Receiver<Event>) -> Vec<Event> {
    std::iter::from_fn(|| rx.try_recv().ok()).collect()
}

#[tokio::test]
async fn each_session_sees_each_nudge_work_goes_to_one() {
    let lc = Lifecycle::default();
    let a = lc.open_session("copilot#1", false, None);
    let b = lc.open_session("copilot#2", false, None);
    let now = Utc::now();
    lc.offer(
        vec![
            action(1, Mode::Notify, now),
            action(2, Mode::Auto, now),
            action(3, Mode::Confirm, now),
        ],
        None,
        now,
    )
    .await;
    use ItemKind::*;
    assert_eq!(
        ids(&lc.take(a, "copilot#1", 10)),
        [(Auto, 2), (Nudge, 1), (ConfirmRequest, 3)]
    );
    assert_eq!(
        ids(&lc.take(b, "copilot#2", 10)),
        [(Nudge, 1), (ConfirmRequest, 3)],
        "auto was claimed by a; the nudge and the request reach b as well"
    );
    assert!(lc.take(a, "copilot#1", 10).is_empty(), "each item once");
    assert!(lc.take(b, "copilot#2", 10).is_empty());
    assert_eq!(lc.stats().claimed_work, 1);
    lc.settle(&[2], true, false, "sent");
    assert_eq!(lc.stats().claimed_work, 0);
    assert_eq!(
        lc.stats().counters.delivered,
        2,
        "the nudge once, the work once"
    );
}

#[tokio::test]
async fn a_new_session_gets_open_confirms_and_work_but_nudges_only_from_its_start() {
    let lc = Lifecycle::default();
    // A session is open: the nudges are not held for the first one to open (see below).
    lc.open_session("early#1", false, None);
    let now = Utc::now();
    lc.offer(
        vec![
            action(1, Mode::Notify, now),
            action(2, Mode::Confirm, now),
            action(3, Mode::Auto, now),
        ],
        None,
        now,
    )
    .await;
    let late = lc.open_session("late#1", false, None);
    use ItemKind::*;
    assert_eq!(
        ids(&lc.take(late, "late#1", 10)),
        [(Auto, 3), (ConfirmRequest, 2)]
    );
    lc.offer(vec![action(4, Mode::Notify, now)], None, now)
        .await;
    assert_eq!(ids(&lc.take(late, "late#1", 10)), [(Nudge, 4)]);
    // A named consumer resumes from its cursor: message seq 0 = everything retained.
    let named = lc.open_session("oncall", true, Some(0));
    assert_eq!(
        ids(&lc.take(named, "oncall", 10)),
        [(Nudge, 1), (ConfirmRequest, 2), (Nudge, 4)]
    );
}

#[tokio::test]
async fn a_released_claim_goes_to_the_next_session_first() {
    let lc = Lifecycle::default();
    let mut rx = lc.subscribe();
    let a = lc.open_session("a", false, None);
    let b = lc.open_session("b", false, None);
    let now = Utc::now();
    lc.offer(
        vec![action(1, Mode::Auto, now), action(2, Mode::Auto, now)],
        None,
        now,
    )
    .await;
    assert_eq!(ids(&lc.take(a, "a", 1)), [(ItemKind::Auto, 1)]);
    // a's result could not be sent: 1 goes back before 2.
    lc.settle(&[1], false, false, "the result could not be sent");
    assert_eq!(
        ids(&lc.take(b, "b", 10)),
        [(ItemKind::Auto, 1), (ItemKind::Auto, 2)]
    );
    // b ends with both claimed: both come back for whoever waits next.
    assert_eq!(lc.close_session(b, now).as_deref(), Some("b"));
    let c = lc.open_session("c", false, None);
    assert_eq!(ids(&lc.take(c, "c", 10)).len(), 2);
    let seen = events(&mut rx);
    let released = seen
        .iter()
        .filter(|e| matches!(e, Event::Released { .. }))
        .count();
    assert_eq!(released, 3, "{seen:?}");
    assert_eq!(lc.stats().counters.released, 3);
}

#[tokio::test]
async fn a_full_nudge_queue_drops_its_oldest_other_queues_refuse_the_newest() {
    let lc = Lifecycle::new(4, JournalWriter::memory());
    let now = Utc::now();
    let offered = lc
        .offer(
            (1..=10).map(|i| action(i, Mode::Notify, now)).collect(),
            None,
            now,
        )
        .await;
    assert_eq!(offered.dropped, [1, 2, 3, 4, 5, 6]);
    let s = lc.open_session("s", true, Some(0));
    assert_eq!(
        ids(&lc.take(s, "s", 10))
            .iter()
            .map(|(_, id)| *id)
            .collect::<Vec<_>>(),
        [7, 8, 9, 10],
        "the newest survive"
    );
    let offered = lc
        .offer(
            (11..=16).map(|i| action(i, Mode::Auto, now)).collect(),
            None,
            now,
        )
        .await;
    assert_eq!(offered.dropped, [15, 16]);
    let stats = lc.stats();
    assert_eq!(stats.counters.dropped[&Mode::Notify], 6);
    assert_eq!(stats.counters.dropped[&Mode::Auto], 2);
}

#[tokio::test]
async fn confirm_answers() {
    let lc = Lifecycle::default();
    let agent = lc.open_session("agent", false, None);
    let other = lc.open_session("other", false, None);
    let now = Utc::now();
    lc.offer(
        (1..=3).map(|i| action(i, Mode::Confirm, now)).collect(),
        None,
        now,
    )
    .await;
    let yes = lc
        .confirm(
            1,
            true,
            &crate::actions::by::by("agent"),
            Via::Tool,
            Some(agent),
            now,
        )
        .await
        .unwrap()
        .unwrap();
    assert_eq!((yes.kind, yes.prompt.as_str()), (ItemKind::Approved, "p1"));
    assert!(
        lc.take(other, "other", 10).iter().all(|i| i.action_id != 1),
        "approved through the tool is claimed by the answering session"
    );
    assert_eq!(lc.stats().claimed_work, 1);
    assert_eq!(
        lc.confirm(
            2,
            false,
            &crate::actions::by::by("cli"),
            Via::Cli,
            None,
            now
        )
        .await,
        Ok(None)
    );
    assert!(matches!(
        lc.confirm(1, true, &crate::actions::by::by("cli"), Via::Cli, None, now)
            .await,
        Err(ConfirmError::AlreadyAnswered { .. })
    ));
    assert_eq!(
        lc.confirm(
            99,
            true,
            &crate::actions::by::by("cli"),
            Via::Cli,
            None,
            now
        )
        .await,
        Err(ConfirmError::Unknown(99))
    );
    // CLI approval queues it as work for the next session.
    lc.confirm(3, true, &crate::actions::by::by("cli"), Via::Cli, None, now)
        .await
        .unwrap();
    let next = lc.open_session("next", false, None);
    assert_eq!(
        ids(&lc.take(next, "next", 10)).first(),
        Some(&(ItemKind::Approved, 3))
    );
}

#[tokio::test]
async fn two_answers_at_once_one_wins() {
    let lc = Lifecycle::default();
    let now = Utc::now();
    lc.offer(vec![action(1, Mode::Confirm, now)], None, now)
        .await;
    let answers = futures::future::join_all((0..8).map(|i| {
        let lc = lc.clone();
        async move {
            lc.confirm(
                1,
                i % 2 == 0,
                &crate::actions::by::by("cli"),
                Via::Cli,
                None,
                now,
            )
            .await
        }
    }))
    .await;
    assert_eq!(answers.iter().filter(|a| a.is_ok()).count(), 1);
}

#[tokio::test]
async fn expiry_by_timer_and_on_answer() {
    let lc = Lifecycle::default();
    let now = Utc::now();
    lc.offer(
        (1..=2).map(|i| action(i, Mode::Confirm, now)).collect(),
        None,
        now,
    )
    .await;
    let after = now + TimeDelta::minutes(31);
    assert!(matches!(
        lc.confirm(
            1,
            true,
            &crate::actions::by::by("cli"),
            Via::Cli,
            None,
            after
        )
        .await,
        Err(ConfirmError::Expired { .. })
    ));
    assert_eq!(lc.expire_due(after), None);
    assert!(lc.pending_confirms().is_empty(), "2 expired too");
    assert!(matches!(
        lc.confirm(
            2,
            false,
            &crate::actions::by::by("cli"),
            Via::Cli,
            None,
            after
        )
        .await,
        Err(ConfirmError::Expired { .. })
    ));
}

#[tokio::test]
async fn expiry_task_expires_without_a_read() {
    let lc = Lifecycle::default();
    let mut rx = lc.subscribe();
    let now = Utc::now();
    let (mut a, m) = action(1, Mode::Confirm, now);
    a.expires = Some(now + TimeDelta::milliseconds(100));
    let token = CancellationToken::new();
    let task = tokio::spawn({
        let lc = lc.clone();
        let token = token.clone();
        async move { lc.run_expiry(token).await }
    });
    lc.offer(vec![(a, m)], None, now).await;
    let expired = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            if let Ok(Event::Expired { id, .. }) = rx.recv().await {
                return id;
            }
        }
    })
    .await
    .expect("expired by the timer");
    assert_eq!(expired, 1);
    assert!(lc.pending_confirms().is_empty());
    token.cancel();
    task.await.unwrap();
}

#[tokio::test]
async fn wait_wakes_on_offer_and_a_cancelled_wait_takes_nothing() {
    let lc = Lifecycle::default();
    let s = lc.open_session("a", false, None);
    let never = CancellationToken::new();
    let mut rx = lc.subscribe();
    let waiter = tokio::spawn({
        let lc = lc.clone();
        let never = never.clone();
        async move { lc.wait(s, "a", 10, Duration::from_secs(5), &never).await }
    });
    tokio::task::yield_now().await;
    let now = Utc::now();
    let start = std::time::Instant::now();
    lc.offer(vec![action(1, Mode::Auto, now)], None, now).await;
    let items = waiter.await.unwrap();
    assert_eq!(ids(&items), [(ItemKind::Auto, 1)]);
    assert!(start.elapsed() < Duration::from_secs(1));
    let _ = events(&mut rx);

    // A wait cancelled before anything arrives returns empty and claims nothing.
    let cancel = CancellationToken::new();
    let waiter = tokio::spawn({
        let lc = lc.clone();
        let cancel = cancel.clone();
        async move { lc.wait(s, "a", 10, Duration::from_secs(30), &cancel).await }
    });
    tokio::task::yield_now().await;
    cancel.cancel();
    assert!(waiter.await.unwrap().is_empty());
    lc.offer(vec![action(2, Mode::Auto, now)], None, now).await;
    let other = lc.open_session("b", false, None);
    assert_eq!(ids(&lc.take(other, "b", 10)), [(ItemKind::Auto, 2)]);
}

/// A wait with nothing to take returns empty at its timeout, not before: on tokio's paused
/// clock, so the fifty seconds a host asks for take no real time.
#[tokio::test(start_paused = true)]
async fn a_wait_with_nothing_to_take_returns_empty_at_its_timeout() {
    let lc = Lifecycle::default();
    let s = lc.open_session("a", false, None);
    let never = CancellationToken::new();
    let started = tokio::time::Instant::now();
    let waiter = tokio::spawn({
        let lc = lc.clone();
        let never = never.clone();
        async move { lc.wait(s, "a", 10, Duration::from_secs(50), &never).await }
    });
    tokio::time::sleep(Duration::from_secs(49)).await;
    assert!(!waiter.is_finished(), "returned before its timeout");
    assert!(waiter.await.unwrap().is_empty());
    assert_eq!(started.elapsed(), Duration::from_secs(50));
}

#[tokio::test]
async fn contended_work_reaches_exactly_one_session_each() {
    let lc = Lifecycle::new(2000, JournalWriter::memory());
    let sessions: Vec<SessionId> = (0..8)
        .map(|i| lc.open_session(&format!("s{i}"), false, None))
        .collect();
    let stop = CancellationToken::new();
    let takers: Vec<_> = sessions
        .iter()
        .map(|&s| {
            let lc = lc.clone();
            let stop = stop.clone();
            tokio::spawn(async move {
                let name = format!("s{}", s - 1);
                let mut got = Vec::new();
                loop {
                    let items = lc.wait(s, &name, 7, Duration::from_secs(5), &stop).await;
                    if items.is_empty() {
                        return got;
                    }
                    let claims = claims_of(&items);
                    lc.settle(&claims, true, false, "sent");
                    got.extend(claims);
                }
            })
        })
        .collect();
    let now = Utc::now();
    for chunk in (1..=1000u64).collect::<Vec<_>>().chunks(50) {
        lc.offer(
            chunk.iter().map(|&i| action(i, Mode::Auto, now)).collect(),
            None,
            now,
        )
        .await;
        tokio::task::yield_now().await;
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while lc.stats().queued_work > 0 || lc.stats().claimed_work > 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "work left after 30 s: {:?}",
            lc.stats()
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    stop.cancel();
    let mut all: Vec<ActionId> = Vec::new();
    for t in takers {
        all.extend(t.await.unwrap());
    }
    all.sort_unstable();
    assert_eq!(all, (1..=1000).collect::<Vec<_>>(), "each exactly once");
}

#[tokio::test]
async fn journal_restores_pending_undelivered_and_claimed() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("actions.jsonl");
    let now = Utc::now();
    let expires;
    {
        let (log, _) = ActionLog::open(&path).unwrap();
        let lc = Lifecycle::new(64, JournalWriter::start(log, FsyncPolicy::Always).unwrap());
        let s = lc.open_session("a", false, None);
        let (c, m) = action(1, Mode::Confirm, now);
        expires = c.expires;
        lc.offer(
            vec![
                (c, m),
                action(2, Mode::Auto, now),
                action(3, Mode::Auto, now),
                action(4, Mode::Notify, now),
                action(5, Mode::Confirm, now),
                action(6, Mode::Auto, now),
            ],
            Some(6),
            now,
        )
        .await;
        assert_eq!(ids(&lc.take(s, "a", 1)), [(ItemKind::Auto, 2)]);
        lc.settle(&[2], true, false, "sent");
        // 3 is claimed and never settled: the process dies holding it.
        assert_eq!(ids(&lc.take(s, "a", 1)), [(ItemKind::Auto, 3)]);
        lc.confirm(
            5,
            false,
            &crate::actions::by::by("cli"),
            Via::Cli,
            None,
            now,
        )
        .await
        .unwrap();
        lc.flush().await;
    }
    let (_, replay) = ActionLog::open(&path).unwrap();
    assert_eq!(replay.evaluated, Some(6));
    assert_eq!(replay.next_id, 7);
    let lc = Lifecycle::default();
    lc.restore(replay.live.into_values());
    let s = lc.open_session("b", true, Some(0));
    let items = lc.take(s, "b", 10);
    use ItemKind::*;
    assert_eq!(
        ids(&items),
        [(Auto, 3), (Auto, 6), (ConfirmRequest, 1), (Nudge, 4)]
    );
    assert_eq!(items[2].expires_at, expires, "original expiry kept");
    assert!(
        items[0].redelivered,
        "3 was claimed at the stop: its result may have left"
    );
    assert!(!items[1].redelivered, "6 was never handed out");
}

#[tokio::test]
async fn a_resolved_confirm_is_closed_told_journalled_and_stays_closed() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("actions.jsonl");
    let now = Utc::now();
    {
        let (log, _) = ActionLog::open(&path).unwrap();
        let lc = Lifecycle::new(64, JournalWriter::start(log, FsyncPolicy::Always).unwrap());
        let mut rx = lc.subscribe();
        let mut mark = lc.evaluated();
        lc.offer(
            vec![action(1, Mode::Confirm, now), action(2, Mode::Confirm, now)],
            Some(2),
            now,
        )
        .await;
        assert_eq!(
            *mark.borrow_and_update(),
            2,
            "the mark follows visible confirms"
        );
        events(&mut rx);
        assert_eq!(
            lc.resolve(&[1, 99], 7, now),
            vec![1],
            "unknown ids are skipped"
        );
        assert_eq!(
            events(&mut rx),
            [Event::Resolved {
                id: 1,
                rule: "r".into(),
                by_seq: 7
            }]
        );
        assert_eq!(
            lc.confirm(1, true, &crate::actions::by::by("cli"), Via::Cli, None, now)
                .await,
            Err(ConfirmError::AlreadyAnswered {
                id: 1,
                state: "resolved".into()
            })
        );
        assert!(lc.resolve(&[1], 8, now).is_empty(), "closed once");
        assert_eq!(lc.stats().counters.resolved, 1);
        assert_eq!(lc.pending_summary().len(), 1);
        lc.flush().await;
    }
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(
        text.contains(r#""state":"resolved""#) && text.contains("resolved by message 7"),
        "{text}"
    );
    let (_, replay) = ActionLog::open(&path).unwrap();
    assert_eq!(
        replay.live.keys().copied().collect::<Vec<_>>(),
        [2],
        "a resolved confirm is not restored"
    );
}

#[tokio::test]
async fn exec_work_goes_to_the_runner_never_to_a_wait_and_a_crash_mid_run_is_interrupted() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("actions.jsonl");
    let now = Utc::now();
    let exec_action = |id| {
        let (mut a, m) = action(id, Mode::Auto, now);
        a.delivery = Delivery::Exec;
        (a, m)
    };
    {
        let (log, _) = ActionLog::open(&path).unwrap();
        let lc = Lifecycle::new(8, JournalWriter::start(log, FsyncPolicy::Always).unwrap());
        let mut rx = lc.subscribe();
        let s = lc.open_session("copilot#1", false, None);
        lc.offer(
            vec![exec_action(1), exec_action(2), action(3, Mode::Auto, now)],
            Some(3),
            now,
        )
        .await;
        assert_eq!(
            ids(&lc.take(s, "copilot#1", 10)),
            [(ItemKind::Auto, 3)],
            "exec work is not offered to a session"
        );
        let stats = lc.stats();
        assert_eq!((stats.exec_queued, stats.queued_work), (2, 0));
        let mut published = events(&mut rx);
        published.retain(|e| matches!(e, Event::Queued { .. } | Event::ExecQueued { .. }));
        assert!(
            matches!(
                &published[..],
                [Event::ExecQueued { .. }, Event::ExecQueued { .. }, Event::Queued { item }]
                    if item.action_id == 3
            ),
            "exec work is never published as `queued` (push would offer it): {published:?}"
        );
        let token = CancellationToken::new();
        let first = lc.next_exec(&token, |_| {}).await.unwrap();
        assert_eq!(first.action_id, 1);
        let second = lc.next_exec(&token, |_| {}).await.unwrap();
        lc.finish_exec(
            second.action_id,
            ActionState::Succeeded,
            None,
            ExecReport::default(),
        );
        assert_eq!(lc.stats().counters.succeeded, 1);
        assert_eq!(lc.stats().exec_running, 1);
        token.cancel();
        assert!(lc.next_exec(&token, |_| {}).await.is_none());
        lc.flush().await;
        // Action 1 is still `running` on disk: the process "dies" here.
    }
    let (log, replay) = ActionLog::open(&path).unwrap();
    assert_eq!(replay.live[&1].state, ActionState::Running);
    assert!(!replay.live.contains_key(&2), "a finished run is not live");
    let lc = Lifecycle::new(8, JournalWriter::start(log, FsyncPolicy::Always).unwrap());
    let mut rx = lc.subscribe();
    lc.restore(replay.live.into_values());
    lc.flush().await;
    assert!(matches!(
        &events(&mut rx)[..],
        [Event::Finished { id: 1, state: ActionState::Failed, reason: Some(r), .. }] if r == "interrupted"
    ));
    assert_eq!(lc.stats().counters.failed, 1);
    let (_, again) = ActionLog::open(&path).unwrap();
    assert_eq!(
        again.live.keys().copied().collect::<Vec<_>>(),
        vec![3],
        "the failed run is recorded once; only the claimed wait work stays live"
    );
}

#[tokio::test]
async fn while_the_journal_fails_confirms_stay_hidden_and_the_mark_waits_for_the_disk() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("actions.jsonl");
    let now = Utc::now();
    let (log, _) = ActionLog::open(&path).unwrap();
    let lc = Lifecycle::new(64, JournalWriter::start(log, FsyncPolicy::Always).unwrap());
    let mut mark = lc.evaluated();
    let s = lc.open_session("a", false, None);
    lc.offer(vec![action(1, Mode::Notify, now)], Some(1), now)
        .await;
    assert!(lc.flush().await);
    assert_eq!(*mark.borrow_and_update(), 1, "the mark follows the write");
    let Some(guard) = crate::actions::fault::Immutable::set(&path) else {
        return;
    };

    // Nudges are visible at once; the mark waits for their record.
    lc.offer(vec![action(2, Mode::Notify, now)], Some(2), now)
        .await;
    assert_eq!(
        ids(&lc.take(s, "a", 10)),
        [(ItemKind::Nudge, 1), (ItemKind::Nudge, 2)]
    );
    assert!(!lc.flush().await, "not on disk");
    assert!(lc.stats().actions_journal.starts_with("failing: "));
    assert_eq!(*mark.borrow_and_update(), 1);

    // A confirm request is not shown, and the offer (the dispatcher) waits for the disk.
    let offer = tokio::spawn({
        let lc = lc.clone();
        async move {
            lc.offer(vec![action(3, Mode::Confirm, now)], Some(3), now)
                .await
        }
    });
    // The offer decides and hands its records over, then the writer tries them and fails.
    tokio::task::yield_now().await;
    assert!(!lc.flush().await);
    tokio::task::yield_now().await;
    assert!(
        !offer.is_finished(),
        "the offer returned before its records were written"
    );
    assert!(lc.pending_confirms().is_empty());
    assert_eq!(*mark.borrow_and_update(), 1);

    drop(guard);
    let offered = tokio::time::timeout(Duration::from_secs(10), offer)
        .await
        .expect("written once the file takes writes again")
        .unwrap();
    assert_eq!(ids(&offered.queued), [(ItemKind::ConfirmRequest, 3)]);
    assert_eq!(ids(&lc.take(s, "a", 10)), [(ItemKind::ConfirmRequest, 3)]);
    assert_eq!(*mark.borrow_and_update(), 3);
    assert!(lc.flush().await);
    assert_eq!(lc.stats().actions_journal, "ok");
    let (_, replay) = ActionLog::open(&path).unwrap();
    assert_eq!(replay.evaluated, Some(3));
    assert_eq!(
        replay.live.keys().copied().collect::<Vec<_>>(),
        [3],
        "the nudges' deliveries were held and written too"
    );
}

#[tokio::test]
async fn nudges_that_fired_while_no_session_was_open_go_to_the_first_session_to_open() {
    let lc = Lifecycle::default();
    let now = Utc::now();
    lc.offer(
        vec![action(1, Mode::Notify, now), action(2, Mode::Notify, now)],
        None,
        now,
    )
    .await;
    let stats = lc.stats();
    assert_eq!(
        (
            stats.nudges_undelivered,
            stats.nudges_held,
            stats.nudges_waiting
        ),
        (2, 2, 0),
        "held for the next session"
    );

    let first = lc.open_session_numbered("copilot");
    let stats = lc.stats();
    assert_eq!(
        (stats.nudges_held, stats.nudges_waiting),
        (0, 2),
        "handed to the first session, waiting for its wait"
    );
    let second = lc.open_session_numbered("copilot");
    assert!(
        lc.take(second, &format!("copilot#{second}"), 10).is_empty(),
        "a session that opens while another is open starts from its start"
    );
    let never = CancellationToken::new();
    let items = lc
        .wait(
            first,
            &format!("copilot#{first}"),
            10,
            Duration::from_secs(5),
            &never,
        )
        .await;
    assert_eq!(
        ids(&items),
        [(ItemKind::Nudge, 1), (ItemKind::Nudge, 2)],
        "the first wait returns them"
    );
    let stats = lc.stats();
    assert_eq!(
        (
            stats.nudges_undelivered,
            stats.nudges_held,
            stats.nudges_waiting
        ),
        (0, 0, 0)
    );
    assert_eq!(stats.counters.delivered, 2);
}

#[tokio::test]
async fn the_hold_keeps_the_newest_unseen_nudges_no_older_than_its_age_until_a_session_takes_them()
{
    let settings = ActionSettings {
        held_nudges: 2,
        held_nudge_max_age: Duration::from_secs(3600),
        ..ActionSettings::default()
    };
    let lc = Lifecycle::with_settings(&settings, JournalWriter::memory());
    let now = Utc::now();
    let (mut stale, m) = action(1, Mode::Notify, now);
    stale.created = now - TimeDelta::hours(2);
    lc.offer(
        vec![
            (stale, m),
            action(2, Mode::Notify, now),
            action(3, Mode::Notify, now),
            action(4, Mode::Notify, now),
        ],
        None,
        now,
    )
    .await;
    let stats = lc.stats();
    assert_eq!(
        (stats.nudges_undelivered, stats.nudges_held),
        (4, 2),
        "the newest 2 are held; the rest are left behind"
    );
    // A first session that ends before it waits takes nothing: the next first one gets them.
    let gone = lc.open_session_numbered("a");
    lc.close_session(gone, now);
    let s = lc.open_session_numbered("b");
    assert_eq!(
        ids(&lc.take(s, &format!("b#{s}"), 10)),
        [(ItemKind::Nudge, 3), (ItemKind::Nudge, 4)]
    );
    lc.close_session(s, now);
    assert_eq!(lc.stats().nudges_held, 0, "the stale ones are not held");
    let s = lc.open_session_numbered("c");
    assert!(lc.take(s, &format!("c#{s}"), 10).is_empty());

    let none = Lifecycle::with_settings(
        &ActionSettings {
            held_nudges: 0,
            ..ActionSettings::default()
        },
        JournalWriter::memory(),
    );
    none.offer(vec![action(1, Mode::Notify, now)], None, now)
        .await;
    assert_eq!(none.stats().nudges_held, 0);
    let s = none.open_session_numbered("d");
    assert!(
        none.take(s, &format!("d#{s}"), 10).is_empty(),
        "`heldNudges: 0` holds none"
    );
}

#[tokio::test]
async fn nudges_nobody_saw_before_a_restart_are_held_for_the_first_session_after_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("actions.jsonl");
    let now = Utc::now();
    {
        let (log, _) = ActionLog::open(&path).unwrap();
        let lc = Lifecycle::new(64, JournalWriter::start(log, FsyncPolicy::Always).unwrap());
        lc.offer(vec![action(1, Mode::Notify, now)], Some(1), now)
            .await;
        assert!(lc.flush().await);
    }
    let (_, replay) = ActionLog::open(&path).unwrap();
    let lc = Lifecycle::default();
    lc.restore(replay.live.into_values());
    assert_eq!(lc.stats().nudges_held, 1);
    let s = lc.open_session_numbered("morning");
    assert_eq!(
        ids(&lc.take(s, &format!("morning#{s}"), 10)),
        [(ItemKind::Nudge, 1)]
    );
}

#[tokio::test]
async fn approve_via_refuses_a_path_the_rule_does_not_list_and_records_the_path() {
    let lc = Lifecycle::default();
    let agent = lc.open_session("agent", false, None);
    let now = Utc::now();
    let mut rx = lc.subscribe();
    let (mut a, msg) = action(1, Mode::Confirm, now);
    a.approve_via = vec![Via::Cli, Via::Web];
    lc.offer(vec![(a, msg)], None, now).await;
    let refused = lc
        .confirm(
            1,
            true,
            &crate::actions::by::by("agent"),
            Via::Tool,
            Some(agent),
            now,
        )
        .await;
    assert_eq!(
        refused.as_ref().unwrap_err().to_string(),
        "confirm 1 cannot be answered via `tool`: rule `r` takes answers only via cli, web; ask \
         a person to answer it there"
    );
    assert_eq!(
        lc.pending_confirms().len(),
        1,
        "a refused answer leaves it pending"
    );
    lc.confirm(1, true, &crate::actions::by::by("web"), Via::Web, None, now)
        .await
        .unwrap();
    let answered = events(&mut rx).into_iter().find_map(|e| match e {
        Event::Answered { via, by, .. } => Some((via, by)),
        _ => None,
    });
    assert_eq!(
        answered,
        Some((Some(Via::Web), crate::actions::by::by("web")))
    );
    let closed = lc.closed_confirm(1).unwrap();
    assert_eq!(
        (
            closed.state,
            closed.via,
            closed.by.as_ref().map(|b| b.id.as_str())
        ),
        (ActionState::Approved, Some(Via::Web), Some("web"))
    );
    assert_eq!(
        lc.confirm(
            1,
            false,
            &crate::actions::by::by("cli"),
            Via::Cli,
            None,
            now
        )
        .await
        .unwrap_err()
        .to_string(),
        "confirm 1 was already answered: approved via web by web"
    );
    assert_eq!(lc.closed_confirms(10), [closed]);
}

#[tokio::test]
async fn one_session_at_a_time_asks_a_confirm_in_a_form_and_a_late_form_answer_is_refused() {
    let lc = Lifecycle::default();
    let a = lc.open_session("claude#1", false, None);
    let b = lc.open_session("claude#2", false, None);
    let now = Utc::now();
    let (mut cli_only, msg) = action(2, Mode::Confirm, now);
    cli_only.approve_via = vec![Via::Cli];
    lc.offer(
        vec![action(1, Mode::Confirm, now), (cli_only, msg)],
        None,
        now,
    )
    .await;
    assert!(lc.elicit(1, a, true), "the first session to ask gets it");
    assert!(!lc.elicit(1, b, true), "while a asks, b does not");
    assert!(lc.elicit(1, a, true), "asking again is idempotent");
    assert!(
        !lc.elicit(2, a, true),
        "approveVia without elicitation: no form"
    );
    assert!(!lc.elicit(9, a, true), "no such confirm");

    // a's form ended (declined): b may ask.
    assert!(lc.elicit(1, a, false));
    assert!(lc.elicit(1, b, true));
    // b's session ends with its form open: a may ask again.
    lc.close_session(b, now);
    assert!(lc.elicit(1, a, true));

    // Answered elsewhere first: no one asks any more, and the form's late answer is refused.
    lc.confirm(1, true, &crate::actions::by::by("cli"), Via::Cli, None, now)
        .await
        .unwrap();
    assert!(!lc.elicit(1, a, true));
    assert_eq!(
        lc.confirm(
            1,
            true,
            &crate::actions::by::by("claude#1"),
            Via::Elicitation,
            None,
            now
        )
        .await
        .unwrap_err()
        .to_string(),
        "confirm 1 was already answered: approved via cli by cli"
    );
}

#[tokio::test]
async fn an_answer_the_journal_cannot_take_is_refused_and_the_confirm_stays_pending() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("actions.jsonl");
    let now = Utc::now();
    {
        let (log, _) = ActionLog::open(&path).unwrap();
        let lc = Lifecycle::new(64, JournalWriter::start(log, FsyncPolicy::Always).unwrap());
        let mut events = lc.subscribe();
        lc.offer(vec![action(1, Mode::Confirm, now)], Some(1), now)
            .await;
        let Some(guard) = crate::actions::fault::Immutable::set(&path) else {
            return;
        };
        let refused = lc
            .confirm(
                1,
                false,
                &crate::actions::by::by("cli"),
                Via::Cli,
                None,
                now,
            )
            .await;
        assert!(
            matches!(&refused, Err(ConfirmError::NotRecorded { id: 1, cause }) if !cause.is_empty()),
            "{refused:?}"
        );
        let shown = refused.unwrap_err().to_string();
        assert!(
            shown.starts_with("confirm 1: not recorded: the actions journal cannot be written (")
                && shown.ends_with("); try again"),
            "{shown}"
        );
        assert_eq!(ids(&lc.pending_confirms()), [(ItemKind::ConfirmRequest, 1)]);
        assert!(lc.closed_confirm(1).is_none());
        while let Ok(e) = events.try_recv() {
            assert!(!matches!(e, Event::Answered { .. }), "{e:?}");
        }
        drop(guard);
        // The journal takes writes again: the same answer is kept.
        let approved = lc
            .confirm(1, true, &crate::actions::by::by("cli"), Via::Cli, None, now)
            .await;
        assert!(matches!(approved, Ok(Some(_))), "{approved:?}");
    }
    let (_, replay) = ActionLog::open(&path).unwrap();
    let live: Vec<_> = replay
        .live
        .values()
        .map(|l| (l.action.id, l.state))
        .collect();
    assert_eq!(
        live,
        [(1, ActionState::Approved)],
        "the refused `no` never landed"
    );
}

#[tokio::test]
async fn a_second_answer_while_the_first_is_saved_hears_how_it_went() {
    let lc = Lifecycle::default();
    let now = Utc::now();
    lc.offer(vec![action(1, Mode::Confirm, now)], None, now)
        .await;
    lc.lock().confirms.reserve(1);
    // Nothing else closes it meanwhile.
    assert!(lc.expire_due(now + TimeDelta::hours(1)).is_none());
    assert_eq!(lc.pending_confirms().len(), 1);
    let second = tokio::spawn({
        let lc = lc.clone();
        async move {
            lc.confirm(1, true, &crate::actions::by::by("web"), Via::Web, None, now)
                .await
        }
    });
    tokio::task::yield_now().await;
    assert!(!second.is_finished(), "it waits for the first");
    // The first was refused: the second is kept.
    lc.lock().confirms.unreserve(1);
    lc.inner.answered.notify_waiters();
    assert!(matches!(second.await.unwrap(), Ok(Some(_))));
}

#[tokio::test]
async fn four_waiting_sessions_share_forty_items() {
    let lc = Lifecycle::default();
    let now = Utc::now();
    let stop = CancellationToken::new();
    let mut waits = Vec::new();
    for n in 0..4 {
        let lc = lc.clone();
        let stop = stop.clone();
        let consumer = format!("w#{n}");
        let session = lc.open_session(&consumer, false, None);
        waits.push(tokio::spawn(async move {
            let mut got = 0;
            while !stop.is_cancelled() {
                let items = lc
                    .wait(session, &consumer, 10, Duration::from_secs(5), &stop)
                    .await;
                lc.settle(&claims_of(&items), true, false, "sent");
                got += items.len();
            }
            got
        }));
    }
    // Every session is waiting before the first item comes.
    while lc.lock().waiters.len() < 4 {
        tokio::task::yield_now().await;
    }
    for id in 1..=40 {
        lc.offer(vec![action(id, Mode::Auto, now)], None, now).await;
        tokio::task::yield_now().await;
    }
    while lc.stats().counters.delivered < 40 {
        tokio::task::yield_now().await;
    }
    stop.cancel();
    let mut got = Vec::new();
    for w in waits {
        got.push(w.await.unwrap());
    }
    assert_eq!(got.iter().sum::<usize>(), 40);
    assert!(got.iter().all(|n| (5..=15).contains(n)), "{got:?}");
}

#[tokio::test]
async fn a_session_that_ends_holding_work_gives_it_back_marked() {
    let lc = Lifecycle::default();
    let now = Utc::now();
    lc.offer(
        vec![action(1, Mode::Auto, now), action(2, Mode::Auto, now)],
        None,
        now,
    )
    .await;
    let a = lc.open_session("a", false, None);
    assert_eq!(lc.take(a, "a", 2).len(), 2);
    // 1's result could not be sent: back as it was. 2's left, and the session ended.
    lc.settle(&[1], false, false, "not sent");
    lc.close_session(a, now);
    let b = lc.open_session("b", false, None);
    let mut again: Vec<_> = lc
        .take(b, "b", 10)
        .iter()
        .map(|i| (i.action_id, i.redelivered))
        .collect();
    again.sort_unstable();
    assert_eq!(again, [(1, false), (2, true)]);
}
