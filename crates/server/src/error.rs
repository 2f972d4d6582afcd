//! Errors in OpenAI's shape: `{"error": {"message", "type", "param", "code"}}` with the HTTP status
//! clients expect.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::json;

#[derive(Debug, Clone)]
pub struct ApiError {
    pub status: StatusCode,
    pub message: String,
    pub kind: &'static str,
    pub param: Option<String>,
    pub code: Option<&'static str>,
    pub retry_after: Option<u64>,
}

impl ApiError {
    pub fn new(status: StatusCode, kind: &'static str, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            message: message.into(),
            kind,
            param: None,
            code: None,
            retry_after: None,
        }
    }

    /// 400 for a field with a bad value; names the field.
    pub fn invalid(param: &str, message: impl Into<String>) -> ApiError {
        ApiError {
            param: Some(param.to_owned()),
            ..ApiError::new(StatusCode::BAD_REQUEST, "invalid_request_error", message)
        }
    }

    /// 400 for a field this server does not implement (never silently ignored).
    pub fn unsupported(param: &str, what: &str) -> ApiError {
        ApiError {
            code: Some("unsupported_parameter"),
            ..ApiError::invalid(
                param,
                format!("'{param}': {what} is not supported by this server"),
            )
        }
    }

    pub fn not_found(message: impl Into<String>) -> ApiError {
        ApiError {
            code: Some("not_found"),
            ..ApiError::new(StatusCode::NOT_FOUND, "not_found_error", message)
        }
    }

    pub fn unauthorized() -> ApiError {
        ApiError {
            code: Some("invalid_api_key"),
            ..ApiError::new(
                StatusCode::UNAUTHORIZED,
                "authentication_error",
                "missing or incorrect API key (send it as 'Authorization: Bearer KEY')",
            )
        }
    }

    pub fn loading() -> ApiError {
        ApiError {
            code: Some("model_loading"),
            retry_after: Some(1),
            ..ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "unavailable_error",
                "the model is still loading",
            )
        }
    }

    pub fn queue_full(depth: usize) -> ApiError {
        ApiError {
            code: Some("rate_limit_exceeded"),
            retry_after: Some(1),
            ..ApiError::new(
                StatusCode::TOO_MANY_REQUESTS,
                "rate_limit_error",
                format!("the server is busy: {depth} requests are already waiting; retry shortly"),
            )
        }
    }

    pub fn internal(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "server_error", message)
    }

    pub fn body(&self) -> serde_json::Value {
        json!({
            "error": {
                "message": self.message,
                "type": self.kind,
                "param": self.param,
                "code": self.code,
            }
        })
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut response = (self.status, axum::Json(self.body())).into_response();
        if let Some(seconds) = self.retry_after {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
        }
        response
    }
}
