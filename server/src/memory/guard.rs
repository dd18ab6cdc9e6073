//! The SSRF guard of memory downloads: which addresses a server-side fetch may reach.
//!
//! Unless the operator allows private networks, a download may not reach loopback, private,
//! link-local (cloud metadata included), unspecified, broadcast, CGNAT, multicast or reserved
//! addresses. The check runs on IP-literal URLs before connecting, on every DNS answer (a
//! [`reqwest::dns::Resolve`] that refuses the whole answer when any address is blocked, so a
//! rebinding name cannot mix a private address in), and on IP-literal redirect targets (hostname
//! redirect targets go through the same resolver).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use reqwest::dns::{Addrs, Name, Resolve, Resolving};
use reqwest::{Url, redirect};

/// Redirects followed before giving up (the browser `fetch` limit upstream relies on).
const MAX_REDIRECTS: usize = 20;

/// Whether a download may connect to `ip` when private networks are not allowed.
pub(crate) fn is_public(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => is_public_v4(v4),
        IpAddr::V6(v6) => is_public_v6(v6),
    }
}

fn is_public_v4(ip: Ipv4Addr) -> bool {
    let [a, b, ..] = ip.octets();
    let blocked = a == 0 // "this network", 0.0.0.0 included
        || a == 10
        || a == 127
        || (a == 100 && (64..128).contains(&b)) // CGNAT 100.64/10
        || (a == 169 && b == 254) // link-local, cloud metadata
        || (a == 172 && (16..32).contains(&b))
        || (a == 192 && b == 168)
        || (a == 192 && b == 0 && ip.octets()[2] == 0) // IETF protocol assignments
        || a >= 224; // multicast, reserved, broadcast
    !blocked
}

fn is_public_v6(ip: Ipv6Addr) -> bool {
    if let Some(v4) = embedded_v4(ip) {
        return is_public_v4(v4);
    }
    let first = ip.segments()[0];
    let blocked = ip.is_unspecified()
        || ip.is_loopback()
        || (first & 0xfe00) == 0xfc00 // unique local fc00::/7
        || (first & 0xffc0) == 0xfe80 // link-local fe80::/10
        || (first & 0xffc0) == 0xfec0 // site-local fec0::/10 (deprecated)
        || (first & 0xff00) == 0xff00; // multicast
    !blocked
}

/// The IPv4 address inside an IPv4-mapped, IPv4-compatible, NAT64 or 6to4 IPv6 address.
fn embedded_v4(ip: Ipv6Addr) -> Option<Ipv4Addr> {
    let segments = ip.segments();
    let tail = |high: u16, low: u16| Ipv4Addr::from((u32::from(high) << 16) | u32::from(low));
    match segments {
        [0, 0, 0, 0, 0, 0xffff, high, low] => Some(tail(high, low)),
        // IPv4-compatible (deprecated); `::` and `::1` are handled as IPv6.
        [0, 0, 0, 0, 0, 0, high, low] if (high, low) > (0, 1) => Some(tail(high, low)),
        [0x64, 0xff9b, 0, 0, 0, 0, high, low] => Some(tail(high, low)),
        [0x2002, high, low, ..] => Some(tail(high, low)),
        _ => None,
    }
}

/// A destination the guard refused; found in a reqwest error's source chain by [`blocked_in`].
#[derive(Debug, thiserror::Error)]
#[error("{host} is a private or local network address")]
pub(crate) struct Blocked {
    /// The host as the URL or DNS named it.
    pub host: String,
}

/// Checks an IP-literal URL host; hostnames pass (the resolver checks their answers).
pub(crate) fn check_url(url: &Url) -> Result<(), Blocked> {
    // The URL parser has already normalised IPv4 spellings (`2130706433`, `0x7f.1`) to dotted
    // form; IPv6 hosts come bracketed.
    let host = url.host_str().unwrap_or_default();
    let Ok(ip) = host.trim_start_matches('[').trim_end_matches(']').parse::<IpAddr>() else { return Ok(()) };
    if is_public(ip) { Ok(()) } else { Err(Blocked { host: ip.to_string() }) }
}

/// The [`Blocked`] refusal somewhere in `error`'s source chain.
pub(crate) fn blocked_in<'e>(error: &'e (dyn std::error::Error + 'static)) -> Option<&'e Blocked> {
    let mut current = Some(error);
    while let Some(error) = current {
        if let Some(blocked) = error.downcast_ref::<Blocked>() {
            return Some(blocked);
        }
        current = error.source();
    }
    None
}

/// System DNS, refusing any answer that holds a non-public address.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct GuardedResolver;

impl Resolve for GuardedResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let host = name.as_str().to_owned();
        Box::pin(async move {
            let addrs: Vec<SocketAddr> = tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            if let Some(bad) = addrs.iter().find(|addr| !is_public(addr.ip())) {
                tracing::warn!(%host, address = %bad.ip(), "download refused: the name resolves to a private address");
                return Err(Box::new(Blocked { host }) as Box<dyn std::error::Error + Send + Sync>);
            }
            Ok(Box::new(addrs.into_iter()) as Addrs)
        })
    }
}

