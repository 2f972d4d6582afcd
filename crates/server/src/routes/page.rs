//! The chat page: `/` and its files under `/assets/…`, embedded in the binary so that the page
//! needs nothing but the server (no build step, no network). The page's own files are revalidated
//! on every load (`no-cache` with an `ETag`, so an upgraded server is picked up at once and an
//! unchanged file costs a 304); the vendored libraries carry their version in their path and are
//! cached for good. The page runs under a Content-Security-Policy that allows scripts from this
//! origin only, so markup from a model that slipped past the sanitizer still could not run.
//!
//! Beside the page, the files a browser asks for at llama-server's paths (public, like the page):
//! `/manifest.webmanifest` (the page's), `/_app/version.json` (what llama-server's cached web UI
//! polls to notice that the server changed: it then reloads, and gets this page) and `/sw.js`
//! (removes the service worker llama-server's web UI left in the browser; served with the page
//! off too, as llama-server does).

use axum::extract::Path;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

use crate::error::ApiError;

struct Asset {
    /// The path under `/assets/`.
    path: &'static str,
    bytes: &'static [u8],
    content_type: &'static str,
    /// Versioned in its path: never changes under that name.
    immutable: bool,
}

const JS: &str = "text/javascript; charset=utf-8";
const CSS: &str = "text/css; charset=utf-8";
const HTML: &str = "text/html; charset=utf-8";

/// What the page may load and run: its own scripts, styles and fetches; no inline script, no
/// plugins, no framing by other sites. `data:` images for the icons marked renders inline.
const CSP: &str = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
                   connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'none'; \
                   frame-ancestors 'none'";

macro_rules! own {
    ($file:literal, $type:expr) => {
        Asset {
            path: $file,
            bytes: include_bytes!(concat!("../page/", $file)),
            content_type: $type,
            immutable: false,
        }
    };
}

macro_rules! vendored {
    ($dir:literal, $file:literal) => {
        Asset {
            path: concat!("vendor/", $dir, "/", $file),
            bytes: include_bytes!(concat!("../page/vendor/", $dir, "/", $file)),
            content_type: JS,
            immutable: true,
        }
    };
}

const INDEX: Asset = own!("index.html", HTML);
const MANIFEST: Asset = own!("manifest.webmanifest", "application/manifest+json");
const SERVICE_WORKER: Asset = own!("sw.js", JS);

/// The paths served without the API key besides `/` and `/assets/…` (GET only).
pub(super) const PUBLIC_FILES: &[&str] = &["/sw.js", "/manifest.webmanifest", "/_app/version.json"];

/// Every file the page loads; `page/vendor/README.md` says where the vendored ones came from.
const ASSETS: &[Asset] = &[
    own!("app.js", JS),
    own!("app.css", CSS),
    vendored!("marked-18.2.1", "marked.esm.js"),
    vendored!("dompurify-3.4.18", "purify.min.js"),
    vendored!("highlight-11.12.0", "core.min.js"),
    vendored!("highlight-11.12.0", "bash.min.js"),
    vendored!("highlight-11.12.0", "c.min.js"),
    vendored!("highlight-11.12.0", "cpp.min.js"),
    vendored!("highlight-11.12.0", "css.min.js"),
    vendored!("highlight-11.12.0", "diff.min.js"),
    vendored!("highlight-11.12.0", "go.min.js"),
    vendored!("highlight-11.12.0", "java.min.js"),
    vendored!("highlight-11.12.0", "javascript.min.js"),
    vendored!("highlight-11.12.0", "json.min.js"),
    vendored!("highlight-11.12.0", "markdown.min.js"),
    vendored!("highlight-11.12.0", "python.min.js"),
    vendored!("highlight-11.12.0", "rust.min.js"),
    vendored!("highlight-11.12.0", "sql.min.js"),
    vendored!("highlight-11.12.0", "typescript.min.js"),
    vendored!("highlight-11.12.0", "xml.min.js"),
    vendored!("highlight-11.12.0", "yaml.min.js"),
];

