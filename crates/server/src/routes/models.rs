//! What the server says about itself: `/v1/models` (the one model), `/health`, `/metrics`
//! (Prometheus text).

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};

use super::loaded;
use crate::error::ApiError;
use crate::AppState;

pub(super) async fn health(State(state): State<Arc<AppState>>) -> Response {
    match loaded(&state) {
        Ok(_) => Json(json!({"status": "ok"})).into_response(),
        Err(ApiError::Loading) => (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({"status": "loading"})),
        )
            .into_response(),
        Err(e) => e.into_response(),
    }
}

pub(super) async fn metrics(State(state): State<Arc<AppState>>) -> Response {
    if !state.options.metrics_endpoint {
        return ApiError::NotSupported(
            "This server does not support metrics endpoint. Start it with `--metrics`".to_owned(),
        )
        .into_response();
    }
    (
        [
            (header::CONTENT_TYPE, "text/plain; version=0.0.4".to_owned()),
            // llama-server's header: scrapers tell a restart from a counter reset by it.
            (
                header::HeaderName::from_static("process-start-time-unix"),
                state.created.to_string(),
            ),
        ],
        state.metrics.render(),
    )
        .into_response()
}

fn model_object(state: &AppState) -> Value {
    let mut m = json!({
        "id": state.model_id,
        "aliases": state.aliases,
        "tags": state.tags,
        "object": "model",
        "created": state.created,
        "owned_by": "oxibonsai",
    });
    if let Some(l) = state.loaded.get() {
        m["meta"] =
            json!({"n_ctx": l.n_ctx, "n_vocab": l.n_vocab, "slots": state.options.parallel});
    }
    m
}

pub(super) async fn list_models(State(state): State<Arc<AppState>>) -> Json<Value> {
    Json(json!({"object": "list", "data": [model_object(&state)]}))
}

pub(super) async fn get_model(
    State(state): State<Arc<AppState>>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    if id == state.model_id || state.aliases.contains(&id) {
        Ok(Json(model_object(&state)))
    } else {
        Err(ApiError::not_found(format!(
            "the model '{id}' does not exist"
        )))
    }
}
