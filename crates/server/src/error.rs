//! The server's errors. [`ServerError`]: why the server could not start or stopped (the model, its
//! tokenizer or template, the listener). [`ApiError`]: a request's error, sent in OpenAI's shape
//! `{"error": {"message", "type", "param", "code"}}` with the HTTP status clients expect — each
//! kind's status, type and code are given in one table (`ApiError::wire`).

use std::net::SocketAddr;
use std::path::PathBuf;

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use oxibonsai_engine::{ConstraintError, EngineError};
use oxibonsai_gguf::GgufError;
use oxibonsai_tokenizer::chat_template::TemplateError;
use oxibonsai_tokenizer::TokenizerError;
use serde_json::json;

/// Why the server could not load its model or serve. A variant with a source states only what it
/// adds; [`chain`] writes the whole story.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("cannot open {}", path.display())]
    ModelFile {
        path: PathBuf,
        // Boxed: the file's errors are large, and this one happens once.
        #[source]
        source: Box<GgufError>,
    },
    #[error("cannot build the tokenizer")]
    Tokenizer(#[source] TokenizerError),
    #[error("the model's chat template does not compile")]
    ChatTemplate(#[source] TemplateError),
    /// The CPU backend could not start.
    #[error(transparent)]
    Backend(EngineError),
    /// The model's weights or hyper-parameters were refused.
    #[error(transparent)]
    Model(EngineError),
    #[error("--ctx must be at least 1")]
    ZeroCtx,
    #[error("--ctx {ctx} is the context of all {parallel} slots together: less than a token each")]
    CtxBelowSlots { ctx: usize, parallel: usize },
    #[error("cannot build the constrained-decoding vocabulary")]
    ConstraintVocab(#[source] ConstraintError),
    /// The engine thread stopped on an error (a slot's cache could not be made).
    #[error(transparent)]
    Engine(EngineError),
    #[error("cannot listen on {addr}")]
    Listen {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    /// The HTTP server stopped on an I/O error.
    #[error(transparent)]
    Serve(std::io::Error),
    /// The model did not load (the engine thread's error, as text): the server stops.
    #[error("the model failed to load: {0}")]
    LoadFailed(String),
    /// The engine thread stopped on an error after the model loaded: the server stops.
    #[error("the engine stopped: {0}")]
    EngineStopped(String),
}

/// An error and its sources, outermost first, joined by ": " (as `anyhow` writes `{:#}`): the
/// text the log and HTTP clients get, where no error chain can be printed.
pub fn chain(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// A request's error: what was wrong, in words a client can act on.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ApiError {
    /// A field (or the body) holds a value this API does not accept; names the field.
    #[error("{message}")]
    Invalid { param: String, message: String },
    /// A field this server does not implement (never silently ignored).
    #[error("'{param}': {what} is not supported by this server")]
    Unsupported { param: String, what: String },
    /// The prompt fills the context and leaves no room to generate.
    #[error(
        "This model's maximum context length is {n_ctx} tokens. However, your request has \
         {prompt_tokens} prompt tokens, leaving no room to generate."
    )]
    ContextLength {
        n_ctx: usize,
        prompt_tokens: usize,
        /// The field holding the prompt: `messages` or `prompt`.
        param: &'static str,
    },
    #[error("the request body is larger than this server accepts")]
    TooLarge,
    #[error("missing or incorrect API key (send it as 'Authorization: Bearer KEY')")]
    Unauthorized,
    #[error("{0}")]
    NotFound(String),
    #[error("the model is still loading")]
    Loading,
    /// Every slot is busy and `waiting` requests are queued already.
    #[error("the server is busy: {waiting} requests are already waiting; retry shortly")]
    QueueFull { waiting: usize },
    #[error("{0}")]
    Internal(String),
    /// The path exists, the method does not (`allow`: the methods it takes).
    #[error("{method} is not allowed on {path} (allowed: {allow})")]
    MethodNotAllowed {
        method: String,
        path: String,
        allow: String,
    },
    /// A JSON route called with another (or no) `Content-Type`.
    #[error("'Content-Type' must be application/json, got {given}")]
    UnsupportedMediaType { given: String },
    /// The body did not arrive within the server's time limit.
    #[error("the request body did not arrive in time")]
    BodyTimeout,
    /// A browser page from another origin, not allowed by `--cors-origin`.
    #[error(
        "requests from the origin '{origin}' are not allowed (start the server with \
         --cors-origin {origin} to allow them)"
    )]
    OriginNotAllowed { origin: String },
    #[error("the server is shutting down")]
    ShuttingDown,
    /// A route this server has switched off (llama-server's 501 `not_supported_error`).
    #[error("{0}")]
    NotSupported(String),
    /// hyper's own refusals (see `listen`): a request line or header it could not parse.
    #[error("the request is not valid HTTP/1.1")]
    MalformedHttp,
    #[error("the request URI is longer than this server accepts")]
    UriTooLong,
    #[error("the request head is larger than this server accepts")]
    HeadersTooLarge,
    /// Any other error status of the HTTP layer that has no kind of its own.
    #[error("{message}")]
    Http { status: u16, message: String },
}

