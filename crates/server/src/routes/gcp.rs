//! Google Cloud Vertex AI's prediction protocol, as llama-server serves it when started with
//! `AIP_MODE=PREDICTION` (see [`crate::Gcp`]): `POST /predict` (or `AIP_PREDICT_ROUTE`) takes
//! `{"instances": [...]}`, each instance a request body naming the route it is for in
//! `@requestFormat` — a route's camelCase alias (`chatCompletions` for `/v1/chat/completions`,
//! `applyTemplate` for `/apply-template`) or its path — and answers `{"predictions": [...]}`,
//! each prediction that route's JSON answer (or its error), in order. Instances run at once, each
//! through the whole route table as a request of its own (same headers, so the same key and
//! origin checks), never streaming.

use axum::body::{to_bytes, Body, Bytes};
use axum::extract::Request;
use axum::http::{header, HeaderValue, Method};
use axum::response::{IntoResponse, Response};
use axum::{Json, Router};
use serde_json::{json, Value};
use tower::ServiceExt;

use crate::error::ApiError;

/// llama-server's bound on one prediction request.
const MAX_INSTANCES: usize = 128;

/// The routes an instance may name: llama-server derives its aliases from every route it has;
/// these are this server's (the route table in `routes`), each with the method it answers.
/// Where two paths share an alias the first one here wins (the OpenAI route).
const ROUTES: &[(&str, Method)] = &[
    ("/v1/chat/completions", Method::POST),
    ("/v1/completions", Method::POST),
    ("/v1/responses", Method::POST),
    ("/v1/messages", Method::POST),
    ("/v1/messages/count_tokens", Method::POST),
    ("/v1/chat/completions/input_tokens", Method::POST),
    ("/v1/embeddings", Method::POST),
    ("/v1/rerank", Method::POST),
    ("/v1/models", Method::GET),
    ("/chat/completions", Method::POST),
    ("/completion", Method::POST),
    ("/completions", Method::POST),
    ("/responses", Method::POST),
    ("/infill", Method::POST),
    ("/rerank", Method::POST),
    ("/tokenize", Method::POST),
    ("/detokenize", Method::POST),
    ("/apply-template", Method::POST),
    ("/chat/completions/input_tokens", Method::POST),
    ("/props", Method::GET),
    ("/slots", Method::GET),
    ("/models", Method::GET),
    ("/metrics", Method::GET),
    ("/health", Method::GET),
];

/// llama-server's alias of a path: `/v1` dropped, then camelCase at each `/`, `-` or `_`.
fn alias(path: &str) -> String {
    let rest = path.strip_prefix("/v1").unwrap_or(path);
    let rest = rest.strip_prefix('/').unwrap_or(rest);
    let mut out = String::with_capacity(rest.len());
    let mut cap = false;
    for c in rest.chars() {
        match c {
            ':' => break,
            '/' | '-' | '_' => cap = true,
            c => {
                out.push(if cap { c.to_ascii_uppercase() } else { c });
                cap = false;
            }
        }
    }
    out
}

/// The route an `@requestFormat` names: an alias first, then a path as given.
fn route_for(format: &str) -> Option<&'static (&'static str, Method)> {
    ROUTES
        .iter()
        .find(|(path, _)| alias(path) == format)
        .or_else(|| ROUTES.iter().find(|(path, _)| *path == format))
}

pub(super) async fn predict(api: Router, req: Request) -> Response {
    let (parts, body) = req.into_parts();
    if let Err(e) = super::access::require_json(&parts.headers) {
        return e.into_response();
    }
    let body = match to_bytes(body, usize::MAX).await {
        Ok(body) => body,
        Err(e) => return ApiError::invalid("body", e.to_string()).into_response(),
    };
    let data: Value = match serde_json::from_slice(&body) {
        Ok(data) => data,
        Err(e) => {
            return ApiError::invalid("body", format!("the request body is not valid JSON: {e}"))
                .into_response()
        }
    };
    let Some(instances) = data.get("instances").and_then(Value::as_array) else {
        return ApiError::invalid(
            "instances",
            "request body must include an array field named instances",
        )
        .into_response();
    };
    if instances.len() > MAX_INSTANCES {
        return ApiError::invalid(
            "instances",
            format!("instances array exceeds maximum size of {MAX_INSTANCES}"),
        )
        .into_response();
    }
    let answers = instances
        .iter()
        .map(|instance| one(api.clone(), &parts.headers, instance));
    let predictions = futures_util::future::join_all(answers).await;
    Json(json!({ "predictions": predictions })).into_response()
}