/// Follows up to `MAX_REDIRECTS` http(s) redirects, refusing IP-literal private targets when
/// `guarded`.
pub(crate) fn redirect_policy(guarded: bool) -> redirect::Policy {
    redirect::Policy::custom(move |attempt| {
        if attempt.previous().len() >= MAX_REDIRECTS {
            return attempt.error("too many redirects");
        }
        if !matches!(attempt.url().scheme(), "http" | "https") {
            return attempt.error("redirect to a URL that is not http or https");
        }
        if guarded && let Err(blocked) = check_url(attempt.url()) {
            return attempt.error(blocked);
        }
        attempt.follow()
    })
}

/// The download client: like the app's outbound client (rustls, ring), never through a proxy
/// (a proxy would resolve names past the guard), with the guard's resolver and redirect policy
/// unless private networks are allowed. Built once per mode.
pub(crate) fn client(allow_private_network: bool) -> reqwest::Result<reqwest::Client> {
    static GUARDED: OnceLock<reqwest::Client> = OnceLock::new();
    static OPEN: OnceLock<reqwest::Client> = OnceLock::new();
    let cell = if allow_private_network { &OPEN } else { &GUARDED };
    if let Some(client) = cell.get() {
        return Ok(client.clone());
    }
    let client = build(!allow_private_network)?;
    Ok(cell.get_or_init(|| client).clone())
}

fn build(guarded: bool) -> reqwest::Result<reqwest::Client> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut builder = reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(15))
        .user_agent(concat!("seed-agents-server/", env!("CARGO_PKG_VERSION")))
        .no_proxy()
        .redirect(redirect_policy(guarded));
    if guarded {
        builder = builder.dns_resolver(Arc::new(GuardedResolver));
    }
    builder.build()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn public(ip: &str) -> bool {
        is_public(ip.parse().unwrap())
    }

    #[test]
    fn classifies_addresses() {
        for blocked in [
            "127.0.0.1",
            "127.255.0.9",
            "10.0.0.1",
            "172.16.0.1",
            "172.31.255.255",
            "192.168.1.1",
            "169.254.169.254",
            "0.0.0.0",
            "255.255.255.255",
            "100.64.0.1",
            "100.127.255.255",
            "224.0.0.1",
            "::",
            "::1",
            "fc00::1",
            "fd12:3456::1",
            "fe80::1",
            "ff02::1",
            "::ffff:127.0.0.1",
            "::ffff:169.254.169.254",
            "::10.0.0.1",
            "64:ff9b::a00:1",
            "2002:7f00:1::",
        ] {
            assert!(!public(blocked), "{blocked} must be blocked");
        }
        for allowed in
            ["8.8.8.8", "1.1.1.1", "172.32.0.1", "172.15.255.255", "100.128.0.1", "100.63.0.1", "2606:4700::1111"]
        {
            assert!(public(allowed), "{allowed} must be allowed");
        }
    }

    #[test]
    fn checks_ip_literal_urls_in_every_spelling() {
        for url in [
            "http://127.0.0.1/x",
            "http://10.0.0.1/",
            "http://169.254.169.254/latest/meta-data/",
            "http://[::1]:8080/",
            "http://[::ffff:7f00:1]/",
            "http://2130706433/", // 127.0.0.1 as one number
            "http://0x7f.1/",
            "http://0/",
        ] {
            let parsed = Url::parse(url).unwrap();
            assert!(check_url(&parsed).is_err(), "{url} must be refused");
        }
        assert!(check_url(&Url::parse("https://example.com/a").unwrap()).is_ok());
        assert!(check_url(&Url::parse("http://8.8.8.8/").unwrap()).is_ok());
    }

    #[tokio::test]
    async fn resolver_refuses_names_that_resolve_to_loopback() {
        let error = GuardedResolver.resolve("localhost".parse().unwrap()).await.err().unwrap();
        assert!(blocked_in(error.as_ref()).is_some(), "{error}");
    }

    #[tokio::test]
    async fn the_guarded_client_never_connects_to_a_loopback_name() {
        // A listener that would accept; the guard must stop the request before it connects.
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let client = build(true).unwrap();
        let error = client.get(format!("http://localhost:{port}/")).send().await.unwrap_err();
        assert!(blocked_in(&error).is_some(), "{error:?}");
        let accepted = tokio::time::timeout(Duration::from_millis(50), listener.accept()).await;
        assert!(accepted.is_err(), "no connection was made");
    }

    #[tokio::test]
    async fn redirects_to_private_ip_literals_are_refused() {
        // The policy runs before the redirect is followed; drive it through a real redirect from
        // a loopback server with a client whose resolver is open but whose policy is guarded.
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            use tokio::io::{AsyncReadExt, AsyncWriteExt};
            let (mut socket, _) = listener.accept().await.unwrap();
            let mut buffer = [0u8; 1024];
            let _ = socket.read(&mut buffer).await;
            let response =
                "HTTP/1.1 302 Found\r\nLocation: http://169.254.169.254/latest/meta-data/\r\nContent-Length: 0\r\n\r\n";
            socket.write_all(response.as_bytes()).await.unwrap();
        });
        let client = reqwest::Client::builder().no_proxy().redirect(redirect_policy(true)).build().unwrap();
        let error = client.get(format!("http://{addr}/start")).send().await.unwrap_err();
        assert!(error.is_redirect(), "{error:?}");
        assert_eq!(blocked_in(&error).map(|blocked| blocked.host.as_str()), Some("169.254.169.254"));
    }
}
