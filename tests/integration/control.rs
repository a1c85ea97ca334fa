//! The control socket's protocol through the real binary: a client of another protocol is
//! refused at its hello with a sentence that says what to do, a call the daemon does not know
//! is answered with an error (never silence), and front ends cannot take the operator's room.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::util::*;

/// Connects to the control socket of `sb` with a read timeout.
fn connect(sb: &Switchboard) -> (UnixStream, BufReader<UnixStream>) {
    let stream = UnixStream::connect(sb.home.path().join("control.sock")).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let reader = BufReader::new(stream.try_clone().unwrap());
    (stream, reader)
}

fn read_json(reader: &mut BufReader<UnixStream>) -> Value {
    let mut line = String::new();
    reader.read_line(&mut line).expect("a line from the daemon");
    serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON: {line:?}: {e}"))
}

fn hello(protocol: u32, role: &str) -> String {
    json!({"hello": {"protocol": protocol, "version": "9.9.9", "pid": 1, "role": role}}).to_string()
}

#[test]
fn a_front_end_of_another_protocol_is_refused_at_its_hello_with_what_to_do() {
    let mut sb = Switchboard::start();
    // Protocol 2 is the front end of the build before refusals carried their kind.
    for (protocol, role) in [(2, "front_end"), (1, "operator"), (999, "front_end")] {
        let (mut stream, mut reader) = connect(&sb);
        writeln!(stream, "{}", hello(protocol, role)).unwrap();
        let answer = read_json(&mut reader);
        let message = answer["refused"]["message"]
            .as_str()
            .unwrap_or_else(|| panic!("refused, with a message: {answer}"));
        assert!(
            message.contains("speaks control protocol 3")
                && message.contains(&format!("(switchboard 9.9.9) speaks {protocol}"))
                && message.contains(&format!(
                    "run `switchboard --home {} stop`, then retry",
                    sb.home.path().display()
                )),
            "{message}"
        );
        let mut rest = String::new();
        assert_eq!(reader.read_line(&mut rest).unwrap(), 0, "then it hangs up");
    }

    // A front end of the first protocol (no hello: `{"cmd": "attach"}`) reads its own shape.
    let (mut stream, mut reader) = connect(&sb);
    writeln!(
        stream,
        r#"{{"cmd": "attach", "version": "0.0.9", "pid": 1}}"#
    )
    .unwrap();
    let answer = read_json(&mut reader);
    assert_eq!(answer["ok"], false, "{answer}");
    let error = answer["error"].as_str().unwrap();
    assert!(
        error.contains("(switchboard 0.0.9) speaks 1")
            && error.contains(&format!(
                "`switchboard --home {} stop`",
                sb.home.path().display()
            )),
        "{error}"
    );
    sb.terminate();
}

#[test]
fn a_call_the_daemon_does_not_know_gets_an_error_reply_within_a_second() {
    let mut sb = Switchboard::start();
    let (mut stream, mut reader) = connect(&sb);
    writeln!(stream, "{}", hello(3, "operator")).unwrap();
    let welcome = read_json(&mut reader);
    assert_eq!(welcome["welcome"]["protocol"], 3, "{welcome}");

    let asked = Instant::now();
    writeln!(
        stream,
        r#"{{"id": 7, "call": {{"op": "teleport", "to": "mars"}}}}"#
    )
    .unwrap();
    let answer = read_json(&mut reader);
    assert!(
        asked.elapsed() < Duration::from_secs(1),
        "{:?}",
        asked.elapsed()
    );
    assert_eq!(answer["reply"]["id"], 7, "{answer}");
    let error = &answer["reply"]["error"];
    assert_eq!(error["type"], "unknown_call", "{answer}");
    assert_eq!(error["call"], "teleport");
    assert_eq!(error["protocol"], 3);

    // A known call with arguments of the wrong shape is answered too, naming it.
    writeln!(
        stream,
        r#"{{"id": 8, "call": {{"op": "pause", "paused": "yes"}}}}"#
    )
    .unwrap();
    let answer = read_json(&mut reader);
    assert_eq!(answer["reply"]["id"], 8, "{answer}");
    assert!(
        answer["reply"]["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("`pause`")),
        "{answer}"
    );

    // The daemon's own calls are not served on the socket.
    writeln!(stream, r#"{{"id": 9, "call": {{"op": "exec_next"}}}}"#).unwrap();
    let answer = read_json(&mut reader);
    assert!(
        answer["reply"]["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("not served on the control socket")),
        "{answer}"
    );
    assert_eq!(answer["reply"]["error"]["type"], "refused", "{answer}");
    assert_eq!(answer["reply"]["error"]["code"], "not_allowed", "{answer}");

    // Issue 46: a line that is not JSON, or names no call, is answered too (today: silence).
    // Without an id of its own the reply's is 0 (clients number their calls from 1).
    for (line, id, says) in [
        ("this is not json", 0, "a line that is not a call"),
        (
            r#"{"call": {"op": "stats"}}"#,
            0,
            "a line that is not a call",
        ),
        (r#"{"id": 11}"#, 11, "neither a `call` nor"),
        (r#"{"id": 12, "call": null}"#, 12, "neither a `call` nor"),
    ] {
        writeln!(stream, "{line}").unwrap();
        let answer = read_json(&mut reader);
        assert_eq!(answer["reply"]["id"], id, "{line}: {answer}");
        assert_eq!(
            answer["reply"]["error"]["type"], "protocol",
            "{line}: {answer}"
        );
        assert!(
            answer["reply"]["error"]["message"]
                .as_str()
                .is_some_and(|m| m.contains(says)),
            "{line}: {answer}"
        );
    }

    // And the connection still works.
    writeln!(stream, r#"{{"id": 10, "call": {{"op": "stats"}}}}"#).unwrap();
    let answer = read_json(&mut reader);
    assert!(answer["reply"]["ok"]["inbox"].is_object(), "{answer}");
    sb.terminate();
}

#[test]
fn attached_front_ends_leave_the_operator_room_and_a_refused_one_says_why() {
    let sb = Switchboard::start();
    // Every front-end place taken (raw connections that said hello as front ends).
    let taken: Vec<(UnixStream, BufReader<UnixStream>)> = (0..256)
        .map(|_| {
            let (mut stream, mut reader) = connect(&sb);
            writeln!(stream, "{}", hello(3, "front_end")).unwrap();
            let welcome = read_json(&mut reader);
            assert!(welcome.get("welcome").is_some(), "{welcome}");
            (stream, reader)
        })
        .collect();

    // One more front end: `serve` says why on stderr and exits non-zero.
    let mut serve = Command::new(bin())
        .arg("--home")
        .arg(sb.home.path())
        .arg("serve")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let status = wait_exit(&mut serve, Duration::from_secs(20));
    let mut err = String::new();
    std::io::Read::read_to_string(&mut serve.stderr.take().unwrap(), &mut err).unwrap();
    assert!(!status.success(), "{status:?}: {err}");
    assert!(
        err.contains("serves 256 MCP front ends already"),
        "says why: {err}"
    );

    // The operator still has room: stats, then stop.
    let out = sb.cli(&["stats"]);
    assert!(out.status.success(), "{}", stderr(&out));
    drop(taken);
    let out = sb.cli(&["stop"]);
    assert!(out.status.success(), "{}", stderr(&out));
}
