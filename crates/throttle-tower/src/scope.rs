//! Which scope (budget) a request spends.

use std::fmt;
use std::sync::Arc;

use crate::message::Target;

type KeyFn = dyn Fn(&Target<'_>) -> Option<String> + Send + Sync;

/// How a request's scope is named: one throttling budget per distinct name.
///
/// ```
/// use polite_throttle_tower::ScopeKey;
///
/// let per_host = ScopeKey::host(); // the default: "api.example.com", "127.0.0.1:8080"
/// let one_budget = ScopeKey::fixed("api"); // every request, whatever its host
/// let per_method = ScopeKey::from_fn(|t| Some(format!("{}:{}", t.host, t.method)));
/// # let _ = (per_host, one_budget, per_method);
/// ```
#[derive(Clone)]
pub struct ScopeKey(Kind);

#[derive(Clone)]
enum Kind {
    Host,
    #[cfg(feature = "psl")]
    RegistrableDomain,
    Fixed(Arc<str>),
    Custom(Arc<KeyFn>),
}

impl fmt::Debug for ScopeKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            Kind::Host => f.write_str("ScopeKey::host()"),
            #[cfg(feature = "psl")]
            Kind::RegistrableDomain => f.write_str("ScopeKey::registrable_domain()"),
            Kind::Fixed(name) => write!(f, "ScopeKey::fixed({name:?})"),
            Kind::Custom(_) => f.write_str("ScopeKey::from_fn(..)"),
        }
    }
}

impl Default for ScopeKey {
    fn default() -> Self {
        Self::host()
    }
}

impl ScopeKey {
    /// The host, lower-cased, with the port unless it is the scheme's default: the
    /// scope names the crawl frontier gives hosts (`example.com`, `localhost:8080`).
    pub fn host() -> Self {
        ScopeKey(Kind::Host)
    }

    /// The registrable domain (`www.example.co.uk` and `api.example.co.uk` share
    /// `example.co.uk`), from the public suffix list compiled into `psl`. A host with
    /// no registrable domain (an IP, `localhost`) falls back to [`host`](Self::host).
    #[cfg(feature = "psl")]
    pub fn registrable_domain() -> Self {
        ScopeKey(Kind::RegistrableDomain)
    }

    /// One budget for every request: the scope `name` (an API's name).
    pub fn fixed(name: impl Into<String>) -> Self {
        ScopeKey(Kind::Fixed(Arc::from(name.into())))
    }

    /// A scope from any part of the request; `None` refuses the request (the service
    /// answers [`Error::NoScope`](crate::Error::NoScope)).
    pub fn from_fn(f: impl Fn(&Target<'_>) -> Option<String> + Send + Sync + 'static) -> Self {
        ScopeKey(Kind::Custom(Arc::new(f)))
    }

    /// The scope of a request going to `target`.
    pub fn scope_of(&self, target: &Target<'_>) -> Option<String> {
        match &self.0 {
            Kind::Host => Some(host_scope(target)),
            #[cfg(feature = "psl")]
            Kind::RegistrableDomain => {
                let host = target.host.trim_end_matches('.').to_ascii_lowercase();
                match psl::domain_str(&host) {
                    Some(domain) if !is_ip(&host) => Some(domain.to_string()),
                    _ => Some(host_scope(target)),
                }
            }
            Kind::Fixed(name) => Some(name.to_string()),
            Kind::Custom(f) => f(target),
        }
    }
}

#[cfg(feature = "psl")]
fn is_ip(host: &str) -> bool {
    host.starts_with('[') || host.parse::<std::net::Ipv4Addr>().is_ok()
}

fn host_scope(t: &Target<'_>) -> String {
    let mut s = t.host.to_ascii_lowercase();
    let default = match t.scheme {
        "http" | "ws" => Some(80),
        "https" | "wss" => Some(443),
        _ => None,
    };
    if let Some(port) = t.port
        && Some(port) != default
    {
        s.push(':');
        s.push_str(&port.to_string());
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scope(key: &ScopeKey, uri: &str) -> Option<String> {
        let req = http::Request::get(uri).body(()).unwrap();
        key.scope_of(&crate::ThrottledRequest::target(&req)?)
    }

    #[test]
    fn host_scopes_match_the_frontiers() {
        let k = ScopeKey::host();
        assert_eq!(
            scope(&k, "https://API.Example.com/x").as_deref(),
            Some("api.example.com")
        );
        assert_eq!(
            scope(&k, "https://example.com:443/").as_deref(),
            Some("example.com")
        );
        assert_eq!(
            scope(&k, "http://127.0.0.1:8080/").as_deref(),
            Some("127.0.0.1:8080")
        );
        assert_eq!(
            scope(&k, "https://example.com:80/").as_deref(),
            Some("example.com:80")
        );
        assert_eq!(scope(&k, "/relative"), None);
        assert_eq!(
            scope(&ScopeKey::fixed("api"), "http://a.com/").as_deref(),
            Some("api")
        );
    }

    #[cfg(feature = "psl")]
    #[test]
    fn registrable_domains() {
        let k = ScopeKey::registrable_domain();
        assert_eq!(
            scope(&k, "https://www.example.co.uk/").as_deref(),
            Some("example.co.uk")
        );
        assert_eq!(
            scope(&k, "https://a.b.github.io/").as_deref(),
            Some("b.github.io")
        );
        assert_eq!(
            scope(&k, "http://127.0.0.1:81/").as_deref(),
            Some("127.0.0.1:81")
        );
        assert_eq!(
            scope(&k, "http://localhost:81/").as_deref(),
            Some("localhost:81")
        );
    }
}