impl ApiError {
    /// 400 for a field with a bad value; names the field.
    pub fn invalid(param: &str, message: impl Into<String>) -> ApiError {
        ApiError::Invalid {
            param: param.to_owned(),
            message: message.into(),
        }
    }

    /// 400 for a field this server does not implement.
    pub fn unsupported(param: &str, what: &str) -> ApiError {
        ApiError::Unsupported {
            param: param.to_owned(),
            what: what.to_owned(),
        }
    }

    pub fn not_found(message: impl Into<String>) -> ApiError {
        ApiError::NotFound(message.into())
    }

    pub fn internal(message: impl Into<String>) -> ApiError {
        ApiError::Internal(message.into())
    }

    /// Image or audio input (`kind`), which a model without a multimodal projector cannot take:
    /// llama-server's own words and status (its media loader throws, and its HTTP layer answers
    /// any such exception with a 500 `server_error`), so clients written against it see the same.
    pub fn media_unsupported(kind: &str) -> ApiError {
        ApiError::Internal(format!(
            "{kind} input is not supported - hint: if this is unexpected, you may need to provide the mmproj"
        ))
    }

    /// How each kind goes out — HTTP status, OpenAI `type`, `code`, seconds for `Retry-After` —
    /// in one table.
    fn wire(&self) -> Wire {
        use StatusCode as S;
        let (status, kind, code, retry_after) = match self {
            ApiError::Invalid { .. } => (S::BAD_REQUEST, "invalid_request_error", None, None),
            ApiError::Unsupported { .. } => (
                S::BAD_REQUEST,
                "invalid_request_error",
                Some("unsupported_parameter"),
                None,
            ),
            // llama-server's type (its clients branch on it), OpenAI's code.
            ApiError::ContextLength { .. } => (
                S::BAD_REQUEST,
                "exceed_context_size_error",
                Some("context_length_exceeded"),
                None,
            ),
            ApiError::TooLarge => (
                S::PAYLOAD_TOO_LARGE,
                "invalid_request_error",
                Some("request_too_large"),
                None,
            ),
            ApiError::Unauthorized => (
                S::UNAUTHORIZED,
                "authentication_error",
                Some("invalid_api_key"),
                None,
            ),
            ApiError::NotFound(_) => (S::NOT_FOUND, "not_found_error", Some("not_found"), None),
            ApiError::Loading => (
                S::SERVICE_UNAVAILABLE,
                "unavailable_error",
                Some("model_loading"),
                Some(1),
            ),
            ApiError::QueueFull { .. } => (
                S::TOO_MANY_REQUESTS,
                "rate_limit_error",
                Some("rate_limit_exceeded"),
                Some(1),
            ),
            ApiError::Internal(_) => (S::INTERNAL_SERVER_ERROR, "server_error", None, None),
            ApiError::MethodNotAllowed { .. } => (
                S::METHOD_NOT_ALLOWED,
                "invalid_request_error",
                Some("method_not_allowed"),
                None,
            ),
            ApiError::UnsupportedMediaType { .. } => (
                S::UNSUPPORTED_MEDIA_TYPE,
                "invalid_request_error",
                Some("unsupported_media_type"),
                None,
            ),
            ApiError::BodyTimeout => (
                S::REQUEST_TIMEOUT,
                "invalid_request_error",
                Some("request_timeout"),
                None,
            ),
            ApiError::OriginNotAllowed { .. } => (
                S::FORBIDDEN,
                "permission_error",
                Some("origin_not_allowed"),
                None,
            ),
            ApiError::NotSupported(_) => (
                S::NOT_IMPLEMENTED,
                "not_supported_error",
                Some("not_supported"),
                None,
            ),
            ApiError::ShuttingDown => (
                S::SERVICE_UNAVAILABLE,
                "unavailable_error",
                Some("shutting_down"),
                None,
            ),
            ApiError::MalformedHttp => (
                S::BAD_REQUEST,
                "invalid_request_error",
                Some("malformed_http"),
                None,
            ),
            ApiError::UriTooLong => (
                S::URI_TOO_LONG,
                "invalid_request_error",
                Some("uri_too_long"),
                None,
            ),
            ApiError::HeadersTooLarge => (
                S::REQUEST_HEADER_FIELDS_TOO_LARGE,
                "invalid_request_error",
                Some("headers_too_large"),
                None,
            ),
            ApiError::Http { status, .. } => {
                let status = S::from_u16(*status).unwrap_or(S::BAD_REQUEST);
                let kind = if status.is_server_error() {
                    "server_error"
                } else {
                    "invalid_request_error"
                };
                (status, kind, None, None)
            }
        };
        Wire {
            status,
            kind,
            code,
            retry_after,
        }
    }