pub(super) async fn index(headers: HeaderMap) -> Response {
    serve(&INDEX, &headers)
}

pub(super) async fn manifest(headers: HeaderMap) -> Response {
    serve(&MANIFEST, &headers)
}

pub(super) async fn service_worker(headers: HeaderMap) -> Response {
    serve(&SERVICE_WORKER, &headers)
}

/// SvelteKit's `{"version": …}`: any value other than the one llama-server's UI was built with
/// makes it reload.
pub(super) async fn version() -> Response {
    (
        [(header::CACHE_CONTROL, "no-cache")],
        axum::Json(serde_json::json!({
            "version": concat!("oxibonsai-", env!("CARGO_PKG_VERSION")),
        })),
    )
        .into_response()
}

pub(super) async fn asset(Path(path): Path<String>, headers: HeaderMap) -> Response {
    match ASSETS.iter().find(|a| a.path == path) {
        Some(asset) => serve(asset, &headers),
        None => ApiError::not_found(format!(
            "no asset '/assets/{}'",
            path.chars().take(200).collect::<String>()
        ))
        .into_response(),
    }
}

fn serve(asset: &Asset, request: &HeaderMap) -> Response {
    let etag = format!("\"{:016x}\"", fnv1a(asset.bytes));
    let fresh = request
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|tags| tags.split(',').any(|t| t.trim() == etag || t.trim() == "*"));
    let mut response = if fresh {
        StatusCode::NOT_MODIFIED.into_response()
    } else {
        ([(header::CONTENT_TYPE, asset.content_type)], asset.bytes).into_response()
    };
    let headers = response.headers_mut();
    if let Ok(value) = HeaderValue::from_str(&etag) {
        headers.insert(header::ETAG, value);
    }
    headers.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static(if asset.immutable {
            "public, max-age=31536000, immutable"
        } else {
            "no-cache"
        }),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    if asset.content_type == HTML {
        headers.insert(
            header::CONTENT_SECURITY_POLICY,
            HeaderValue::from_static(CSP),
        );
    }
    response
}

/// A content tag for `ETag`: it only has to change when the bytes do.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every file the page refers to is served, and every served file is used: a missing row
    /// would only show in a browser, a stale one would only cost space.
    #[test]
    fn the_page_and_the_asset_table_agree() {
        let text: String = [INDEX.bytes, ASSETS[0].bytes]
            .iter()
            .map(|b| String::from_utf8_lossy(b).into_owned())
            .collect();
        let mut referred = Vec::new();
        for (at, _) in text.match_indices("/assets/") {
            let rest = &text[at + "/assets/".len()..];
            let end = rest.find(['"', '\'']).unwrap_or(rest.len());
            referred.push(&rest[..end]);
        }
        for path in &referred {
            assert!(
                ASSETS.iter().any(|a| a.path == *path),
                "the page refers to /assets/{path}, which is not served"
            );
        }
        for asset in ASSETS {
            assert!(
                referred.contains(&asset.path),
                "/assets/{} is served but the page never loads it",
                asset.path
            );
        }
    }

    #[test]
    fn an_unchanged_file_answers_not_modified() {
        let first = serve(&ASSETS[0], &HeaderMap::new());
        assert_eq!(first.status(), StatusCode::OK);
        assert_eq!(first.headers()[header::CACHE_CONTROL], "no-cache");
        let etag = first.headers()[header::ETAG].clone();
        let mut request = HeaderMap::new();
        request.insert(header::IF_NONE_MATCH, etag);
        assert_eq!(
            serve(&ASSETS[0], &request).status(),
            StatusCode::NOT_MODIFIED
        );
        let vendored = serve(&ASSETS[2], &HeaderMap::new());
        assert!(vendored.headers()[header::CACHE_CONTROL]
            .to_str()
            .is_ok_and(|v| v.contains("immutable")));
    }
}
