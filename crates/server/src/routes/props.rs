//! llama-server's server-description and template routes: `GET /props` (and `POST /props`,
//! switched off unless `--props`, as there), `POST /apply-template` (the chat template's rendering, without generating) and
//! `POST /chat/completions/input_tokens` (the rendered prompt's token count).

use std::sync::Arc;

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};

use super::{chat, native};
use super::{loaded, ModelRequest};
use crate::api::{self, Fields};
use crate::error::ApiError;
use crate::{AppState, Loaded};

/// The build, as llama-server's `build_info` names its own (`b<number>-<commit>`).
const BUILD_INFO: &str = concat!("b0-oxibonsai-", env!("CARGO_PKG_VERSION"));

/// The sampling a request gets when it sets none: the native endpoint's defaults.
fn default_settings(l: &Loaded, defaults: &api::RequestDefaults) -> Result<Value, ApiError> {
    let empty = json!({});
    native::read(l, &Fields::new(&empty)?, defaults).map(|n| n.generation_settings())
}

pub(super) async fn get_props(State(state): State<Arc<AppState>>) -> Result<Response, ApiError> {
    let l = loaded(&state)?;
    let token_text = |id: Option<u32>| {
        id.and_then(|id| l.tokenizer.token_to_piece(id, true).ok())
            .map(|b| String::from_utf8_lossy(b).into_owned())
            .unwrap_or_default()
    };
    let o = &state.options;
    Ok(Json(json!({
        "default_generation_settings": {
            "params": default_settings(l, &o.request_defaults)?,
            "n_ctx": l.n_ctx,
        },
        "total_slots": o.parallel.max(1),
        "model_alias": state.model_id,
        "model_path": o.model_path.display().to_string(),
        "modalities": {"vision": false, "video": false, "audio": false},
        "endpoint_slots": o.slots_endpoint,
        "endpoint_props": o.props_endpoint,
        "endpoint_metrics": true,
        "ui": true,
        "chat_template": l.template.as_ref().map_or("", |t| t.source()),
        "chat_template_caps": {},
        "bos_token": token_text(l.tokenizer.bos()),
        "eos_token": token_text(l.tokenizer.eos()),
        "build_info": BUILD_INFO,
        "is_sleeping": state.sleep.is_sleeping(),
        "device": state.device.get(),
    }))
    .into_response())
}

/// llama-server changes no property here either; it only answers whether it may.
pub(super) async fn post_props(State(state): State<Arc<AppState>>) -> Result<Response, ApiError> {
    if !state.options.props_endpoint {
        return Err(ApiError::NotSupported(
            "This server does not support changing global properties. Start it with `--props`"
                .to_owned(),
        ));
    }
    Ok(Json(json!({"success": true})).into_response())
}

/// `/apply-template`: the prompt the chat route would generate from — the same parse of the body
/// (tools, `chat_template_kwargs`, the assistant prefill, the reasoning settings), rendered.
pub(super) async fn apply_template(req: ModelRequest) -> Result<Response, ApiError> {
    let (l, f) = req.parts()?;
    let prepared = chat::prepare(l, &f)?;
    Ok(Json(json!({"prompt": prepared.prompt_text})).into_response())
}

/// The tokens the chat route would feed for this body.
pub(super) async fn input_tokens(req: ModelRequest) -> Result<Response, ApiError> {
    let (l, f) = req.parts()?;
    let prepared = chat::prepare(l, &f)?;
    Ok(Json(json!({"input_tokens": prepared.prompt.len()})).into_response())
}
