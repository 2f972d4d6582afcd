//! Who may call the server: the API key, the origin policy for browsers (CORS), and the
//! `Content-Type` of JSON bodies.
//!
//! The origin policy has two modes. Without `--cors-origins` the server answers as
//! llama-server does by default: any page may call it (its `Origin` is reflected, with
//! credentials), so browser apps written for llama-server work unchanged — the API key is what
//! guards a server reachable from pages. With `--cors-origins` only the listed origins (`*`: any,
//! `localhost`: any page served from the loopback host) and the server's own page may call; a
//! request carrying another `Origin` is refused outright. Why the media type matters then: a page
//! on any site may POST `text/plain` without a preflight and the server would spend its compute
//! on it, so JSON routes take only `application/json`, which a foreign page can send only after a
//! preflight.

use axum::http::{header, HeaderMap, HeaderName, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};

use crate::error::ApiError;
use crate::AppState;

/// The methods and request headers the server takes from a page of a listed origin.
const ALLOW_METHODS: &str = "GET, POST, OPTIONS";
const ALLOW_HEADERS: &str = "authorization, content-type, x-api-key";
/// llama-server's defaults (`--cors-methods`, `--cors-headers`), answered without
/// `--cors-origins`.
const LLAMA_ALLOW_METHODS: &str = "GET, POST, DELETE, OPTIONS";
const LLAMA_ALLOW_HEADERS: &str = "*";
/// How long a browser may cache a preflight answer.
const PREFLIGHT_MAX_AGE: &str = "600";
/// llama-server's second way of sending the key (Anthropic clients send it).
const X_API_KEY: HeaderName = HeaderName::from_static("x-api-key");

/// A foreign origin the server answers: how, and the value of `Access-Control-Allow-Origin`.
pub(super) struct Allowed {
    origin: HeaderValue,
    /// No `--cors-origins`: llama-server's default answer (credentials, its methods and headers).
    open: bool,
}

/// The request's `Origin` if it is one the server answers cross-origin (`Some`), `None` when the
/// request has none or comes from the server's own origin, or the 403 for any other.
pub(super) fn cross_origin(
    state: &AppState,
    headers: &HeaderMap,
) -> Result<Option<Allowed>, ApiError> {
    let Some(origin) = headers.get(header::ORIGIN) else {
        return Ok(None);
    };
    let text = origin.to_str().unwrap_or_default();
    // Same origin: the page was loaded from this server, so the browser's `Host` is its
    // authority. Only plain http: the server speaks no TLS itself.
    let host = headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or_default();
    let same = text
        .strip_prefix("http://")
        .is_some_and(|authority| !host.is_empty() && authority.eq_ignore_ascii_case(host));
    if same {
        return Ok(None);
    }
    let allowed = &state.options.cors_origins;
    if allowed.is_empty() {
        return Ok(Some(Allowed {
            origin: origin.clone(),
            open: true,
        }));
    }
    if allowed.iter().any(|a| a == "*") {
        return Ok(Some(Allowed {
            origin: HeaderValue::from_static("*"),
            open: false,
        }));
    }
    let listed = allowed
        .iter()
        .any(|a| a.eq_ignore_ascii_case(text) || (a == "localhost" && is_localhost(text)));
    if listed {
        return Ok(Some(Allowed {
            origin: origin.clone(),
            open: false,
        }));
    }
    Err(ApiError::OriginNotAllowed {
        origin: text.chars().take(200).collect(),
    })
}

/// `http(s)://localhost`, `127.0.0.1` or `[::1]`, with any port (llama-server's `localhost`).
fn is_localhost(origin: &str) -> bool {
    let Some(rest) = origin
        .strip_prefix("http://")
        .or_else(|| origin.strip_prefix("https://"))
    else {
        return false;
    };
    let host = if let Some(v6) = rest.strip_prefix('[') {
        match v6.split_once(']') {
            Some((h, port)) if port.is_empty() || port.starts_with(':') => h,
            _ => return false,
        }
    } else {
        rest.split(':').next().unwrap_or_default()
    };
    let port_ok = rest
        .rsplit_once(':')
        .filter(|(_, p)| !p.contains(']'))
        .is_none_or(|(_, p)| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()));
    port_ok && matches!(host, "localhost" | "127.0.0.1" | "::1")
}

/// Adds the CORS answer headers for an allowed foreign origin.
pub(super) fn allow_origin(response: &mut Response, allowed: Option<Allowed>) {
    let headers = response.headers_mut();
    // Caches must not hand one origin's answer to another.
    headers.append(header::VARY, HeaderValue::from_static("origin"));
    if let Some(allowed) = allowed {
        headers.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, allowed.origin);
    }
}

