//! Which HTTP proxy a request goes through, as the HTTP client reads the
//! environment (`http_proxy`/`HTTP_PROXY` for http, `https_proxy`/
//! `HTTPS_PROXY` for https, else `all_proxy`/`ALL_PROXY`; `no_proxy`/
//! `NO_PROXY` lists hosts, domains and `*` that go direct). Only to say so
//! when a connection fails: the client routes by itself.

/// The proxy a request to `host` over https (or http) uses: the variable
/// that names it and its value.
pub(super) fn proxy_for(https: bool, host: &str) -> Option<(String, String)> {
    proxy_in(https, host, &|k| std::env::var(k).ok())
}

fn proxy_in(
    https: bool,
    host: &str,
    get: &dyn Fn(&str) -> Option<String>,
) -> Option<(String, String)> {
    let set = |k: &str| get(k).filter(|v| !v.trim().is_empty());
    let no_proxy = set("no_proxy")
        .or_else(|| set("NO_PROXY"))
        .unwrap_or_default();
    if no_proxy
        .split(',')
        .map(str::trim)
        .any(|e| bypasses(e, host))
    {
        return None;
    }
    let names: &[&str] = if https {
        &["https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"]
    } else {
        &["http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY"]
    };
    names
        .iter()
        .find_map(|k| set(k).map(|v| (k.to_string(), v)))
}

/// Whether `NO_PROXY` entry `entry` sends `host` direct.
fn bypasses(entry: &str, host: &str) -> bool {
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if entry == "*" {
        return true;
    }
    // `*.site.org` as `.site.org`.
    let entry = entry.trim_start_matches('*');
    match entry {
        "" => false,
        _ => {
            let bare = entry.trim_start_matches('.');
            host.eq_ignore_ascii_case(bare)
                || host
                    .to_ascii_lowercase()
                    .ends_with(&format!(".{}", bare.to_ascii_lowercase()))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(vars: &[(&str, &str)], https: bool, host: &str) -> Option<(String, String)> {
        let get = |k: &str| {
            vars.iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        };
        proxy_in(https, host, &get)
    }

    #[test]
    fn scheme_variables_no_proxy_and_fallback() {
        let p = [
            ("HTTP_PROXY", "http://p:3128"),
            ("https_proxy", "http://s:3128"),
        ];
        assert_eq!(
            with(&p, false, "reg.example.org"),
            Some(("HTTP_PROXY".into(), "http://p:3128".into()))
        );
        assert_eq!(with(&p, true, "reg.example.org").unwrap().0, "https_proxy");
        assert_eq!(
            with(&[("ALL_PROXY", "socks5://a")], true, "x").unwrap().0,
            "ALL_PROXY"
        );
        let np = [
            ("HTTP_PROXY", "http://p"),
            ("NO_PROXY", "localhost, .site.org,127.0.0.1"),
        ];
        assert_eq!(with(&np, false, "127.0.0.1"), None);
        assert_eq!(with(&np, false, "mirror.site.org"), None);
        assert_eq!(with(&np, false, "site.org"), None);
        assert!(with(&np, false, "othersite.org").is_some());
        assert_eq!(
            with(&[("HTTP_PROXY", "http://p"), ("no_proxy", "*")], false, "x"),
            None
        );
        assert_eq!(with(&[], false, "x"), None);
    }
}
