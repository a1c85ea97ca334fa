//! Engine dispatch counted, not timed: a fixed number of dispatches of one `engine_dispatch`
//! workload, to run under `cachegrind`.
//!
//! On this project's shared machines one `engine_dispatch` run of a workload moves by up to
//! 3× from the next (other tenants' use of the shared caches), which hides any change below
//! about 1.5×. Instructions and simulated cache misses per dispatch do not move: they are what
//! this bench gives, for changes too small for the wall clock to show.
//!
//! ```sh
//! cargo bench --no-run --bench engine_count     # prints the path of the binary
//! BIN=target/release/deps/engine_count-HASH
//! for n in 0 100000; do
//!   valgrind --tool=cachegrind --cache-sim=yes --LL=4194304,16,64 \
//!     --cachegrind-out-file=/dev/null $BIN matchers_100 $n
//! done
//! ```
//!
//! Per dispatch: the difference of the two runs' totals (`I refs`, `D1 misses`, `LLd misses`)
//! over 100,000, so that compiling the rules and building the messages cancel out. A fixed
//! LL size (4 MiB here) keeps the counts the same from one machine to the next; a cycle of
//! 4,096 messages with metadata is larger than that, as it is than most L2 caches.
//!
//! Arguments: the workload as in `engine_dispatch`'s ids (`100`, `1000`, `10000`,
//! `catchall_10000`, `matchers_N`, `meta_N`) and the number of dispatches. Without them (as
//! `cargo bench` runs it) it says how to run it and does nothing.

use std::hint::black_box;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use chrono::Utc;
use switchboard::engine::{Engine, Prepared};
use switchboard::rules::RuleSet;

mod engine_workload;
use engine_workload::{messages, workload};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    let (Some(label), Some(count)) = (args.first(), args.get(1)) else {
        eprintln!(
            "engine_count: give a workload and a number of dispatches, e.g. `matchers_100 100000` \
             (run it under cachegrind; see the top of benches/engine_count.rs)"
        );
        return ExitCode::SUCCESS;
    };
    let Some((text, pools, meta)) = workload(label) else {
        eprintln!(
            "engine_count: no workload `{label}` (100, 1000, catchall_10000, matchers_100, meta_100, ...)"
        );
        return ExitCode::from(2);
    };
    let Ok(count) = count.parse::<usize>() else {
        eprintln!("engine_count: `{count}` is not a number of dispatches");
        return ExitCode::from(2);
    };
    let msgs = messages(&pools, meta);
    let rules = RuleSet::parse(&text).expect("bench rules compile");
    let mut engine = Engine::from_prepared(Prepared::new(Arc::new(rules)));
    let start = Instant::now();
    let mut i = 0;
    for _ in 0..count {
        i = (i + 1) % msgs.len();
        black_box(engine.evaluate(&msgs[i], Utc::now()));
    }
    if count > 0 {
        eprintln!(
            "{label}: {count} dispatches, {:.0} ns each (wall clock, for orientation only)",
            start.elapsed().as_nanos() as f64 / count as f64
        );
    }
    ExitCode::SUCCESS
}
