//! Which addresses a webhook may reach: only globally routable ones (the draft's SSRF rule,
//! after the IANA special-purpose registries), loopback too when `mcp.events.allowHttpLoopback`
//! says so. Checked on the literal at subscribe, and on what a name resolves to at subscribe
//! and again at every delivery, which then connects to the address it checked.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// Why an address is refused (`None`: it may be reached).
pub fn refused(ip: IpAddr, allow_loopback: bool) -> Option<&'static str> {
    match ip {
        IpAddr::V4(v4) => refused_v4(v4, allow_loopback),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => refused_v4(v4, allow_loopback),
            None => refused_v6(v6, allow_loopback),
        },
    }
}

fn refused_v4(ip: Ipv4Addr, allow_loopback: bool) -> Option<&'static str> {
    let [a, b, c, _] = ip.octets();
    Some(match (a, b, c) {
        _ if ip.is_loopback() => {
            if allow_loopback {
                return None;
            }
            "loopback"
        }
        (10, ..) | (192, 168, _) => "private",
        (172, b, _) if (16..32).contains(&b) => "private",
        (169, 254, _) => "link-local",
        (100, b, _) if (64..128).contains(&b) => "shared address space (CGNAT)",
        (192, 0, 2) | (198, 51, 100) | (203, 0, 113) => "documentation",
        (198, 18 | 19, _) => "benchmarking",
        (0, ..) => "this network",
        (192, 0, 0) => "IETF protocol assignments",
        _ if ip.is_multicast() || ip.is_broadcast() || a >= 240 => "not unicast",
        _ => return None,
    })
}

fn refused_v6(ip: Ipv6Addr, allow_loopback: bool) -> Option<&'static str> {
    let s = ip.segments();
    Some(match s[0] {
        _ if ip.is_loopback() => {
            if allow_loopback {
                return None;
            }
            "loopback"
        }
        _ if ip.is_unspecified() => "unspecified",
        x if x & 0xfe00 == 0xfc00 => "unique-local",
        x if x & 0xffc0 == 0xfe80 => "link-local",
        x if x & 0xff00 == 0xff00 => "multicast",
        0x2001 if s[1] == 0x0db8 => "documentation",
        0x3fff if s[1] & 0xf000 == 0 => "documentation",
        0x0064 if s[1] == 0xff9b => "NAT64",
        0x2001 if s[1] < 0x0200 => "IETF protocol assignments",
        0x0100 if s[1..4] == [0, 0, 0] => "discard-only",
        _ => return None,
    })
}

/// The first address `host:port` resolves to, checked: every address it resolves to must be
/// allowed (a name that also resolves to a private address is refused, so that a rebinding
/// cannot choose which one is used).
pub async fn resolve(
    host: &str,
    port: u16,
    allow_loopback: bool,
) -> Result<SocketAddr, (&'static str, String)> {
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    let addrs: Vec<SocketAddr> = match bare.parse::<IpAddr>() {
        Ok(ip) => vec![SocketAddr::new(ip, port)],
        Err(_) => tokio::net::lookup_host((bare, port))
            .await
            .map_err(|e| {
                (
                    "connection_refused",
                    format!("cannot resolve \"{host}\": {e}"),
                )
            })?
            .collect(),
    };
    for a in &addrs {
        if let Some(why) = refused(a.ip(), allow_loopback) {
            return Err((
                "connection_refused",
                format!(
                    "\"{host}\" resolves to {} ({why}); webhooks go only to public addresses",
                    a.ip()
                ),
            ));
        }
    }
    addrs.first().copied().ok_or_else(|| {
        (
            "connection_refused",
            format!("\"{host}\" resolves to nothing"),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn private_loopback_link_local_cgnat_unique_local_and_documentation_are_refused() {
        for (ip, why) in [
            ("10.1.2.3", "private"),
            ("172.16.0.1", "private"),
            ("192.168.1.1", "private"),
            ("127.0.0.1", "loopback"),
            ("169.254.169.254", "link-local"),
            ("100.64.0.1", "shared address space (CGNAT)"),
            ("192.0.2.1", "documentation"),
            ("203.0.113.9", "documentation"),
            ("::1", "loopback"),
            ("fd00::1", "unique-local"),
            ("fe80::1", "link-local"),
            ("2001:db8::1", "documentation"),
            ("::ffff:10.0.0.1", "private"),
        ] {
            assert_eq!(refused(ip.parse().unwrap(), false), Some(why), "{ip}");
        }
        for ip in [
            "8.8.8.8",
            "1.1.1.1",
            "2606:4700::1111",
            "172.32.0.1",
            "100.128.0.1",
        ] {
            assert_eq!(refused(ip.parse().unwrap(), false), None, "{ip}");
        }
        assert_eq!(refused("127.0.0.1".parse().unwrap(), true), None);
        assert_eq!(refused("10.0.0.1".parse().unwrap(), true), Some("private"));
    }
}
