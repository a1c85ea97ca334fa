//! Who is at the other end of a control connection: its process id, from the socket's own
//! credentials (not from anything the client says), and the processes above it.
//!
//! The permission relay needs to know which host window a call comes from: an MCP host
//! (Claude Code) starts its `switchboard serve` front end and runs its hooks as its own
//! children, so the front end's parent is the host, and the host is an ancestor of every hook
//! it runs. Two windows are two host processes. A process's parent is read from
//! `/proc/PID/stat` on Linux and from `ps -o ppid=` elsewhere.

/// The most ancestors [`ancestors`] walks up (a process tree is rarely a dozen deep).
const MAX_DEPTH: usize = 64;

/// The parent of process `pid`; `None` when it is gone, unreadable, or the top (pid 1 or 0).
pub fn parent(pid: u32) -> Option<u32> {
    let ppid = read_parent(pid)?;
    (ppid > 1).then_some(ppid)
}

/// The processes above `pid`, nearest first, up to (not including) pid 1.
pub fn ancestors(pid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    let mut at = pid;
    while out.len() < MAX_DEPTH
        && let Some(up) = parent(at)
    {
        if out.contains(&up) {
            break;
        }
        out.push(up);
        at = up;
    }
    out
}

#[cfg(target_os = "linux")]
fn read_parent(pid: u32) -> Option<u32> {
    // `PID (COMM) STATE PPID ...`: the command may hold spaces and parentheses.
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, rest) = stat.rsplit_once(')')?;
    rest.split_whitespace().nth(1)?.parse().ok()
}

#[cfg(not(target_os = "linux"))]
fn read_parent(pid: u32) -> Option<u32> {
    let out = std::process::Command::new("ps")
        .args(["-o", "ppid=", "-p", &pid.to_string()])
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .output()
        .ok()?;
    String::from_utf8_lossy(&out.stdout).trim().parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_descends_from_its_parent() {
        let me = std::process::id();
        let up = ancestors(me);
        let parent = parent(me).expect("a test runs under some process");
        assert_eq!(up.first(), Some(&parent));
        assert!(!up.contains(&me) && !up.contains(&1), "{up:?}");
        assert_eq!(super::parent(u32::MAX), None, "no such process");
    }
}
