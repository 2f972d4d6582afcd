//! llama-server's CORS proxy, `GET|POST /cors-proxy?url=…` (`--ui-mcp-proxy`; 403 without it):
//! a web page reaches an MCP server that sends no CORS headers through this server. Like
//! llama-server it forwards only what the caller names for the target, each
//! `X-Llama-Server-Proxy-Header-<name>` as `<name>`: the caller's own credentials for this server
//! (`Authorization`, `X-Api-Key`, cookies) never leave it. The target's answer comes back as it
//! streams (MCP answers with server-sent events), its status and headers but those this server
//! sets itself (length, framing, CORS).

use std::collections::HashMap;
use std::io::Read;
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{Query, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;
use tokio::sync::{mpsc, oneshot};

use crate::error::ApiError;
use crate::AppState;

const PREFIX: &str = "x-llama-server-proxy-header-";
/// llama-server's read and write limits for the target.
const TIMEOUT: Duration = Duration::from_secs(600);
const CHUNK: usize = 16 << 10;

pub(super) async fn cors_proxy(
    State(state): State<Arc<AppState>>,
    method: Method,
    Query(query): Query<HashMap<String, String>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if !state.options.ui_mcp_proxy {
        // llama-server's answer for a feature it was not started with.
        let error =
            json!({"error": {"message": "this feature is disabled", "type": "feature_disabled"}});
        return (StatusCode::FORBIDDEN, Json(error)).into_response();
    }
    let target = match target(query.get("url").map(String::as_str)) {
        Ok(target) => target,
        Err(e) => return e.into_response(),
    };
    let forwarded = forwarded_headers(&headers);
    let (head_tx, head_rx) = oneshot::channel();
    let (body_tx, body_rx) = mpsc::channel::<Result<Bytes, std::io::Error>>(4);
    tokio::task::spawn_blocking(move || fetch(method, target, forwarded, body, head_tx, body_tx));
    let Ok(head) = head_rx.await else {
        return ApiError::internal("proxy error: the request to the target ended early")
            .into_response();
    };
    let (status, headers) = match head {
        Ok(head) => head,
        // llama-server answers a target it could not reach with 500 and the reason as text.
        Err(reason) => {
            return (
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("proxy error: {reason}"),
            )
                .into_response()
        }
    };
    let mut response =
        Body::from_stream(tokio_stream::wrappers::ReceiverStream::new(body_rx)).into_response();
    *response.status_mut() = status;
    response.headers_mut().extend(headers);
    response
}

/// The `url` parameter: http or https, a host, no credentials in it (llama-server's checks).
fn target(url: Option<&str>) -> Result<String, ApiError> {
    let url = url.ok_or_else(|| ApiError::invalid("url", "the target URL `url` is missing"))?;
    let uri: Uri = url
        .parse()
        .map_err(|e| ApiError::invalid("url", format!("invalid target URL: {e}")))?;
    match uri.scheme_str() {
        Some("http" | "https") => {}
        other => {
            return Err(ApiError::invalid(
                "url",
                format!(
                    "unsupported URL scheme in target URL: {}",
                    other.unwrap_or("")
                ),
            ))
        }
    }
    let authority = uri
        .authority()
        .filter(|a| !a.host().is_empty())
        .ok_or_else(|| ApiError::invalid("url", "invalid target URL: missing host"))?;
    if authority.as_str().contains('@') {
        return Err(ApiError::invalid(
            "url",
            "authentication in target URL is not supported",
        ));
    }
    Ok(url.to_owned())
}

/// The headers the caller addressed to the target, their prefix removed; framing and encoding
/// are the client's own business (the body is forwarded whole, uncompressed), the `Host` the
/// target's.
fn forwarded_headers(headers: &HeaderMap) -> Vec<(HeaderName, HeaderValue)> {
    headers
        .iter()
        .filter_map(|(name, value)| {
            let rest = name.as_str().strip_prefix(PREFIX)?;
            if rest.is_empty()
                || matches!(
                    rest,
                    "accept-encoding" | "transfer-encoding" | "content-length" | "host"
                )
            {
                return None;
            }
            Some((HeaderName::from_bytes(rest.as_bytes()).ok()?, value.clone()))
        })
        .collect()
}

/// The target's headers passed back: not those this server writes itself.
fn kept(name: &HeaderName) -> bool {
    let name = name.as_str();
    !matches!(
        name,
        "server" | "transfer-encoding" | "content-length" | "keep-alive" | "connection"
    ) && !name.starts_with("access-control-")
}

type Head = Result<(StatusCode, HeaderMap), String>;

/// The request to the target, on a blocking thread: the status and headers go back first, then
/// the body in chunks until it ends or the caller is gone.
fn fetch(
    method: Method,
    url: String,
    headers: Vec<(HeaderName, HeaderValue)>,
    body: Bytes,
    head_tx: oneshot::Sender<Head>,
    body_tx: mpsc::Sender<Result<Bytes, std::io::Error>>,
) {
    // HTTPS targets are checked against the operating system's roots (and `SSL_CERT_FILE`), as
    // every HTTPS client of the project; built per request, which is a network round trip anyway.
    let (roots, _) = oxibonsai_hub::native_roots();
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .tls_config(ureq::tls::TlsConfig::builder().root_certs(roots).build())
        // The target's status is the answer's, whatever it is.
        .http_status_as_error(false)
        // llama-server connects directly, whatever the environment's proxy settings.
        .proxy(None)
        .max_redirects(10)
        .timeout_connect(Some(TIMEOUT))
        .timeout_per_read(Some(TIMEOUT))
        .timeout_per_write(Some(TIMEOUT))
        .build()
        .into();
    let answer = if method == Method::POST {
        let mut request = agent.post(&url);
        for (name, value) in &headers {
            request = request.header(name, value);
        }
        request.send(&body[..])
    } else {
        let mut request = agent.get(&url);
        for (name, value) in &headers {
            request = request.header(name, value);
        }
        request.call()
    };
    let response = match answer {
        Ok(response) => response,
        Err(e) => {
            let _ = head_tx.send(Err(e.to_string()));
            return;
        }
    };
    let (parts, body) = response.into_parts();
    let mut out = HeaderMap::new();
    for (name, value) in &parts.headers {
        if kept(name) {
            out.append(name.clone(), value.clone());
        }
    }
    let status = StatusCode::from_u16(parts.status.as_u16()).unwrap_or(StatusCode::BAD_GATEWAY);
    if head_tx.send(Ok((status, out))).is_err() {
        return;
    }
    let mut reader = body.into_reader();
    let mut buf = vec![0u8; CHUNK];
    loop {
        match reader.read(&mut buf) {
            Ok(0) => return,
            Ok(n) => {
                if body_tx
                    .blocking_send(Ok(Bytes::copy_from_slice(&buf[..n])))
                    .is_err()
                {
                    return;
                }
            }
            Err(e) => {
                let _ = body_tx.blocking_send(Err(e));
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_named_headers_go_to_the_target() {
        let mut headers = HeaderMap::new();
        for (name, value) in [
            ("authorization", "Bearer key"),
            ("cookie", "session=1"),
            ("x-api-key", "key"),
            ("x-llama-server-proxy-header-accept", "application/json"),
            ("x-llama-server-proxy-header-authorization", "Bearer mcp"),
            ("x-llama-server-proxy-header-content-length", "12"),
            ("x-llama-server-proxy-header-", "empty"),
        ] {
            headers.insert(
                HeaderName::from_static(name),
                HeaderValue::from_static(value),
            );
        }
        let got: Vec<(String, String)> = forwarded_headers(&headers)
            .into_iter()
            .map(|(n, v)| (n.to_string(), v.to_str().unwrap_or_default().to_owned()))
            .collect();
        assert_eq!(
            got,
            [
                ("accept".to_owned(), "application/json".to_owned()),
                ("authorization".to_owned(), "Bearer mcp".to_owned()),
            ]
        );
    }

    #[test]
    fn target_urls_are_checked_like_llama_server() {
        assert!(target(Some("http://127.0.0.1:8080/models")).is_ok());
        assert!(target(Some("https://example.com")).is_ok());
        for bad in [
            None,
            Some("ftp://example.com/"),
            Some("/relative"),
            Some("http://user:pw@example.com/"),
        ] {
            assert!(target(bad).is_err(), "{bad:?} was accepted");
        }
    }
}
