//! The approval page in real headless Chromium: Debian's `chromium` and `chromium-driver`,
//! driven by `tests/python/ui_browser.py` with `python3-selenium`, all installed with apt-get
//! when missing (as the Alertmanager test installs Alertmanager). Skipped, with a notice, only
//! where they are missing and there is no apt-get, and never under `CI=true`.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use rmcp::ServiceExt;
use serde_json::json;

use super::approvals::ui_link_with;
use super::util::*;

const CHROMIUM: &str = "/usr/bin/chromium";
const DRIVER: &str = "/usr/bin/chromedriver";
const PYTHON: &str = "/usr/bin/python3";

fn has_selenium() -> bool {
    Command::new(PYTHON)
        .args(["-c", "import selenium"])
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn ready() -> bool {
    Path::new(CHROMIUM).is_file() && Path::new(DRIVER).is_file() && has_selenium()
}

/// Whether the browser, its driver and selenium are there, installed with apt-get when not;
/// false (skip) only where there is no apt-get outside CI.
fn browser() -> bool {
    if ready() {
        return true;
    }
    let ci = super::util::ci();
    let apt = Path::new("/usr/bin/apt-get").is_file();
    if !apt {
        assert!(
            !ci,
            "chromium, chromium-driver and python3-selenium are missing and there is no apt-get; \
             CI=true: the browser test cannot be skipped in CI"
        );
        let _ = writeln!(
            std::io::stderr(),
            "\n*** SKIPPED: the approval page's browser test needs chromium, chromium-driver and \
             python3-selenium, which are not installed, and there is no apt-get ***\n"
        );
        return false;
    }
    // Another test process may be installing the same packages.
    let tmp = Path::new(env!("CARGO_TARGET_TMPDIR"));
    std::fs::create_dir_all(tmp).unwrap();
    let lock = std::fs::File::create(tmp.join("apt-chromium.lock")).unwrap();
    fs4::fs_std::FileExt::lock_exclusive(&lock).unwrap();
    if ready() {
        return true;
    }
    apt_install(&["chromium", "chromium-driver", "python3-selenium"]);
    assert!(
        ready(),
        "chromium, chromedriver and selenium after apt-get install"
    );
    true
}

#[tokio::test(flavor = "multi_thread")]
async fn the_page_in_chromium_approves_a_confirm_that_a_waiting_agent_then_runs() {
    if !tokio::task::spawn_blocking(browser).await.unwrap() {
        return;
    }
    let mut sb = Switchboard::new();
    sb.write(
        "triggers.json",
        r#"{"rules": [{"name": "ask", "channel": "alerts/*", "mode": "confirm",
            "prompt": "Investigate: {{content}}", "tools": ["view"], "confirmTimeout": "30m",
            "approveVia": ["cli", "web"]}]}"#,
    );
    sb.spawn();

    // An agent waiting for work the whole time: it is shown the confirm requests, and gets
    // the approved prompt once the page approves it.
    let client = rmcp::model::ClientConfig::default()
        .serve(http_transport(&sb))
        .await
        .expect("client connects");
    let agent = tokio::spawn(async move {
        let deadline = Instant::now() + Duration::from_secs(120);
        while Instant::now() < deadline {
            let v = tool(&client, "wait_for_inbound_message", json!({"timeout_s": 5})).await;
            let items = v["items"].as_array().cloned().unwrap_or_default();
            if let Some(approved) = items.iter().find(|i| i["kind"] == "approved") {
                let approved = approved.clone();
                client.cancel().await.ok();
                return Some(approved);
            }
        }
        None
    });

    let (_, link) = ui_link_with(&sb, &["--label", "phone"]);
    let shot: PathBuf = Path::new(env!("CARGO_TARGET_TMPDIR")).join("ui.png");
    let _ = std::fs::remove_file(&shot);
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python/ui_browser.py");
    let ingest = sb.ingest.clone().unwrap();
    let token = sb.token();
    let run = tokio::task::spawn_blocking(move || {
        run_limited(
            Command::new(PYTHON)
                .arg(script)
                .args([ingest.as_str(), link.as_str()])
                .arg(&shot)
                .env("SWITCHBOARD_TOKEN", token),
            Duration::from_secs(180),
        )
    })
    .await
    .unwrap();
    assert!(
        run.status.is_some_and(|s| s.success()),
        "the browser test failed ({}):\n{}\n{}",
        run.describe(),
        run.stdout,
        run.stderr
    );
    let _ = writeln!(std::io::stderr(), "{}\n{}", run.describe(), run.stdout);
    for check in [
        "the one-time link opens the page",
        "appears without a reload",
        "screenshot at phone width",
        "Approve answers it, via web",
        "a cross-site POST",
        "every card appears",
        "the link works once",
        "without the cookie",
    ] {
        assert!(run.stdout.contains(check), "{check}: {}", run.stdout);
    }

    let approved = agent
        .await
        .unwrap()
        .expect("the approved prompt reached the wait");
    assert_eq!(
        approved["prompt"],
        "Investigate: [FIRING] DiskFull: /var is at 97% on db-1"
    );
    assert_eq!(approved["tools"], json!(["view"]));
    let pending = control(sb.home.path(), json!({"op": "pending"}));
    assert_eq!(
        pending["result"][0]["content"], "[FIRING] DiskFull: /home is at 99% on db-2",
        "the cross-site posts answered nothing: {pending}"
    );
    let records = action_records(sb.home.path());
    assert!(
        records
            .iter()
            .any(|r| r["state"] == "approved" && r["via"] == "web"),
        "{records:?}"
    );
}
