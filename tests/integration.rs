//! Integration tests: each module drives the real `switchboard` binary (or the
//! library through real clients) the way a user or an MCP host would.

mod integration {
    pub mod util;

    pub mod approvals;
    mod ui_browser;

    mod answers;
    mod cli;
    mod control;
    mod daemon;
    mod docs;
    mod events;
    mod exec;
    mod faults;
    mod first_hour;
    mod hooks;
    mod hostile;
    mod house;
    mod inbox;
    mod ingest;
    mod jetstream;
    mod lifecycle;
    mod mcp;
    mod mcp_era;
    mod model_double;
    mod npm;
    mod oncall;
    mod python_sdk;
    mod races;
    mod relay;
    mod reply;
    mod routing;
    mod rules;
    mod schedules;
    mod sessions;
    mod slack;
    mod teams;
    mod ts_sdk;
    mod upstream;
    mod worked_example;
}