/// The answer to `OPTIONS`, 200 as llama-server answers it: for a preflight of an allowed origin
/// the methods and headers it may use; otherwise (no `Origin`: not a browser's preflight) the
/// methods in `Allow`. Never behind the API key: browsers send no credentials with a preflight.
pub(super) fn preflight(allowed: Option<Allowed>) -> Response {
    let mut response = StatusCode::OK.into_response();
    let headers = response.headers_mut();
    headers.insert(header::ALLOW, HeaderValue::from_static(ALLOW_METHODS));
    if let Some(a) = &allowed {
        let (methods, allow_headers) = if a.open {
            headers.insert(
                header::ACCESS_CONTROL_ALLOW_CREDENTIALS,
                HeaderValue::from_static("true"),
            );
            (LLAMA_ALLOW_METHODS, LLAMA_ALLOW_HEADERS)
        } else {
            (ALLOW_METHODS, ALLOW_HEADERS)
        };
        headers.insert(
            header::ACCESS_CONTROL_ALLOW_METHODS,
            HeaderValue::from_static(methods),
        );
        headers.insert(
            header::ACCESS_CONTROL_ALLOW_HEADERS,
            HeaderValue::from_static(allow_headers),
        );
        headers.insert(
            header::ACCESS_CONTROL_MAX_AGE,
            HeaderValue::from_static(PREFLIGHT_MAX_AGE),
        );
    }
    allow_origin(&mut response, allowed);
    response
}

/// Whether the request may pass: no key set, an open route, or the key as a bearer token or in
/// `X-Api-Key` (llama-server takes it there, and Anthropic's clients send it so). The scheme is
/// case-insensitive (RFC 7235); the key must match exactly, compared in constant time.
pub(super) fn authorized(
    state: &AppState,
    method: &Method,
    path: &str,
    headers: &HeaderMap,
) -> bool {
    let Some(key) = &state.options.api_key else {
        return true;
    };
    let page =
        path == "/" || path.starts_with("/assets/") || super::page::PUBLIC_FILES.contains(&path);
    if path == "/health" || (page && method == Method::GET) {
        return true;
    }
    let in_x_api_key = headers
        .get(X_API_KEY)
        .is_some_and(|v| constant_time_eq(v.as_bytes(), key.as_bytes()));
    if in_x_api_key {
        return true;
    }
    let Some(value) = headers.get(header::AUTHORIZATION) else {
        return false;
    };
    let Some((scheme, token)) = split_scheme(value.as_bytes()) else {
        return false;
    };
    scheme.eq_ignore_ascii_case(b"bearer") && constant_time_eq(token, key.as_bytes())
}

/// `scheme SP+ credentials` → (scheme, credentials).
fn split_scheme(value: &[u8]) -> Option<(&[u8], &[u8])> {
    let at = value.iter().position(|&b| b == b' ')?;
    let rest = &value[at..];
    let skip = rest.iter().take_while(|&&b| b == b' ').count();
    Some((&value[..at], &rest[skip..]))
}

/// Equal bytes, in time that depends only on the lengths (the key's length is not a secret
/// worth hiding; its content is).
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// 415 unless the body is declared `application/json` (parameters such as `charset` allowed).
pub(super) fn require_json(headers: &HeaderMap) -> Result<(), ApiError> {
    let given = headers
        .get(header::CONTENT_TYPE)
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
    let is_json = given.as_deref().is_some_and(|v| {
        v.split(';')
            .next()
            .is_some_and(|media| media.trim().eq_ignore_ascii_case("application/json"))
    });
    if is_json {
        return Ok(());
    }
    Err(ApiError::UnsupportedMediaType {
        given: given.map_or_else(
            || "none".to_owned(),
            |g| format!("'{}'", g.chars().take(100).collect::<String>()),
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_compare_exactly() {
        assert!(constant_time_eq(b"k3y", b"k3y"));
        assert!(!constant_time_eq(b"k3y", b"k3z"));
        assert!(!constant_time_eq(b"k3y", b"k3y "));
        assert_eq!(
            split_scheme(b"bEaReR   k"),
            Some((&b"bEaReR"[..], &b"k"[..]))
        );
        assert_eq!(split_scheme(b"Bearer"), None);
    }

    #[test]
    fn localhost_origins_are_the_loopback_hosts_only() {
        for yes in [
            "http://localhost",
            "http://localhost:8080",
            "http://127.0.0.1",
            "http://127.0.0.1:3000",
            "http://[::1]",
            "http://[::1]:3000",
            "https://localhost",
        ] {
            assert!(is_localhost(yes), "{yes}");
        }
        for no in [
            "http://web.mydomain.fr",
            "http://notlocalhost",
            "http://localhost.evil.com",
            "http://localhost:80x",
            "http://[::1]evil",
            "localhost",
        ] {
            assert!(!is_localhost(no), "{no}");
        }
    }
}