/// One instance through the route it names; its answer as JSON (text if it is not JSON, null if
/// empty), an error in llama-server's `{"error": …}` shape.
async fn one(api: Router, headers: &axum::http::HeaderMap, instance: &Value) -> Value {
    let Some(fields) = instance.as_object() else {
        return as_json(
            ApiError::invalid("instances", "each instance must be a JSON object").into_response(),
        )
        .await;
    };
    let Some(format) = fields.get("@requestFormat").and_then(Value::as_str) else {
        return as_json(
            ApiError::invalid(
                "@requestFormat",
                "each instance must include a string @requestFormat",
            )
            .into_response(),
        )
        .await;
    };
    let Some((path, method)) = route_for(format) else {
        return as_json(
            ApiError::invalid(
                "@requestFormat",
                format!("no handler registered for @requestFormat: {format}"),
            )
            .into_response(),
        )
        .await;
    };
    let mut payload = fields.clone();
    payload.remove("@requestFormat");
    if payload.contains_key("stream") {
        // The predict route answers one JSON document per instance.
        payload.insert("stream".to_owned(), Value::Bool(false));
    }
    let body = if *method == Method::GET {
        Body::empty()
    } else {
        Body::from(Bytes::from(Value::Object(payload).to_string()))
    };
    let mut inner = Request::new(body);
    *inner.method_mut() = method.clone();
    *inner.uri_mut() = match path.parse() {
        Ok(uri) => uri,
        Err(_) => {
            return as_json(ApiError::internal("a route path that is not a URI").into_response())
                .await
        }
    };
    for (name, value) in headers {
        if name != header::CONTENT_LENGTH && name != header::TRANSFER_ENCODING {
            inner.headers_mut().append(name.clone(), value.clone());
        }
    }
    inner.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    let response = match api.oneshot(inner).await {
        Ok(response) => response,
        Err(never) => match never {},
    };
    as_json(response).await
}

async fn as_json(response: Response) -> Value {
    let streaming = response
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"text/event-stream"));
    if streaming {
        return error_value(ApiError::invalid(
            "stream",
            "predict route does not support streaming responses",
        ))
        .await;
    }
    match to_bytes(response.into_body(), usize::MAX).await {
        Ok(bytes) if bytes.is_empty() => Value::Null,
        Ok(bytes) => serde_json::from_slice(&bytes)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned())),
        Err(e) => json!({"error": {"message": e.to_string(), "type": "server_error", "code": 500}}),
    }
}

async fn error_value(error: ApiError) -> Value {
    let bytes = to_bytes(error.into_response().into_body(), usize::MAX)
        .await
        .unwrap_or_default();
    serde_json::from_slice(&bytes).unwrap_or(Value::Null)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// llama-server's own examples (server-http.cpp), and the first-registered rule.
    #[test]
    fn aliases_are_llama_servers() {
        assert_eq!(alias("/v1/chat/completions"), "chatCompletions");
        assert_eq!(alias("/apply-template"), "applyTemplate");
        assert_eq!(alias("/slots/:id_slot"), "slots");
        assert_eq!(alias("/v1/messages/count_tokens"), "messagesCountTokens");
        assert_eq!(
            route_for("chatCompletions").map(|r| r.0),
            Some("/v1/chat/completions")
        );
        assert_eq!(
            route_for("completions").map(|r| r.0),
            Some("/v1/completions")
        );
        assert_eq!(route_for("/completion").map(|r| r.0), Some("/completion"));
        assert_eq!(
            route_for("tokenize").map(|r| r.1.clone()),
            Some(Method::POST)
        );
        assert!(route_for("nothing").is_none());
    }
}