    pub fn status(&self) -> StatusCode {
        self.wire().status
    }

    /// The field at fault.
    fn param(&self) -> Option<&str> {
        match self {
            ApiError::Invalid { param, .. } | ApiError::Unsupported { param, .. } => Some(param),
            ApiError::ContextLength { param, .. } => Some(param),
            ApiError::UnsupportedMediaType { .. } => Some("Content-Type"),
            _ => None,
        }
    }

    pub fn body(&self) -> serde_json::Value {
        let wire = self.wire();
        let mut body = json!({
            "error": {
                "message": self.to_string(),
                "type": wire.kind,
                "param": self.param(),
                "code": wire.code,
            }
        });
        // llama-server's counts beside the message.
        if let ApiError::ContextLength {
            n_ctx,
            prompt_tokens,
            ..
        } = self
        {
            body["error"]["n_prompt_tokens"] = json!(prompt_tokens);
            body["error"]["n_ctx"] = json!(n_ctx);
        }
        body
    }
}

struct Wire {
    status: StatusCode,
    kind: &'static str,
    code: Option<&'static str>,
    retry_after: Option<u64>,
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut response = (self.status(), axum::Json(self.body())).into_response();
        let headers = response.headers_mut();
        if let Some(seconds) = self.wire().retry_after {
            headers.insert(header::RETRY_AFTER, HeaderValue::from(seconds));
        }
        match &self {
            // RFC 7235: a 401 names the scheme that would be accepted.
            ApiError::Unauthorized => {
                headers.insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            }
            ApiError::MethodNotAllowed { allow, .. } => {
                if let Ok(v) = HeaderValue::from_str(allow) {
                    headers.insert(header::ALLOW, v);
                }
            }
            // A body that never arrived whole leaves the connection unusable.
            ApiError::BodyTimeout => {
                headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
            }
            _ => {}
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_kind_has_its_status_type_and_code() {
        let loading = ApiError::Loading;
        assert_eq!(loading.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(
            loading.body(),
            json!({"error": {"message": "the model is still loading", "type": "unavailable_error",
                "param": null, "code": "model_loading"}})
        );
        let unsupported = ApiError::unsupported("n", "more than one choice (n > 1)");
        assert_eq!(unsupported.status(), StatusCode::BAD_REQUEST);
        assert_eq!(
            unsupported.body()["error"],
            json!({"message": "'n': more than one choice (n > 1) is not supported by this server",
                "type": "invalid_request_error", "param": "n", "code": "unsupported_parameter"})
        );
        let overflow = ApiError::ContextLength {
            n_ctx: 256,
            prompt_tokens: 300,
            param: "prompt",
        };
        assert_eq!(overflow.status(), StatusCode::BAD_REQUEST);
        let e = &overflow.body()["error"];
        assert_eq!(
            (
                &e["type"],
                &e["code"],
                &e["param"],
                &e["n_prompt_tokens"],
                &e["n_ctx"]
            ),
            (
                &json!("exceed_context_size_error"),
                &json!("context_length_exceeded"),
                &json!("prompt"),
                &json!(300),
                &json!(256)
            )
        );
        let response = ApiError::QueueFull { waiting: 3 }.into_response();
        assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(response.headers()[header::RETRY_AFTER], "1");
    }

    #[test]
    fn server_errors_can_cross_threads() {
        // The binary carries them in `anyhow::Error`, which needs both.
        fn send_sync<E: Send + Sync + 'static>() {}
        send_sync::<ServerError>();
    }

    #[test]
    fn the_chain_names_each_source_once() {
        let err = ServerError::Listen {
            addr: "127.0.0.1:8080".parse().unwrap(),
            source: std::io::Error::new(std::io::ErrorKind::AddrInUse, "address in use"),
        };
        assert_eq!(
            chain(&err),
            "cannot listen on 127.0.0.1:8080: address in use"
        );
    }
}
